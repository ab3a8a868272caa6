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
    """A decorator that runs the function under ``tf.name_scope(name_scope)`` (by default the
    function's name). A call may choose another scope with the keyword ``name_scope=``.

    Example::

        @under_name_scope()
        def rms(x):                       # its ops are named rms/...
            return tf.sqrt(tf.reduce_mean(tf.square(x)))
    """
    def decorate(func):
        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            scope = kwargs.pop('name_scope', None) or name_scope or func.__name__
            with tfv1.name_scope(scope):
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


@contextlib.contextmanager
def cached_name_scope(name, top_level=True):
    """Enter the name scope ``name`` again each time instead of making ``name_1``, ``name_2``...

    Args:
        name (str): the scope's name.
        top_level (bool): the scope sits at the top of the graph (otherwise under the
            current name scope).
    """
    if top_level:
        full_name = name.rstrip('/') + '/'
    else:
        current = tfv1.get_default_graph().get_name_scope()
        full_name = (current + '/' if current else '') + name.rstrip('/') + '/'
    with tfv1.name_scope(full_name) as scope:
        yield scope
