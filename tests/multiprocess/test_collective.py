"""multiprocess.collective: the differentiable mean over the members of a collective group, on
virtual CPU devices (forward, gradient, keys), and the graph it builds for GPU members."""

import numpy as np
import pytest

from tensorpack_lite.compat import tf, tfv1
from tensorpack_lite.multiprocess.collective import (CollectiveGroup, cluster_group, collective_mean,
                                                     tower_group)
from tensorpack_lite.tfutils.tower_context import TrainTowerContext


def cpu_session(k):
    """A session on k virtual CPUs whose steps fail after 60 s instead of waiting for a
    member that never comes."""
    return tfv1.Session(config=tfv1.ConfigProto(device_count={'CPU': k}, operation_timeout_in_ms=60000))


def collective_ops(graph=None):
    graph = graph or tfv1.get_default_graph()
    return [op for op in graph.get_operations() if op.type == 'CollectiveReduceV2']


def const_input(op, index):
    return int(tf.make_ndarray(op.inputs[index].op.get_attr('value')))


@pytest.mark.parametrize('k', [2, 3])
def test_mean_and_its_gradient_over_virtual_cpus(k):
    rng = np.random.RandomState(0)
    values = rng.randn(k, 4).astype('float32')
    weights = rng.randn(k, 4).astype('float32')
    group = tower_group(k, '/cpu:0')
    inputs, means, grads = [], [], []
    for i in range(k):
        with tf.device('/cpu:{}'.format(i)):
            x = tfv1.placeholder(tf.float32, [4])
            mean = collective_mean(tf.square(x), group, name='square')
            grads.append(tf.gradients(tf.reduce_sum(mean * weights[i]), x)[0])
        inputs.append(x)
        means.append(mean)
    with cpu_session(k) as sess:
        got_means, got_grads = sess.run([means, grads], dict(zip(inputs, values)))
        again = sess.run(means, dict(zip(inputs, values + 1)))      # the same keys work every step
    for i in range(k):
        np.testing.assert_allclose(got_means[i], np.mean(values ** 2, 0), rtol=1e-6)
        np.testing.assert_allclose(again[i], np.mean((values + 1) ** 2, 0), rtol=1e-6)
        # d/dx_i of sum_j sum(w_j * mean(x^2)) = 2 x_i * mean_j(w_j)
        np.testing.assert_allclose(got_grads[i], 2 * values[i] * weights.mean(0), rtol=1e-5)


def test_default_name_drops_the_tower_scope_and_keys_agree():
    group = cluster_group(2)
    for i in range(2):
        with tf.device('/cpu:{}'.format(i)), TrainTowerContext('tower{}'.format(i), index=i, total=2):
            x = tf.ones([3], name='stats') * (i + 1)
            mean = collective_mean(x, group)
            tf.gradients(mean, x)
    ops = collective_ops()
    assert [op.name for op in ops] == [
        'tower0/collective_mean/collective_mean',
        'tower0/gradients/tower0/collective_mean/IdentityN_grad/collective_mean_grad',
        'tower1/collective_mean/collective_mean',
        'tower1/gradients/tower1/collective_mean/IdentityN_grad/collective_mean_grad']
    keys = [(const_input(op, 2), const_input(op, 3)) for op in ops]     # group key, instance key
    forward = [key for key, op in zip(keys, ops) if not op.name.endswith('_grad')]
    backward = [key for key, op in zip(keys, ops) if op.name.endswith('_grad')]
    assert forward[0] == forward[1] and backward[0] == backward[1] and forward[0] != backward[0]
    assert forward[0][0] == group.key == 1 << 29
    means = ['tower{}/collective_mean/IdentityN:0'.format(i) for i in range(2)]
    with cpu_session(2) as sess:
        np.testing.assert_allclose(sess.run(means), [[1.5] * 3] * 2)


def test_group_keys_differ_per_worker_and_from_the_graph_builders():
    local = tower_group(2, '/gpu:0')
    keys = {local.key, tower_group(2, '/job:worker/task:0/device:GPU:0').key,
            tower_group(2, '/job:worker/task:1/device:GPU:0').key,
            tower_group(2, '/job:chief/task:0/device:CPU:0').key, cluster_group(4).key}
    assert len(keys) == 5 and min(keys) >= 1 << 29 and max(keys) < 2 ** 31
    assert tower_group(3, '/job:worker/task:1/device:GPU:1').key == tower_group(
        3, '/job:worker/task:1/device:GPU:0').key


def test_gpu_members_use_nccl_and_cpu_members_a_ring():
    """Built, not run: this machine has no GPU."""
    for devices in (['/gpu:0', '/gpu:1'], ['/cpu:0', '/cpu:1']):
        with tfv1.Graph().as_default() as graph:
            group = tower_group(2, devices[0])
            for device in devices:
                with tf.device(device):
                    x = tf.ones([2])
                    tf.gradients(collective_mean(x, group, name='x'), x)
            ops = collective_ops(graph)
            assert len(ops) == 4
            hint = b'nccl' if 'gpu' in devices[0] else b'ring'
            assert [op.get_attr('communication_hint') for op in ops] == [hint] * 4
            assert sorted(tf.DeviceSpec.from_string(op.device).device_index for op in ops) == [0, 0, 1, 1]
            types = {tf.DeviceSpec.from_string(op.device).device_type for op in ops}
            assert types == {devices[0][1:4].upper()}


def test_one_member_is_the_identity_and_bad_arguments_are_errors():
    x = tf.constant([1.0, 2.0])
    assert collective_mean(x, CollectiveGroup(1, 5)).op.type == 'Identity' and not collective_ops()
    with pytest.raises(TypeError, match='group must be a CollectiveGroup'):
        collective_mean(x, 2)
    with pytest.raises(ValueError, match='size must be a positive int'):
        CollectiveGroup(0, 5)
    with pytest.raises(ValueError, match=r'key must be an int in \[1, 2\*\*31\)'):
        CollectiveGroup(2, 2 ** 31)
    group = CollectiveGroup(2, 7)
    collective_mean(x, group, name='layer33322/statistics')
    collective_mean(x, group, name='layer33322/statistics')     # another member of the same reduction
    # two names whose keys coincide (found by search): an error, not two reductions that mix
    with pytest.raises(ValueError, match=r"reductions 'layer50543/statistics' \(mean\) and "
                                         r"'layer33322/statistics' \(mean\) would share the instance key"):
        collective_mean(x, group, name='layer50543/statistics')
