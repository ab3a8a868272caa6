"""Decorators and small helpers about function arguments: memoization, argument mapping,
call-once guards, shape normalisation and the type checks of numeric arguments."""

import functools
import inspect
import numbers

from . import logger

__all__ = ['map_arg', 'memoized', 'memoized_method', 'memoized_ignoreargs', 'graph_memoized',
           'shape2d', 'shape4d', 'call_only_once', 'log_once', 'is_int', 'is_real']


def is_int(value):
    """Whether ``value`` is an integer (Python's or numpy's) and not a bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def is_real(value):
    """Whether ``value`` is a real number (an int, a float, numpy's) and not a bool."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def memoized(func):
    """Memoize ``func`` on its (hashable) arguments, without limit
    (``functools.lru_cache(maxsize=None)``)."""
    return functools.lru_cache(maxsize=None)(func)


def map_arg(**maps):
    """Transform some arguments of a function before it runs.

    Example::

        @map_arg(path=os.path.expanduser)
        def load(path): ...
    """
    def decorator(func):
        signature = inspect.signature(func)

        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            bound = signature.bind(*args, **kwargs)
            for name, mapper in maps.items():
                if name in bound.arguments:
                    bound.arguments[name] = mapper(bound.arguments[name])
            return func(*bound.args, **bound.kwargs)
        return wrapper
    return decorator


def memoized_ignoreargs(func):
    """Memoize a function as if it took no arguments: the first result is returned forever."""
    cache = []

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        if not cache:
            cache.append(func(*args, **kwargs))
        return cache[0]
    return wrapper


def graph_memoized(func):
    """Like :data:`memoized`, but one cache per default ``tf.Graph``: a new graph recomputes."""
    marker = '__tensorpack_lite_graph_memoized_key__'

    @memoized
    def cached(*args, **kwargs):
        kwargs.pop(marker)
        return func(*args, **kwargs)

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        from ..compat import tfv1
        kwargs[marker] = tfv1.get_default_graph()
        return cached(*args, **kwargs)
    return wrapper


def memoized_method(func):
    """Memoize a method per instance (the cache lives on the instance, not on the class)."""
    @functools.wraps(func)
    def wrapper(self, *args, **kwargs):
        try:
            cache = self.__dict__['_memoized_method_cache']
        except KeyError:
            cache = self.__dict__['_memoized_method_cache'] = {}
        key = (func.__name__, args, frozenset(kwargs.items()))
        if key not in cache:
            cache[key] = func(self, *args, **kwargs)
        return cache[key]
    return wrapper


def call_only_once(func):
    """Decorate a method that must run at most once per instance; a second call raises."""
    @functools.wraps(func)
    def wrapper(self, *args, **kwargs):
        called = self.__dict__.setdefault('_called_only_once_methods', set())
        if func.__name__ in called:
            raise RuntimeError("{}.{}() can only be called once per instance; it was already "
                               "called on {!r}.".format(type(self).__name__, func.__name__, self))
        called.add(func.__name__)
        return func(self, *args, **kwargs)
    return wrapper


_LOGGED_ONCE = set()


def log_once(message, func='info'):
    """Log ``message`` with ``logger.<func>`` the first time only."""
    if message in _LOGGED_ONCE:
        return
    _LOGGED_ONCE.add(message)
    getattr(logger, func)(message)


def shape2d(a):
    """Normalise an int or a pair to a list ``[h, w]``."""
    if isinstance(a, int):
        return [a, a]
    if isinstance(a, (list, tuple)) and len(a) == 2:
        return list(a)
    raise ValueError("Expected an int or a pair (h, w), got {!r}".format(a))


def shape4d(a, data_format='NHWC'):
    """Normalise an int or a pair to a rank-4 list in ``data_format`` (1 on N and C)."""
    h, w = shape2d(a)
    if data_format.upper() in ('NHWC', 'CHANNELS_LAST'):
        return [1, h, w, 1]
    if data_format.upper() in ('NCHW', 'CHANNELS_FIRST'):
        return [1, 1, h, w]
    raise ValueError("Unknown data_format {!r}".format(data_format))
