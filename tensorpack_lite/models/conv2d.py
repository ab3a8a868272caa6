"""2-D convolution and transposed convolution."""

import functools

from ..compat import tf, tfv1
from ..utils.argtools import shape2d, shape4d
from .layout import call_in_data_format
from .registry import layer_register
from .tflayer import channel_axis, convert_to_tflayer_args, get_data_format, kernel_and_bias, output_count
from .utils import (check_input_rank, describe_layer, finish_output, known_dim, shape_argument,
                    static_or_dynamic_shape)

__all__ = ['Conv2D', 'Conv2DTranspose', 'Deconv2D']


def _padding(padding, layer_type):
    value = str(padding).upper()
    if value not in ('SAME', 'VALID'):
        raise ValueError("{}: padding must be 'same' or 'valid', got {!r}".format(
            describe_layer(layer_type), padding))
    return value


class _NonEmptyBatch(object):
    """Runs a layer on a batch of at least one example and gives back the real batch.

    An empty batch is normal in detection (no box left). TensorFlow's oneDNN convolutions (the
    default on x86 CPUs) give an empty result of the wrong shape there (the input's channels:
    ``(0, 28, 28, 256)`` for 80 filters), which the next BiasAdd rejects, and a reshape after the
    convolution does not help once grappler fuses the two. So an empty batch gets one example of
    zeros appended before the layer, and the layer's result is cut back to the real batch after
    its activation. On a non-empty batch the Pad adds nothing and the Slice takes everything, both
    without a copy, and Conv2D + BiasAdd + activation stay fusable.

    The two steps have gradients of their own, a Slice and a Pad by the tensors of the forward
    pass: TensorFlow's would add a dozen shape ops to each layer's step. A batch size that is
    known when the graph is built needs no guard and gets none.
    """

    def __init__(self, x):
        batch = x.shape[0]
        if batch is not None and batch > 0:
            self.padded = x
            self._missing = None
            return
        self._size = tf.shape(x)[0]
        self._missing = tf.maximum(1 - self._size, 0)   # 1 for an empty batch, else 0
        self.padded = self._pad(x)
        self.padded.set_shape(x.shape)

    def result(self, out):
        """``out``, computed from the padded batch, cut to the real batch."""
        if self._missing is None:
            return out
        cut = self._cut(out)
        cut.set_shape(out.shape)
        return cut

    def _pad(self, x):
        @tf.custom_gradient
        def pad(value):
            # Padded as a matrix: oneDNN fuses a Pad that feeds a 'valid' Conv2D into the
            # convolution and drops the padding of the batch axis.
            rows = tf.pad(tf.reshape(value, _as_rows(value, self._size)), self._batch_paddings(2))
            return tf.reshape(rows, _from_rows(value)), self._slice
        return pad(x)

    def _cut(self, out):
        @tf.custom_gradient
        def cut(value):
            return self._slice(value), lambda grad: tf.pad(grad, self._batch_paddings(grad.shape.ndims))
        return cut(out)

    def _batch_paddings(self, ndims):
        """Paddings of a rank ``ndims`` tensor that append the missing example, if any."""
        return self._missing * tf.constant([[0, 1]] + [[0, 0]] * (ndims - 1))

    def _slice(self, value):
        """The first ``size`` examples of ``value``."""
        ndims = value.shape.ndims
        return tf.slice(value, tf.zeros([ndims], tf.int32), tf.stack([self._size] + [-1] * (ndims - 1)))


def _as_rows(x, size):
    """The shape that makes ``x``, a batch of ``size``, a matrix of one row per example."""
    inner = x.shape[1:]
    if inner.is_fully_defined() and inner.num_elements() > 0:
        return [-1, inner.num_elements()]
    return tf.stack([size, -1])


def _from_rows(x):
    """The shape that makes the rows of :func:`_as_rows` ``x``'s examples again."""
    inner = x.shape[1:]
    if inner.is_fully_defined():
        return [-1] + inner.as_list()
    return tf.concat([[-1], tf.shape(x)[1:]], axis=0)


def _grouped_conv(x, data_format, kernel, split, strides, padding, dilations):
    """The convolution of ``x`` (in ``data_format``) by ``kernel`` in ``split`` groups of channels."""
    def conv(part, part_kernel):
        return tf.nn.conv2d(part, part_kernel, strides=shape4d(strides, data_format), padding=padding,
                            data_format=data_format, dilations=shape4d(dilations, data_format))
    if split == 1:
        return conv(x, kernel)
    ch_axis = channel_axis(data_format)
    groups = zip(tf.split(x, split, axis=ch_axis), tf.split(kernel, split, axis=3))
    return tf.concat([conv(part, part_kernel) for part, part_kernel in groups], axis=ch_axis)


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
    filters = output_count(filters, 'Conv2D', 'filters')
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

    conv = functools.partial(_grouped_conv, kernel=W, split=split, strides=strides, padding=padding,
                             dilations=dilations)
    return _finish_conv(conv, inputs, b, data_format, activation, activity_regularizer, W=W, b=b)


def _finish_conv(conv, inputs, bias, data_format, activation, activity_regularizer, **variables):
    """``activation(conv(inputs) + bias)`` of the right shape for an empty batch too (see
    :class:`_NonEmptyBatch`), named ``output`` with ``variables`` attached."""
    batch = _NonEmptyBatch(inputs)
    out = call_in_data_format(conv, batch.padded, data_format)
    if bias is not None:
        out = tf.nn.bias_add(out, bias, data_format=data_format)
    if activation is not None:
        out = activation(out)
    return finish_output(batch.result(out), None, activity_regularizer, **variables)


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
    out.set_shape([d if isinstance(d, int) else None for d in out_shape])
    return out


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
    filters = output_count(filters, 'Conv2DTranspose', 'filters')
    kernel_shape, strides = shape2d(kernel_size), shape2d(strides)
    padding = _padding(padding, 'Conv2DTranspose')
    W, b = kernel_and_bias(kernel_shape + [filters, in_channel], filters, use_bias, kernel_initializer,
                           bias_initializer, kernel_regularizer, bias_regularizer,
                           dtype=inputs.dtype.base_dtype)

    deconv = functools.partial(_transposed_conv, kernel=W, filters=filters, kernel_shape=kernel_shape,
                               strides=strides, padding=padding)
    return _finish_conv(deconv, inputs, b, data_format, activation, activity_regularizer, W=W, b=b)


Deconv2D = Conv2DTranspose
"""The old name of :func:`Conv2DTranspose`."""
