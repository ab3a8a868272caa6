"""The distributed builders and trainers in this process, without training: where variables and
ops go, and the errors for what cannot work. (The servers themselves: multiprocess/test_server.py;
processes that train together: distributed/test_trainers.py.) The servers made here live until
the test process ends."""

import re

import numpy as np
import pytest

from helpers.precision import UNIT_ROUNDOFF, assert_16_bit_sum
from helpers.process_guard import starts_tensorflow_server_here
from tensorpack_lite.compat import tf, tfv1
from tensorpack_lite.graph_builder.distributed import (CollectiveAllReduceBuilder,
                                                       DistributedParameterServerBuilder,
                                                       DistributedReplicatedBuilder)
from tensorpack_lite.multiprocess.server import cluster_of_server, create_server
from tensorpack_lite.tfutils.sesscreate import NewSessionCreator
from tensorpack_lite.tfutils.sessinit import JustCurrentSession
from tensorpack_lite.train.distributed import (CollectiveAllReduceTrainer, DistributedTrainerParameterServer,
                                               DistributedTrainerReplicated)
from tensorpack_lite.cluster.config import local_cluster

pytestmark = starts_tensorflow_server_here   # servers made in this process


@pytest.fixture(scope='module')
def ps_servers():
    """The servers of workers 0 and 1 of a cluster with 2 parameter servers (never started)."""
    cluster = local_cluster(2, 2)
    return [create_server(cluster, 'worker', k) for k in range(2)]


@pytest.fixture(scope='module')
def lone_server():
    """The server of the only worker of a cluster without parameter server."""
    return create_server(local_cluster(1), 'worker', 0)


def test_the_cluster_of_a_server(ps_servers):
    config = cluster_of_server(ps_servers[1])
    assert (config.job_name, config.task_index, config.num_worker, config.num_ps) == ('worker', 1, 2, 2)
    assert ps_servers[1].server_def.default_session_config.experimental.collective_group_leader == \
        '/job:worker/replica:0/task:0'
    with pytest.raises(TypeError, match='Expected a tf.compat.v1.train.Server'):
        cluster_of_server('grpc://localhost:1234')


def build_tiny_model():
    """Variables of 100, 10 and 5 elements; returns the cost and the variables."""
    a = tfv1.get_variable('a', initializer=np.ones(100, 'float32'))
    b = tfv1.get_variable('b', initializer=np.ones(10, 'float32'))
    c = tfv1.get_variable('c', initializer=np.ones(5, 'float32'))
    return tf.reduce_sum(a) + tf.reduce_sum(b) * tf.reduce_sum(c), [a, b, c]


def tower_gradients():
    cost, variables = build_tiny_model()
    return tfv1.train.GradientDescentOptimizer(0.1).compute_gradients(cost, var_list=variables)


def test_parameter_server_builder_spreads_variables_and_caches_them_on_the_worker(ps_servers):
    builder = DistributedParameterServerBuilder(['/cpu:0'], ps_servers[1])
    assert builder.raw_devices == ['/job:worker/task:1/device:CPU:0']
    grad_list = builder.call_for_each_tower(tower_gradients)
    variables = {v.op.name: v for v in tfv1.global_variables()}
    # least-loaded by size: a (100) on ps 0, then b and c on ps 1
    ps0, ps1 = '/job:ps/task:0/device:CPU:0', '/job:ps/task:1/device:CPU:0'
    assert [variables[n].device for n in 'abc'] == [ps0, ps1, ps1]
    assert variables['a'].value().device == '/job:worker/task:1/device:CPU:0'    # the cached read
    step_done = builder.build(grad_list, lambda: tfv1.train.GradientDescentOptimizer(0.1))
    # worker 1 sends its gradients to the queue of each parameter server, then waits for the chief
    ops = {op.name: op for op in tf.compat.v1.get_default_graph().get_operations()}
    sends = [op for op in ops.values() if op.type == 'QueueEnqueueV2' and 'from_worker1' in op.name]
    queue_devices = sorted(op.inputs[0].op.device for op in sends)
    assert queue_devices == ['/job:ps/task:0/device:CPU:0', '/job:ps/task:1/device:CPU:0']
    waits = [op for op in step_done.control_inputs if op.type == 'QueueDequeueV2']
    assert [op.name for op in waits] == ['ps_sync/step_done_1_Dequeue']


def test_parameter_server_builder_of_the_chief_averages_what_the_others_send(ps_servers):
    builder = DistributedParameterServerBuilder(['/cpu:0'], ps_servers[0])
    grad_list = builder.call_for_each_tower(tower_gradients)
    builder.build(grad_list, lambda: tfv1.train.GradientDescentOptimizer(0.1))
    ops = tf.compat.v1.get_default_graph().get_operations()
    received = sorted(op.name for op in ops if op.type == 'QueueDequeueV2')
    assert received == ['ps_sync/grads_ps0_from_worker1_Dequeue', 'ps_sync/grads_ps1_from_worker1_Dequeue']
    tokens = [op for op in ops if op.type == 'QueueEnqueueV2' and 'step_done_1' in op.name]
    assert len(tokens) == 1


def test_replicated_builder_keeps_local_replicas_and_global_copies_on_the_ps(ps_servers):
    builder = DistributedReplicatedBuilder(['/cpu:0', '/cpu:1'], ps_servers[0])
    grad_list = builder.call_for_each_tower(tower_gradients)
    _, _, model_sync = builder.build(grad_list, lambda: tfv1.train.GradientDescentOptimizer(0.1))
    local = {v.op.name: v.device for v in tfv1.local_variables()}
    assert local == {'tower{}/{}'.format(k, n): '/job:worker/task:0/device:CPU:{}'.format(k)
                     for k in range(2) for n in 'abc'}
    shadows = {v.op.name: v.device for v in tfv1.global_variables()}
    assert shadows == {'a': '/job:ps/task:0/device:CPU:0', 'b': '/job:ps/task:1/device:CPU:0',
                       'c': '/job:ps/task:1/device:CPU:0'}
    assert model_sync is None    # no non-trainable model variable
    ops = tf.compat.v1.get_default_graph().get_operations()
    for scope in ('initial_sync_variables/', 'copy_from_ps/'):   # every replica from its global copy
        assigned = sorted(op.inputs[0].op.name for op in ops
                          if op.type == 'AssignVariableOp' and op.name.startswith(scope))
        assert assigned == ['tower0/a', 'tower0/b', 'tower0/c', 'tower1/a', 'tower1/b', 'tower1/c'], scope


def test_trainers_refuse_clusters_and_towers_that_cannot_work(ps_servers, lone_server):
    with pytest.raises(ValueError, match=r"needs parameter servers, but the cluster .* has no 'ps' job"):
        DistributedTrainerReplicated(['/cpu:0'], lone_server)
    ps_addresses = cluster_of_server(ps_servers[0]).cluster['ps']
    expected = "CollectiveAllReduceBuilder uses no parameter server, but the cluster has 'ps' tasks: {}"
    with pytest.raises(ValueError, match=re.escape(expected.format(ps_addresses))):
        CollectiveAllReduceTrainer(['/cpu:0'], ps_servers[0])
    with pytest.raises(ValueError, match=r"tower '/job:worker/task:0/cpu:0' is not on this worker "
                                         r"\(/job:worker/task:1\)"):
        DistributedTrainerReplicated(['/job:worker/task:0/cpu:0'], ps_servers[1])


def test_the_session_config_belongs_to_the_server(lone_server):
    trainer = CollectiveAllReduceTrainer(['/cpu:0'], lone_server)
    assert trainer.is_chief and trainer.num_worker == 1
    with pytest.raises(ValueError, match='pass the config to create_server'):
        trainer.initialize(NewSessionCreator(config=tfv1.ConfigProto()), JustCurrentSession())


def test_collective_builder_digests_the_variables_of_a_worker(lone_server):
    def digest_of(build):
        with tfv1.Graph().as_default():
            build()
            builder = CollectiveAllReduceBuilder(['/cpu:0'], lone_server)
            digest, smallest, largest = builder.build_variable_check()
            assert builder.build_broadcast() is None       # one worker: nothing to copy
            with tfv1.Session() as sess:
                return sess.run([digest, smallest, largest])

    same = digest_of(build_tiny_model)
    assert same[0] == same[1] == same[2]
    assert digest_of(build_tiny_model) == same
    assert digest_of(lambda: [tfv1.get_variable('c', [5]), tfv1.get_variable('b', [10]),
                              tfv1.get_variable('a', [100])])[0] == same[0]     # order does not matter
    assert digest_of(lambda: [tfv1.get_variable('a', [100]), tfv1.get_variable('b', [10]),
                              tfv1.get_variable('c', [6])])[0] != same[0]       # shapes do


def test_collective_all_reduce_sends_large_tensors_in_pieces(lone_server):
    builder = CollectiveAllReduceBuilder(['/cpu:0'], lone_server, average=False, exchange='collective')
    builder.CHUNK_BYTES = 4000                                   # 1000 float32 per piece
    values = np.arange(2 * 3 * 1001, dtype='float32').reshape(2, 3, 1001)
    with tf.device(builder.raw_devices[0]):
        big, small = builder.all_reduce([[tf.constant(values), tf.constant([1.5, 2.5])]])[0]
    ops = tf.compat.v1.get_default_graph().get_operations()
    keys = sorted(op.inputs[3].op.get_attr('value').int_val[0]   # the instance keys
                  for op in ops if op.type == 'CollectiveReduceV2')
    assert keys == list(range(1000, 1008))         # 6006 elements: 7 pieces of <= 1000 (and 1 for small)
    with tfv1.Session(lone_server.target) as sess:  # a group of one device gives the tensors back
        big_value, small_value = sess.run([big, small])
    np.testing.assert_array_equal(big_value, values)
    np.testing.assert_array_equal(small_value, [1.5, 2.5])


def test_collective_all_reduce_cuts_pieces_of_8_mb_by_default(lone_server):
    """The default piece (issue 28: 8 MB moved more than 2 MB between 4 processes on 2 cores)."""
    builder = CollectiveAllReduceBuilder(['/cpu:0'], lone_server, average=False)
    assert builder.CHUNK_BYTES == 8 << 20
    with tf.device(builder.raw_devices[0]):
        builder.all_reduce([[tf.zeros([5 << 20]), tf.zeros([2 << 20])]])   # 20 MB and 8 MB of float32
    sizes = [op.inputs[0].shape.num_elements() for op in tfv1.get_default_graph().get_operations()
             if op.type == 'CollectiveReduceV2']
    assert sizes == [1747632, 1747632, 1747616, 2 << 20]   # 20 MB in 3 (64-byte multiples), 8 MB whole


def test_collective_pieces_follow_backprop_and_none_starts_before_the_one_ahead():
    """The gradients of a 3-layer MLP travel in backprop's order: the middle layer's weight
    first, then the pack holding the first layer's; each piece's all-reduce waits for the op
    packing the piece before it (the launch order), not for that piece's all-reduce to end."""
    server = create_server(local_cluster(1), 'worker', 0)    # its own: a server keeps each key's shape
    builder = CollectiveAllReduceBuilder(['/cpu:0'], server, average=False)
    builder.NUM_PACKS = 3
    x = tf.random.normal([4, 30], seed=2)
    variables, out = [], x
    for index, (fan_in, fan_out) in enumerate([(30, 200), (200, 100), (100, 5)]):
        w = tfv1.get_variable('fc{}/W'.format(index), [fan_in, fan_out])
        b = tfv1.get_variable('fc{}/b'.format(index), [fan_out], initializer=tfv1.zeros_initializer())
        variables += [w, b]
        out = tf.nn.relu(tf.matmul(out, w) + b)
    grads = tf.gradients(tf.reduce_sum(out), variables)
    with tf.device(builder.raw_devices[0]):
        reduced = builder.all_reduce([grads])[0]
    collectives = [op for op in tfv1.get_default_graph().get_operations() if op.type == 'CollectiveReduceV2']
    carried = [{g.op.name for g in grads} & _ancestor_names(op) for op in collectives]
    names = [g.op.name for g in grads]         # fc0/W, fc0/b, fc1/W, fc1/b, fc2/W, fc2/b
    # packs of at most 1/3 of the 26805 elements: fc1/W (20000) alone, ready before the pack of
    # the others, whose last tensor is the first layer's
    assert carried == [{names[2]}, {names[4], names[5], names[3], names[0], names[1]}]
    assert not _waits_for(collectives[0])
    for before, op in zip(collectives, collectives[1:]):
        assert _waits_for(op) == [before.inputs[0].op], op.name
    with tfv1.Session(server.target) as sess:        # a group of one device gives the tensors back
        sess.run(tfv1.global_variables_initializer())
        want, got = sess.run([grads, reduced])
    for w, g in zip(want, got):
        np.testing.assert_array_equal(g, w)


def _waits_for(op):
    """The control inputs of ``op`` and of the ops of its inputs (the keys of a collective are
    constants made under the same control dependencies)."""
    found = list(op.control_inputs)
    for tensor in op.inputs:
        found += [c for c in tensor.op.control_inputs if c not in found]
    return found


def _ancestor_names(op):
    seen, stack = set(), [op]
    while stack:
        current = stack.pop()
        if current.name not in seen:
            seen.add(current.name)
            stack.extend(t.op for t in current.inputs)
    return seen


def three_tower_values(rng):
    """Per tower, gradients of 3 x 700 elements, magnitudes 1e-4 to 1e4 (fp16 subnormals among
    them), whose 16-bit roundings differ from them."""
    return [(rng.randn(3, 700) * 10.0 ** rng.randint(-4, 5, size=(3, 700))).astype('float32')
            for _ in range(3)]


@pytest.mark.parametrize('compression, average', [('fp16', False), ('fp16', True), ('bf16', False),
                                                  ('bf16', True)])
def test_compressed_all_reduce_is_a_16_bit_ring_sum_with_the_same_bits_on_every_tower(compression, average):
    """One worker of 3 virtual CPU towers (a group of 3, the path of every tower of every worker):
    float32 and float64 gradients travel and are summed in 16 bits (CollectiveReduceV2 of the
    16-bit tensors, in pieces: ring-level bytes), divided by 3 before rounding when averaging;
    float16 and int32 ones are all-reduced as they are. No all-gather."""
    server = create_server(local_cluster(1), 'worker', 0, config=tfv1.ConfigProto(device_count={'CPU': 3}))
    builder = CollectiveAllReduceBuilder(['/cpu:0', '/cpu:1', '/cpu:2'], server, average, compression,
                                         exchange='collective')
    builder.CHUNK_BYTES = 1000                      # 2100 elements of 2 bytes: 5 pieces
    rng = np.random.RandomState(0)
    floats = three_tower_values(rng)
    if compression == 'fp16' and not average:
        floats = [np.clip(x, -2e4, 2e4) for x in floats]        # a sum of 3 within fp16's range
    doubles = [rng.randn(20) for _ in range(3)]
    halves = [np.arange(4, dtype='float16') * (k + 1) for k in range(3)]
    ints = [np.arange(5, dtype='int32') + 10 * k for k in range(3)]
    all_tensors = [[tf.constant(x) for x in per_tower]
                   for per_tower in zip(floats, doubles, halves, ints)]
    results = builder.all_reduce(all_tensors)
    ops = tf.compat.v1.get_default_graph().get_operations()
    assert not [op for op in ops if op.type == 'CollectiveGatherV2']
    reduced = sorted(op.inputs[0].dtype.name for op in ops if op.type == 'CollectiveReduceV2')
    wire = 'float16' if compression == 'fp16' else 'bfloat16'
    # 3 towers x (5 pieces of the floats + the doubles), then the float16 and the int32 tensors
    assert reduced == sorted([wire] * (3 * 6) + ['float16'] * 3 + ['int32'] * 3)
    with tfv1.Session(server.target) as sess:
        values = sess.run(results)

    first = values[0]
    for tower_values in values:                     # every tower: the same bits
        for value, reference in zip(tower_values, first):
            np.testing.assert_array_equal(value, reference)
    float_value, double_value, half_value, int_value = first
    assert float_value.dtype == np.float32 and double_value.dtype == np.float64
    assert_16_bit_sum(float_value, floats, compression, 1 / 3 if average else 1)
    assert_16_bit_sum(double_value, doubles, compression, 1 / 3 if average else 1)
    half_sum = sum(halves)
    np.testing.assert_array_equal(half_value, half_sum / np.float16(3) if average else half_sum)
    np.testing.assert_array_equal(int_value, sum(ints) // 3 if average else sum(ints))


@pytest.mark.parametrize('average', [False, True])
def test_fp16_compression_sums_above_65504_overflow_unless_averaging_divides_first(average):
    """3 towers of 40000 each: their fp16 sum (120000) is inf, their mean (40000 / 3 each,
    rounded, then added) is finite: averaging divides before the 16-bit sum."""
    server = create_server(local_cluster(1), 'worker', 0, config=tfv1.ConfigProto(device_count={'CPU': 3}))
    builder = CollectiveAllReduceBuilder(['/cpu:0', '/cpu:1', '/cpu:2'], server, average, 'fp16')
    results = builder.all_reduce([[tf.constant([40000.0, 1.0])] for _ in range(3)])
    with tfv1.Session(server.target) as sess:
        values = [tower[0] for tower in sess.run(results)]
    if average:
        np.testing.assert_allclose(values[0], [40000.0, 1.0], rtol=3 * UNIT_ROUNDOFF['fp16'])
    else:
        assert np.isinf(values[0][0]) and values[0][1] == 3.0
    for value in values[1:]:
        np.testing.assert_array_equal(value, values[0])


@pytest.mark.parametrize('exchange', ['ring', 'Queues', None])
def test_an_unknown_exchange_is_refused_naming_the_choices(lone_server, exchange):
    expected = "CollectiveAllReduceTrainer: exchange must be one of 'collective', got {!r}"
    with pytest.raises(ValueError, match=re.escape(expected.format(exchange))):
        CollectiveAllReduceTrainer(['/cpu:0'], lone_server, exchange=exchange)


@pytest.mark.parametrize('exchange', ['sockets', 'queues'])
def test_the_removed_exchanges_are_an_error_saying_what_to_use(lone_server, exchange):
    expected = ("CollectiveAllReduceTrainer: exchange={!r} was removed (it sent every worker's gradients to "
                "every other worker); use exchange='collective' (the default").format(exchange)
    with pytest.raises(ValueError, match=re.escape(expected)):
        CollectiveAllReduceTrainer(['/cpu:0'], lone_server, exchange=exchange)
    removed = "CollectiveAllReduceBuilder: exchange={!r} was removed".format(exchange)
    with pytest.raises(ValueError, match=removed):
        CollectiveAllReduceBuilder(['/cpu:0'], lone_server, exchange=exchange)


@pytest.fixture(scope='module')
def second_of_two_workers():
    """The server of worker 1 of a cluster of 2 workers (worker 0 never started: graphs only)."""
    return create_server(local_cluster(2), 'worker', 1)


def worker_reductions():
    """(device, op type, communication hint) of every gradient reduction of the graph."""
    return [(op.device, op.type, op.get_attr('communication_hint').decode())
            for op in tfv1.get_default_graph().get_operations()
            if op.type in ('CollectiveReduceV2', 'CollectiveGatherV2', 'NcclAllReduce')
            and op.name.startswith('collective_allreduce')]


@pytest.mark.parametrize('compression', [None, 'fp16'])
def test_a_worker_with_gpu_towers_reduces_on_its_gpus_through_nccl(monkeypatch, second_of_two_workers,
                                                                   compression):
    """Worker 1 of 2 with towers '/gpu:0' and '/gpu:1' (built, never run: no GPU needed): the
    three small gradients (115 elements) share one collective op per tower, on that GPU, with
    the hint 'nccl', in a group of the 4 GPUs of the cluster, not cut by CHUNK_BYTES (a CPU
    limit); compressed ones are reduced in 16 bits the same way. No Python op anywhere, no
    reduction on a CPU."""
    monkeypatch.setenv('CUDA_VISIBLE_DEVICES', '0,1')      # the towers are checked against it
    builder = CollectiveAllReduceBuilder(['/gpu:0', '/gpu:1'], second_of_two_workers, compression=compression)
    builder.CHUNK_BYTES = 16                                # would cut 'a' into pieces on CPUs
    grad_list = builder.call_for_each_tower(tower_gradients)
    builder.build(grad_list, lambda: tfv1.train.GradientDescentOptimizer(0.1))
    op_type = 'CollectiveReduceV2'
    gpus = ['/job:worker/task:1/device:GPU:{}'.format(k) for k in range(2)]
    assert worker_reductions() == [(gpus[0], op_type, 'nccl'), (gpus[1], op_type, 'nccl')]
    ops = tfv1.get_default_graph().get_operations()
    assert {op.inputs[1].op.get_attr('value').int_val[0] for op in ops if op.type == op_type} == {4}
    wire = tf.float16 if compression else tf.float32
    assert {op.inputs[0].dtype for op in ops if op.type == op_type} == {wire}
    assert not [op for op in ops if op.type in ('PyFunc', 'EagerPyFunc', 'NumpyFunction')]


def test_a_worker_with_cpu_towers_reduces_in_pieces_through_the_ring(second_of_two_workers):
    builder = CollectiveAllReduceBuilder(['/cpu:0'], second_of_two_workers)
    builder.CHUNK_BYTES = 200                # 'a' (400 bytes) in 2 pieces, 'b' and 'c' (60) in one
    grad_list = builder.call_for_each_tower(tower_gradients)
    builder.build(grad_list, lambda: tfv1.train.GradientDescentOptimizer(0.1))
    assert worker_reductions() == [('/job:worker/task:1/device:CPU:0', 'CollectiveReduceV2', 'ring')] * 3


@pytest.mark.parametrize('compression', ['int8', 'FP16', True, 16])
def test_an_unknown_compression_is_refused_naming_the_argument_and_the_choices(lone_server, compression):
    expected = "CollectiveAllReduceTrainer: compression must be None or one of 'fp16', 'bf16', got {!r}"
    with pytest.raises(ValueError, match=re.escape(expected.format(compression))):
        CollectiveAllReduceTrainer(['/cpu:0'], lone_server, compression=compression)
    with pytest.raises(ValueError, match="CollectiveAllReduceBuilder: compression must be None or one of"):
        CollectiveAllReduceBuilder(['/cpu:0'], lone_server, compression=compression)


def _ancestors(op):
    """The names of ``op`` and of every op it depends on (inputs and control inputs)."""
    seen, todo = set(), [op]
    while todo:
        current = todo.pop()
        if current.name in seen:
            continue
        seen.add(current.name)
        todo.extend(t.op for t in current.inputs)
        todo.extend(current.control_inputs)
    return seen


@pytest.mark.parametrize('trainer_class', [DistributedTrainerParameterServer, DistributedTrainerReplicated])
@pytest.mark.parametrize('worker', [0, 1])
def test_parameter_server_trainers_share_one_loss_scale_updated_by_the_chief_before_the_others_go_on(
        ps_servers, trainer_class, worker):
    """fp16: the loss-scale state is on the first parameter server; the chief updates it
    after its apply and before it hands the others their step-done tokens; another worker
    never updates it."""
    from tensorpack_lite.dataflow import DataFromList
    from tensorpack_lite.input_source import QueueInput
    with tfv1.Graph().as_default():
        trainer = trainer_class(['/cpu:0'], ps_servers[worker])
        trainer.mixed_precision = 'fp16'
        x = tf.TensorSpec([None], tf.float32, 'x')

        def cost(x):
            w = tfv1.get_variable('w', initializer=tf.ones([1]))
            return tf.reduce_sum(x * w)

        trainer.setup_graph([x], QueueInput(DataFromList([[np.ones(1, np.float32)]])), cost,
                            lambda: tfv1.train.MomentumOptimizer(0.1, 0.9))
        scale = trainer.loss_scale
        for var in (scale.scale, scale.good_steps, scale.skipped_steps):
            assert var.device == '/job:ps/task:0/device:CPU:0', var.name
        graph = tfv1.get_default_graph()
        scale_updates = {op.name for op in graph.get_operations()
                         if op.type == 'AssignVariableOp' and 'loss_scale_update/' in op.name}
        assert len(scale_updates) == 2    # scale and good_steps (skipped_steps: AssignAddVariableOp)
        upstream = _ancestors(trainer.train_op)
        if worker == 0:
            tokens = [op for op in graph.get_operations()
                      if op.type == 'QueueEnqueueV2' and 'step_done' in op.inputs[0].op.name]
            assert len(tokens) == 1
            assert scale_updates <= _ancestors(tokens[0])
        else:
            assert not scale_updates & upstream
        types = {graph.get_operation_by_name(name).type for name in upstream}
        assert bool(types & {'If', 'StatelessIf'}) == (worker == 0)    # only the chief applies (if finite)
