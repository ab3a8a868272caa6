"""Argument conventions of the layers (those of ``tf.layers``, which tensorpack 0.11 follows)
and the variables most layers create.

* ``data_format`` may be given as ``'channels_last'``/``'channels_first'`` or
  ``'NHWC'``/``'NCHW'``;
* the old tensorpack argument names still work: ``nl`` (activation), ``W_init``, ``b_init``,
  and per layer e.g. ``out_channel``, ``kernel_shape``, ``stride``;
* the first few arguments after the input may be positional (``Conv2D('c', x, 32, 3)``) and
  then win over defaults from argscope;
* a number of outputs (``filters``, ``units``) may be a float with a whole value
  (``n_in / 2``): :func:`output_count`.

:func:`rename_tflayer_get_variable` gives variables created with ``tf.layers``' names
(``kernel``, ``bias``, ``moving_mean``...) tensorpack's names (``W``, ``b``, ``mean/EMA``...).
"""

import functools

from ..compat import tfv1
from ..tfutils.varreplace import custom_getter_scope
from ..utils.argtools import is_int, is_real
from .utils import describe_layer

__all__ = ['get_data_format', 'convert_to_tflayer_args', 'default_kernel_initializer', 'kernel_and_bias',
           'channel_axis', 'output_count', 'rename_get_variable', 'rename_tflayer_get_variable']

# tf.layers' variable names -> tensorpack's
_TFLAYER_TO_TENSORPACK_NAMES = {
    'kernel': 'W',
    'bias': 'b',
    'moving_mean': 'mean/EMA',
    'moving_variance': 'variance/EMA',
}

_DATA_FORMATS = {
    'channels_last': ('channels_last', 'NHWC'), 'nhwc': ('channels_last', 'NHWC'),
    'channels_first': ('channels_first', 'NCHW'), 'nchw': ('channels_first', 'NCHW'),
}


def get_data_format(data_format, keras_mode=True):
    """Normalise a data format: ``'channels_last'``/``'channels_first'`` with ``keras_mode``,
    else ``'NHWC'``/``'NCHW'``."""
    try:
        keras_name, tf_name = _DATA_FORMATS[str(data_format).lower()]
    except KeyError:
        raise ValueError("Unknown data_format {!r}: use 'channels_last' ('NHWC') or 'channels_first' "
                         "('NCHW').".format(data_format))
    return keras_name if keras_mode else tf_name


def channel_axis(data_format, ndims=4):
    """The axis of the channels for an input of rank ``ndims`` (the last one of a 2-D input)."""
    if ndims == 2:
        return 1
    return 1 if get_data_format(data_format) == 'channels_first' else ndims - 1


def _map_common_args(kwargs):
    kwargs = dict(kwargs)
    if kwargs.get('data_format') is not None:
        kwargs['data_format'] = get_data_format(kwargs['data_format'])
    if 'nl' in kwargs:
        nonlin = kwargs.pop('nl')
        kwargs['activation'] = lambda x, name=None: nonlin(x, name=name)
    for old, new in (('W_init', 'kernel_initializer'), ('b_init', 'bias_initializer')):
        if old in kwargs:
            kwargs[new] = kwargs.pop(old)
    return kwargs


def convert_to_tflayer_args(args_names, name_mapping):
    """Decorator of a layer function ``func(inputs, **kwargs)``: normalise ``data_format``, map
    the old argument names (``nl``, ``W_init``, ``b_init`` and ``name_mapping``) to the new
    ones, and pass the positional arguments after the input as the ``args_names``
    (positional arguments override the same keyword, as argscope defaults arrive as
    keywords)."""
    def decorator(func):
        @functools.wraps(func)
        def decorated_func(inputs, *args, **kwargs):
            if len(args) > len(args_names):
                raise TypeError("{} takes at most {} positional argument(s) after its input ({}); got {}. "
                                "Pass the others by keyword.".format(
                                    describe_layer(func.__name__), len(args_names), ', '.join(args_names),
                                    len(args)))
            kwargs = _map_common_args(kwargs)
            mapped = {}
            for name, value in kwargs.items():
                new_name = name_mapping.get(name, name)
                if new_name != name and new_name in kwargs:
                    raise TypeError("{}: arguments '{}' and '{}' mean the same; give only one.".format(
                        describe_layer(func.__name__), name, new_name))
                mapped[new_name] = value
            mapped.update(zip(args_names, args))
            return func(inputs, **mapped)
        return decorated_func
    return decorator


def default_kernel_initializer():
    """tensorpack's default for kernels: variance scaling with scale 2 over fan-in, from an
    untruncated normal distribution (He initialisation)."""
    return tfv1.variance_scaling_initializer(scale=2.0, mode='fan_in', distribution='untruncated_normal')


def output_count(value, layer_type, argument):
    """A layer's number of outputs ``argument`` (``filters``, ``units``) as an int: a float with
    a whole value converts (``128.0``, as tensorpack's layers took it); a fraction is a
    ValueError and anything else a TypeError, naming the layer and the argument."""
    if is_int(value) or (is_real(value) and float(value).is_integer()):
        return int(value)
    if is_real(value):
        raise ValueError("{}: {} must be a whole number, got {!r}".format(
            describe_layer(layer_type), argument, value))
    raise TypeError("{}: {} must be an int, got {!r}".format(describe_layer(layer_type), argument, value))


def kernel_and_bias(kernel_shape, bias_size, use_bias, kernel_initializer, bias_initializer,
                    kernel_regularizer=None, bias_regularizer=None, dtype=None):
    """Variables ``W`` of ``kernel_shape`` and (when ``use_bias``) ``b`` of ``[bias_size]`` in
    the current variable scope; ``b`` is None without bias. A None ``kernel_initializer``
    means :func:`default_kernel_initializer`."""
    kernel = tfv1.get_variable('W', kernel_shape, dtype=dtype,
                               initializer=kernel_initializer or default_kernel_initializer(),
                               regularizer=kernel_regularizer)
    bias = None
    if use_bias:
        bias = tfv1.get_variable('b', [bias_size], dtype=dtype, initializer=bias_initializer,
                                 regularizer=bias_regularizer)
    return kernel, bias


def rename_get_variable(mapping):
    """A context in which ``tf.compat.v1.get_variable`` renames the variables whose last name
    component is a key of ``mapping`` (e.g. ``{'kernel': 'W'}`` makes ``conv0/kernel``
    ``conv0/W``). Existing variables are looked up under the new names too.

    Args:
        mapping (dict): old last name component -> new one.
    """
    def renaming_getter(getter, name, *args, **kwargs):
        scope, _, base = name.rpartition('/')
        if base in mapping:
            name = scope + '/' + mapping[base] if scope else mapping[base]
        return getter(name, *args, **kwargs)
    return custom_getter_scope(renaming_getter)


def rename_tflayer_get_variable():
    """A context in which variables created with ``tf.layers``' names get tensorpack's:
    ``kernel`` -> ``W``, ``bias`` -> ``b``, ``moving_mean`` -> ``mean/EMA``,
    ``moving_variance`` -> ``variance/EMA``. It acts on ``tf.compat.v1.get_variable``, so it
    serves any code written with those names (``tf.layers`` itself is not used by this library).

    Example::

        with rename_tflayer_get_variable(), tf.variable_scope('fc0'):
            w = tf.get_variable('kernel', [10, 4])      # fc0/W
            b = tf.get_variable('bias', [4])            # fc0/b
    """
    return rename_get_variable(_TFLAYER_TO_TENSORPACK_NAMES)
