"""Gradient compression for the collective all-reduce across workers: gradients travel in 16
bits and are summed in float32.

A collective all-reduce of 16-bit tensors would add in 16 bits at every hop. Instead every
member of the group sends its gradient rounded to 16 bits with an all-gather
(``CollectiveGatherV2``), and each member adds the N gathered values in float32 itself, one
after the other in rank order. Every member adds the same values in the same order with the
same float32 operations, so every replica gets the same, deterministic result: the float32
sum of the rounded gradients. For 2 members this moves the bytes of a ring all-reduce of the
float32 data halved; for N members each receives (N - 1) 16-bit copies, as many bytes as a
float32 ring all-reduce at N = 4, more beyond (TensorFlow's collective reduce-scatter and
all-to-all, which would avoid that, run with NCCL only).
"""

from ..compat import tf
from .utils import sum_in_order

__all__ = ['COMPRESSIONS', 'check_compression', 'GradientCompression']

COMPRESSIONS = ('fp16', 'bf16')
"""The gradient compressions: ``'fp16'`` (IEEE half: 11 significant bits, up to 65504) and
``'bf16'`` (bfloat16: 8 significant bits, float32's range)."""

_WIRE_DTYPES = {'fp16': tf.float16, 'bf16': tf.bfloat16}


def check_compression(compression, owner):
    """``compression`` if it is None or one of :data:`COMPRESSIONS`, else a ValueError naming
    ``owner``'s argument and the choices."""
    if compression is None or (isinstance(compression, str) and compression in COMPRESSIONS):
        return compression
    raise ValueError("{}: compression must be None or one of {}, got {!r}".format(
        owner, ', '.join(repr(c) for c in COMPRESSIONS), compression))


class GradientCompression:
    """How one kind of compression sends a gradient and sums what arrives.

    Args:
        compression (str): one of :data:`COMPRESSIONS`.
    """

    def __init__(self, compression):
        if check_compression(compression, type(self).__name__) is None:
            raise ValueError("GradientCompression: compression must be one of {}, got None".format(
                ', '.join(repr(c) for c in COMPRESSIONS)))
        self.name = compression
        self.wire_dtype = _WIRE_DTYPES[compression]

    @staticmethod
    def applies_to(tensor):
        """Whether ``tensor`` is compressed: floating point of 32 bits or more (float16 and
        bfloat16 travel as they are, other dtypes are not touched)."""
        dtype = tensor.dtype.base_dtype
        return dtype.is_floating and dtype.size >= 4

    def encode(self, tensor):
        """``tensor`` flattened and rounded (to nearest even) to 16 bits, as float16: the dtype
        the collective gather accepts (bfloat16 travels bit for bit inside float16)."""
        rounded = tf.cast(tf.reshape(tensor, [-1]), self.wire_dtype)
        if self.wire_dtype == tf.float16:
            return rounded
        return tf.bitcast(rounded, tf.float16)

    def decode(self, encoded):
        """The float32 values of an :meth:`encode` d tensor (or of rows of them)."""
        if self.wire_dtype != tf.float16:
            encoded = tf.bitcast(encoded, self.wire_dtype)
        return tf.cast(encoded, tf.float32)

    def sum_gathered(self, gathered, group_size):
        """The float32 sum of the ``group_size`` encoded tensors concatenated in ``gathered``,
        added one after the other in their order."""
        return sum_in_order(tf.unstack(self.decode(tf.reshape(gathered, [group_size, -1])), num=group_size))
