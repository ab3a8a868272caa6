"""CollectiveAllReduceBuilder's exchanges between workers that send their sums to each other,
sockets (graph_builder/socket_allreduce.py) and queues (graph_builder/queue_allreduce.py),
between in-process workers: each worker a server of its own with virtual CPU towers, each
running its session in a thread. The sums are checked bit for bit against numpy, in the order
the builder documents: towers in tower order on each worker, then workers in worker order."""

import multiprocessing
import re
import threading

import numpy as np
import pytest

from tensorpack_lite.compat import tf, tfv1
from tensorpack_lite.graph_builder.distributed import CollectiveAllReduceBuilder
from tensorpack_lite.tfutils.distributed import create_server
from tensorpack_lite.utils.cluster import local_cluster

RUN_BOUND = 120.0
"""Seconds a worker's run may take before the test fails (a hang, not a slow machine)."""
RUN_MS = int(RUN_BOUND * 1000)


def start_workers(num_worker, num_tower):
    cluster = local_cluster(num_worker)
    # a socket exchange holds a thread of the process's pool until every peer's data is in:
    # in-process workers need a thread each (see run_for)
    config = tfv1.ConfigProto(device_count={'CPU': num_tower}, inter_op_parallelism_threads=2 * num_worker)
    return [create_server(cluster, 'worker', k, config=config) for k in range(num_worker)]


class Worker:
    """One worker's graph of the all-reduce of ``per_tower`` (a list per tower of arrays, fed
    through placeholders as gradients would be computed, not folded as constants)."""

    def __init__(self, server, per_tower, average, compression, exchange, chunk_bytes=1000):
        self.server = server
        self.graph = tfv1.Graph()
        with self.graph.as_default():
            towers = ['/cpu:{}'.format(k) for k in range(len(per_tower))]
            self.builder = CollectiveAllReduceBuilder(towers, server, average, compression, exchange)
            self.builder.QUEUE_CHUNK_BYTES = chunk_bytes
            self.feeds = {}
            inputs = []
            for tower in per_tower:
                placeholders = [tfv1.placeholder(tf.as_dtype(x.dtype), x.shape) for x in tower]
                self.feeds.update(zip(placeholders, tower))
                inputs.append(placeholders)
            self.results = self.builder.all_reduce(inputs)
            self.abort = self.builder.build_abort()

    def session(self):
        config = tfv1.ConfigProto(device_filters=self.builder.session_device_filters())
        return tfv1.Session(self.server.target, graph=self.graph, config=config)

    def run(self):
        with self.session() as sess:
            self.builder.connect(sess, timeout=RUN_BOUND, step_timeout=RUN_BOUND)
            return sess.run(self.results, self.feeds)


def in_fresh_process(function, *args):
    """``function(*args)`` in a new Python process: its result, or its exception raised here."""
    with multiprocessing.get_context('spawn').Pool(1) as pool:
        return pool.apply_async(function, args).get(2 * RUN_BOUND)


def run_for(exchange):
    """How a test of 3 in-process workers runs: with sockets, in a new process. A socket
    exchange op holds a thread of TensorFlow's inter-op pool until every peer's data is in, so
    3 workers in one process need 3 threads, and the pool is one per process, sized by the
    first server of the process (in a test run, another test's)."""
    if exchange == 'sockets':
        return in_fresh_process
    return lambda function, *args: function(*args)


def run_together(runs):
    """Call every ``run()`` in a thread of its own; their results (an exception is returned)."""
    results = [None] * len(runs)

    def call(index):
        try:
            results[index] = runs[index]()
        except Exception as err:     # returned to the test, which asserts on it
            results[index] = err

    threads = [threading.Thread(target=call, args=(k,), daemon=True) for k in range(len(runs))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(RUN_BOUND)
        assert not thread.is_alive(), "a worker's run did not end within {} s".format(RUN_BOUND)
    return results


def connected_sessions(workers, step_timeout=RUN_BOUND):
    """A session per worker, every worker connected to the others (in threads: the workers
    connect to each other)."""
    sessions = [worker.session() for worker in workers]
    outcome = run_together([lambda k=k: workers[k].builder.connect(sessions[k], RUN_BOUND, step_timeout)
                            for k in range(len(workers))])
    assert outcome == [None] * len(workers)
    return sessions


def run_in_thread(function):
    """Start ``function`` in a daemon thread; returns the thread and a dict that receives
    ``'result'`` or ``'error'``."""
    outcome = {}

    def call():
        try:
            outcome['result'] = function()
        except Exception as err:      # asserted on by the test
            outcome['error'] = err

    thread = threading.Thread(target=call, daemon=True)
    thread.start()
    return thread, outcome


def rounded(values, compression):
    """``values`` rounded to nearest even in 16 bits, back in float32. TensorFlow's kernels run
    with denormals flushed: a value below float16's smallest normal (2^-14) becomes 0."""
    import ml_dtypes
    values = np.asarray(values, np.float32)
    if compression == 'fp16':
        return values.astype(np.float16).astype(np.float32)
    return values.astype(ml_dtypes.bfloat16).astype(np.float32)


def worker_values(rng, num_worker, num_tower):
    """[worker][tower] -> (floats 3x700, doubles 20, halves 4, ints 5). The first float's sum
    over the workers depends on the order of the additions: (1 + 2^-24) + 2^-24 rounds to 1."""
    values = []
    for worker in range(num_worker):
        towers = []
        for tower in range(num_tower):
            floats = (rng.randn(3, 700) * 10.0 ** rng.randint(-4, 5, size=(3, 700))).astype('float32')
            floats[0, 0] = [1.0, 2.0 ** -24, 2.0 ** -24][worker] if tower == 0 else 0.0
            towers.append((floats, rng.randn(20), (np.arange(4) * (worker + tower + 1)).astype('float16'),
                           np.arange(5, dtype='int32') + 10 * worker + tower))
        values.append(towers)
    return values


def expected_totals(values, compression):
    """The sums the builder documents: tower order on each worker, then worker order."""
    totals = []
    for index in range(4):
        local = []
        for towers in values:
            total = towers[0][index]
            for tower in towers[1:]:
                total = total + tower[index]
            if compression and total.dtype in (np.float32, np.float64):
                total = rounded(total, compression)
            local.append(total)
        total = local[0]
        for other in local[1:]:
            total = total + other
        totals.append(total.astype(values[0][0][index].dtype))
    return totals


def check_graph(graph, exchange, num_worker, compression):
    """The ops that move the data: one dequeue from each peer's outbox (large tensors in
    pieces), or one py_func sending and receiving everything; no collective op. (The floats
    and doubles are compressed when ``compression`` is given.)"""
    operations = graph.get_operations()
    assert not [op for op in operations if op.type.startswith('Collective')]
    if exchange == 'queues':
        dequeues = [op for op in operations if op.type == 'QueueDequeueV2']
        assert len(dequeues) == num_worker - 1
        float_pieces = 5 if compression else 9                  # 2100 elements of 2 or 4 bytes, 1000 a piece
        assert all(len(op.outputs) == float_pieces + 3 for op in dequeues)
    else:
        exchanges = [op for op in operations if op.type == 'PyFunc' and 'exchange' in op.name]
        # each sum, or (compressed floats, decoded and added by TensorFlow) each peer's data
        compressed_outputs = 2 * (num_worker - 1) if compression else 2
        assert len(exchanges) == 1 and len(exchanges[0].outputs) == compressed_outputs + 2
        assert not [op for op in operations if op.type == 'QueueDequeueV2' and 'ports' not in op.name]


@pytest.mark.parametrize('exchange', ['sockets', 'queues'])
@pytest.mark.parametrize('compression', [None, 'fp16', 'bf16'])
@pytest.mark.parametrize('average', [False, True])
def test_three_workers_of_two_towers_get_the_same_sum_in_worker_order(average, compression, exchange):
    run_for(exchange)(check_three_workers_sum, average, compression, exchange)


def check_three_workers_sum(average, compression, exchange):
    num_worker, num_tower = 3, 2
    servers = start_workers(num_worker, num_tower)
    values = worker_values(np.random.RandomState(0), num_worker, num_tower)
    workers = [Worker(server, per_tower, average, compression, exchange)
               for server, per_tower in zip(servers, values)]
    check_graph(workers[0].graph, exchange, num_worker, compression)

    outputs = run_together([worker.run for worker in workers])
    for output in outputs:
        assert not isinstance(output, Exception), output

    expected = expected_totals(values, compression)
    assert expected[0][0, 0] == 1.0                             # (1 + 2^-24) + 2^-24 in worker order
    group = num_worker * num_tower
    for worker_output in outputs:
        for floats, doubles, halves, ints in worker_output:      # every tower of every worker
            if not average and not compression:
                np.testing.assert_array_equal(floats, expected[0])
                np.testing.assert_array_equal(doubles, expected[1])
                np.testing.assert_array_equal(halves, expected[2])
                np.testing.assert_array_equal(ints, expected[3])
            elif not average:
                # the decoded sums: TensorFlow's graph optimizer may reassociate the additions
                # after the casts (the same way on every worker): within an ulp of worker order
                np.testing.assert_allclose(floats, expected[0], rtol=2.4e-7)
                np.testing.assert_allclose(doubles, expected[1], rtol=2.4e-7)
                np.testing.assert_array_equal(halves, expected[2])
                np.testing.assert_array_equal(ints, expected[3])
            else:
                scale = (lambda x: x * np.float32(1 / group)) if compression else (lambda x: x / group)
                np.testing.assert_allclose(floats, scale(expected[0]).astype('float32'), rtol=4.8e-7)
                double_rtol = 4.8e-7 if compression else 2.3e-16
                np.testing.assert_allclose(doubles, scale(expected[1]), rtol=double_rtol)
                np.testing.assert_array_equal(ints, expected[3] // group)
            assert [v.dtype for v in (floats, doubles, halves, ints)] == [e.dtype for e in expected]
    reference = outputs[0][0]
    for worker_output in outputs:                               # bit for bit the same everywhere
        for tower_output in worker_output:
            for value, first in zip(tower_output, reference):
                np.testing.assert_array_equal(value, first)


@pytest.mark.parametrize('exchange', ['sockets', 'queues'])
def test_steps_repeat_and_a_worker_one_step_ahead_waits_for_the_others(exchange):
    """Five steps of different values: each worker gets each step's sum, never another's."""
    servers = start_workers(2, 1)
    graphs = []
    for server in servers:
        graph = tfv1.Graph()
        with graph.as_default():
            step = tfv1.placeholder(tf.float32, [3])
            builder = CollectiveAllReduceBuilder(['/cpu:0'], server, average=False, exchange=exchange)
            total = builder.all_reduce([[step]])[0][0]
        graphs.append((graph, builder, step, total))

    def steps(worker):
        server, (graph, builder, step, total) = servers[worker], graphs[worker]
        config = tfv1.ConfigProto(device_filters=builder.session_device_filters())
        with tfv1.Session(server.target, graph=graph, config=config) as sess:
            builder.connect(sess, timeout=RUN_BOUND)
            return [sess.run(total, {step: np.full(3, 10.0 ** worker * (k + 1), 'float32')})
                    for k in range(5)]

    outputs = run_together([lambda: steps(0), lambda: steps(1)])
    for output in outputs:
        assert not isinstance(output, Exception), output
        np.testing.assert_array_equal(output, [np.full(3, 11.0 * (k + 1)) for k in range(5)])


def test_abort_ends_a_step_waiting_for_a_worker_that_never_sends():
    servers = start_workers(2, 1)
    worker = Worker(servers[0], [[np.ones(5, 'float32')]], True, None, 'queues')
    assert worker.abort is not None
    sess = worker.session()
    thread, outcome = run_in_thread(lambda: sess.run(worker.results, worker.feeds))
    thread.join(1.0)                  # the step waits for worker 1's contribution, which never comes
    assert thread.is_alive()
    sess.run(worker.abort)
    thread.join(RUN_BOUND)
    assert not thread.is_alive()
    assert isinstance(outcome['error'], (tf.errors.OutOfRangeError, tf.errors.CancelledError))
    assert 'closed' in outcome['error'].message


def receive_done(sess, receive, timeout_ms=RUN_MS):
    """A peer's index from a done signal, or -1 when none spoke (as the trainer reads it)."""
    try:
        return sess.run(receive, options=tfv1.RunOptions(timeout_in_ms=timeout_ms))
    except tf.errors.DeadlineExceededError:      # queues: the run's timeout; sockets return -1 after 1 s
        return -1


@pytest.mark.parametrize('exchange', ['sockets', 'queues'])
def test_done_signals_arrive_only_once_each_peer_has_run_its_last_step(exchange):
    """A worker's last step ends before its peers have taken its contribution (out of its
    outbox, or its connections); its peers' done signals tell it when they have."""
    run_for(exchange)(check_done_signals, exchange)


def check_done_signals(exchange):
    servers = start_workers(3, 1)
    workers = [Worker(server, [[np.full(4, 10.0 ** k, 'float32')]], False, None, exchange)
               for k, server in enumerate(servers)]
    done = []
    for worker in workers:
        with worker.graph.as_default():
            done.append(worker.builder.build_done_signals())
    assert [sorted(d.sends) for d in done] == [[1, 2], [0, 2], [0, 1]]
    sessions = connected_sessions(workers)
    try:
        def last_step_then_done(k):
            total = sessions[k].run(workers[k].results, workers[k].feeds)[0][0]
            for send in done[k].sends.values():
                sessions[k].run(send)
            return total

        first = run_together([lambda: last_step_then_done(0), lambda: last_step_then_done(1),
                              lambda: sessions[2].run(workers[2].results, workers[2].feeds)[0][0]])
        for total in first:
            np.testing.assert_array_equal(total, np.full(4, 111.0, 'float32'))
        heard = [receive_done(sessions[0], done[0].receive)]
        assert heard == [1]
        assert receive_done(sessions[0], done[0].receive, 300) == -1      # worker 2 has not said it yet
        for send in done[2].sends.values():
            sessions[2].run(send)
        heard.append(receive_done(sessions[0], done[0].receive))
        assert heard == [1, 2]
        assert sorted(receive_done(sessions[1], done[1].receive) for _ in range(2)) == [0, 2]
    finally:
        for sess in sessions:
            sess.close()


@pytest.mark.parametrize('exchange', ['sockets', 'queues'])
def test_one_worker_without_peers_builds_no_queue(exchange):
    servers = start_workers(1, 2)
    worker = Worker(servers[0], [[np.arange(3, dtype='float32')], [np.ones(3, 'float32')]], False, None,
                    exchange)
    assert worker.abort is None
    assert not [op for op in worker.graph.get_operations() if 'Queue' in op.type or op.type == 'PyFunc']
    assert worker.builder.build_done_signals() is None
    for tower_output in worker.run():
        np.testing.assert_array_equal(tower_output[0], [1.0, 2.0, 3.0])


# ----- sockets: connecting, failures and the end ---------------------------------------------------

def test_sockets_abort_ends_a_step_waiting_for_a_worker_that_never_sends():
    servers = start_workers(2, 1)
    workers = [Worker(server, [[np.ones(5, 'float32')]], True, None, 'sockets') for server in servers]
    assert workers[0].abort is not None
    sessions = connected_sessions(workers)
    thread, outcome = run_in_thread(lambda: sessions[0].run(workers[0].results, workers[0].feeds))
    thread.join(1.0)                  # the step waits for worker 1's data, which never comes
    assert thread.is_alive()
    sessions[0].run(workers[0].abort)
    thread.join(RUN_BOUND)
    assert not thread.is_alive()
    assert isinstance(outcome['error'], tf.errors.UnknownError), outcome   # how a py_func op fails
    error = workers[0].builder.exchange_failure()                      # why, as the trainer reports it
    assert isinstance(error, tf.errors.UnavailableError), error
    address = servers[1].server_def.cluster.job[0].tasks[1]
    assert "the connection to worker 1 ({}) failed".format(address) in error.message
    assert error.message in outcome['error'].message


def test_sockets_a_step_fails_naming_the_peer_whose_connection_ends():
    """A peer that goes away mid-exchange (its connections close) makes the step fail at once
    with an UnavailableError naming it, not wait for the timeout."""
    servers = start_workers(2, 1)
    workers = [Worker(server, [[np.ones(5, 'float32')]], False, None, 'sockets') for server in servers]
    sessions = connected_sessions(workers)
    thread, outcome = run_in_thread(lambda: sessions[0].run(workers[0].results, workers[0].feeds))
    thread.join(0.5)
    sessions[1].run(workers[1].abort)          # worker 1's connections end, as when its process dies
    thread.join(RUN_BOUND)
    assert not thread.is_alive()
    assert isinstance(outcome['error'], tf.errors.UnknownError), outcome
    error = workers[0].builder.exchange_failure()
    assert isinstance(error, tf.errors.UnavailableError), error
    assert 'worker 1' in error.message and 'the connection was closed' in error.message


def test_sockets_a_step_without_the_peers_data_fails_after_the_step_timeout():
    servers = start_workers(2, 1)
    workers = [Worker(server, [[np.ones(5, 'float32')]], False, None, 'sockets') for server in servers]
    sessions = connected_sessions(workers, step_timeout=0.5)
    with pytest.raises(tf.errors.UnknownError):
        sessions[0].run(workers[0].results, workers[0].feeds)
    error = workers[0].builder.exchange_failure()
    assert isinstance(error, tf.errors.DeadlineExceededError), error
    assert re.search(r'worker 1 \(localhost:\d+\) sent or took no data within 0.5 s', error.message)


def test_sockets_connect_fails_naming_the_peer_that_never_comes():
    servers = start_workers(2, 1)
    worker = Worker(servers[1], [[np.ones(5, 'float32')]], False, None, 'sockets')
    sess = worker.session()
    # worker 0 never runs: its port never reaches worker 1's queue
    with pytest.raises(tf.errors.DeadlineExceededError,
                       match=r'worker 0 \(localhost:\d+\) did not publish its port within 0.5 s'):
        worker.builder.connect(sess, timeout=0.5)


def test_sockets_abort_ends_connect_waiting_for_a_peer():
    """The watchdog's abort also ends a start-up waiting for a lost peer's port, or for its
    connection."""
    servers = start_workers(3, 1)
    worker = Worker(servers[1], [[np.ones(5, 'float32')]], False, None, 'sockets')
    sess = worker.session()
    thread, outcome = run_in_thread(lambda: worker.builder.connect(sess, timeout=RUN_BOUND))
    thread.join(1.0)                  # workers 0 and 2 never publish their ports
    assert thread.is_alive()
    sess.run(worker.abort)
    thread.join(RUN_BOUND)
    assert not thread.is_alive()
    assert isinstance(outcome['error'], (tf.errors.OutOfRangeError, tf.errors.CancelledError)), outcome
    assert 'closed' in outcome['error'].message


def test_sockets_connect_ignores_a_stranger_and_a_step_runs_before_connect_fails_clearly():
    import socket as sockets
    servers = start_workers(2, 1)
    workers = [Worker(server, [[np.full(3, 10.0 ** k, 'float32')]], False, None, 'sockets')
               for k, server in enumerate(servers)]
    sessions = [worker.session() for worker in workers]
    with pytest.raises(tf.errors.UnknownError, match=r'connect\(\) was not called before the first step'):
        sessions[0].run(workers[0].results, workers[0].feeds)
    listener_port = workers[1].builder._between_workers._listener.getsockname()[1]
    stranger = sockets.create_connection(('localhost', listener_port))
    stranger.sendall(b'GET / HTTP/1.0\r\n\r\n')                # a health check, not a worker
    outcome = run_together([lambda k=k: workers[k].builder.connect(sessions[k], timeout=RUN_BOUND)
                            for k in range(2)])
    assert outcome == [None, None]
    totals = run_together([lambda k=k: sessions[k].run(workers[k].results, workers[k].feeds)
                           for k in range(2)])
    for total in totals:
        np.testing.assert_array_equal(total[0][0], [11.0, 11.0, 11.0])
    stranger.close()


def test_sockets_a_port_that_is_taken_is_an_error_naming_the_variable(monkeypatch):
    import socket as sockets
    servers = start_workers(2, 1)
    taken = sockets.create_server(('', 0))
    monkeypatch.setenv('TENSORPACK_LITE_SOCKET_PORT', str(taken.getsockname()[1]))
    try:
        with pytest.raises(RuntimeError, match=r"worker 0 \(localhost:\d+\) cannot listen on port '\d+' "
                                               r"\(TENSORPACK_LITE_SOCKET_PORT='\d+'\)"):
            Worker(servers[0], [[np.ones(3, 'float32')]], False, None, 'sockets')
    finally:
        taken.close()
    monkeypatch.setenv('TENSORPACK_LITE_SOCKET_PORT', 'http')
    with pytest.raises(RuntimeError, match="cannot listen on port 'http'"):
        Worker(servers[0], [[np.ones(3, 'float32')]], False, None, 'sockets')
