"""Pooling and un-pooling layers."""

import numpy as np

from ..compat import tf, tfv1
from ..utils.argtools import shape2d, shape4d
from .layout import call_in_data_format
from .registry import layer_register
from .tflayer import channel_axis, convert_to_tflayer_args, get_data_format
from .utils import check_input_rank, describe_layer, shape_argument, static_or_dynamic_shape

__all__ = ['MaxPooling', 'AvgPooling', 'GlobalAvgPooling', 'FixedUnPooling']


def _pool(pool_fn, layer_type, inputs, pool_size, strides, padding, data_format):
    check_input_rank(inputs, (4,), layer_type)
    data_format = get_data_format(data_format, keras_mode=False)
    pool_size = shape2d(pool_size)
    strides = pool_size if strides is None else shape2d(strides)
    padding = str(padding).upper()
    if padding not in ('SAME', 'VALID'):
        raise ValueError("{}: padding must be 'same' or 'valid', got {!r}".format(
            describe_layer(layer_type), padding))

    def pool(x, fmt):
        return pool_fn(x, ksize=shape4d(pool_size, fmt), strides=shape4d(strides, fmt), padding=padding,
                       data_format=fmt)
    return tf.identity(call_in_data_format(pool, inputs, data_format), name='output')


@layer_register(log_shape=True)
@convert_to_tflayer_args(args_names=['pool_size', 'strides'],
                         name_mapping={'shape': 'pool_size', 'stride': 'strides'})
def MaxPooling(inputs, pool_size, strides=None, padding='valid', data_format='channels_last'):
    """2-D max pooling (``tf.layers.MaxPooling2D``'s arguments); ``strides`` defaults to
    ``pool_size``. Returns a tensor named ``output``.

    Example::

        x = MaxPooling('pool0', x, 2)     # [N, 28, 28, C] -> [N, 14, 14, C]
    """
    return _pool(tfv1.nn.max_pool, 'MaxPooling', inputs, pool_size, strides, padding, data_format)


@layer_register(log_shape=True)
@convert_to_tflayer_args(args_names=['pool_size', 'strides'],
                         name_mapping={'shape': 'pool_size', 'stride': 'strides'})
def AvgPooling(inputs, pool_size, strides=None, padding='valid', data_format='channels_last'):
    """2-D average pooling (``tf.layers.AveragePooling2D``'s arguments); ``strides``
    defaults to ``pool_size``. Returns a tensor named ``output``."""
    return _pool(tfv1.nn.avg_pool, 'AvgPooling', inputs, pool_size, strides, padding, data_format)


@layer_register(log_shape=True)
def GlobalAvgPooling(x, data_format='channels_last'):
    """The mean over the spatial axes of a 4-D input (Network In Network,
    http://arxiv.org/abs/1312.4400). Returns an NC tensor named ``output``."""
    check_input_rank(x, (4,), 'GlobalAvgPooling')
    axes = [1, 2] if channel_axis(data_format) == 3 else [2, 3]
    return tf.reduce_mean(x, axes, name='output')


def _unpool_matrix(unpool_mat, shape, dtype):
    if unpool_mat is None:
        mat = np.zeros(shape, dtype=dtype.as_numpy_dtype)
        mat[0, 0] = 1
        return tf.constant(mat, name='unpool_mat')
    if isinstance(unpool_mat, np.ndarray):
        unpool_mat = tf.constant(unpool_mat, dtype=dtype, name='unpool_mat')
    if unpool_mat.shape.as_list() != list(shape):
        raise ValueError("{}: unpool_mat must have the shape {}, got {}".format(
            describe_layer('FixedUnPooling'), list(shape), unpool_mat.shape.as_list()))
    return tf.cast(unpool_mat, dtype)


@layer_register(log_shape=True)
def FixedUnPooling(x, shape, unpool_mat=None, data_format='channels_last'):
    """Un-pool a 4-D input by a fixed matrix: each pixel ``v`` becomes the block
    ``v * unpool_mat`` of size ``shape`` (the Kronecker product of each channel with the
    matrix).

    Args:
        shape: an int or a pair (sh, sw), the enlargement factors.
        unpool_mat: an array or tensor of shape ``shape``; by default 1 at the top-left corner
            and 0 elsewhere.

    Example::

        y = FixedUnPooling('unpool', x, 2)   # [N, 7, 7, C] -> [N, 14, 14, C]
    """
    check_input_rank(x, (4,), 'FixedUnPooling')
    sh, sw = shape = shape2d(shape)
    mat = _unpool_matrix(unpool_mat, shape, x.dtype.base_dtype)
    nhwc = channel_axis(data_format) == 3
    h_axis, w_axis = (1, 2) if nhwc else (2, 3)
    # insert an axis of length sh after H and one of length sw after W, multiply by the
    # matrix broadcast the same way, then merge each pair of axes
    expanded = tf.expand_dims(tf.expand_dims(x, w_axis + 1), h_axis + 1)
    mat_shape = [1] * 6
    mat_shape[h_axis + 1], mat_shape[w_axis + 2] = sh, sw
    blocks = expanded * tf.reshape(mat, mat_shape)
    out_shape = static_or_dynamic_shape(x)
    out_shape[0] = -1
    out_shape[h_axis] = out_shape[h_axis] * sh
    out_shape[w_axis] = out_shape[w_axis] * sw
    out = tf.reshape(blocks, shape_argument(out_shape))
    return tf.identity(out, name='output')
