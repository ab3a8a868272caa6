"""Parallel DataFlows when things go wrong around the workers (issue 13, items 6 and 9), with
real processes: workers that hang (named in warnings, then an error after ``idle_timeout``),
a parent killed by SIGKILL or SIGTERM (the last worker to exit removes the ipc directory),
and shared memory that cannot be reserved (a clear error, nothing left behind)."""

import contextlib
import gc
import logging
import multiprocessing as mp
import os
import re
import resource
import shutil
import signal
import tempfile
import threading
import time

import numpy as np
import psutil
import pytest

from helpers.timing import run_or_hang
from tensorpack_lite.dataflow.base import DataFlow
from tensorpack_lite.dataflow.raw import DataFromList
from tensorpack_lite.dataflow.ipc_dir import IPCDir
from tensorpack_lite.dataflow.parallel import DataFlowWorkerError, MultiProcessRunner, MultiProcessRunnerZMQ
from tensorpack_lite.dataflow.parallel_map import MultiProcessMapAndBatchData, MultiProcessMapData
from tensorpack_lite.dataflow.workers import WorkerProcesses
from helpers.dataflows import children, gone

FORK = mp.get_context('fork')
WORKER = re.compile(r'(\w+) worker #(\d+) \(pid (\d+)\)')


# ---------------------------------------------------------------- processes and directories


def wait_until(condition, timeout=30):
    """Poll ``condition()`` until it holds or ``timeout`` seconds passed; its last value."""
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.05)
    return condition()


def kill_all(pids):
    for pid in pids:
        with contextlib.suppress(psutil.NoSuchProcess):
            psutil.Process(pid).kill()


@pytest.fixture(autouse=True)
def private_tmp(monkeypatch):
    """A private temporary directory (short enough for socket paths) for the ipc directories,
    so that other sessions on the machine never interfere; every test must leave it empty
    and end every process it started."""
    path = tempfile.mkdtemp(prefix='tpr-', dir='/tmp')
    monkeypatch.setattr(tempfile, 'tempdir', path)
    before = children()
    yield path
    leftovers = children() - before
    kill_all(leftovers)
    leftover_files = os.listdir(path)
    shutil.rmtree(path, ignore_errors=True)
    assert leftovers == set() and leftover_files == []


@contextlib.contextmanager
def time_limit(seconds):
    """TimeoutError in this (the main) thread after ``seconds``: a regression fails the test
    instead of hanging it."""
    def expire(signum, frame):
        raise TimeoutError("still blocked after {} s".format(seconds))
    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


# ---------------------------------------------------------------- dataflows

def block_until(path):
    """Block as a stuck read does, until ``path`` exists (forever if nobody creates it)."""
    while not os.path.exists(path):
        time.sleep(0.02)


class BlocksAfter(DataFlow):
    """Datapoints [0], [1], ... [n-1], then blocks until ``release`` exists, then [n]."""

    def __init__(self, n, release):
        self.n, self.release = n, release

    def __len__(self):
        return self.n + 1

    def __iter__(self):
        for i in range(self.n):
            yield [i]
        block_until(self.release)
        yield [self.n]


class BlockingMap(object):
    """map_func: the identity, blocking on datapoint [n] until ``release`` exists."""

    def __init__(self, n, release):
        self.n, self.release = n, release

    def __call__(self, dp):
        if dp[0] == self.n:
            block_until(self.release)
        return dp


def numbers(n):
    return DataFromList([[i] for i in range(n)], shuffle=False)


def blocking_flow(kind, release, num_proc):
    """A dataflow whose ``num_proc`` workers go silent after a few datapoints until ``release``
    exists, and the indices of the workers that are watched."""
    if kind == 'zmq':
        return MultiProcessRunnerZMQ(BlocksAfter(2, release), num_proc=num_proc), set(range(num_proc))
    if kind == 'queue':
        return (MultiProcessRunner(BlocksAfter(2, release), num_prefetch=2, num_proc=num_proc),
                set(range(num_proc)))
    if kind == 'map':
        return (MultiProcessMapData(numbers(6), num_proc=num_proc, map_func=BlockingMap(3, release),
                                    strict=True), set(range(num_proc)))
    # one map worker (its batch [2, 3] waits for [3]) and the dispatcher, which is not watched
    return MultiProcessMapAndBatchData(numbers(6), num_proc=1, map_func=BlockingMap(3, release),
                                       batch_size=2), {0}


KINDS = ['zmq', 'queue', 'map', 'mapbatch']


def named_workers(text):
    """{(class name, worker index, pid)} named in ``text``."""
    return {(owner, int(idx), int(pid)) for owner, idx, pid in WORKER.findall(text)}


def idle_warnings(log_records):
    return [m for m in log_records.messages_at(logging.WARNING) if 'Nothing arrived from the workers' in m]


# ---------------------------------------------------------------- item 6: hung workers

@pytest.mark.parametrize('kind', KINDS)
def test_a_hung_worker_is_named_then_the_wait_times_out(kind, private_tmp, log_records):
    df, silent = blocking_flow(kind, os.path.join(private_tmp, 'never-created'), num_proc=2)
    df.idle_warning, df.idle_timeout = 0.5, 2
    owner = type(df).__name__
    before = children()
    with time_limit(60):
        df.reset_state()
        workers = children() - before
        with pytest.raises(DataFlowWorkerError) as info:
            for _ in range(10):
                list(df)
    message = str(info.value)
    assert message.startswith(owner + ': nothing arrived from the workers for ')
    assert '(idle_timeout=2)' in message
    named = named_workers(message)
    assert {idx for _, idx, _ in named} == silent and {o for o, _, _ in named} == {owner}
    assert {pid for _, _, pid in named} <= workers and 'dispatcher' not in message
    # warnings came first, naming the same workers
    warnings = idle_warnings(log_records)
    assert warnings and all(named_workers(w) == named for w in warnings)
    assert all(w.startswith('[{}] Nothing arrived'.format(owner)) for w in warnings)
    # the dataflow is closed for good: workers ended (even blocked), ipc directory removed
    assert wait_until(lambda: all(gone(p) for p in workers))
    assert os.listdir(private_tmp) == []
    with pytest.raises(DataFlowWorkerError, match='idle_timeout'):
        list(df)


@pytest.mark.parametrize('kind', ['zmq', 'queue', 'map'])
def test_without_a_timeout_the_parent_warns_and_keeps_waiting(kind, private_tmp, log_records):
    release = os.path.join(private_tmp, 'release')

    class Release(logging.Handler):   # the workers resume once a warning was logged
        def emit(self, record):
            if 'Nothing arrived from the workers' in record.getMessage():
                open(release, 'w').close()

    # one runner worker: the epoch (3 datapoints) needs the one after the block
    df, silent = blocking_flow(kind, release, num_proc=2 if kind == 'map' else 1)
    df.idle_warning = 0.2
    assert df.idle_timeout is None   # the default: wait forever, as tensorpack
    handler = Release()
    logging.getLogger('tensorpack_lite').addHandler(handler)
    try:
        with time_limit(60):
            df.reset_state()
            values = sorted(dp[0] for dp in df)
    finally:
        logging.getLogger('tensorpack_lite').removeHandler(handler)
        df.close()
        os.remove(release)
    assert values == ([0, 1, 2, 3, 4, 5] if kind == 'map' else [0, 1, 2])
    assert {idx for w in idle_warnings(log_records) for _, idx, _ in named_workers(w)} == silent


# ---------------------------------------------------------------- item 6: a killed parent

class Counting(DataFlow):
    def __iter__(self):
        i = 0
        while True:
            time.sleep(0.01)
            yield [np.full(4, i)]
            i += 1


def _parent_to_kill(conn, tmpdir):
    """Starts three parallel dataflows (ipc directories in ``tmpdir``), reports its workers
    and directories, then waits to be killed."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)   # not a handler inherited from pytest
    tempfile.tempdir = tmpdir
    before = children()
    flows = [MultiProcessRunnerZMQ(Counting(), num_proc=2),
             MultiProcessMapData(numbers(1000), num_proc=2, map_func=BlockingMap(-1, ''), buffer_size=4),
             MultiProcessMapAndBatchData(numbers(1000), num_proc=1, map_func=BlockingMap(-1, ''),
                                         batch_size=2)]
    for df in flows:
        df.reset_state()
        next(iter(df))
    conn.send((sorted(children() - before), sorted(os.listdir(tmpdir))))
    time.sleep(600)


@pytest.mark.parametrize('sig', [signal.SIGKILL, signal.SIGTERM], ids=['SIGKILL', 'SIGTERM'])
def test_the_last_worker_of_a_killed_parent_removes_the_ipc_directory(sig, private_tmp):
    recv, send = FORK.Pipe(duplex=False)
    parent = FORK.Process(target=_parent_to_kill, args=(send, private_tmp))
    parent.start()
    workers = []
    try:
        assert recv.poll(60), "the parent did not start its workers"
        workers, dirs = recv.recv()
        assert len(workers) == 6 and not any(gone(p) for p in workers)
        assert [d.split('-')[1] for d in dirs] == ['map', 'mapbatch', 'runner']
        os.kill(parent.pid, sig)
        parent.join(30)
        assert parent.exitcode == -sig
        assert wait_until(lambda: all(gone(p) for p in workers)), "workers outlived their parent"
        assert wait_until(lambda: os.listdir(private_tmp) == []), os.listdir(private_tmp)
    finally:
        parent.kill()
        parent.join(5)
        kill_all(workers)


def test_workers_that_end_leave_the_directory_to_their_living_parent(private_tmp):
    df = MultiProcessRunnerZMQ(Counting(), num_proc=2)
    before = children()
    df.reset_state()
    workers = children() - before
    itr = iter(df)
    next(itr)
    [ipc] = os.listdir(private_tmp)
    for pid in workers:
        os.kill(pid, signal.SIGTERM)
    assert wait_until(lambda: all(gone(p) for p in workers))
    assert os.listdir(os.path.join(private_tmp, ipc)) == ['data']   # the parent's endpoint stays
    with time_limit(60), pytest.raises(DataFlowWorkerError, match='was killed by signal SIGTERM'):
        for _ in range(10 ** 6):
            next(itr)
    assert os.listdir(private_tmp) == []   # the failure closed the dataflow


def _wait_forever(conn):
    conn.send('forked')
    time.sleep(600)


def test_the_last_member_to_leave_removes_the_ipc_directory(private_tmp):
    ipc = IPCDir('unit')
    member = ipc.join()
    # a process forked now inherits both locks' descriptors: it must not count as a member
    recv, send = FORK.Pipe(duplex=False)
    bystander = FORK.Process(target=_wait_forever, args=(send,))
    bystander.start()
    try:
        assert recv.poll(30) and recv.recv() == 'forked'
        ipc._membership.leave()   # the parent's own membership
        assert os.path.isdir(ipc.path)
        assert member.leave() is True
        assert not os.path.exists(ipc.path)
        assert ipc.join() is None and member.leave() is True   # a new member cannot join; leave twice
    finally:
        bystander.kill()
        bystander.join(5)
    ipc.cleanup()


def _numbers(dp):
    return dp


@pytest.mark.parametrize('kind', ['runner', 'map'])
def test_a_dataflow_in_a_reference_cycle_is_collected_without_hanging(kind):
    """The garbage collector clears the weak references into a cycle (pyzmq's weak set of a
    context's sockets among them) before it runs the cycle's finalizers: the dataflow's cleanup
    must still close its sockets, or terminating the ZeroMQ context waits for them for ever."""
    df = (MultiProcessRunnerZMQ(Counting(), num_proc=1) if kind == 'runner' else
          MultiProcessMapData(numbers(50), num_proc=1, map_func=_numbers, buffer_size=8))
    before = children()   # earlier tests may have left children of their own (a resource tracker)
    df.reset_state()
    next(iter(df))
    workers = children() - before
    assert len(workers) == 1
    df.itself = df   # a cycle: only the garbage collector frees it
    del df
    run_or_hang(gc.collect)
    assert wait_until(lambda: all(gone(pid) for pid in workers))


def test_reset_state_leaves_the_parents_signal_handlers_alone():
    def mine(signum, frame):
        pass
    previous = signal.signal(signal.SIGTERM, mine)
    try:
        df = MultiProcessRunnerZMQ(Counting(), num_proc=1)
        df.reset_state()
        next(iter(df))
        df.close()
        assert signal.getsignal(signal.SIGTERM) is mine
    finally:
        signal.signal(signal.SIGTERM, previous)


class SigtermGoesElsewhere(DataFlow):
    """In the worker: starts a Python thread, then blocks SIGTERM in the main thread (as if the
    kernel handed the signal to that other thread, which it may do with any thread that does
    not block it), says so with the file ``ready``, and sleeps in a C call for ever."""

    def __init__(self, ready):
        self.ready = ready

    def __iter__(self):
        threading.Thread(target=time.sleep, args=(10 ** 4,), daemon=True).start()
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
        open(self.ready, 'w').close()
        time.sleep(10 ** 4)
        yield [0]


def test_closing_ends_a_worker_whose_main_thread_does_not_take_sigterm(monkeypatch):
    """A Python SIGTERM handler runs in the main thread only: with the signal handed to another
    thread, the old worker waited out its C call (here: for ever) until SIGKILL after
    ``join_timeout``. Now SIGTERM is blocked in every thread of a worker and its guard thread
    takes it: close() returns without waiting (no SIGKILL fallback: join_timeout is hours)."""
    monkeypatch.setattr(WorkerProcesses, 'join_timeout', 10 ** 4)
    marks = tempfile.mkdtemp(prefix='tpr-mark-', dir='/tmp')   # not in the ipc directories' parent
    try:
        ready = os.path.join(marks, 'ready')
        df = MultiProcessRunnerZMQ(SigtermGoesElsewhere(ready), num_proc=1)
        before = children()   # earlier tests may have left children of their own (a resource tracker)
        df.reset_state()
        (worker,) = children() - before
        assert wait_until(lambda: os.path.exists(ready))
        blocked = {int(line.split()[1], 16) for line in open('/proc/{}/status'.format(worker))
                   if line.startswith('SigBlk:')}
        assert blocked == {1 << (signal.SIGTERM - 1)}   # the worker blocks SIGTERM and nothing else
        run_or_hang(df.close)
        assert gone(worker)
    finally:
        shutil.rmtree(marks, ignore_errors=True)


# ---------------------------------------------------------------- item 9: shared memory

def _start_under_an_address_space_limit(conn, tmpdir, num_proc, slots):
    """Starts a runner under RLIMIT_AS = this process's address space + 1 GiB; reports what
    happened, the processes left and the content of ``tmpdir``."""
    tempfile.tempdir = tmpdir
    with open('/proc/self/status') as f:
        size_kib = int(re.search(r'VmSize:\s+(\d+) kB', f.read()).group(1))
    limit = size_kib * 1024 + (1 << 30)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    df = MultiProcessRunnerZMQ(numbers(3), num_proc=num_proc)
    if slots is not None:
        df.shared_memory_slots = slots
    try:
        df.reset_state()
        outcome = ('ok', sorted(dp[0] for dp in df))
    except Exception as err:
        outcome = (type(err).__name__, str(err))
    conn.send(outcome + (sorted(children()), os.listdir(tmpdir)))
    df.close()


def run_under_an_address_space_limit(tmpdir, num_proc, slots=None):
    recv, send = FORK.Pipe(duplex=False)
    child = FORK.Process(target=_start_under_an_address_space_limit,
                         args=(send, tmpdir, num_proc, slots))
    child.start()
    try:
        assert recv.poll(60), "the child did not report"
        return recv.recv()
    finally:
        child.join(30)
        child.kill()
        child.join(5)


def test_shared_memory_that_cannot_be_reserved_is_a_clear_error_and_leaves_nothing(private_tmp):
    kind, message, processes, files = run_under_an_address_space_limit(private_tmp, num_proc=16)
    assert kind == 'MemoryError'
    assert message.startswith('MultiProcessRunnerZMQ: cannot reserve the shared memory of worker #')
    assert 'Cannot allocate memory' in message
    assert ('Each of the 16 workers reserves shared_memory_slots x shared_memory_slot_bytes = '
            '8 x 67108864 bytes (512 MiB; 8192 MiB in all)') in message
    assert ('Lower MultiProcessRunnerZMQ.shared_memory_slots (0: arrays go through the pipe) or '
            'MultiProcessRunnerZMQ.shared_memory_slot_bytes') in message
    assert processes == [] and files == []   # no worker started, no ipc directory left


def test_without_shared_memory_the_same_limit_is_fine(private_tmp):
    # 4 workers would reserve 2 GiB of slots by default, more than the limit leaves
    kind, values, processes, files = run_under_an_address_space_limit(private_tmp, num_proc=4, slots=0)
    assert kind == 'ok' and len(values) == 3 and set(values) <= {0, 1, 2}   # an epoch of len(ds)
    assert len(processes) == 4 and len(files) == 1   # running: its workers and its ipc directory
