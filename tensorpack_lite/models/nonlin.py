"""Nonlinearities that are layers: Maxout, PReLU, LeakyReLU, BNReLU."""

from ..compat import tf, tfv1
from .batch_norm import BatchNorm
from .registry import layer_register
from .utils import (VariableHolder, check_input_rank, describe_layer, known_dim, log_once_per_graph,
                    shape_argument, static_or_dynamic_shape)

__all__ = ['Maxout', 'PReLU', 'LeakyReLU', 'BNReLU']


@layer_register(use_scope=None)
def Maxout(x, num_unit):
    """Maxout (Goodfellow et al. 2013, http://arxiv.org/abs/1302.4389): the maximum over each
    group of ``num_unit`` consecutive channels of an NHWC or NC input.

    Returns:
        tf.Tensor named ``output`` with ``C / num_unit`` channels.
    """
    check_input_rank(x, (2, 4), 'Maxout')
    channels = known_dim(x, -1, 'number of channels', 'Maxout')
    if num_unit < 1 or channels % num_unit:
        raise ValueError("{}: num_unit={} must divide the number of channels ({}).".format(
            describe_layer('Maxout'), num_unit, channels))
    new_shape = [-1] + static_or_dynamic_shape(x)[1:-1] + [channels // num_unit, num_unit]
    return tf.reduce_max(tf.reshape(x, shape_argument(new_shape)), axis=-1, name='output')


@layer_register()
def PReLU(x, init=0.001, name=None):
    """Parametric ReLU (He et al. 2015, https://arxiv.org/abs/1502.01852):
    ``max(x, 0) + alpha * min(x, 0)`` with a learned scalar ``alpha``.

    Variable names: ``alpha``.
    """
    if name is not None:
        log_once_per_graph("PReLU(name=...) is deprecated: the output is named 'output'.", 'warn')
    alpha = tfv1.get_variable('alpha', [], dtype=x.dtype.base_dtype,
                              initializer=tfv1.constant_initializer(init))
    out = tf.add(tf.nn.relu(x), alpha * tf.minimum(x, 0.0), name='output')
    out.variables = VariableHolder(alpha=alpha)
    return out


@layer_register(use_scope=None)
def LeakyReLU(x, alpha, name='output'):
    """Leaky ReLU (Maas et al. 2013): ``max(x, alpha * x)`` for ``0 <= alpha <= 1``."""
    return tf.maximum(x, alpha * x, name=name)


@layer_register(use_scope=None)
def BNReLU(x, name=None):
    """``relu(BatchNorm('bn', x))``: as the activation of a layer, its BatchNorm variables are
    ``<layer>/bn/beta`` etc.

    Example::

        x = Conv2D('conv0', x, 32, 3, activation=BNReLU)
    """
    if name is not None:
        log_once_per_graph("BNReLU(name=...) is deprecated: the output is named by its layer.", 'warn')
    return tf.nn.relu(BatchNorm('bn', x), name=name)
