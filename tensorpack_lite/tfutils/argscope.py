"""argscope: default arguments of layers for a block of code.

Example::

    with argscope(Conv2D, kernel_size=3, activation=tf.nn.relu):
        x = Conv2D('conv0', x, 32)              # kernel_size=3, relu
        with argscope([Conv2D, MaxPooling], data_format='channels_first'):
            x = Conv2D('conv1', x, 64)          # kernel_size=3, relu, channels_first
        x = Conv2D('conv2', x, 64, kernel_size=5)   # an explicit argument wins
"""

import functools
from collections import defaultdict
from contextlib import contextmanager

from ..utils import logger
from .model_utils import get_shape_str
from .tower import get_current_tower_context

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


def enable_argscope_for_function(func, log_shape=True):
    """Make a plain function (whose first argument is its input tensor) usable with
    :func:`argscope`; with ``log_shape``, each call in the main training tower (or outside
    towers) logs its input and output shapes.

    Example::

        Conv = enable_argscope_for_function(my_conv)
        with argscope(Conv, kernel=3):
            y = Conv(x, 16)
    """
    name = func.__name__

    @functools.wraps(func)
    def wrapped_func(*args, **kwargs):
        actual_args = get_arg_scope()[name]
        actual_args.update(kwargs)
        out = func(*args, **actual_args)
        ctx = get_current_tower_context()
        if log_shape and args and (ctx is None or ctx.is_main_training_tower):
            first_out = out[0] if isinstance(out, tuple) else out
            logger.info("'{}': {} --> {}".format(name, get_shape_str(args[0]), get_shape_str(first_out)))
        return out

    wrapped_func.__argscope_enabled__ = True
    return wrapped_func


def enable_argscope_for_module(module, log_shape=True):
    """Apply :func:`enable_argscope_for_function` to every public function of ``module`` in
    place (e.g. a module of your own layer functions)."""
    for name in dir(module):
        obj = getattr(module, name)
        if not name.startswith('_') and callable(obj) and getattr(obj, '__module__', None) == \
                module.__name__ and not isinstance(obj, type):
            setattr(module, name, enable_argscope_for_function(obj, log_shape=log_shape))
