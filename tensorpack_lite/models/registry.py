"""layer_register: turn a function into a tensorpack layer.

A registered layer

* is called as ``Layer('name', input, ...)`` and builds its variables and ops under the
  variable scope ``name`` (or, with ``use_scope=None``, may be called without a name);
* takes its default arguments from :func:`~tensorpack_lite.tfutils.argscope.argscope`;
* logs its input and output shapes once per layer name and graph (with ``log_shape``);
* can be chained with :class:`~tensorpack_lite.models.linearwrap.LinearWrap`.
"""

import functools
import re

from ..compat import tf, tfv1
from ..tfutils.argscope import get_arg_scope
from ..tfutils.model_utils import get_shape_str
from ..tfutils.tower_context import get_current_tower_context
from ..utils import logger
from ..utils.argtools import graph_memoized

__all__ = ['layer_register', 'get_registered_layer', 'disable_layer_logging', 'current_layer_description']

_LAYER_REGISTRY = {}
_RESERVED_NAMES = ('tf',)
_LAYERS_BEING_BUILT = []     # descriptions of the registered layers being built, innermost last


class _ShapeLogging(object):
    """Whether layers log their shapes (switched off by :func:`disable_layer_logging`)."""
    enabled = True


@graph_memoized
def _logged_layer_names():
    """The layer names (tower prefix removed) whose shapes were logged in the default graph."""
    return set()


def get_registered_layer(name):
    """The layer registered under ``name`` (its function name), or None."""
    return _LAYER_REGISTRY.get(name)


def disable_layer_logging():
    """Stop every layer from logging its input and output shapes."""
    _ShapeLogging.enabled = False


def current_layer_description():
    """``"Conv2D 'conv1'"``: the innermost registered layer being built (its type and
    variable scope), for error messages; None outside layers."""
    return _LAYERS_BEING_BUILT[-1] if _LAYERS_BEING_BUILT else None


def _register(name, layer):
    if name in _RESERVED_NAMES:
        raise ValueError("A layer cannot be named '{}': the name is reserved by LinearWrap.".format(name))
    if name in _LAYER_REGISTRY:
        logger.warning("Layer '{}' is registered again; the new definition replaces the old one.".format(
            name))
    _LAYER_REGISTRY[name] = layer


def _is_tensor(x):
    return isinstance(x, (tf.Tensor, tf.Variable))


def _split_name(layer_name, use_scope, args):
    """``(scope name or None, the inputs, the arguments after the name)``."""
    if not args:
        raise TypeError("{}() needs an input tensor{}.".format(
            layer_name, " after the layer name" if use_scope else ""))
    if use_scope or (use_scope is None and isinstance(args[0], str)):
        name = args[0]
        if not isinstance(name, str):
            raise TypeError("{0} must be called as {0}('name', input, ...): its first argument is the "
                            "layer name (a str), got {1!r}.".format(layer_name, type(name).__name__))
        if len(args) < 2:
            raise TypeError("{}('{}', ...) needs an input tensor after the layer name.".format(
                layer_name, name))
        return name, args[1], args[1:]
    return None, args[0], args


def _check_inputs(description, inputs):
    ok = _is_tensor(inputs) or (isinstance(inputs, (list, tuple)) and len(inputs) > 0
                                and all(_is_tensor(t) for t in inputs))
    if not ok:
        raise TypeError("{}: its input must be a tf.Tensor (or a list of them), got {}: {!r}".format(
            description, type(inputs).__name__, inputs))


def _shapes_for_log(tensors):
    try:
        return get_shape_str(tensors)
    except TypeError:   # a layer may return something else than tensors
        return type(tensors).__name__


def _without_tower_prefix(scope_name):
    """'tower1/conv0' -> 'conv0': the same layer in every tower."""
    return re.sub('tower[0-9]+/', '', scope_name)


def _should_log(log_shape, scope_name):
    if not (log_shape and _ShapeLogging.enabled):
        return False
    ctx = get_current_tower_context()
    if ctx is not None and ctx.is_training and not ctx.is_main_training_tower:
        return False
    return _without_tower_prefix(scope_name) not in _logged_layer_names()


def layer_register(log_shape=False, use_scope=True):
    """Decorator that registers a function ``func(input, ...)`` as a layer.

    Args:
        log_shape (bool): log the input and output shapes of the layer, once per layer name
            (tower prefixes ignored) and graph, in the main training tower.
        use_scope (bool or None): True: the layer is called as ``Layer('name', x, ...)`` and
            runs under ``tf.compat.v1.variable_scope('name')``. False: called as
            ``Layer(x, ...)``, no scope. None: either form, depending on whether the first
            argument is a str.

    Example::

        @layer_register(log_shape=True)
        def AddBias(x):
            return x + tf.compat.v1.get_variable('b', [x.shape[-1]])

        y = AddBias('bias0', x)      # creates variable 'bias0/b'
    """
    def decorator(func):
        layer_name = func.__name__

        @functools.wraps(func)
        def wrapped_func(*args, **kwargs):
            name, inputs, args = _split_name(layer_name, use_scope, args)
            description = "{} '{}'".format(layer_name, name) if name is not None else layer_name
            _check_inputs(description, inputs)
            actual_args = get_arg_scope()[layer_name]
            actual_args.update(kwargs)
            if name is None:
                scope = tfv1.get_variable_scope().name
                return _build(func, "{} (in scope '{}')".format(layer_name, scope) if scope else layer_name,
                              args, actual_args)
            with tfv1.variable_scope(name) as scope:
                do_log = _should_log(log_shape, scope.name)
                if do_log:
                    logger.info("{} input: {}".format(scope.name, _shapes_for_log(inputs)))
                outputs = _build(func, "{} '{}'".format(layer_name, scope.name), args, actual_args)
                if do_log:
                    logger.info("{} output: {}".format(scope.name, _shapes_for_log(outputs)))
                    _logged_layer_names().add(_without_tower_prefix(scope.name))
            return outputs

        wrapped_func.symbolic_function = func
        wrapped_func.use_scope = use_scope
        wrapped_func.__argscope_enabled__ = True
        _register(layer_name, wrapped_func)
        return wrapped_func
    return decorator


def _build(func, description, args, kwargs):
    _LAYERS_BEING_BUILT.append(description)
    try:
        return func(*args, **kwargs)
    finally:
        _LAYERS_BEING_BUILT.pop()
