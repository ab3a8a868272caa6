"""Regularization: weight-decay costs and dropout."""

import numbers
import re

from ..compat import tf, tfv1
from ..tfutils.tower_context import get_current_tower_context
from ..utils import logger
from .registry import layer_register
from .utils import describe_layer, log_once_per_graph

__all__ = ['regularize_cost', 'regularize_cost_from_collection', 'l2_regularizer', 'l1_regularizer',
           'Dropout']


def _check_scale(scale, name):
    if not isinstance(scale, numbers.Real) or scale < 0:
        raise ValueError("{}(scale): scale must be a number >= 0, got {!r}".format(name, scale))


def _scaled(scale, loss, name):
    """``scale * loss`` in the dtype of ``loss`` (float16 weights give a float16 loss)."""
    return tf.multiply(tf.constant(scale, dtype=loss.dtype.base_dtype), loss, name=name)


def l2_regularizer(scale):
    """A function ``w -> scale * sum(w ** 2) / 2`` (as ``tf.contrib.layers.l2_regularizer``),
    a loss of ``w``'s dtype.

    Example::

        cost += regularize_cost('fc.*/W', l2_regularizer(1e-5))
    """
    _check_scale(scale, 'l2_regularizer')
    return lambda weights: _scaled(scale, tf.nn.l2_loss(weights), 'l2_regularizer')


def l1_regularizer(scale):
    """A function ``w -> scale * sum(|w|)`` (as ``tf.contrib.layers.l1_regularizer``), a loss
    of ``w``'s dtype."""
    _check_scale(scale, 'l1_regularizer')
    return lambda weights: _scaled(scale, tf.reduce_sum(tf.abs(weights)), 'l1_regularizer')


def _as_float32_loss(loss, origin):
    if not loss.dtype.is_floating:
        raise TypeError("A regularization loss must be a float tensor; {} gave {}".format(origin, loss))
    return loss if loss.dtype == tf.float32 else tf.cast(loss, tf.float32)


def _empty_cost(name):
    return tf.constant(0, dtype=tf.float32, name='empty_' + name)


def _items_of_this_tower(ctx, key):
    """What to regularize in collection ``key``: None in an inference tower; the items the
    tower added when it has its own variables; else the whole collection."""
    if ctx is not None and not ctx.is_training:
        return None
    if ctx is not None and ctx.has_own_variables:
        return ctx.get_collection_in_tower(key)
    return tfv1.get_collection(key)


def regularize_cost(regex, func, name='regularize_cost'):
    """The sum of ``func(v)`` over the trainable variables ``v`` whose op name matches
    ``regex`` (``re.search``), named ``name``.

    In a tower that has its own variables (the first training tower, or a replicated one)
    only the variables created in that tower are looked at; in a tower reusing variables,
    all trainable variables. In an inference tower the cost is a constant 0, as it is when
    nothing matches. The matched names are logged once per graph.

    Example::

        wd_cost = regularize_cost('conv.*/W', l2_regularizer(1e-4), name='wd_cost')
    """
    if not regex:
        raise ValueError("regularize_cost() needs a non-empty regex.")
    ctx = get_current_tower_context()
    params = _items_of_this_tower(ctx, tfv1.GraphKeys.TRAINABLE_VARIABLES)
    if params is None:
        return _empty_cost(name)
    costs, names = [], []
    with tfv1.name_scope(name + '_internals'):
        for param in params:
            if re.search(regex, param.op.name):
                costs.append(_as_float32_loss(func(param), "the regularizer of '{}'".format(param.op.name)))
                names.append(param.op.name)
    if not costs:
        return _empty_cost(name)
    prefix = ctx.vs_name + '/' if ctx is not None and ctx.vs_name else ''
    names = [n[len(prefix):] if prefix and n.startswith(prefix) else n for n in names]
    logger.info("regularize_cost() found {} variables to regularize.".format(len(names)))
    log_once_per_graph("The following tensors will be regularized: {}".format(', '.join(names)))
    return tf.add_n(costs, name=name)


def regularize_cost_from_collection(name='regularize_cost'):
    """The sum of the losses in ``tf.GraphKeys.REGULARIZATION_LOSSES`` (where the layers'
    ``kernel_regularizer`` etc. put theirs), named ``name``. In a tower with its own
    variables, only the losses added in that tower; in an inference tower, a constant 0.

    Example::

        x = FullyConnected('fc', x, 10, kernel_regularizer=l2_regularizer(1e-4))
        cost = tf.add(cost, regularize_cost_from_collection(), name='total_cost')
    """
    losses = _items_of_this_tower(get_current_tower_context(), tfv1.GraphKeys.REGULARIZATION_LOSSES)
    if not losses:
        return _empty_cost(name)
    logger.info("regularize_cost_from_collection() found {} regularizers in REGULARIZATION_LOSSES.".format(
        len(losses)))
    return tf.add_n([_as_float32_loss(loss, 'REGULARIZATION_LOSSES') for loss in losses], name=name)


def _dropout_rate(args, rate, keep_prob):
    if len(args) > 1:
        raise TypeError("{} takes one positional argument after its input (keep_prob), got {}.".format(
            describe_layer('Dropout'), len(args)))
    given = [n for n, v in (('positional keep_prob', args[0] if args else None), ('keep_prob', keep_prob),
                            ('rate', rate)) if v is not None]
    if len(given) > 1:
        raise TypeError("{}: give only one of {}.".format(describe_layer('Dropout'), ' and '.join(given)))
    if args:
        if not isinstance(args[0], numbers.Real) or args[0] != 0.5:
            logger.warning("The first positional argument of Dropout is the probability to KEEP (as in "
                           "tensorpack), not the rate to drop. Pass rate= to be explicit.")
        return 1 - args[0]
    if keep_prob is not None:
        log_once_per_graph("Dropout(keep_prob=) is deprecated: use rate=1-keep_prob.", 'warn')
        return 1 - keep_prob
    return 0.5 if rate is None else rate


@layer_register(use_scope=None)
def Dropout(x, *args, rate=None, keep_prob=None, noise_shape=None, seed=None, training=None,
            is_training=None):
    """Dropout that is on in training towers and off (the identity) in inference towers.

    Args:
        rate: the probability to drop (default 0.5); a float or a scalar tensor.
        noise_shape, seed: as ``tf.nn.dropout``.
        training (bool): whether to drop; default ``get_current_tower_context().is_training``.
        is_training: the old name of ``training``.
        keep_prob: deprecated, ``1 - rate``. For tensorpack's history, a positional argument
            after the input is also the probability to keep.

    Example::

        x = Dropout('drop', x, rate=0.3)
    """
    rate = _dropout_rate(args, rate, keep_prob)
    if isinstance(rate, numbers.Real) and not 0 <= rate < 1:
        raise ValueError("{}: rate must be in [0, 1), got {}".format(describe_layer('Dropout'), rate))
    if training is None:
        training = is_training
    if training is None:
        ctx = get_current_tower_context()
        if ctx is None:
            raise RuntimeError("{} is built outside a TowerContext: build it in a tower or pass "
                               "training=True/False.".format(describe_layer('Dropout')))
        training = ctx.is_training
    if not training:
        return tf.identity(x, name='dropout')
    return tfv1.nn.dropout(x, rate=rate, noise_shape=noise_shape, seed=seed, name='dropout')
