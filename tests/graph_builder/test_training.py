"""graph_builder: tower devices, variable placement, local variables and every way of
combining the gradients of several towers, on virtual CPU devices."""

import logging

import numpy as np
import pytest

from tensorpack_lite.compat import tf, tfv1
from tensorpack_lite.graph_builder import (
    DataParallelBuilder, GradientPacker, LeastLoadedDeviceSetter, SyncMultiGPUReplicatedBuilder,
    aggregate_grads, allreduce_grads, allreduce_grads_collective, allreduce_grads_hierarchical, average_grads,
    check_session_devices, interpret_towers, merge_grad_list, override_to_local_variable, split_grad_list)
from tensorpack_lite.tfutils.tower import get_current_tower_context

from helpers.logs import capture_logs
from helpers.graphs import cpus


def cpu_session(num_cpu):
    return tfv1.Session(config=tfv1.ConfigProto(device_count={'CPU': num_cpu}))


def tower_values(k, shapes, seed=0):
    """k towers of float32 arrays of the given shapes."""
    rng = np.random.RandomState(seed)
    return [[rng.randn(*shape).astype('float32') for shape in shapes] for _ in range(k)]


def constants_on(devices, values):
    result = []
    for device, arrays in zip(devices, values):
        with tf.device(device):
            result.append([tf.constant(a) for a in arrays])
    return result


# ----- devices ---------------------------------------------------------------------------------

@pytest.mark.quick
def test_interpret_towers_accepts_counts_ids_and_device_strings(monkeypatch):
    monkeypatch.setenv('CUDA_VISIBLE_DEVICES', '0,1')
    assert interpret_towers(2) == [0, 1]
    assert interpret_towers([1]) == [1]
    assert interpret_towers(('/cpu:0', '/cpu:1')) == ['/cpu:0', '/cpu:1']


@pytest.mark.parametrize('gpus, error, match', [
    (0, ValueError, 'must be positive'),
    ([], ValueError, 'empty'),
    ('/cpu:0', TypeError, 'gpus must be'),
    ([True], TypeError, 'tower 0'),
    (['/cpu:0', '/device:CPU:0'], ValueError, 'towers 0 and 1 are both on device CPU:0'),
    (['nonsense'], ValueError, "'nonsense' is not a device string"),
    ([-1], ValueError, 'negative'),
    (3, ValueError, r'tower 0 asks for GPU 0 .*sees 0 GPU.*device_count'),
    (['/cpu:0', '/gpu:0'], ValueError, 'tower 1 asks for GPU 0'),
])
def test_interpret_towers_rejects_bad_towers(monkeypatch, gpus, error, match):
    monkeypatch.setenv('CUDA_VISIBLE_DEVICES', '')
    with pytest.raises(error, match=match):
        interpret_towers(gpus)


def test_check_session_devices_names_the_missing_tower():
    with cpu_session(2) as sess:
        check_session_devices(sess, cpus(2))
        with pytest.raises(ValueError, match=r"tower 2 is on device '/cpu:2'.*device_count=\{'CPU': 3\}"):
            check_session_devices(sess, cpus(3))


def test_least_loaded_device_setter_spreads_variables_by_size():
    setter = LeastLoadedDeviceSetter('/cpu:0', ['/cpu:1', '/cpu:2'])
    with tfv1.device(setter):
        big = tfv1.get_variable('big', shape=[100])
        small = tfv1.get_variable('small', shape=[10])
        second = tfv1.get_variable('second', shape=[20])   # cpu:2 holds 10 < 100
        with tf.device('/cpu:1'):
            pinned = tfv1.get_variable('pinned', shape=[1])
        compute = tf.reduce_sum(big)
    assert [tf.DeviceSpec.from_string(v.device).device_index for v in (big, small, second, pinned)] == \
        [1, 2, 2, 1]
    assert tf.DeviceSpec.from_string(compute.device).device_index == 0
    assert setter.ps_sizes == [100, 30]


def test_override_to_local_variable_keeps_trainable_but_not_global():
    with override_to_local_variable():
        local = tfv1.get_variable('local', shape=[2])
        frozen = tfv1.get_variable('frozen', shape=[2], trainable=False,
                                   collections=[tfv1.GraphKeys.GLOBAL_VARIABLES, 'mine'])
    with override_to_local_variable(enable=False):
        normal = tfv1.get_variable('normal', shape=[2])
    assert tfv1.global_variables() == [normal]
    assert tfv1.local_variables() == [local, frozen]
    assert tfv1.trainable_variables() == [local, normal]
    assert tfv1.get_collection('mine') == [frozen]


# ----- towers ------------------------------------------------------------------------------------

def test_call_for_each_tower_names_devices_and_variable_scopes():
    seen = []

    def tower():
        ctx = get_current_tower_context()
        w = tfv1.get_variable('w', shape=[3])
        out = tf.identity(w, name='out')
        seen.append((ctx.index, ctx.total, ctx.ns_name, ctx.vs_name, ctx.is_main_training_tower))
        return w, out

    results = DataParallelBuilder.call_for_each_tower(cpus(3), tower, use_vs=[False, True, True])
    assert seen == [(0, 3, 'tower0', '', True), (1, 3, 'tower1', 'tower1', False),
                    (2, 3, 'tower2', 'tower2', False)]
    assert [w.op.name for w, _ in results] == ['w', 'tower1/w', 'tower2/w']
    assert [out.op.name for _, out in results] == ['tower0/out', 'tower1/out', 'tower2/out']
    assert [tf.DeviceSpec.from_string(out.device).device_index for _, out in results] == [0, 1, 2]
    assert [v.op.name for v in tfv1.global_variables()] == ['w']
    assert [v.op.name for v in tfv1.local_variables()] == ['tower1/w', 'tower2/w']
    with pytest.raises(ValueError, match='use_vs has 1 entries for 2 towers'):
        DataParallelBuilder.call_for_each_tower(cpus(2), tower, use_vs=[False])


def test_grad_lists_of_different_lengths_are_an_error():
    v = tfv1.get_variable('v', shape=[1])
    g = tf.ones([1])
    with pytest.raises(ValueError, match='tower0: 1, tower1: 2'):
        DataParallelBuilder._check_grad_list([[(g, v)], [(g, v), (g, v)]])


def test_replicated_builder_checks_mode_and_tower_count():
    with pytest.raises(ValueError, match="unknown mode 'ring'"):
        SyncMultiGPUReplicatedBuilder(cpus(2), True, 'ring')
    with pytest.raises(ValueError, match="'nccl' needs GPU towers, but /cpu:0"):
        SyncMultiGPUReplicatedBuilder(cpus(2), True, 'nccl')
    with pytest.raises(ValueError, match="'hierarchical' needs 8 towers, got 2"):
        SyncMultiGPUReplicatedBuilder(cpus(2), True, 'hierarchical')


# ----- combining gradients -----------------------------------------------------------------------

def test_split_and_merge_grad_list_are_inverse():
    grad_list = [[('g00', 'v00'), ('g01', 'v01')], [('g10', 'v10'), ('g11', 'v11')]]
    grads, variables = split_grad_list(grad_list)
    assert grads == [['g00', 'g01'], ['g10', 'g11']] and variables == [['v00', 'v01'], ['v10', 'v11']]
    assert merge_grad_list(grads, variables) == grad_list


@pytest.mark.parametrize('average', [True, False])
def test_aggregate_grads_sums_or_averages_on_the_asked_devices(average):
    values = tower_values(3, [(2, 3), (4,)])
    variables = [tfv1.get_variable('a', shape=[2, 3]), tfv1.get_variable('b', shape=[4])]
    grads = constants_on(cpus(3), values)
    grad_list = merge_grad_list(grads, [variables] * 3)
    summed = aggregate_grads(grad_list, devices=['/cpu:2', '/cpu:1'], average=average)
    assert [v for _, v in summed] == variables
    assert [tf.DeviceSpec.from_string(g.device).device_index for g, _ in summed] == [2, 1]
    with cpu_session(3) as sess:
        result = sess.run([g for g, _ in summed])
    for index, got in enumerate(result):
        expected = sum(tower[index] for tower in values) / (3 if average else 1)
        np.testing.assert_allclose(got, expected, rtol=1e-6)
    assert average_grads is aggregate_grads
    with pytest.raises(ValueError, match='not both'):
        aggregate_grads(grad_list, colocation=True, devices=['/cpu:0'])


def _check_allreduced(result, values, average):
    k = len(values)
    for tower in result:
        for index, got in enumerate(tower):
            expected = sum(v[index] for v in values) / (k if average else 1)
            np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize('average', [True, False])
def test_collective_allreduce_on_cpu_devices(average):
    values = tower_values(2, [(3, 2), (5,)])
    reduced = allreduce_grads_collective(constants_on(cpus(2), values), cpus(2), average)
    assert [[tf.DeviceSpec.from_string(g.device).device_index for g in tower] for tower in reduced] == \
        [[0, 0], [1, 1]]
    with cpu_session(2) as sess:
        result = sess.run(reduced)
    _check_allreduced(result, values, average)


def test_hierarchical_allreduce_on_eight_cpu_devices():
    values = tower_values(8, [(3,), (2, 2), (1,)])
    reduced = allreduce_grads_hierarchical(constants_on(cpus(8), values), cpus(8), average=True)
    with cpu_session(8) as sess:
        result = sess.run(reduced)
    _check_allreduced(result, values, average=True)
    with pytest.raises(ValueError, match='8 devices'):
        allreduce_grads_hierarchical(constants_on(cpus(4), values[:4]), cpus(4))


def test_gradient_packer_round_trip_and_collective_on_packs():
    shapes = [(40, 50), (7,), (30, 30)]
    values = tower_values(2, shapes)
    grads = constants_on(cpus(2), values)
    packer = GradientPacker(num_split=2)
    assert packer.compute_strategy(grads[0])
    packed = packer.pack_all(grads, cpus(2))
    assert [p.shape.as_list() for p in packed[0]] == [[1453], [1454]]
    unpacked = packer.unpack_all(allreduce_grads_collective(packed, cpus(2), average=False), cpus(2))
    assert [g.shape.as_list() for g in unpacked[1]] == [list(s) for s in shapes]
    with cpu_session(2) as sess:
        result = sess.run(unpacked)
    _check_allreduced(result, values, average=False)


def test_gradient_packer_declines_small_or_mixed_gradients():
    with capture_logs() as records:
        assert not GradientPacker(8).compute_strategy([tf.ones([10, 10])])
        assert not GradientPacker(1).compute_strategy([tf.ones([2000]), tf.ones([10], tf.float64)])
    assert any('too few' in m for m in records.messages(logging.INFO))
    assert any('different dtypes' in m for m in records.messages(logging.INFO))
    with pytest.raises(RuntimeError, match='compute_strategy'):
        GradientPacker(2).pack([tf.ones([3])])


# ----- which engine reduces: NCCL on GPU towers (graphs built, never run: no GPU needed) ------------

REDUCTION_OPS = ('CollectiveReduceV2', 'CollectiveGatherV2', 'NcclAllReduce')


def reductions(graph=None):
    """(device, op type, communication hint) of every reduction op of the graph, in graph order."""
    graph = graph or tfv1.get_default_graph()
    return [(op.device, op.type, op.get_attr('communication_hint').decode())
            for op in graph.get_operations() if op.type in REDUCTION_OPS]


def two_variable_towers():
    a = tfv1.get_variable('a', initializer=np.ones([3, 4], 'float32'))
    b = tfv1.get_variable('b', initializer=np.ones([5], 'float32'))
    cost = tf.reduce_sum(a * a) + tf.reduce_sum(b)
    return tfv1.train.GradientDescentOptimizer(0.1).compute_gradients(cost, var_list=[a, b])


def build_replicated(towers, mode):
    builder = SyncMultiGPUReplicatedBuilder(towers, True, mode)
    grad_list = builder.call_for_each_tower(two_variable_towers)
    builder.build(grad_list, lambda: tfv1.train.GradientDescentOptimizer(0.1))
    return reductions()


@pytest.mark.parametrize('mode', ['nccl', 'collective'])
def test_replicated_builder_reduces_on_gpu_towers_through_nccl(monkeypatch, mode):
    """Two variables, two GPU towers: one CollectiveReduceV2 per variable and tower, on the
    tower's GPU, with the hint 'nccl' (no NcclAllReduce of the deprecated nccl_ops, no copy
    to the CPU, no Python op)."""
    monkeypatch.setenv('CUDA_VISIBLE_DEVICES', '0,1')      # the towers are checked against it
    dump = build_replicated(['/gpu:0', '/gpu:1'], mode)
    assert dump == [('/device:GPU:0', 'CollectiveReduceV2', 'nccl'),
                    ('/device:GPU:1', 'CollectiveReduceV2', 'nccl')] * 2
    ops = tfv1.get_default_graph().get_operations()
    assert not [op for op in ops if op.type in ('PyFunc', 'EagerPyFunc', 'NcclAllReduce')]


def test_replicated_builder_on_cpu_towers_uses_the_ring_not_nccl():
    dump = build_replicated(cpus(2), 'collective')
    assert dump == [('/device:CPU:0', 'CollectiveReduceV2', 'ring'),
                    ('/device:CPU:1', 'CollectiveReduceV2', 'ring')] * 2


def test_allreduce_grads_refuses_cpu_devices():
    grads = constants_on(cpus(2), tower_values(2, [(3,)]))
    with pytest.raises(ValueError, match="allreduce_grads: NCCL all-reduces on GPUs; '/cpu:0' is not one"):
        allreduce_grads(grads, True, cpus(2))
