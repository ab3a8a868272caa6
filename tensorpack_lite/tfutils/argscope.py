"""argscope: default arguments of layers for a block of code.

Example::

    with argscope(Conv2D, kernel_size=3, activation=tf.nn.relu):
        x = Conv2D('conv0', x, 32)              # kernel_size=3, relu
        with argscope([Conv2D, MaxPooling], data_format='channels_first'):
            x = Conv2D('conv1', x, 64)          # kernel_size=3, relu, channels_first
        x = Conv2D('conv2', x, 64, kernel_size=5)   # an explicit argument wins
"""

import functools
import inspect
from collections import defaultdict
from contextlib import contextmanager

from ..compat import tf
from ..utils import logger
from .model_utils import get_shape_str
from .tower_context import get_current_tower_context

__all__ = ['argscope', 'get_arg_scope', 'enable_argscope_for_function', 'enable_argscope_for_module']

_ARGSCOPE_STACK = []


def get_arg_scope():
    """The defaults in effect: a dict ``layer name -> {argument: value}`` (a copy; changing it
    changes nothing). Layers not mentioned map to an empty dict."""
    scope = defaultdict(dict)
    if _ARGSCOPE_STACK:
        for name, args in _ARGSCOPE_STACK[-1].items():
            scope[name] = dict(args)
    return scope


@contextmanager
def argscope(layers, **kwargs):
    """Inside the block, every call of the given layers gets ``kwargs`` as default arguments.

    Scopes nest: an inner scope adds to (and overrides) the defaults of the outer one, and
    leaving it restores them. Arguments given in a call always win over the defaults.

    Args:
        layers: a layer (a function decorated by ``layer_register`` or
            :func:`enable_argscope_for_function`) or a list of them.
        kwargs: the default arguments.
    """
    if not isinstance(layers, (list, tuple)):
        layers = [layers]
    for layer in layers:
        if not getattr(layer, '__argscope_enabled__', False):
            raise TypeError("argscope() only applies to layers registered with layer_register (or "
                            "functions wrapped by enable_argscope_for_function); got {!r}.".format(layer))
    new_scope = get_arg_scope()
    for layer in layers:
        new_scope[layer.__name__].update(kwargs)
    _ARGSCOPE_STACK.append(new_scope)
    try:
        yield
    finally:
        _ARGSCOPE_STACK.pop()


def _should_log_shapes(ctx):
    """Shapes are logged outside towers and in the main training tower, not in the others."""
    return ctx is None or 'tower' not in ctx.ns_name.lower() or ctx.is_main_training_tower


def _is_tensor(x):
    return isinstance(x, (tf.Tensor, tf.Variable))


def enable_argscope_for_function(func, log_shape=True):
    """Make a plain function (whose first argument is its input tensor) take default
    arguments from :func:`argscope`, under its ``__name__``; returns the wrapped function.

    With ``log_shape``, each call outside towers or in the main training tower logs the shape
    of its first input and of its (first) output, under the call's ``name=`` if it has one.

    Example::

        conv2d = enable_argscope_for_function(tf.nn.conv2d)
        with argscope(conv2d, strides=[1, 1, 1, 1], padding='SAME'):
            y = conv2d(x, kernel)
    """
    if not callable(func):
        raise TypeError("enable_argscope_for_function() takes a function, got {!r}.".format(func))
    scope_name = func.__name__

    @functools.wraps(func)
    def wrapped_func(*args, **kwargs):
        actual_args = get_arg_scope()[scope_name]
        actual_args.update(kwargs)
        out = func(*args, **actual_args)
        first_out = out[0] if isinstance(out, tuple) and out else out
        if log_shape and args and _is_tensor(args[0]) and _is_tensor(first_out) and \
                _should_log_shapes(get_current_tower_context()):
            logger.info("'{}': {} --> {}".format(kwargs.get('name') or scope_name, get_shape_str(args[0]),
                                                 get_shape_str(first_out)))
        return out

    wrapped_func.__argscope_enabled__ = True
    return wrapped_func


def enable_argscope_for_module(module, log_shape=True):
    """Replace every Python function that is an attribute of ``module`` by its
    :func:`enable_argscope_for_function` version, in place (a monkey-patch: it changes the
    module for everyone who uses it). Functions already enabled are left as they are.

    Example::

        import my_layers                       # a module of plain layer functions
        enable_argscope_for_module(my_layers)
        with argscope(my_layers.dense, use_bias=False):
            y = my_layers.dense(x, 10)
    """
    for name, obj in inspect.getmembers(module, inspect.isfunction):
        if not getattr(obj, '__argscope_enabled__', False):
            setattr(module, name, enable_argscope_for_function(obj, log_shape=log_shape))
