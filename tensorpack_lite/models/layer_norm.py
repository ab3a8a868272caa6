"""Normalizations by the statistics of each sample: layer and instance normalization."""

from ..compat import tf, tfv1
from .registry import layer_register
from .tflayer import channel_axis, convert_to_tflayer_args
from .utils import (affine_variables, broadcastable, check_input_rank, finish_output, known_dim,
                    log_once_per_graph)

__all__ = ['LayerNorm', 'InstanceNorm']


def _normalize_per_sample(x, moment_axes, chan_axis, num_chan, epsilon, center, scale, gamma_initializer):
    """Normalize ``x`` by its moments over ``moment_axes``, then scale and shift per channel
    by the variables ``gamma`` and ``beta``."""
    mean, variance = tf.nn.moments(x, moment_axes, keepdims=True)
    beta, gamma = affine_variables(num_chan, center, scale, tfv1.zeros_initializer(), gamma_initializer,
                                   x.dtype.base_dtype)
    ndims = x.shape.rank
    out = tf.nn.batch_normalization(x, mean, variance, broadcastable(beta, ndims, chan_axis),
                                    broadcastable(gamma, ndims, chan_axis), epsilon)
    return finish_output(out, gamma=gamma, beta=beta)


@layer_register()
@convert_to_tflayer_args(
    args_names=[],
    name_mapping={'use_bias': 'center', 'use_scale': 'scale', 'gamma_init': 'gamma_initializer'})
def LayerNorm(x, epsilon=1e-5, center=True, scale=True, gamma_initializer=tfv1.ones_initializer(),
              data_format='channels_last'):
    """Layer normalization (Ba et al. 2016, https://arxiv.org/abs/1607.06450): each sample is
    normalized by the mean and variance of all its values, then scaled and shifted per
    channel.

    Args:
        x (tf.Tensor): 2-D, or 4-D in ``data_format``.

    Variable names: ``beta``, ``gamma`` (shape ``[channels]``).
    """
    check_input_rank(x, (2, 4), 'LayerNorm')
    ndims = x.shape.rank
    chan_axis = channel_axis(data_format, ndims)
    num_chan = known_dim(x, chan_axis, 'number of channels', 'LayerNorm')
    return _normalize_per_sample(x, list(range(1, ndims)), chan_axis, num_chan, epsilon, center, scale,
                                 gamma_initializer)


@layer_register()
@convert_to_tflayer_args(args_names=[], name_mapping={'gamma_init': 'gamma_initializer'})
def InstanceNorm(x, epsilon=1e-5, center=True, scale=True, gamma_initializer=tfv1.ones_initializer(),
                 data_format='channels_last', use_affine=None):
    """Instance normalization (Ulyanov et al. 2016, https://arxiv.org/abs/1607.08022): each
    channel of each sample is normalized over its spatial positions, then scaled and shifted
    per channel.

    Args:
        x (tf.Tensor): 4-D in ``data_format``.
        use_affine (bool): deprecated; sets both ``center`` and ``scale``.

    Variable names: ``beta``, ``gamma`` (shape ``[channels]``).
    """
    check_input_rank(x, (4,), 'InstanceNorm')
    if use_affine is not None:
        log_once_per_graph("InstanceNorm(use_affine=) is deprecated: use center= and scale=.", 'warn')
        center = scale = use_affine
    chan_axis = channel_axis(data_format)
    num_chan = known_dim(x, chan_axis, 'number of channels', 'InstanceNorm')
    spatial_axes = [1, 2] if chan_axis == 3 else [2, 3]
    return _normalize_per_sample(x, spatial_axes, chan_axis, num_chan, epsilon, center, scale,
                                 gamma_initializer)
