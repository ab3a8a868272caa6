"""PiecePlan: how a tower's tensors are packed into the flat pieces of collective all-reduces."""

import numpy as np
import pytest

from tensorpack_lite.compat import tf, tfv1
from tensorpack_lite.graph_builder.pieces import ALIGN_BYTES, PiecePlan


def mixed_tensors(rng):
    """A conv kernel and its bias (multiples of 64 bytes), a 10-element bias, a big float32
    tensor, an int32 one and a float64 one, in that order."""
    return [tf.constant(rng.randn(3, 3, 4, 16).astype('float32')),      # 576 elements
            tf.constant(rng.randn(16).astype('float32')),
            tf.constant(rng.randn(10).astype('float32')),
            tf.constant(rng.randn(50, 41).astype('float32')),          # 2050 elements: cut
            tf.constant(np.arange(30, dtype='int32').reshape(5, 6)),
            tf.constant(rng.randn(7))]


def test_the_plan_packs_in_order_cuts_what_is_too_big_and_aligns_every_segment():
    with tf.Graph().as_default():
        tensors = mixed_tensors(np.random.RandomState(0))
        plan = PiecePlan(tensors, lambda dtype: 4096 // dtype.size)        # pieces of <= 4 KB
    layout = [[(s.index, s.start, s.stop, s.offset) for s in piece] for piece in plan.pieces]
    assert layout == [
        [(0, 0, 576, 0), (1, 0, 16, 576), (2, 0, 10, 592)],     # float32: 602 of 1024 elements
        [(3, 0, 688, 0)], [(3, 688, 1376, 0)], [(3, 1376, 2050, 0)],   # 2050 > 1024: 3 cuts
        [(4, 0, 30, 0)], [(5, 0, 7, 0)]]                       # int32 and float64: pieces of their own
    for piece in plan.pieces:
        for segment in piece:
            itemsize = tensors[segment.index].dtype.size
            assert segment.offset * itemsize % ALIGN_BYTES == 0
            assert segment.start * itemsize % ALIGN_BYTES == 0


def test_a_piece_that_would_overflow_is_closed_and_small_tensors_of_one_dtype_share_pieces():
    with tf.Graph().as_default():
        tensors = [tf.zeros([100]), tf.zeros([100]), tf.zeros([5], tf.int32), tf.zeros([100]), tf.zeros([3])]
        plan = PiecePlan(tensors, lambda dtype: 230)
    assert [[(s.index, s.offset) for s in piece] for piece in plan.pieces] == \
        [[(0, 0), (1, 112)], [(2, 0)], [(3, 0), (4, 112)]]      # 112 + 100 <= 230; 224 + 100 is not


@pytest.mark.quick
def test_pack_then_unpack_gives_every_tensor_back_with_its_shape_and_dtype():
    rng = np.random.RandomState(1)
    with tf.Graph().as_default():
        tensors = mixed_tensors(rng)
        unknown = tfv1.placeholder(tf.float32, [None, 3])
        plan = PiecePlan(tensors + [unknown], lambda dtype: 4096 // dtype.size)
        pieces = plan.pack(tensors + [unknown])
        back = plan.unpack([piece * tf.constant(2, piece.dtype) for piece in pieces])   # a "reduction"
        assert [t.shape for t in back] == [t.shape for t in tensors + [unknown]]
        assert [p.shape.num_elements() for p in pieces] == [602, 688, 688, 674, 30, 7, None]
        with tfv1.Session() as sess:
            feed = rng.randn(4, 3).astype('float32')
            expected, got = sess.run([tensors, back], {unknown: feed})
    for value, result in zip(expected + [feed], got):
        assert result.dtype == value.dtype
        np.testing.assert_array_equal(result, value * 2)


def test_each_byte_is_copied_once_on_the_way_in_and_aligned_tensors_come_out_as_slices():
    """The copies are the concats: one per piece of several tensors, one to join a tensor that
    was cut. An aligned tensor comes out of its piece as a slice of 64-byte multiples (which
    shares the piece's memory); a whole-piece tensor and the unknown-shaped one as the piece."""
    with tf.Graph().as_default() as graph:
        tensors = [tf.zeros([3, 3, 4, 16]), tf.zeros([16]), tf.zeros([5000]), tf.zeros([1500])]
        plan = PiecePlan(tensors, lambda dtype: 2048)
        pieces = plan.pack(tensors)
        before = {op.name for op in graph.get_operations()}
        back = plan.unpack(pieces)
        unpack_ops = [op for op in graph.get_operations() if op.name not in before]
    concats = [p for p in pieces if p.op.type == 'ConcatV2']
    assert [c.shape.num_elements() for c in concats] == [592]             # 576 + 16 packed
    assert [p.op.type for p in pieces[1:]] == ['StridedSlice'] * 3 + ['Reshape']   # 5000 in 3; 1500 whole
    assert sorted(op.type for op in unpack_ops if op.type not in ('Const', 'Reshape')) == \
        ['ConcatV2'] + ['StridedSlice'] * 2              # the cut tensor joined; 2 packed ones sliced
    for op in unpack_ops:
        if op.type == 'StridedSlice':
            begin, end = (tf.get_static_value(op.inputs[k])[0] for k in (1, 2))
            assert begin * 4 % ALIGN_BYTES == 0 and end * 4 % ALIGN_BYTES == 0
    assert back[3].op.inputs[0] is pieces[4]


def test_pack_refuses_a_tensor_unlike_the_planned_one_naming_it():
    with tf.Graph().as_default():
        plan = PiecePlan([tf.zeros([4]), tf.zeros([2, 2])], lambda dtype: 100)
        expected = r"tensor 1 \(wrong:0\) is float32 of shape \(3,\), planned float32 of shape \(2, 2\)"
        with pytest.raises(ValueError, match=expected):
            plan.pack([tf.zeros([4]), tf.zeros([3], name='wrong')])
        with pytest.raises(ValueError, match='planned for 2 tensors, got 1'):
            plan.pack([tf.zeros([4])])
        with pytest.raises(ValueError, match='planned 1 pieces, got 2'):
            plan.unpack([tf.zeros([24]), tf.zeros([4])])


def test_a_tensor_larger_than_a_pack_travels_whole_and_one_larger_than_the_cut_in_pieces():
    """The MLP 784-1024-1024-10 with packs of a quarter of its 1.9 M elements: the two big
    weights are pieces of their own, not copied; the small rest shares one, which comes after
    the pieces whose tensors all come before its last; a cut limit of 2**19 elements cuts the
    1024 x 1024 weight in two."""
    shapes = [[784, 1024], [1024], [1024, 1024], [1024], [1024, 10], [10]]
    with tf.Graph().as_default():
        tensors = [tf.zeros(shape) for shape in shapes]
        plan = PiecePlan(tensors, cut_elements=lambda dtype: 1 << 20, pack_elements=lambda dtype: 477000)
        assert [[s.index for s in piece] for piece in plan.pieces] == [[0], [2], [1, 3, 4, 5]]
        assert [p.op.type for p in plan.pack(tensors)] == ['Reshape', 'Reshape', 'ConcatV2']
        cut = PiecePlan(tensors, cut_elements=lambda dtype: 1 << 19, pack_elements=lambda dtype: 477000)
    assert [[(s.index, s.start, s.stop) for s in piece] for piece in cut.pieces] == \
        [[(0, 0, 401408)], [(0, 401408, 802816)], [(2, 0, 524288)], [(2, 524288, 1048576)],
         [(1, 0, 1024), (3, 0, 1024), (4, 0, 10240), (5, 0, 10)]]


def test_pieces_follow_the_order_given_each_after_the_last_tensor_it_holds():
    """In backprop's order (the last layer's gradients first), the small tensors share one pack
    whose last tensor (the first layer's bias) comes after the middle weight: the pack comes
    second; the first layer's weight, after the pack's last tensor but one, comes last."""
    shapes = [[784, 1024], [1024], [1024, 1024], [1024], [1024, 10], [10]]
    with tf.Graph().as_default():
        tensors = [tf.random.normal(shape) for shape in shapes]
        plan = PiecePlan(tensors, cut_elements=lambda dtype: 1 << 20, pack_elements=lambda dtype: 477000,
                         order=[5, 4, 3, 2, 1, 0])
        assert plan.order == [5, 4, 3, 2, 1, 0]
        assert [[(s.index, s.offset) for s in piece] for piece in plan.pieces] == \
            [[(2, 0)], [(5, 0), (4, 16), (3, 10256), (1, 11280)], [(0, 0)]]
        back = plan.unpack(plan.pack(tensors))
        with tfv1.Session() as sess:
            want, got = sess.run([tensors, back])
        for w, g in zip(want, got):
            assert g.shape == w.shape and np.array_equal(g, w)
        with pytest.raises(ValueError, match='order must hold each of the 6'):
            PiecePlan(tensors, pack_elements=lambda dtype: 100, order=[0, 1, 2, 3, 4, 4])


def test_without_a_cut_limit_no_tensor_is_cut_and_a_plan_needs_a_limit():
    with tf.Graph().as_default():
        tensors = [tf.zeros([5000]), tf.zeros([10]), tf.zeros([20])]
        plan = PiecePlan(tensors, pack_elements=lambda dtype: 100)
        assert [[(s.index, s.start, s.stop, s.offset) for s in piece] for piece in plan.pieces] == \
            [[(0, 0, 5000, 0)], [(1, 0, 10, 0), (2, 0, 20, 16)]]
        with pytest.raises(ValueError, match='give cut_elements, pack_elements or both'):
            PiecePlan(tensors)
