"""2-D convolution and transposed convolution."""

import functools

from ..compat import tf, tfv1
from ..utils.argtools import shape2d, shape4d
from .layout import call_in_data_format
from .registry import layer_register
from .tflayer import channel_axis, convert_to_tflayer_args, get_data_format, kernel_and_bias
from .utils import (check_input_rank, describe_layer, finish_output, known_dim, shape_argument,
                    static_or_dynamic_shape)

__all__ = ['Conv2D', 'Conv2DTranspose', 'Deconv2D']


def _padding(padding, layer_type):
    value = str(padding).upper()
    if value not in ('SAME', 'VALID'):
        raise ValueError("{}: padding must be 'same' or 'valid', got {!r}".format(
            describe_layer(layer_type), padding))
    return value


def _conv_length(length, kernel, stride, dilation, padding):
    """Output length of a convolution along one axis (an int or a scalar tensor)."""
    if padding == 'SAME':
        return (length + stride - 1) // stride
    return (length - (kernel - 1) * dilation - 1 + stride) // stride


def _conv_output_shape(x, data_format, filters, kernel_shape, strides, dilations, padding):
    shape = static_or_dynamic_shape(x)
    shape[channel_axis(data_format)] = filters
    spatial_axes = (1, 2) if data_format == 'NHWC' else (2, 3)
    for axis, size, stride, dilation in zip(spatial_axes, kernel_shape, strides, dilations):
        shape[axis] = _conv_length(shape[axis], size, stride, dilation, padding)
    return shape


def _with_shape(out, shape):
    """``out`` reshaped to ``shape`` (a list of ints and scalar tensors), a metadata-only op."""
    out = tf.reshape(out, shape_argument(shape))
    out.set_shape([d if isinstance(d, int) else None for d in shape])
    return out


def _unless_empty(kernel, x, shape, dtype):
    """``kernel(x)`` of ``shape``, or zeros of ``shape`` when the batch of ``x`` is empty (the
    kernel does not run then).

    An empty batch is normal in detection (no box left). TensorFlow's oneDNN Conv2D (the default
    on x86 CPUs) returns an empty tensor of the INPUT's shape there ((0, 28, 28, 256) for 80
    filters), which the next bias_add rejects; reshaping its result is not enough, as the
    graph rewrites of grappler and oneDNN (e.g. fusing a Pad or a BiasAdd into the convolution)
    may see through it. So the kernel runs only on a non-empty batch: one conditional per layer.
    """
    return _with_shape(tf.cond(tf.shape(x)[0] > 0, lambda: kernel(x),
                               lambda: tf.zeros(shape_argument(shape), dtype=dtype)), shape)


def _grouped_conv(x, data_format, kernel, filters, split, strides, padding, dilations, kernel_shape):
    """The convolution of ``x`` (in ``data_format``) by ``kernel`` in ``split`` groups of channels,
    of the right shape for an empty batch too (see :func:`_unless_empty`)."""
    def conv(part, part_kernel):
        return tf.nn.conv2d(part, part_kernel, strides=shape4d(strides, data_format), padding=padding,
                            data_format=data_format, dilations=shape4d(dilations, data_format))

    def grouped(x):
        if split == 1:
            return conv(x, kernel)
        ch_axis = channel_axis(data_format)
        groups = zip(tf.split(x, split, axis=ch_axis), tf.split(kernel, split, axis=3))
        return tf.concat([conv(part, part_kernel) for part, part_kernel in groups], axis=ch_axis)
    shape = _conv_output_shape(x, data_format, filters, kernel_shape, strides, dilations, padding)
    return _unless_empty(grouped, x, shape, x.dtype.base_dtype)


@layer_register(log_shape=True)
@convert_to_tflayer_args(
    args_names=['filters', 'kernel_size'],
    name_mapping={'out_channel': 'filters', 'kernel_shape': 'kernel_size', 'stride': 'strides',
                  'groups': 'split'})
def Conv2D(inputs, filters, kernel_size, strides=(1, 1), padding='same', data_format='channels_last',
           dilation_rate=(1, 1), activation=None, use_bias=True, kernel_initializer=None,
           bias_initializer=tfv1.zeros_initializer(), kernel_regularizer=None, bias_regularizer=None,
           activity_regularizer=None, split=1):
    """A 2-D convolution (``tf.layers.Conv2D``'s arguments), with tensorpack's differences:
    the kernel is initialised by variance scaling (scale 2.0) by default, padding defaults to
    'same', and ``split`` (alias ``groups``) makes a group convolution.

    Args:
        inputs (tf.Tensor): a 4-D tensor in ``data_format`` (``'channels_last'``/``'NHWC'`` or
            ``'channels_first'``/``'NCHW'``; on a CPU, NCHW is computed in NHWC between two
            transposes: see :mod:`tensorpack_lite.models.layout`).
        filters (int): output channels, a multiple of ``split``.
        kernel_size, strides, dilation_rate: an int or a pair (h, w).
        split (int): number of groups; the input channels must be a multiple of it.

    Returns:
        tf.Tensor named ``output``, with ``.variables.W`` and ``.variables.b``.

    Variable names: ``W`` (the kernel, ``[kh, kw, in_channels / split, filters]``), ``b``.

    Example::

        x = Conv2D('conv0', image, 32, 3, activation=tf.nn.relu)
    """
    check_input_rank(inputs, (4,), 'Conv2D')
    data_format = get_data_format(data_format, keras_mode=False)
    in_channel = known_dim(inputs, channel_axis(data_format), 'number of channels', 'Conv2D')
    split = int(split)
    if split < 1 or in_channel % split or filters % split:
        raise ValueError("{}: split={} must divide both the input channels ({}) and filters ({}).".format(
            describe_layer('Conv2D'), split, in_channel, filters))
    kernel_shape = shape2d(kernel_size)
    strides, dilations = shape2d(strides), shape2d(dilation_rate)
    if max(strides) > 1 and max(dilations) > 1:
        raise ValueError("{}: strides {} and dilation_rate {} cannot both be larger than 1.".format(
            describe_layer('Conv2D'), strides, dilations))
    padding = _padding(padding, 'Conv2D')

    W, b = kernel_and_bias(kernel_shape + [in_channel // split, filters], filters, use_bias,
                           kernel_initializer, bias_initializer, kernel_regularizer, bias_regularizer,
                           dtype=inputs.dtype.base_dtype)

    conv = functools.partial(_grouped_conv, kernel=W, filters=filters, split=split, strides=strides,
                             padding=padding, dilations=dilations, kernel_shape=kernel_shape)
    out = call_in_data_format(conv, inputs, data_format)
    if b is not None:
        out = tf.nn.bias_add(out, b, data_format=data_format)
    return finish_output(out, activation, activity_regularizer, W=W, b=b)


def _transposed_length(length, kernel, stride, padding):
    """Output length of a transposed convolution along one axis (an int or a scalar tensor)."""
    if padding == 'SAME':
        return length * stride
    return length * stride + max(kernel - stride, 0)


def _transposed_conv(x, data_format, kernel, filters, kernel_shape, strides, padding):
    """The transposed convolution of ``x`` (in ``data_format``) by ``kernel``, static shape set."""
    out_shape = static_or_dynamic_shape(x)
    out_shape[channel_axis(data_format)] = filters
    spatial_axes = (1, 2) if data_format == 'NHWC' else (2, 3)
    for axis, size, stride in zip(spatial_axes, kernel_shape, strides):
        out_shape[axis] = _transposed_length(out_shape[axis], size, stride, padding)
    out = tf.nn.conv2d_transpose(x, kernel, shape_argument(out_shape), strides=shape4d(strides, data_format),
                                 padding=padding, data_format=data_format)
    return _with_shape(out, out_shape)


@layer_register(log_shape=True)
@convert_to_tflayer_args(
    args_names=['filters', 'kernel_size', 'strides'],
    name_mapping={'out_channel': 'filters', 'kernel_shape': 'kernel_size', 'stride': 'strides'})
def Conv2DTranspose(inputs, filters, kernel_size, strides=(1, 1), padding='same',
                    data_format='channels_last', activation=None, use_bias=True, kernel_initializer=None,
                    bias_initializer=tfv1.zeros_initializer(), kernel_regularizer=None, bias_regularizer=None,
                    activity_regularizer=None):
    """A 2-D transposed convolution ("deconvolution"), with ``tf.layers.Conv2DTranspose``'s
    arguments; kernel initialised by variance scaling (scale 2.0), padding 'same' by default.

    The output is ``stride`` times larger with 'same' padding, and
    ``input * stride + max(kernel - stride, 0)`` with 'valid'.

    Variable names: ``W`` (``[kh, kw, filters, in_channels]``), ``b``.

    Example::

        x = Conv2DTranspose('deconv', x, 64, 4, strides=2)   # [N, 7, 7, C] -> [N, 14, 14, 64]
    """
    check_input_rank(inputs, (4,), 'Conv2DTranspose')
    data_format = get_data_format(data_format, keras_mode=False)
    in_channel = known_dim(inputs, channel_axis(data_format), 'number of channels', 'Conv2DTranspose')
    kernel_shape, strides = shape2d(kernel_size), shape2d(strides)
    padding = _padding(padding, 'Conv2DTranspose')
    W, b = kernel_and_bias(kernel_shape + [filters, in_channel], filters, use_bias, kernel_initializer,
                           bias_initializer, kernel_regularizer, bias_regularizer,
                           dtype=inputs.dtype.base_dtype)

    deconv = functools.partial(_transposed_conv, kernel=W, filters=filters, kernel_shape=kernel_shape,
                               strides=strides, padding=padding)
    out = call_in_data_format(deconv, inputs, data_format)
    if b is not None:
        out = tf.nn.bias_add(out, b, data_format=data_format)
    return finish_output(out, activation, activity_regularizer, W=W, b=b)


Deconv2D = Conv2DTranspose
"""The old name of :func:`Conv2DTranspose`."""
