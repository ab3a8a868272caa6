"""The fully-connected layer."""

import numpy as np

from ..compat import tf, tfv1
from .registry import layer_register
from .tflayer import convert_to_tflayer_args, kernel_and_bias, output_count
from .utils import describe_layer, finish_output, shape_text

__all__ = ['FullyConnected', 'batch_flatten']


def batch_flatten(x):
    """Reshape ``x`` to 2-D ``[batch, everything else]``."""
    rest = x.shape.as_list()[1:]
    if None not in rest:
        return tf.reshape(x, [-1, int(np.prod(rest))])
    return tf.reshape(x, tf.stack([tf.shape(x)[0], -1]))


@layer_register(log_shape=True)
@convert_to_tflayer_args(args_names=['units'], name_mapping={'out_dim': 'units'})
def FullyConnected(inputs, units, activation=None, use_bias=True, kernel_initializer=None,
                   bias_initializer=tfv1.zeros_initializer(), kernel_regularizer=None, bias_regularizer=None,
                   activity_regularizer=None):
    """A fully-connected layer (``tf.layers.Dense``'s arguments). The input is flattened to
    ``[batch, -1]`` first; the kernel is initialised by variance scaling (scale 2.0) by
    default.

    Returns:
        tf.Tensor named ``output`` of shape ``[batch, units]``, with ``.variables.W`` and
        ``.variables.b``.

    Variable names: ``W`` (``[in_dim, units]``), ``b``.

    Example::

        logits = FullyConnected('fc1', features, 10)
    """
    rank = inputs.shape.rank
    if rank is None or rank < 2:
        raise ValueError("{} expects an input of rank >= 2 (batch first), got shape {}".format(
            describe_layer('FullyConnected'), shape_text(inputs.shape)))
    in_dim = inputs.shape[1:].num_elements()
    if in_dim is None:
        raise ValueError("{} needs all the dimensions of its input but the first to be known, got shape "
                         "{}".format(describe_layer('FullyConnected'), shape_text(inputs.shape)))
    units = output_count(units, 'FullyConnected', 'units')
    inputs = batch_flatten(inputs)
    W, b = kernel_and_bias([in_dim, units], units, use_bias, kernel_initializer, bias_initializer,
                           kernel_regularizer, bias_regularizer, dtype=inputs.dtype.base_dtype)
    out = tf.matmul(inputs, W)
    if b is not None:
        out = tf.nn.bias_add(out, b)
    return finish_output(out, activation, activity_regularizer, W=W, b=b)
