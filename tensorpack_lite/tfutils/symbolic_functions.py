"""Small symbolic helpers: the root mean square of a tensor, and a tensor that prints its
statistics when computed.

Example::

    x = print_stat(x, message='features')   # prints shape, mean, rms and values of x to stderr
"""

import sys

from ..compat import tf, tfv1

__all__ = ['print_stat', 'rms']


def rms(x, name=None):
    """The root mean square of all elements of ``x``, a scalar tensor.

    Args:
        x (tf.Tensor): a floating-point tensor.
        name (str): the name of the result (in the current name scope); by default
            ``<op name of x>/rms``, outside of any name scope (the op name of ``x`` holds its
            scope already).
    """
    if name is not None:
        return tf.sqrt(tf.reduce_mean(tf.square(x)), name=name)
    with tfv1.name_scope(None):
        return tf.sqrt(tf.reduce_mean(tf.square(x)), name=x.op.name + '/rms')


def print_stat(x, message=None):
    """``x``, through an identity op that prints (to stderr) ``message``, the shape of ``x``,
    its mean, its root mean square (for floating-point ``x``) and its first values (20 at
    most per dimension) each time it is computed.

    Args:
        x (tf.Tensor):
        message (str): defaults to the op name of ``x``.

    Returns:
        tf.Tensor: named ``print_<op name of x>``, the same value as ``x``.
    """
    if message is None:
        message = x.op.name
    stats = [tf.shape(x), tf.reduce_mean(x)]
    if x.dtype.is_floating:
        stats.append(rms(x))
    print_op = tf.print(message, *(stats + [x]), summarize=20, output_stream=sys.stderr)
    with tf.control_dependencies([print_op]):
        return tf.identity(x, name='print_' + x.op.name)
