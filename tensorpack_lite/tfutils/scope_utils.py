"""Decorators that run a graph-building function under a name or variable scope.

Example (a discriminator called on real and on fake images shares its variables)::

    @auto_reuse_variable_scope
    def discriminator(image):
        return FullyConnected('fc', image, 1)

    with tf.variable_scope('discrim'):
        real_logits = discriminator(real)   # creates discrim/fc/W
        fake_logits = discriminator(fake)   # reuses discrim/fc/W
"""

import contextlib
import functools

from ..compat import tfv1
from ..utils import logger
from ..utils.argtools import graph_memoized

__all__ = ['auto_reuse_variable_scope', 'under_name_scope', 'under_variable_scope', 'cached_name_scope']


def auto_reuse_variable_scope(func):
    """Decorate a function so that its second and later calls under the same variable scope
    (in the same graph) reuse the variables the first call created. No scope is added."""
    scopes_seen = set()

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        scope = tfv1.get_variable_scope()
        key = (tfv1.get_default_graph(), scope.name)
        if key not in scopes_seen:
            scopes_seen.add(key)
            return func(*args, **kwargs)
        with tfv1.variable_scope(scope, reuse=True, auxiliary_name_scope=False):
            return func(*args, **kwargs)
    return wrapper


def under_name_scope(name_scope=None):
    """A decorator that runs the function under a name scope: ``name_scope``, by default the
    function's name, opened anew at each call (``rms``, ``rms_1``...).

    A call may pass ``name_scope='...'`` to choose the scope; that scope is entered again by
    every call that names it (see :func:`cached_name_scope`). When the name was already taken
    by something else in the graph, TensorFlow gives another one (``'name_1'``) and a warning
    is logged.

    Example::

        @under_name_scope()
        def rms(x):                       # its ops are named rms/...
            return tf.sqrt(tf.reduce_mean(tf.square(x)))

        rms(x)                            # ops under 'rms/'
        rms(x, name_scope='loss_rms')     # ops under 'loss_rms/'
    """
    def decorate(func):
        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            if 'name_scope' not in kwargs:
                with tfv1.name_scope(name_scope or func.__name__):
                    return func(*args, **kwargs)
            asked = kwargs.pop('name_scope').rstrip('/')
            current = tfv1.get_default_graph().get_name_scope()
            expected = current + '/' + asked if current else asked
            with cached_name_scope(asked, top_level=False) as scope:
                actual = scope.rstrip('/')
                if actual != expected:
                    logger.warn("Calling {} with name_scope='{}', but the name scope is '{}': the name '{}' "
                                "is taken in the graph.".format(func.__name__, asked, actual, expected))
                return func(*args, **kwargs)
        return wrapper
    return decorate


def under_variable_scope():
    """A decorator that runs the function under ``tf.variable_scope(<function name>)``, so its
    variables (and ops) are named ``<function name>/...``."""
    def decorate(func):
        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            with tfv1.variable_scope(func.__name__):
                return func(*args, **kwargs)
        return wrapper
    return decorate


@graph_memoized
def _first_name_scope(full_name):
    """The scope TensorFlow gave ``full_name`` when it was first opened in this graph (from the
    root; ``'name_1/'`` if ``name`` was taken then)."""
    with tfv1.name_scope(None), tfv1.name_scope(full_name) as scope:
        return scope


@contextlib.contextmanager
def cached_name_scope(name, top_level=True):
    """A name scope that is entered again each time instead of making ``name_1``, ``name_2``...

    The first time, the scope is opened as usual (so if ``name`` is already taken in the graph
    it becomes e.g. ``name_1``); later calls with the same name, in the same graph, enter that
    same scope.

    Args:
        name (str): the scope's name.
        top_level (bool): the scope sits at the top of the graph (otherwise under the
            current name scope).

    Example::

        with cached_name_scope('stats'):
            a = tf.identity(x, name='a')     # stats/a
        with cached_name_scope('stats'):
            b = tf.identity(x, name='b')     # stats/b
    """
    name = name.rstrip('/')
    if not top_level:
        current = tfv1.get_default_graph().get_name_scope()
        if current:
            name = current + '/' + name
    scope = _first_name_scope(name)
    with tfv1.name_scope(scope):
        yield scope
