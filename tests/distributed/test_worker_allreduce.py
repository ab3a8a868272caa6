"""CollectiveAllReduceBuilder's all-reduce between workers: each worker a process (started by
this test, bounded in time, ended at the test's end) with a server of its own and virtual CPU
towers. (Several servers in one process do not complete TensorFlow's collective ops between
them: the steps wait until their timeout.) Every tower of every
worker is a member of TensorFlow's collective ring: over several steps every tower gets the
same bits, each step's sum (never another step's), and a step whose peer never comes ends
with the run's timeout instead of waiting for ever."""

import multiprocessing

import numpy as np
import pytest

from helpers.precision import assert_16_bit_sum
from tensorpack_lite.compat import tf, tfv1
from tensorpack_lite.graph_builder.distributed import CollectiveAllReduceBuilder
from tensorpack_lite.multiprocess.server import create_server
from tensorpack_lite.cluster.config import local_cluster

RUN_BOUND = 120.0
"""Seconds a worker's run may take before the test fails (a hang, not a slow machine)."""
GRAPH_KEY = 7
"""The collective graph key of every run (the trainer gives its steps one too)."""


def run_options(timeout_s=RUN_BOUND):
    options = tfv1.RunOptions(timeout_in_ms=int(timeout_s * 1000))
    options.experimental.collective_graph_key = GRAPH_KEY
    return options


class Worker:
    """One worker's graph of the all-reduce of a tensor per dtype on each tower, fed through
    placeholders (as gradients would be computed, not folded as constants)."""

    def __init__(self, server, example, average, compression):
        self.server = server
        self.graph = tfv1.Graph()
        with self.graph.as_default():
            towers = ['/cpu:{}'.format(k) for k in range(len(example))]
            self.builder = CollectiveAllReduceBuilder(towers, server, average, compression)
            self.builder.CHUNK_BYTES = 1000
            self.placeholders = []
            for tower, values in zip(towers, example):
                with tf.device(tower):
                    self.placeholders.append([tfv1.placeholder(tf.as_dtype(x.dtype), x.shape)
                                              for x in values])
            self.results = self.builder.all_reduce(self.placeholders)

    def session(self):
        config = tfv1.ConfigProto(device_filters=self.builder.session_device_filters())
        return tfv1.Session(self.server.target, graph=self.graph, config=config)

    def feed(self, per_tower):
        return {p: x for placeholders, values in zip(self.placeholders, per_tower)
                for p, x in zip(placeholders, values)}

    def run_steps(self, steps, timeout_s=RUN_BOUND):
        """The results of one run per entry of ``steps`` (this worker's values of each step)."""
        with self.session() as sess:
            return [sess.run(self.results, self.feed(step), options=run_options(timeout_s)) for step in steps]


def run_worker(cluster, index, steps, average, compression, timeout_s=RUN_BOUND):
    """In a worker process: start worker ``index`` of ``cluster`` (2 virtual CPU towers), build
    its graph and run one step per entry of ``steps``; returns the results (and, in the
    first entry, the graph's reduction ops as (op type, hint))."""
    config = tfv1.ConfigProto(device_count={'CPU': len(steps[0])})
    server = create_server(cluster, 'worker', index, config=config)
    worker = Worker(server, steps[0], average, compression)
    reductions = [(op.type, op.get_attr('communication_hint').decode(), op.device)
                  for op in worker.graph.get_operations() if op.type.startswith('Collective')]
    others = sorted({op.type for op in worker.graph.get_operations()
                     if op.type in ('PyFunc', 'EagerPyFunc') or 'Queue' in op.type})
    return reductions, others, worker.run_steps(steps, timeout_s)


@pytest.fixture(scope='module')
def processes():
    """Three spawned Python processes, in which the workers of every run of this module start,
    each run on a cluster of its own (new ports, a new server in each process): TensorFlow
    starts three times for the module, not three times per run. A worker's run blocks until
    its peers join it, so the runs of one cluster go to three different processes."""
    pool = multiprocessing.get_context('spawn').Pool(3)
    try:
        yield pool
    finally:
        pool.terminate()
        pool.join()


def run_workers(processes, num_worker, per_worker_steps, average, compression, timeout_s=RUN_BOUND):
    """Every worker in a process of its own, together; their results (the test fails on a
    worker's exception or when the run takes more than 2 RUN_BOUND)."""
    cluster = local_cluster(num_worker)
    pending = [processes.apply_async(run_worker, (cluster, k, per_worker_steps[k], average, compression,
                                                  timeout_s))
               for k in range(num_worker)]
    return [p.get(2 * RUN_BOUND) for p in pending]


def step_values(rng, num_worker, num_tower):
    """[worker][tower] -> (floats 3x700, doubles 20, ints 5), floats of magnitudes 1e-3 to 1e3."""
    return [[((rng.randn(3, 700) * 10.0 ** rng.randint(-3, 4, size=(3, 700))).astype('float32'),
              rng.randn(20), rng.randint(-100, 100, size=5).astype('int32'))
             for _ in range(num_tower)] for _ in range(num_worker)]


def members(values, index):
    """Tensor ``index`` of every tower of every worker, in order."""
    return [tower[index] for towers in values for tower in towers]


def check_graph(reductions, others, worker, compression):
    """The data moves through collective all-reduces only, on each tower's CPU, with the ring:
    floats (2100 elements) in 5 pieces of 2 bytes an element or 9 of 4, doubles and ints whole."""
    assert others == []
    assert {hint for _, hint, _ in reductions} == {'ring'}
    assert {device for _, _, device in reductions} == {
        '/job:worker/task:{}/device:CPU:{}'.format(worker, k) for k in range(2)}
    per_tower = (5 + 1 + 1) if compression else (9 + 1 + 1)
    assert [op_type for op_type, _, _ in reductions] == ['CollectiveReduceV2'] * (2 * per_tower)


@pytest.mark.parametrize('compression', [pytest.param(None, marks=pytest.mark.quick), 'fp16', 'bf16'])
@pytest.mark.parametrize('average', [False, True])
def test_three_workers_of_two_towers_get_the_same_bits_on_every_tower_every_step(processes, average,
                                                                                 compression):
    num_worker, num_tower, num_step = 3, 2, 3
    rng = np.random.RandomState(0)
    steps = [step_values(rng, num_worker, num_tower) for _ in range(num_step)]
    results = run_workers(processes, num_worker, [[step[k] for step in steps] for k in range(num_worker)],
                          average, compression)
    for k, (reductions, others, _) in enumerate(results):
        check_graph(reductions, others, k, compression)
    outputs = [result[2] for result in results]

    group = num_worker * num_tower
    scale = group if average else 1
    for index, step in enumerate(steps):
        reference = outputs[0][index][0]
        for worker_output in outputs:
            for tower_output in worker_output[index]:          # every tower of every worker: same bits
                for value, first in zip(tower_output, reference):
                    assert value.dtype == first.dtype
                    np.testing.assert_array_equal(value, first)
        floats, doubles, ints = reference
        assert (floats.dtype, doubles.dtype, ints.dtype) == (np.float32, np.float64, np.int32)
        exact = [np.sum([np.asarray(p, np.float64) for p in members(step, k)], axis=0) for k in range(3)]
        if compression:             # divided by 6 first when averaging, summed in 16 bits
            assert_16_bit_sum(floats, members(step, 0), compression, 1 / scale)
            assert_16_bit_sum(doubles, members(step, 1), compression, 1 / scale)
        else:   # float32 sums of 6 terms up to 1e3 in any order: within 6 ulps of the largest term
            np.testing.assert_allclose(floats, exact[0] / scale, rtol=0, atol=6 * 2.0 ** -23 * 1e3 * 4)
            np.testing.assert_allclose(doubles, exact[1] / scale, rtol=0, atol=1e-12)
        np.testing.assert_array_equal(ints, (exact[2] / scale).astype('int32') if average else exact[2])
        if index:                                           # each step's sum, not the one before
            assert not np.array_equal(floats, outputs[0][index - 1][0][0])


def test_a_step_whose_peer_never_comes_ends_with_the_run_timeout(processes):
    """Worker 1 of 2 never starts: worker 0's step fails with DeadlineExceeded after the run's
    timeout (the trainer's STEP_TIMEOUT; a lost peer is named sooner by its watchdog)."""
    cluster = local_cluster(2)
    pending = processes.apply_async(run_worker, (cluster, 0, [[[np.ones(4, 'float32')]]], False, None, 2.0))
    with pytest.raises(tf.errors.DeadlineExceededError):
        pending.get(RUN_BOUND)
