"""Where a tower's tensors lie in the flat pieces that all-reduces move: the one packing core of
the gradients. A :class:`PieceLayout` says which elements of which tensor lie where in which
piece, checks the tensors it is given and takes them out of the (reduced) pieces again;
:class:`PiecePlan` plans the layout of the collective all-reduces across processes, and
:class:`~tensorpack_lite.graph_builder.utils.GradientPacker` (tensorpack's) cuts the
concatenation of a tower's gradients into equal pieces (:meth:`PieceLayout.concatenated`).

On CPUs, TensorFlow's collective ring spends most of its time copying bytes (issue 28,
docs/distributed.md), so the way gradients are packed matters: a :class:`PiecePlan` copies
each byte at most once on the way in and, for tensors that fill a multiple of 64 bytes, not at
all on the way out. Two facts of TensorFlow's CPU kernels make that possible:

* a slice (or split) along the first dimension of a flat tensor shares the tensor's memory when
  its start and its size are multiples of 64 bytes (``EIGEN_MAX_ALIGN_BYTES`` of x86 builds);
  otherwise it copies;
* ``CollectiveReduceV2`` reduces in place when its input is a buffer nobody else holds (the
  output of a concat, or a gradient with no other consumer); a slice of a larger buffer is
  copied first.
"""

import collections

from ..compat import tf

__all__ = ['PieceLayout', 'PiecePlan', 'Segment', 'ALIGN_BYTES']

ALIGN_BYTES = 64
"""Every segment of a piece starts at a multiple of this many bytes (see the module's text)."""


class Segment(collections.namedtuple('Segment', 'index start stop offset')):
    """Elements ``[start, stop)`` of the flattened tensor number ``index``, placed at element
    ``offset`` of a piece. ``start`` and ``stop`` are None for a tensor of unknown shape, which
    is its own piece, as it is."""

    __slots__ = ()

    @property
    def size(self):
        return None if self.start is None else self.stop - self.start


def _round_up(value, multiple):
    return -(-value // multiple) * multiple


class PieceLayout:
    """Where a list of tensors (one tower's) lies in flat pieces: one list of :class:`Segment`
    per piece (:attr:`pieces`), for tensors of the shapes and dtypes of ``tensors``.
    :meth:`pack` makes the pieces (a concat for a piece of several segments), :meth:`unpack`
    takes the tensors out of them."""

    def __init__(self, tensors, pieces=()):
        self._shapes = [tensor.shape for tensor in tensors]
        self._dtypes = [tensor.dtype.base_dtype for tensor in tensors]
        self.pieces = [list(piece) for piece in pieces]

    @classmethod
    def concatenated(cls, tensors, piece_sizes):
        """The layout that cuts the concatenation of ``tensors`` (flattened, of fully defined
        shapes, in their order) into consecutive pieces of ``piece_sizes`` elements; a tensor
        may span several pieces."""
        sizes = [tensor.shape.num_elements() for tensor in tensors]
        if sum(piece_sizes) != sum(sizes):
            raise ValueError("PieceLayout: pieces of {} elements in all for tensors of {}".format(
                sum(piece_sizes), sum(sizes)))
        pieces, position, starts = [], 0, [sum(sizes[:index]) for index in range(len(sizes))]
        for size in piece_sizes:
            end = position + size
            pieces.append([Segment(index, max(start, position) - start, min(start + length, end) - start,
                                   max(start, position) - position)
                           for index, (start, length) in enumerate(zip(starts, sizes))
                           if max(start, position) < min(start + length, end)])
            position = end
        return cls(tensors, pieces)

    def check(self, tensors):
        """A ValueError unless ``tensors`` have the planned number, shapes and dtypes."""
        if len(tensors) != len(self._shapes):
            raise ValueError("{}: planned for {} tensors, got {}".format(
                type(self).__name__, len(self._shapes), len(tensors)))
        for index, tensor in enumerate(tensors):
            if tensor.shape != self._shapes[index] or tensor.dtype.base_dtype != self._dtypes[index]:
                raise ValueError("{}: tensor {} ({}) is {} of shape {}, planned {} of shape {}".format(
                    type(self).__name__, index, tensor.name, tensor.dtype.name, tensor.shape,
                    self._dtypes[index].name, self._shapes[index]))

    def pack(self, tensors):
        """Tensors shaped like the planned ones -> the flat pieces (one concat per piece of
        several segments; a piece of one whole tensor is that tensor, flattened)."""
        self.check(tensors)
        flat = [tensor if shape.num_elements() is None else tf.reshape(tensor, [-1])
                for tensor, shape in zip(tensors, self._shapes)]
        pieces = []
        for segments in self.pieces:
            parts, position = [], 0
            for segment in segments:
                if segment.offset > position:
                    parts.append(tf.zeros([segment.offset - position], self._dtypes[segment.index]))
                parts.append(self._cut(flat[segment.index], segment, self._shapes[segment.index]))
                position = segment.offset + (segment.size or 0)
            pieces.append(parts[0] if len(parts) == 1 else tf.concat(parts, 0))
        return pieces

    @staticmethod
    def _cut(flat, segment, shape):
        if segment.start is None or segment.size == shape.num_elements():
            return flat
        return flat[segment.start:segment.stop]

    def unpack(self, pieces):
        """The (reduced) pieces -> tensors in the planned shapes: slices of the pieces, joined
        by a concat only for a tensor that was cut."""
        if len(pieces) != len(self.pieces):
            raise ValueError("{}: planned {} pieces, got {}".format(
                type(self).__name__, len(self.pieces), len(pieces)))
        parts = [[] for _ in self._shapes]
        for piece, segments in zip(pieces, self.pieces):
            for segment in segments:
                whole = segment.start is None or (segment.offset == 0 and len(segments) == 1)
                parts[segment.index].append(
                    piece if whole else piece[segment.offset:segment.offset + segment.size])
        tensors = []
        for found, shape in zip(parts, self._shapes):
            flat = found[0] if len(found) == 1 else tf.concat(found, 0)
            tensors.append(flat if shape.num_elements() is None else tf.reshape(flat, shape))
        return tensors


class PiecePlan(PieceLayout):
    """The pieces a list of tensors (one tower's) is all-reduced in.

    A tensor of more than ``cut_elements(dtype)`` elements is cut into pieces of its own, of
    about equal sizes (``cut_elements`` None: none is cut); one of more than
    ``pack_elements(dtype)`` (by default ``cut_elements(dtype)``) is a piece of its own, whole;
    the smaller ones are packed, by dtype, into flat pieces of at most ``pack_elements(dtype)``
    elements, each segment at a 64-byte offset (zeros fill the gaps). The tensors are taken in
    ``order`` (indices; by default as given), and the pieces are sorted by the place in it of
    their last tensor: with :func:`~tensorpack_lite.graph_builder.backprop_order.backprop_order`,
    in the order they can start while backprop runs. A pack fills with the small tensors in that
    order, past the large ones between them (a pack of its own for a few kilobytes would make
    an all-reduce whose 2 (N - 1) hops wait behind the large ones on a loaded link). Every tower
    of every worker builds the same plan from tensors of the same shapes, so the k-th pieces of
    all of them form one collective all-reduce.

    Example::

        plan = PiecePlan(grads_of_tower_0, cut_elements=lambda dtype: (8 << 20) // dtype.size,
                         pack_elements=lambda dtype: 1 << 18)
        pieces = plan.pack(grads)                    # len(plan.pieces) flat tensors
        reduced = [all_reduce(p) for p in pieces]
        grads = plan.unpack(reduced)                 # the shapes of grads_of_tower_0

    Attributes:
        pieces: one list of :class:`Segment` per piece, in the order of :meth:`pack`.
        order: the order the tensors were taken in.
    """

    def __init__(self, tensors, cut_elements=None, pack_elements=None, order=None):
        super().__init__(tensors)
        pack_elements = pack_elements or cut_elements
        if pack_elements is None:
            raise ValueError("PiecePlan: give cut_elements, pack_elements or both")
        order = list(range(len(tensors)) if order is None else order)
        if sorted(order) != list(range(len(tensors))):
            raise ValueError("PiecePlan: order must hold each of the {} tensors' indices once, got {}".format(
                len(tensors), order))
        self.order = order
        filling = {}                                # dtype -> the piece being filled
        for index in order:
            dtype = self._dtypes[index]
            size = self._shapes[index].num_elements()
            cut_limit = max(1, int(cut_elements(dtype))) if cut_elements else None
            pack_limit = max(1, int(pack_elements(dtype)))
            if cut_limit is not None:
                pack_limit = min(cut_limit, pack_limit)
            align = max(1, ALIGN_BYTES // dtype.size)
            if size is not None and cut_limit is not None and size > cut_limit:
                step = _round_up(-(-size // -(-size // cut_limit)), align)
                self.pieces.extend([Segment(index, start, min(size, start + step), 0)]
                                   for start in range(0, size, step))
            elif size is None or size > pack_limit:
                whole = Segment(index, None, None, 0) if size is None else Segment(index, 0, size, 0)
                self.pieces.append([whole])
            else:
                piece = filling.get(dtype)
                offset = _round_up(self._length(piece), align) if piece else 0
                if not piece or offset + size > pack_limit:
                    piece, offset = [], 0
                    self.pieces.append(piece)
                    filling[dtype] = piece
                piece.append(Segment(index, 0, size, offset))
        position = {index: rank for rank, index in enumerate(order)}
        self.pieces.sort(key=lambda piece: max(position[segment.index] for segment in piece))

    @staticmethod
    def _length(piece):
        last = piece[-1]
        return last.offset + last.size
