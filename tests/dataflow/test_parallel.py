"""dataflow.parallel / parallel_map: completeness and order, worker seeds, and faults with real
processes (a worker raising, a worker killed, the parent killed, Ctrl-C in the parent)."""

import gc
import glob
import mmap
import multiprocessing as mp
import os
import pathlib
import signal
import shutil
import tempfile
import time

import numpy as np
import pytest

from tensorpack_lite.dataflow import (DataFlow, DataFlowWorkerError, DataFromList, MultiProcessMapData,
                                      MultiProcessMapDataZMQ, MultiProcessPrefetchData, MultiProcessRunner,
                                      MultiProcessRunnerZMQ, MultiThreadMapData, MultiThreadPrefetchData,
                                      MultiThreadRunner, PrefetchData, PrefetchDataZMQ, RNGDataFlow)
from tensorpack_lite.utils import utils as rng_utils

from helpers.timing import HANG_TIMEOUT, run_or_hang, wait_until
from helpers.dataflows import Opaque, children, gone

FORK = mp.get_context('fork')


class Numbered(DataFlow):
    """[a 64x64 float32 array (16 KiB: sent as its own frame) filled with i, i, a small array]."""

    def __init__(self, n, delay=0.0):
        self.n, self.delay = n, delay

    def __len__(self):
        return self.n

    def __iter__(self):
        for i in range(self.n):
            if self.delay:
                time.sleep(self.delay)
            yield [np.full((64, 64), i, np.float32), i, np.arange(3, dtype=np.int16) + i]


class Failing(DataFlow):
    """Three datapoints, then ValueError."""

    def __iter__(self):
        for i in range(3):
            yield [i]
        raise ValueError('boom after 3')


class Draws(RNGDataFlow):
    """[pid, a draw of self.rng, a draw of np.random] forever."""

    def __iter__(self):
        while True:
            yield [os.getpid(), int(self.rng.randint(1 << 30)), int(np.random.randint(1 << 30))]


def slow_identity(dp):
    time.sleep(0.001 * (dp[1] % 4))  # later datapoints often finish first
    return dp


def ipc_dirs():
    return set(glob.glob(os.path.join(tempfile.gettempdir(), 'tplite-*')))


def wait_gone(pids):
    """The processes of ``pids`` still there after waiting (as long as a hang takes) for them to end."""
    wait_until(lambda: all(gone(p) for p in pids), interval=0.05)
    return [p for p in pids if not gone(p)]


@pytest.fixture(autouse=True)
def no_leftovers(monkeypatch, tmp_path_factory):
    """Every worker started by a test has ended once the test has closed its dataflows.

    The test's ipc directories go to a private temporary directory (short enough for socket
    paths), so that other test sessions running on the machine cannot be mistaken for leftovers.
    """
    tmp_path_factory.getbasetemp()  # pytest's own temporary directories stay where they are
    private = tempfile.mkdtemp(prefix='tpt-', dir='/tmp')
    monkeypatch.setattr(tempfile, 'tempdir', private)
    before, dirs = children(), ipc_dirs()
    yield
    if children() - before:
        gc.collect()  # dataflows only dropped, not closed
    assert wait_gone(children() - before) == []
    assert ipc_dirs() - dirs == set()
    shutil.rmtree(private, ignore_errors=True)


def values(dps):
    return [int(dp[1]) for dp in dps]


def take(df, n):
    itr = iter(df)
    return [next(itr) for _ in range(n)]


RUNNERS = {
    'zmq': lambda ds, n: MultiProcessRunnerZMQ(ds, num_proc=n, hwm=4),
    'queue': lambda ds, n: MultiProcessRunner(ds, num_prefetch=4, num_proc=n),
}


# ---------------------------------------------------------------- runners

@pytest.mark.parametrize('kind', sorted(RUNNERS))
def test_runner_one_worker_keeps_order_and_values(kind):
    before = children()
    df = RUNNERS[kind](Numbered(12), 1)
    assert len(df) == 12
    df.reset_state()
    workers = children() - before
    assert len(workers) == 1
    for _ in range(2):  # two epochs, each exactly the epoch of ds
        out = list(df)
        assert values(out) == list(range(12))
        for i, (big, label, small) in enumerate(out):
            assert big.dtype == np.float32 and big.shape == (64, 64) and (big == i).all()
            assert small.dtype == np.int16 and small.tolist() == [i, i + 1, i + 2]
    df.close()
    assert wait_gone(workers) == []


@pytest.mark.parametrize('kind', sorted(RUNNERS))
def test_runner_workers_run_their_own_copies(kind):
    df = RUNNERS[kind](Numbered(10), 2)
    df.reset_state()
    out = values(list(df) + list(df) + list(df))
    assert len(out) == 30 and sorted(set(out)) == list(range(10))
    assert max(out.count(i) for i in range(10)) >= 2  # each worker goes through all of ds
    del df  # garbage collection ends the workers (checked by the fixture)


class BigNumbered(DataFlow):
    """[a 1.5 MiB array filled with i (big enough for a shared-memory slot), i]."""

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __iter__(self):
        for i in range(self.n):
            yield [np.full((768, 512), i, np.float32), i]


def through_shared_memory(arr):
    """Whether ``arr`` views a shared-memory slot (an mmap) rather than a message."""
    while arr is not None:
        if isinstance(arr, mmap.mmap):
            return True
        arr = getattr(arr, 'base', None) if isinstance(arr, np.ndarray) else getattr(arr, 'obj', None)
    return False


def test_zmq_runner_shared_memory_slots_are_never_overwritten_while_in_use():
    df = MultiProcessRunnerZMQ(BigNumbered(12), num_proc=1, hwm=2)
    df.shared_memory_slots = 3
    df.reset_state()
    kept = list(df)  # all kept: 3 in slots, the others through the pipe
    assert values(kept) == list(range(12))
    assert sum(through_shared_memory(dp[0]) for dp in kept) >= 3
    for i, (big, _) in enumerate(kept):  # nothing was overwritten by a later datapoint
        assert big.shape == (768, 512) and (big == i).all()
    del kept, big
    gc.collect()
    # the slots came back: the next epoch goes through shared memory again, values intact
    again = list(df)
    assert values(again) == list(range(12)) and all((dp[0] == dp[1]).all() for dp in again)
    assert sum(through_shared_memory(dp[0]) for dp in again) >= 3
    df.close()


def _big_result(dp):
    return [np.full((256, 256), dp[1], np.float32), dp[1]]   # 256 KiB


def test_map_results_shared_memory_slots_are_never_overwritten_while_in_use():
    df = MultiProcessMapData(Numbered(12), num_proc=2, map_func=_big_result, buffer_size=4, strict=True)
    df.shared_memory_slots = 2
    df.datapoints_per_message = 2
    df.reset_state()
    kept = run_or_hang(list, df)  # all kept: up to 2 per worker in slots, the others through the pipe
    assert values(kept) == list(range(12))
    assert 2 <= sum(through_shared_memory(dp[0]) for dp in kept) <= 4
    for i, (big, _) in enumerate(kept):  # nothing was overwritten by a later result
        assert big.shape == (256, 256) and (big == i).all()
    del kept, big
    gc.collect()
    # the slots came back: the next epoch goes through shared memory again, values intact
    again = run_or_hang(list, df)
    assert values(again) == list(range(12)) and all((dp[0] == dp[1]).all() for dp in again)
    assert sum(through_shared_memory(dp[0]) for dp in again) >= 2
    df.close()


def _first_draws(seed, monkeypatch):
    monkeypatch.setattr(rng_utils, '_RNG_SEED', seed)
    df = MultiProcessRunnerZMQ(Draws(), num_proc=2)
    df.reset_state()
    firsts = {}
    itr = iter(df)
    while len(firsts) < 2:
        pid, draw, np_draw = next(itr)
        firsts.setdefault(pid, (draw, np_draw))
    df.close()
    return sorted(firsts.values())


def test_each_worker_has_its_own_seed(monkeypatch):
    unseeded = _first_draws(None, monkeypatch)
    assert unseeded[0][0] != unseeded[1][0] and unseeded[0][1] != unseeded[1][1]
    seeded = _first_draws(42, monkeypatch)
    assert seeded[0][0] != seeded[1][0] and seeded[0][1] != seeded[1][1]
    assert _first_draws(42, monkeypatch) == seeded  # reproducible with fix_rng_seed


def test_runner_misuse_is_explained():
    df = MultiProcessRunnerZMQ(Numbered(2))
    with pytest.raises(RuntimeError, match='reset_state'):
        next(iter(df))
    df.reset_state()
    with pytest.raises(RuntimeError, match='called twice'):
        df.reset_state()
    df.close()
    with pytest.raises(RuntimeError, match='was closed'):
        next(iter(df))
    with pytest.raises(ValueError, match='num_proc'):
        MultiProcessRunnerZMQ(Numbered(2), num_proc=0)


def test_tensorpack_aliases():
    assert PrefetchData is MultiProcessRunner and MultiProcessPrefetchData is MultiProcessRunner
    assert PrefetchDataZMQ is MultiProcessRunnerZMQ and MultiThreadPrefetchData is MultiThreadRunner
    assert MultiProcessMapData is MultiProcessMapDataZMQ


def test_plasma_names_import_and_say_they_are_not_supported():
    # tensorpack's programs import them (unused); pyarrow's plasma store no longer exists
    from tensorpack_lite.dataflow.parallel import PlasmaGetData, PlasmaPutData
    for cls in (PlasmaPutData, PlasmaGetData):
        with pytest.raises(NotImplementedError,
                           match=r"{} is not supported: it needs pyarrow's plasma".format(cls.__name__)):
            cls(DataFromList([[1]]), socket='/tmp/plasma')


def test_multi_thread_runner_and_its_errors():
    df = MultiThreadRunner(lambda: DataFromList([[i] for i in range(5)], shuffle=False), 3, 2)
    assert len(df) == 5
    df.reset_state()
    out = [dp[0] for dp in take(df, 30)]
    assert sorted(set(out)) == list(range(5)) and len(out) == 30
    df.close()

    bad = MultiThreadRunner(Failing, 2, 2)
    bad.reset_state()
    with pytest.raises(DataFlowWorkerError, match='raised ValueError: boom after 3') as info:
        run_or_hang(take, bad, 100)  # raises, rather than waiting for datapoints that never come
    assert isinstance(info.value.__cause__, ValueError)


# ---------------------------------------------------------------- parallel map

MAPPERS = {
    'process': lambda ds, f, **kw: MultiProcessMapData(ds, num_proc=3, map_func=f, **kw),
    'thread': lambda ds, f, **kw: MultiThreadMapData(ds, num_thread=3, map_func=f, **kw),
}


@pytest.mark.parametrize('kind', sorted(MAPPERS))
def test_map_strict_gives_every_datapoint_once_in_order(kind):
    df = MAPPERS[kind](Numbered(60), slow_identity, buffer_size=9, strict=True)
    df.reset_state()
    for _ in range(2):
        out = list(df)
        assert values(out) == list(range(60))
        assert all((big == i).all() for i, (big, _, _) in enumerate(out))
    # an epoch left early does not leak into the next one
    assert values(take(df, 5)) == list(range(5))
    assert values(list(df)) == list(range(60))
    df.close()


@pytest.mark.parametrize('kind', sorted(MAPPERS))
def test_map_unordered_gives_every_datapoint_once(kind):
    def drop_odd(dp):
        return slow_identity(dp) if dp[1] % 2 == 0 else None
    df = MAPPERS[kind](Numbered(60), slow_identity, buffer_size=9)
    df.reset_state()
    for _ in range(2):
        assert sorted(values(list(df))) == list(range(60))
    df.close()
    df = MAPPERS[kind](Numbered(20), drop_odd, buffer_size=5)
    df.reset_state()
    assert sorted(values(list(df))) == list(range(0, 20, 2))
    df.close()


@pytest.mark.parametrize('chunk', [3, 8, 50])
def test_map_in_chunks_keeps_order_epochs_and_drops(chunk):
    """Datapoints go to the workers ``datapoints_per_message`` at a time (50: more than the
    buffer, which then bounds it); an epoch left in the middle of a chunk does not leak."""
    df = MultiProcessMapData(Numbered(60), num_proc=2, map_func=slow_identity, buffer_size=9, strict=True)
    df.datapoints_per_message = chunk
    df.reset_state()
    for _ in range(2):
        assert values(run_or_hang(list, df)) == list(range(60))
    assert values(take(df, 5)) == list(range(5))
    assert values(run_or_hang(list, df)) == list(range(60))
    df.close()

    def drop_odd(dp):
        return dp if dp[1] % 2 == 0 else None
    df = MultiProcessMapData(Numbered(21), num_proc=2, map_func=drop_odd, buffer_size=9)
    df.datapoints_per_message = chunk
    df.reset_state()
    for _ in range(2):
        assert sorted(values(run_or_hang(list, df))) == list(range(0, 21, 2))
    df.close()


def test_map_thread_error_is_raised_for_good():
    df = MultiThreadMapData(Numbered(20), num_thread=2, map_func=_failing_map, strict=True)
    df.reset_state()
    for _ in range(2):
        with pytest.raises(DataFlowWorkerError, match='thread #. raised ValueError: boom after 3') as info:
            list(df)
        assert isinstance(info.value.__cause__, ValueError)
    df.close()


def test_map_strict_refuses_none():
    df = MultiThreadMapData(Numbered(4), num_thread=2, map_func=lambda dp: None, strict=True)
    df.reset_state()
    with pytest.raises(ValueError, match='returned None'):
        list(df)
    df.close()


def _pid_and_draw(dp):
    return [os.getpid(), int(np.random.randint(1 << 30))]


def test_map_workers_have_their_own_seed():
    df = MultiProcessMapData(Numbered(40), num_proc=2, map_func=_pid_and_draw, buffer_size=4)
    df.reset_state()
    first = {}
    for pid, draw in df:
        first.setdefault(pid, draw)
    df.close()
    assert len(first) == 2 and len(set(first.values())) == 2


# ---------------------------------------------------------------- faults

def _failing_map(dp):
    if dp[1] == 5:
        raise ValueError('boom after 3')
    return dp


FAILING = {
    'zmq': lambda: MultiProcessRunnerZMQ(Failing(), num_proc=2),
    'queue': lambda: MultiProcessRunner(Failing(), num_prefetch=2, num_proc=2),
    'map': lambda: MultiProcessMapData(Numbered(20), num_proc=2, map_func=_failing_map, strict=True),
}


@pytest.mark.parametrize('kind', sorted(FAILING))
def test_worker_exception_is_raised_by_the_parent(kind):
    before = children()
    df = FAILING[kind]()
    df.reset_state()
    workers = children() - before

    def three_epochs():
        for _ in range(3):
            list(df)

    with pytest.raises(DataFlowWorkerError) as info:
        run_or_hang(three_epochs)  # raises, rather than waiting for datapoints that never come
    message = str(info.value)
    assert 'raised ValueError: boom after 3' in message and 'worker #' in message
    assert 'traceback in the worker' in message
    with pytest.raises(DataFlowWorkerError, match='boom after 3'):  # for good
        list(df)
    assert wait_gone(workers) == []  # the failure closed the other workers too


def _killable(kind):
    if kind == 'map':
        return MultiProcessMapData(Numbered(10 ** 6), num_proc=2, map_func=slow_identity, buffer_size=4)
    return RUNNERS[kind](Numbered(10 ** 6, delay=0.01), 2)


@pytest.mark.parametrize('kind', ['map', 'queue', 'zmq'])
def test_worker_killed_makes_the_parent_fail(kind):
    before = children()
    df = _killable(kind)
    df.reset_state()
    workers = sorted(children() - before)
    itr = iter(df)
    next(itr)
    os.kill(workers[0], signal.SIGKILL)

    def consume():
        for _ in range(10 ** 6):
            next(itr)

    with pytest.raises(DataFlowWorkerError) as info:
        run_or_hang(consume)  # raises, rather than waiting for the dead worker
    assert 'killed by signal SIGKILL' in str(info.value) and str(workers[0]) in str(info.value)
    assert wait_gone(workers) == []


@pytest.mark.parametrize('where', ['runner', 'map'])
def test_unserializable_datapoint_names_type_and_component(where):
    if where == 'runner':
        df = MultiProcessRunnerZMQ(DataFromList([[np.zeros(3), {'mask': Opaque()}]], shuffle=False))
    else:
        df = MultiProcessMapData(Numbered(3), num_proc=1, map_func=lambda dp: [dp[0], Opaque()])
    df.reset_state()
    with pytest.raises(DataFlowWorkerError) as info:
        list(df)
    message = str(info.value)
    assert 'TypeError' in message and 'Opaque' in message
    assert ("datapoint[1]['mask']" if where == 'runner' else 'datapoint[1]') in message


def test_map_worker_that_never_starts_is_an_error(monkeypatch):
    from tensorpack_lite.dataflow import parallel_map
    monkeypatch.setattr(parallel_map._MapWorker, '_open', lambda self: time.sleep(3600))  # never starts
    monkeypatch.setattr(MultiProcessMapDataZMQ, 'startup_timeout', 1.0)
    df = MultiProcessMapData(Numbered(3), num_proc=2, map_func=slow_identity)
    before = children()
    try:
        with pytest.raises(DataFlowWorkerError, match=r'worker\(s\) \[0, 1\] did not start within 1.0 s'):
            run_or_hang(df.reset_state)  # gives up after startup_timeout, rather than waiting for them
        assert wait_gone(children() - before) == []  # and the workers are gone
    finally:
        for pid in children() - before:
            os.kill(pid, signal.SIGKILL)


def _parent_that_gets_killed(conn):
    """Starts three kinds of workers, reports their pids and ipc dirs, then waits."""
    before = children()
    dirs = ipc_dirs()
    flows = [MultiProcessRunnerZMQ(Numbered(10 ** 6), num_proc=2, hwm=2),
             MultiProcessRunner(Numbered(10 ** 6), num_prefetch=2, num_proc=1),
             MultiProcessMapData(Numbered(10 ** 6), num_proc=2, map_func=slow_identity, buffer_size=4)]
    for df in flows:
        df.reset_state()
        next(iter(df))
    conn.send((sorted(children() - before), sorted(ipc_dirs() - dirs)))
    time.sleep(3600)   # until the test kills it


def test_parent_killed_takes_its_workers_along():
    recv, send = FORK.Pipe(duplex=False)
    parent = FORK.Process(target=_parent_that_gets_killed, args=(send,))
    parent.start()
    dirs = []
    try:
        assert recv.poll(HANG_TIMEOUT), "the parent did not start its workers"
        workers, dirs = recv.recv()
        assert len(workers) == 5 and not any(gone(p) for p in workers)
        os.kill(parent.pid, signal.SIGKILL)
        parent.join(5)
        assert wait_gone(workers) == []
    finally:
        parent.kill()
        parent.join(5)
        for path in dirs:  # a parent killed with SIGKILL cannot remove its (empty) ipc directory
            shutil.rmtree(path, ignore_errors=True)


class Endless(DataFlow):
    def __iter__(self):
        while True:
            time.sleep(0.01)
            yield [np.zeros((64, 64), np.float32), 1]


def _parent_that_gets_interrupted(conn, tmpdir):
    """Runs a map over a runner (4 workers, ipc dirs in ``tmpdir``) until Ctrl-C."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    tempfile.tempdir = tmpdir
    mapper = MultiProcessMapData(MultiProcessRunnerZMQ(Endless(), num_proc=2), num_proc=2,
                                 map_func=slow_identity, buffer_size=4)
    mapper.reset_state()
    itr = iter(mapper)
    next(itr)
    try:
        conn.send(sorted(children()))
        for _ in itr:
            pass
    except KeyboardInterrupt:
        conn.send('interrupted')
        raise


@pytest.fixture
def short_tmp_path():
    """A directory of its own, short enough that the runners put their ipc:// sockets in it (the
    library falls back to /tmp past 103 characters; tmp_path under xdist can be that long)."""
    path = tempfile.mkdtemp(prefix='tplite-test-', dir='/tmp')
    yield pathlib.Path(path)
    shutil.rmtree(path, ignore_errors=True)


def test_ctrl_c_in_the_parent_ends_everything(short_tmp_path):
    tmp_path = short_tmp_path
    recv, send = FORK.Pipe(duplex=False)
    parent = FORK.Process(target=_parent_that_gets_interrupted, args=(send, str(tmp_path)))
    parent.start()
    try:
        assert recv.poll(HANG_TIMEOUT), "the parent did not start its workers"
        workers = recv.recv()
        assert len(workers) == 4 and len(os.listdir(tmp_path)) == 2
        os.kill(parent.pid, signal.SIGINT)
        assert recv.poll(HANG_TIMEOUT) and recv.recv() == 'interrupted'
        parent.join(HANG_TIMEOUT)
        assert parent.exitcode == 1  # KeyboardInterrupt went up, and the process ended
        assert wait_gone(workers) == []
        assert os.listdir(tmp_path) == []  # the ipc directories are removed
    finally:
        parent.kill()
        parent.join(5)


# ---------------------------------------------------------------- OpenCV's threads in workers

def _opencv_threads(dp):
    import cv2
    return [cv2.getNumThreads()]


class OpenCVThreads(DataFlow):
    def __iter__(self):
        import cv2
        while True:
            yield [cv2.getNumThreads()]


OPENCV_FLOWS = {
    'map': lambda: MultiProcessMapData(Numbered(4), num_proc=1, map_func=_opencv_threads, buffer_size=2),
    'runner': lambda: MultiProcessRunnerZMQ(OpenCVThreads(), num_proc=1),
    'pipe runner': lambda: MultiProcessRunner(OpenCVThreads(), num_prefetch=2, num_proc=1),
}


@pytest.mark.parametrize('kind', sorted(OPENCV_FLOWS))
def test_workers_run_opencv_on_one_thread_unless_told_otherwise(kind):
    cv2 = pytest.importorskip('cv2')
    cv2.resize(np.zeros((2000, 2000, 3), np.uint8), (1000, 1000))  # this process's thread pool runs
    mine = cv2.getNumThreads()
    seen = {}
    for setting in (1, None, 3):   # 1 is the default; after a fork, asking for 1 thread can hang OpenCV
        df = OPENCV_FLOWS[kind]()
        if setting != 1:
            df.opencv_threads = setting
        df.reset_state()
        seen[setting] = run_or_hang(take, df, 1)[0][0]
        df.close()
    assert seen == {1: 1, None: mine, 3: 3}
    assert cv2.getNumThreads() == mine   # the parent's own setting is untouched
