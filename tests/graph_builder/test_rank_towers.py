"""graph_builder/rank_towers.py in one process, on virtual CPU devices: the towers of a rank
(HorovodTrainer(gpus=...)) with a stand-in for the reduction across ranks."""

import numpy as np
import pytest

from tensorpack_lite.compat import tf, tfv1
from tensorpack_lite.graph_builder import DataParallelBuilder
from tensorpack_lite.graph_builder.rank_towers import RankTowersBuilder, towers_and_ranks_mean
from tensorpack_lite.tfutils.tower_context import TrainTowerContext, get_current_tower_context

TOWERS = ['/cpu:0', '/cpu:1']


def cpu_session():
    return tfv1.Session(config=tfv1.ConfigProto(device_count={'CPU': 2}, operation_timeout_in_ms=60000))


def test_towers_and_ranks_mean_gives_every_tower_the_mean_and_its_gradient():
    """A stand-in for 2 ranks whose other rank has the mean ``other`` and an upstream gradient
    of zero: ``rank_mean(t) = (t + other) / 2``. Every tower gets ((x0 + x1) / 2 + other) / 2, and
    each input the gradient of the sum of both towers' losses."""
    rng = np.random.RandomState(0)
    xs, ws = rng.randn(2, 3).astype('float32'), rng.randn(2, 3).astype('float32')
    other = rng.randn(3).astype('float32')
    mean = towers_and_ranks_mean(2, lambda t: (t + other) / 2.0)

    def tower():
        index = get_current_tower_context().index
        x = tf.constant(xs[index])
        y = mean(x)
        return y, tf.gradients(tf.reduce_sum(y * ws[index]), [x])[0]

    (y0, g0), (y1, g1) = DataParallelBuilder.call_for_each_tower(TOWERS, tower)
    with cpu_session() as sess:
        v0, v1, d0, d1 = sess.run([y0, y1, g0, g1])
    expected = ((xs[0] + xs[1]) / 2 + other) / 2
    np.testing.assert_allclose(v0, expected, rtol=1e-6)
    assert v0.tobytes() == v1.tobytes()    # the same bits in every tower
    np.testing.assert_allclose(d0, (ws[0] + ws[1]) / 4, rtol=1e-6)
    np.testing.assert_allclose(d1, (ws[0] + ws[1]) / 4, rtol=1e-6)
    with pytest.raises(RuntimeError, match='outside the 2 training towers'):
        mean(tf.constant(1.0))
    with TrainTowerContext('', index=0, total=1), pytest.raises(RuntimeError, match='outside the 2'):
        mean(tf.constant(1.0))


def test_rank_towers_builder_applies_the_reduction_across_ranks_on_every_replica():
    """Each replica applies reduce_across_ranks(mean of the towers' gradients): here 3 times it."""
    data = [np.array([1.0, 2.0], np.float32), np.array([-3.0, 0.5], np.float32)]

    def tower():
        index = get_current_tower_context().index
        w = tfv1.get_variable('w', initializer=[1.0, -1.0])
        cost = tf.reduce_sum(w * w * data[index])
        return [(tf.gradients(cost, [w])[0], w)]

    reduced = []

    def reduce_across_ranks(tensors):
        reduced.append(len(tensors))
        return [t * 3.0 for t in tensors]

    builder = RankTowersBuilder(TOWERS, True, reduce_across_ranks)
    grad_list = builder.call_for_each_tower(tower)
    train_op, post_init_op = builder.build(grad_list, lambda: tfv1.train.GradientDescentOptimizer(0.1))
    assert reduced == [1]   # one list of gradients, once, for both towers
    variables = {v.op.name: v for v in tfv1.global_variables() + tfv1.local_variables()}
    assert variables['tower1/w'].device == '/device:CPU:1'
    with cpu_session() as sess:
        sess.run([tfv1.global_variables_initializer(), tfv1.local_variables_initializer()])
        sess.run(post_init_op)
        sess.run(train_op)
        w0, w1 = sess.run([variables['w'], variables['tower1/w']])
    w = np.array([1.0, -1.0], np.float32)
    expected = w - 0.1 * 3.0 * (2 * w * data[0] + 2 * w * data[1]) / 2
    np.testing.assert_allclose(w0, expected, rtol=1e-6)
    assert w0.tobytes() == w1.tobytes()

    with pytest.raises(TypeError, match='reduce_across_ranks must be callable'):
        RankTowersBuilder(TOWERS, True, None)


def test_rank_towers_builder_checks_what_the_reduction_returns():
    def tower():
        w = tfv1.get_variable('w', initializer=[1.0])
        return [(tf.gradients(tf.reduce_sum(w * w), [w])[0], w)]

    builder = RankTowersBuilder(TOWERS, False, lambda tensors: [])
    grad_list = builder.call_for_each_tower(tower)
    with pytest.raises(ValueError, match='reduce_across_ranks returned 0 tensors for 1'):
        builder.build(grad_list, lambda: tfv1.train.GradientDescentOptimizer(0.1))
