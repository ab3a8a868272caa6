"""Layers that combine tensors."""

from ..compat import tf
from .registry import layer_register

__all__ = ['ConcatWith']


@layer_register(use_scope=None)
def ConcatWith(x, tensor, dim):
    """``tf.concat([x] + tensor, dim)``, so that LinearWrap chains can concatenate.

    Args:
        tensor: a tensor or a list of tensors, appended after ``x``.
        dim (int): the axis.

    Example::

        LinearWrap(x).Conv2D('c', 16, 3).ConcatWith(skip, 3)()
    """
    tensors = list(tensor) if isinstance(tensor, (list, tuple)) else [tensor]
    return tf.concat([x] + tensors, dim)
