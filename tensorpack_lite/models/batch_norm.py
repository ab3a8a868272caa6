"""Batch normalization and batch renormalization, following the tower context.

Rules (as tensorpack 0.11):

* ``training`` defaults to ``get_current_tower_context().is_training``: a training tower
  normalizes with the statistics of the batch, an inference tower with the moving averages.
* The moving averages are updated only where the batch statistics are computed and the
  tower is the main training tower (or an inference tower that asks for batch statistics):
  by default the two update ops go to ``tf.GraphKeys.UPDATE_OPS``, which the
  ``RunUpdateOps`` callback (one of the default callbacks) runs with every step.
* ``sync_statistics``: training towers average E[x] and E[x^2] over the towers of the
  process ('nccl', collective ops) or the ranks of the job ('horovod', the trainer's
  ``cross_rank_mean``); the moving averages then follow them, updated internally.
"""

from ..compat import tf, tfv1
from ..multiprocess.collective import collective_mean, tower_group
from ..multiprocess.sync_statistics import cross_rank_mean
from ..tfutils.tower_context import get_current_tower_context
from ..utils import logger
from .registry import layer_register
from .tflayer import channel_axis, convert_to_tflayer_args
from .utils import (affine_variables, broadcastable, check_input_rank, describe_layer, finish_output,
                    known_dim, log_once_per_graph)

__all__ = ['BatchNorm', 'BatchRenorm']

_EMA_UPDATE_MODES = ('default', 'collection', 'internal', 'skip')
_SYNC_MODES = (None, 'nccl', 'horovod')


# ----- helpers shared by BatchNorm and BatchRenorm ------------------------------------------

def _training_flag(training, ctx, layer_type):
    if training is not None:
        return bool(training)
    if ctx is None:
        raise RuntimeError("{} is built outside a TowerContext: build it in a tower (e.g. `with "
                           "TowerContext('', is_training=True):`) or pass training=True/False.".format(
                               describe_layer(layer_type)))
    return ctx.is_training


def _owns_model_variables(ctx):
    """Whether moving statistics created here go to MODEL_VARIABLES: only in the main
    training tower (or outside towers)."""
    return ctx is None or ctx.is_main_training_tower


def _statistics_variable(name, num_chan, init_value, ctx, dtype):
    collections = [tfv1.GraphKeys.GLOBAL_VARIABLES]
    if _owns_model_variables(ctx):
        collections.append(tfv1.GraphKeys.MODEL_VARIABLES)
    return tfv1.get_variable(name, [num_chan], dtype=dtype, initializer=tfv1.constant_initializer(init_value),
                             trainable=False, collections=collections)


def _ema_op(variable, value, momentum, name):
    """``variable <- momentum * variable + (1 - momentum) * value``."""
    return variable.assign_sub((variable - value) * (1.0 - momentum), name=name, read_value=False)


def _variable_dtype(x):
    """The dtype of the variables and statistics for input ``x``: float32 for a float16 or
    bfloat16 input (as tensorpack's), else the input's."""
    dtype = x.dtype.base_dtype
    return tf.float32 if dtype in (tf.float16, tf.bfloat16) else dtype


def _fused_format(x, axis):
    """The data format of the fused batch-norm kernel for ``x``, or None when it does not
    apply (it takes 4-D float32, float16 or bfloat16 inputs with the channels on axis 1 or 3,
    and float32 statistics)."""
    if x.shape.rank != 4 or x.dtype.base_dtype not in (tf.float32, tf.float16, tf.bfloat16):
        return None
    return {1: 'NCHW', 3: 'NHWC'}.get(axis)


def _computed_input(x, axis, dtype, fused):
    """``x`` as the normalization takes it: as it is where the fused kernel may run on it
    (``fused``), else in the variables' ``dtype``."""
    return x if fused and _fused_format(x, axis) is not None else tf.cast(x, dtype)


def _fused_affine(beta, gamma, num_chan):
    return (tf.ones([num_chan], tf.float32) if gamma is None else gamma,
            tf.zeros([num_chan], tf.float32) if beta is None else beta)


def _normalize(x, axis, mean, variance, beta, gamma, epsilon):
    """``(x - mean) / sqrt(variance + epsilon) * gamma + beta`` per channel (``axis``)."""
    ndims = x.shape.rank
    data_format = _fused_format(x, axis)
    if data_format is not None:
        scale, offset = _fused_affine(beta, gamma, x.shape[axis])
        return tfv1.nn.fused_batch_norm(x, scale, offset, mean=mean, variance=variance, epsilon=epsilon,
                                        data_format=data_format, is_training=False)[0]
    return tf.nn.batch_normalization(
        x, broadcastable(mean, ndims, axis), broadcastable(variance, ndims, axis),
        broadcastable(beta, ndims, axis), broadcastable(gamma, ndims, axis), epsilon)


def _reduction_axes(ndims, axis):
    return [i for i in range(ndims) if i != axis]


# ----- BatchNorm -----------------------------------------------------------------------------

def _ema_update_mode(ema_update, internal_update):
    if ema_update not in _EMA_UPDATE_MODES:
        raise ValueError("{}: ema_update must be one of {}, got {!r}".format(
            describe_layer('BatchNorm'), _EMA_UPDATE_MODES, ema_update))
    if internal_update is not None:
        log_once_per_graph("BatchNorm(internal_update=) is deprecated: use ema_update='internal' or "
                           "'collection'.", 'warn')
        if ema_update != 'default':
            raise ValueError("{}: give either internal_update (deprecated) or ema_update, not both.".format(
                describe_layer('BatchNorm')))
        return 'internal' if internal_update else 'collection'
    return 'collection' if ema_update == 'default' else ema_update


def _sync_mode(sync_statistics, training, ctx):
    """How the batch statistics are synchronised: None (not at all), 'nccl' or 'horovod'.
    Only layers that use batch statistics in a training tower synchronise them."""
    if sync_statistics is not None:
        sync_statistics = str(sync_statistics).lower()
    if sync_statistics not in _SYNC_MODES:
        raise ValueError("{}: sync_statistics must be one of {}, got {!r}".format(
            describe_layer('BatchNorm'), _SYNC_MODES, sync_statistics))
    if not training or (ctx is not None and not ctx.is_training):
        return None
    return sync_statistics


def _synced_statistics(x, axis, mode, ctx):
    """``(mean, variance)`` of ``x`` over the towers ('nccl') or the ranks ('horovod'): the
    means of E[x] and E[x^2] over them, and ``E[x^2] - E[x]^2``."""
    axes = _reduction_axes(x.shape.rank, axis)
    local = tf.concat([tf.reduce_mean(x, axes), tf.reduce_mean(tf.square(x), axes)], 0,
                      name='local_statistics')
    if mode == 'horovod':
        synced = cross_rank_mean(local, owner=describe_layer('BatchNorm'))
    elif ctx is None or ctx.total == 1:
        logger.warning("{}: sync_statistics='nccl' with a single tower uses the statistics of its own "
                       "batch.".format(describe_layer('BatchNorm')))
        synced = local
    else:
        synced = collective_mean(local, tower_group(ctx.total, local.device))
    mean, mean_square = tf.split(synced, 2, name='statistics')
    # E[x^2] - E[x]^2 can round below zero for a constant channel
    return mean, tf.maximum(mean_square - tf.square(mean), 0.0)


def _synced_batch_normalize(x, axis, beta, gamma, epsilon, mode, ctx):
    """As :func:`_batch_normalize`, with the statistics of :func:`_synced_statistics` (not
    the fused kernel, which has no gradient for given statistics)."""
    mean, variance = _synced_statistics(x, axis, mode, ctx)
    ndims = x.shape.rank
    out = tf.nn.batch_normalization(
        x, broadcastable(mean, ndims, axis), broadcastable(variance, ndims, axis),
        broadcastable(beta, ndims, axis), broadcastable(gamma, ndims, axis), epsilon)
    return out, mean, variance


def _batch_normalize(x, axis, beta, gamma, epsilon, virtual_batch_size):
    """Normalize ``x`` by the statistics of its batch: ``(output, mean, variance)``, the
    variance being the biased one. With ``virtual_batch_size``, each group of that many
    samples is normalized by its own statistics, and the statistics returned are their
    averages over the groups."""
    ndims = x.shape.rank
    data_format = _fused_format(x, axis)
    if virtual_batch_size:
        return _ghost_batch_normalize(x, axis, beta, gamma, epsilon, int(virtual_batch_size))
    if data_format is None:
        mean, variance = tf.nn.moments(x, _reduction_axes(ndims, axis))
        return _normalize(x, axis, mean, variance, beta, gamma, epsilon), mean, variance
    # the fused kernel is about twice as fast on CPUs; its variance has Bessel's correction
    scale, offset = _fused_affine(beta, gamma, x.shape[axis])
    out, mean, unbiased = tfv1.nn.fused_batch_norm(x, scale, offset, epsilon=epsilon, data_format=data_format,
                                                   is_training=True)
    count = tf.cast(tf.size(x) // tf.shape(x)[axis], unbiased.dtype)
    return out, mean, unbiased * (count - 1) / count


def _ghost_batch_normalize(x, axis, beta, gamma, epsilon, virtual_batch_size):
    ndims = x.shape.rank
    # [G * v, ...] -> [G, v, ...]: statistics over every axis but the groups' and the channels'
    grouped = tf.reshape(x, tf.concat([[-1, virtual_batch_size], tf.shape(x)[1:]], axis=0))
    group_mean, group_var = tf.nn.moments(grouped, [i for i in range(1, ndims + 1) if i != axis + 1],
                                          keepdims=True)
    out = tf.nn.batch_normalization(grouped, group_mean, group_var, broadcastable(beta, ndims + 1, axis + 1),
                                    broadcastable(gamma, ndims + 1, axis + 1), epsilon)
    out = tf.reshape(out, tf.shape(x))
    out.set_shape(x.shape)
    other_axes = [i for i in range(ndims + 1) if i != axis + 1]
    return out, tf.reduce_mean(group_mean, other_axes), tf.reduce_mean(group_var, other_axes)


@layer_register()
@convert_to_tflayer_args(
    args_names=[],
    name_mapping={'use_bias': 'center', 'use_scale': 'scale', 'gamma_init': 'gamma_initializer',
                  'decay': 'momentum', 'use_local_stat': 'training'})
def BatchNorm(inputs, axis=None, training=None, momentum=0.9, epsilon=1e-5, center=True, scale=True,
              beta_initializer=tfv1.zeros_initializer(), gamma_initializer=tfv1.ones_initializer(),
              virtual_batch_size=None, data_format='channels_last', ema_update='default',
              sync_statistics=None, internal_update=None):
    """Batch normalization of a 2-D (NC) or 4-D input, following the tower context.

    Args:
        axis (int): the channel axis; by default 1 for 2-D inputs and given by
            ``data_format`` ('channels_last'/'NHWC' or 'channels_first'/'NCHW') for 4-D ones.
        training (bool): normalize with the batch statistics (True) or the moving averages
            (False). Default: ``get_current_tower_context().is_training``.
        momentum (float): of the moving averages:
            ``ema = momentum * ema + (1 - momentum) * batch_statistic``.
        virtual_batch_size (int): "ghost" batch normalization: when training, each group of
            this many samples is normalized by its own statistics (the batch size must be
            a multiple of it).
        ema_update (str): how the moving averages are updated when ``training`` in the main
            training tower: 'default' (= 'collection'): two ops added to
            ``tf.GraphKeys.UPDATE_OPS``, run by the ``RunUpdateOps`` callback; 'internal':
            the output depends on the updates (control dependencies); 'skip': no update.
        sync_statistics (str): None (each tower uses the statistics of its own batch),
            'nccl' (the towers of this process) or 'horovod' (every rank of a Horovod/MPI
            job, or every tower of every worker of CollectiveAllReduceTrainer): in a training
            tower, E[x] and E[x^2] are averaged over them (each must have the same batch
            size) and the variance is ``E[x^2] - E[x]^2``; the moving averages follow the
            synchronised statistics and ``ema_update`` becomes 'internal' (unless 'skip').
            Every tower must build the layer under the same name, once, and run it in
            every step. 'nccl' uses TensorFlow's collective ops (NCCL on GPUs, a ring on
            CPUs); 'horovod' needs the trainer's ``cross_rank_mean_scope`` (an error
            outside). Not with ``virtual_batch_size``.
        internal_update (bool): deprecated; True means ema_update='internal', False
            'collection'.

    Returns:
        tf.Tensor named ``output``, of the input's dtype; ``.variables`` holds ``beta``,
        ``gamma``, ``mean`` (= ``moving_mean``) and ``variance`` (= ``moving_variance``).

    Variable names: ``beta`` (zeros), ``gamma`` (ones), ``mean/EMA`` (zeros),
    ``variance/EMA`` (ones); the last two are not trainable. The moving variance averages
    the biased batch variance. The variables are float32 for a float16 or bfloat16 input.

    Example::

        x = BatchNorm('bn', x)
        x = Conv2D('conv', x, 32, 3, activation=BNReLU)   # BN variables 'conv/bn/...'
    """
    ctx = get_current_tower_context()
    training = _training_flag(training, ctx, 'BatchNorm')
    check_input_rank(inputs, (2, 4), 'BatchNorm')
    ndims = inputs.shape.rank
    if axis is None:
        axis = channel_axis(data_format, ndims)
    elif isinstance(axis, int) and -ndims <= axis < 0:
        axis += ndims
    if axis not in (1, ndims - 1):
        raise ValueError("{}: axis must be 1 or {} (or -1) for a {}-D input, got {}".format(
            describe_layer('BatchNorm'), ndims - 1, ndims, axis))
    num_chan = known_dim(inputs, axis, 'number of channels', 'BatchNorm')
    ema_update = _ema_update_mode(ema_update, internal_update)
    sync = _sync_mode(sync_statistics, training, ctx)
    if sync is not None:
        if virtual_batch_size:
            raise ValueError("{}: sync_statistics='{}' and virtual_batch_size cannot be used "
                             "together.".format(describe_layer('BatchNorm'), sync))
        ema_update = 'internal' if ema_update != 'skip' else ema_update
    main_or_inference = ctx is None or ctx.is_main_training_tower or not ctx.is_training
    do_ema_update = training and main_or_inference and ema_update != 'skip'
    if not training and ctx is not None and ctx.is_main_training_tower:
        log_once_per_graph("Some BatchNorm layer uses moving_mean/moving_variance in training.", 'warn')

    dtype = _variable_dtype(inputs)
    x = _computed_input(inputs, axis, dtype, fused=not (training and (sync or virtual_batch_size)))
    beta, gamma = affine_variables(num_chan, center, scale, beta_initializer, gamma_initializer, dtype)
    moving_mean = _statistics_variable('mean/EMA', num_chan, 0.0, ctx, dtype)
    moving_var = _statistics_variable('variance/EMA', num_chan, 1.0, ctx, dtype)

    updates = []
    if training:
        if sync is None:
            xn, batch_mean, batch_var = _batch_normalize(x, axis, beta, gamma, epsilon,
                                                         virtual_batch_size)
        else:
            xn, batch_mean, batch_var = _synced_batch_normalize(x, axis, beta, gamma, epsilon, sync, ctx)
        if do_ema_update:
            updates = [_ema_op(moving_mean, batch_mean, momentum, 'mean_ema_op'),
                       _ema_op(moving_var, batch_var, momentum, 'var_ema_op')]
            if ema_update == 'collection':
                for op in updates:
                    tfv1.add_to_collection(tfv1.GraphKeys.UPDATE_OPS, op)
                updates = []
    else:
        xn = _normalize(x, axis, moving_mean, moving_var, beta, gamma, epsilon)
    xn = tf.cast(xn, inputs.dtype)
    with tf.control_dependencies(updates):
        return finish_output(xn, moving_mean=moving_mean, mean=moving_mean, moving_variance=moving_var,
                             variance=moving_var, gamma=gamma, beta=beta)


# ----- BatchRenorm ---------------------------------------------------------------------------

_RENORM_MOMENTUM = 0.99


@layer_register()
@convert_to_tflayer_args(
    args_names=['rmax', 'dmax'],
    name_mapping={'use_bias': 'center', 'use_scale': 'scale', 'gamma_init': 'gamma_initializer',
                  'decay': 'momentum'})
def BatchRenorm(x, rmax, dmax, momentum=0.9, epsilon=1e-5, center=True, scale=True, gamma_initializer=None,
                data_format='channels_last'):
    """Batch renormalization (Ioffe 2017, https://arxiv.org/abs/1702.03275) of a 2-D or 4-D
    input, training or not as the tower context says.

    In training, ``(x - batch_mean) / batch_std * r + d`` with
    ``r = clip(batch_std / renorm_std, 1/rmax, rmax)`` and
    ``d = clip((batch_mean - renorm_mean) / renorm_std, -dmax, dmax)`` (no gradient through r,
    d); ``renorm_mean``/``renorm_stddev`` are moving averages with momentum 0.99, and
    ``moving_mean``/``moving_variance`` (momentum ``momentum``) normalize at inference. The
    four updates go to ``UPDATE_OPS`` in the main training tower. The variables are float32
    for a float16 or bfloat16 input, the output of the input's dtype.

    Args:
        rmax, dmax: scalars (floats or tensors), the largest corrections allowed.

    Variable names: ``beta``, ``gamma``, ``moving_mean``, ``moving_variance``,
    ``renorm_mean``, ``renorm_stddev`` (as TensorFlow's BatchNormalization(renorm=True)).
    """
    ctx = get_current_tower_context()
    training = _training_flag(None, ctx, 'BatchRenorm')
    check_input_rank(x, (2, 4), 'BatchRenorm')
    ndims = x.shape.rank
    axis = channel_axis(data_format, ndims)
    num_chan = known_dim(x, axis, 'number of channels', 'BatchRenorm')
    dtype = _variable_dtype(x)
    inputs, x = x, _computed_input(x, axis, dtype, fused=not training)
    beta, gamma = affine_variables(num_chan, center, scale, tfv1.zeros_initializer(), gamma_initializer,
                                   dtype)
    moving_mean = _statistics_variable('moving_mean', num_chan, 0.0, ctx, dtype)
    moving_var = _statistics_variable('moving_variance', num_chan, 1.0, ctx, dtype)
    renorm_mean = _statistics_variable('renorm_mean', num_chan, 0.0, ctx, dtype)
    renorm_std = _statistics_variable('renorm_stddev', num_chan, 1.0, ctx, dtype)

    if not training:
        xn = _normalize(x, axis, moving_mean, moving_var, beta, gamma, epsilon)
        return finish_output(tf.cast(xn, inputs.dtype), gamma=gamma, beta=beta)

    batch_mean, batch_var = tf.nn.moments(x, _reduction_axes(ndims, axis))
    batch_std = tf.sqrt(batch_var + epsilon)
    r = tf.stop_gradient(tf.clip_by_value(batch_std / renorm_std, 1.0 / rmax, rmax), name='r')
    d = tf.stop_gradient(tf.clip_by_value((batch_mean - renorm_mean) / renorm_std, -dmax, dmax), name='d')
    renormalized = (x - broadcastable(batch_mean, ndims, axis)) * broadcastable(r / batch_std, ndims, axis)
    renormalized = renormalized + broadcastable(d, ndims, axis)
    if gamma is not None:
        renormalized = renormalized * broadcastable(gamma, ndims, axis)
    if beta is not None:
        renormalized = renormalized + broadcastable(beta, ndims, axis)
    if ctx is None or ctx.is_main_training_tower:
        for op in (_ema_op(moving_mean, batch_mean, momentum, 'mean_ema_op'),
                   _ema_op(moving_var, batch_var, momentum, 'var_ema_op'),
                   _ema_op(renorm_mean, batch_mean, _RENORM_MOMENTUM, 'renorm_mean_ema_op'),
                   _ema_op(renorm_std, batch_std, _RENORM_MOMENTUM, 'renorm_std_ema_op')):
            tfv1.add_to_collection(tfv1.GraphKeys.UPDATE_OPS, op)
    return finish_output(tf.cast(renormalized, inputs.dtype), gamma=gamma, beta=beta)
