"""Run a DataFlow in several worker processes or threads and collect what they produce.

* :class:`MultiProcessRunnerZMQ` -- worker processes send datapoints over a ZeroMQ ``ipc://``
  pipe, big arrays without copies (:func:`~tensorpack_lite.utils.serialize.dumps_frames`). The
  fast one: use it for large datapoints.
* :class:`MultiProcessRunner` -- worker processes send pickled datapoints through
  ``multiprocessing`` pipes; no ZeroMQ needed, slower for big arrays.
* :class:`MultiThreadRunner` -- threads in this process, each with its own DataFlow; for work
  that releases the GIL (I/O, OpenCV, numpy).

Every worker resets its own copy of the DataFlow, with its own RNG seed, and runs it epoch
after epoch. Worker processes die with the parent (even a parent killed with SIGKILL), and a
worker that fails makes the parent raise :class:`DataFlowWorkerError` naming its exception.
A parent left waiting by silent workers logs their names and pids (``idle_warning``) and
can give up (``idle_timeout``). See docs/dataflow.md for choosing a runner, start methods
and cleanup guarantees, and docs/parallel.md for stuck workers and leftovers.

The machinery they share with :mod:`.parallel_map` has modules of its own: the worker processes
(:mod:`.workers`), their ipc directory (:mod:`.ipc_dir`), ZeroMQ pipes (:mod:`.zmq_pipes`),
shared memory (:mod:`.shared_slots`), the idle watch (:mod:`.idle_watch`) and the runners' base
(:mod:`.parallel_base`).
"""

import itertools
import multiprocessing as mp
import os
import pickle
import queue
import struct
import threading
import weakref
from multiprocessing.connection import wait as wait_for_sentinels

from ..utils import logger
from ..utils.concurrency import StoppableThread
from ..utils.serialize import dumps_frames, loads_frames
from .base import DataFlow, ProxyDataFlow
from .epochs import repeat_epochs
from .ipc_dir import IPCDir
from .parallel_base import Closable, ParallelBase, len_or_minus_one, thread_error
from .shared_slots import reserve_shared_slots
from .state import without_position
from .workers import DataFlowWorkerError, ProcessWorker, WorkerProcesses, describe_exit, start_method_context
from .zmq_pipes import Sockets, ZMQCollector, ZMQWorker

__all__ = ['MultiProcessRunner', 'MultiProcessRunnerZMQ', 'MultiThreadRunner', 'DataFlowWorkerError',
           'PrefetchData', 'MultiProcessPrefetchData', 'PrefetchDataZMQ', 'MultiThreadPrefetchData',
           'PlasmaPutData', 'PlasmaGetData']


def _closer(pipe_worker):
    """Closes the parent's end of the pipe of ``pipe_worker`` (if it was made)."""
    def close():
        if pipe_worker.reader is not None:
            pipe_worker.reader.close()
    return close


def _warn_duplication(name, num):
    if num > 1:
        logger.info("[{}] Runs {} copies of the dataflow: this assumes its datapoints are "
                    "i.i.d. (an epoch then holds duplicates). To see every datapoint once, map "
                    "with MultiProcessMapData instead (see docs/dataflow.md).".format(name, num))


_WORKER_COPIES = without_position(
    "its worker processes each run a copy of the DataFlow, whose position stays in the worker",
    "the datapoints after them come from the workers started anew, not those that would have followed")


# ------------------------------------------------------------------ MultiProcessRunnerZMQ

_WORKER = struct.Struct('<H')  # which worker sent a message (first bytes of its layout)


class _PushWorker(ZMQWorker):
    """Runs ``ds`` forever and sends every datapoint to the parent, as ``[header, layout,
    frame...]``: ``layout`` is the worker's number and the places of the big arrays
    (:meth:`SharedSlots.lend`); the frames are those of the arrays that did not go through
    a slot."""

    def __init__(self, owner, idx, parent_pid, ds, endpoint, hwm, slots):
        super(_PushWorker, self).__init__(owner, idx, parent_pid)
        self.ds, self.endpoint, self.hwm, self.slots = ds, endpoint, hwm, slots

    def _open(self):
        self.pipes = Sockets()
        self.results = self.pipes.socket(self.pipes.zmq.PUSH, self.hwm)
        self.results.connect(self.endpoint)
        self.ds.reset_state()

    def _loop(self):
        for dp in repeat_epochs(self.ds, self.name):
            frames = dumps_frames(dp)
            places, rest = self.slots.lend(frames[1:])
            self.results.send_multipart([frames[0], _WORKER.pack(self.idx) + places] + rest, copy=False)


def _sender_of_datapoint(frames):
    """The worker that sent a datapoint of :class:`_PushWorker`."""
    return _WORKER.unpack_from(frames[1].buffer)[0]


class MultiProcessRunnerZMQ(ParallelBase):
    """Run ``ds`` in ``num_proc`` worker processes that send datapoints through a ZeroMQ
    ``ipc://`` pipe.

    Workers are forked in :meth:`reset_state` (call it once); each resets its own copy of
    ``ds`` (own RNG seed) and runs it epoch after epoch.

    * ``num_proc=1``: the datapoints of ``ds`` in the same order.
    * ``num_proc>1``: each worker produces all of ``ds``, so an epoch (``len(ds)``
      datapoints) mixes the workers' outputs: the same distribution only if the datapoints
      are i.i.d.; to see every datapoint once, use :class:`MultiProcessMapData` instead.

    Arrays of 16 KiB or more travel as frames of their own, from 256 KiB on without copies in
    the worker: a dataflow must not modify an array after yielding it. Arrays of 1 MiB or
    more go through shared memory when a slot is free (one copy in all; see
    :attr:`shared_memory_slots`). Received arrays are views of the message or of a slot;
    small ones are read-only.

    Workers that leave the parent waiting are named in a warning every :attr:`idle_warning`
    seconds; set :attr:`idle_timeout` to raise instead of waiting forever.

    Args:
        ds (DataFlow): the dataflow to run.
        num_proc (int): number of worker processes.
        hwm (int): ZeroMQ high-water mark (datapoints buffered) of each side.

    Example::

        df = MultiProcessRunnerZMQ(BatchData(MyAugmentedData(), 64), num_proc=4)
        df.reset_state()
        for images, labels in df:
            ...
    """

    shared_memory_slots = 8
    """Shared-memory slots per worker for arrays of 1 MiB or more (0: always use the pipe)."""
    shared_memory_slot_bytes = 64 << 20
    """Size of a slot: bigger arrays go through the pipe. Memory is used as slots fill."""
    shared_memory_min_bytes = 1 << 20
    """Smaller arrays go through the pipe."""

    def __init__(self, ds, num_proc=1, hwm=50):
        super(MultiProcessRunnerZMQ, self).__init__()
        if int(num_proc) < 1:
            raise ValueError("MultiProcessRunnerZMQ: num_proc must be >= 1, got {}".format(num_proc))
        self.ds = ds
        self.num_proc = int(num_proc)
        self._hwm = int(hwm)
        self._size = len_or_minus_one(ds)
        self._collector = None
        _warn_duplication(type(self).__name__, self.num_proc)

    def __len__(self):
        return len(self.ds)

    def reset_state(self):
        """Fork the workers (once)."""
        with self._starting():
            name = type(self).__name__
            self._slots = reserve_shared_slots(name, self.num_proc, self.shared_memory_slots,
                                               self.shared_memory_slot_bytes, self.shared_memory_min_bytes)
            pipes = Sockets()
            self._on_close(pipes.close)
            ipc = IPCDir('runner')
            self._on_close(ipc.cleanup)
            endpoint = ipc.endpoint('data')
            workers = WorkerProcesses([
                _PushWorker(name, k, os.getpid(), self.ds, endpoint, self._hwm, self._slots[k])
                for k in range(self.num_proc)], ipc, self.opencv_threads)
            self._on_close(workers.close)
            socket = pipes.socket(pipes.zmq.PULL, self._hwm)
            socket.bind(endpoint)
            workers.start()
            self._collector = ZMQCollector(socket, workers, self._idle_watch(workers), _sender_of_datapoint)

    def _recv(self):
        frames = self._collector.recv()
        layout = frames[1].bytes
        data = self._slots[_WORKER.unpack_from(layout)[0]].collect(layout[_WORKER.size:], frames[2:])
        return loads_frames([frames[0]] + data)

    def __iter__(self):
        yield from self._iterate(self._recv, self._size)

    get_state, set_state = _WORKER_COPIES


# ------------------------------------------------------------------ MultiProcessRunner

class _PipeWorker(ProcessWorker):
    """Runs ``ds`` forever and sends every pickled datapoint through a pipe of its own,
    after taking a token of the shared semaphore ``tokens`` (given back by the parent on
    receipt): at most ``num_prefetch`` datapoints wait in all the pipes together.

    The pipe is made just before this worker is forked and the parent closes its writing
    end just after, so that the worker is its only writer: when it dies, even in the middle
    of a datapoint, the parent reads an end of file instead of waiting forever.
    """

    def __init__(self, owner, idx, parent_pid, ds, tokens):
        super(_PipeWorker, self).__init__(owner, idx, parent_pid)
        self.ds, self.tokens = ds, tokens
        self.reader = self.writer = None

    def before_fork(self):
        self.reader, self.writer = mp.Pipe(duplex=False)

    def after_fork(self):
        self.writer.close()

    def _open(self):
        self.reader.close()
        self.ds.reset_state()

    def _loop(self):
        for dp in repeat_epochs(self.ds, self.name):
            try:
                buf = pickle.dumps(dp, protocol=pickle.HIGHEST_PROTOCOL)
            except Exception as err:
                raise TypeError("cannot pickle a datapoint of type {}: {}".format(
                    type(dp).__name__, err)) from err
            self.tokens.acquire()
            self.writer.send_bytes(_DATA_TAG + buf)

    def _report(self, text):
        self.writer.send_bytes(_REPORT_TAG + text.encode('utf-8'))


_DATA_TAG, _REPORT_TAG = b'D', b'E'  # first byte of a message of _PipeWorker


class MultiProcessRunner(ParallelBase, ProxyDataFlow):
    """Run ``ds`` in ``num_proc`` worker processes that send pickled datapoints through
    ``multiprocessing`` pipes, at most ``num_prefetch`` of them waiting at a time. Same
    guarantees as :class:`MultiProcessRunnerZMQ` (``idle_warning`` and ``idle_timeout``
    included), without ZeroMQ, but slower for big arrays.

    Args:
        ds (DataFlow): the dataflow to run.
        num_prefetch (int): how many datapoints may wait to be read.
        num_proc (int): number of worker processes.
    """

    def __init__(self, ds, num_prefetch, num_proc):
        ProxyDataFlow.__init__(self, ds)
        ParallelBase.__init__(self)
        if int(num_proc) < 1 or int(num_prefetch) < 1:
            raise ValueError("MultiProcessRunner: num_proc and num_prefetch must be >= 1, got {} "
                             "and {}".format(num_proc, num_prefetch))
        self.num_proc = int(num_proc)
        self.num_prefetch = int(num_prefetch)
        self._size = len_or_minus_one(ds)
        _warn_duplication(type(self).__name__, self.num_proc)

    def reset_state(self):
        """Fork the workers (once)."""
        with self._starting():
            self._tokens = start_method_context().Semaphore(self.num_prefetch)
            name = type(self).__name__
            self._pipe_workers = [_PipeWorker(name, k, os.getpid(), self.ds, self._tokens)
                                  for k in range(self.num_proc)]
            for worker in self._pipe_workers:
                self._on_close(_closer(worker))
            workers = WorkerProcesses(self._pipe_workers, opencv_threads=self.opencv_threads)
            self._on_close(workers.close)
            workers.start()
            self._workers = workers
            self._watch = self._idle_watch(workers)
            self._turn = 0

    def _get(self):
        readers = [w.reader for w in self._pipe_workers]
        self._watch.start_wait()
        while True:
            ready = wait_for_sentinels(readers + self._workers.sentinels, self._watch.seconds_left())
            if not ready:
                self._watch.check()
                continue
            self._turn = (self._turn + 1) % len(readers)  # take turns among ready workers
            for k in itertools.chain(range(self._turn, len(readers)), range(self._turn)):
                if readers[k] in ready:
                    dp = self._read(k)
                    self._watch.heard(k)
                    return dp
            dead = self._workers.dead()  # a worker ended and its pipe is empty
            if dead is not None:
                name, proc = dead
                raise DataFlowWorkerError("{} (pid {}) {} without reporting an error".format(
                    name, proc.pid, describe_exit(proc.exitcode)))

    def _read(self, k):
        try:
            msg = self._pipe_workers[k].reader.recv_bytes()
        except EOFError:
            proc = self._workers.procs[k]
            proc.join(self._workers.join_timeout)
            raise DataFlowWorkerError("{} (pid {}) {} without reporting an error".format(
                self._workers.names[k], proc.pid, describe_exit(proc.exitcode))) from None
        if msg[:1] == _REPORT_TAG:
            raise DataFlowWorkerError(msg[1:].decode('utf-8', 'replace'))
        self._tokens.release()
        return pickle.loads(memoryview(msg)[1:])

    def __iter__(self):
        yield from self._iterate(self._get, self._size)

    get_state, set_state = _WORKER_COPIES


# ------------------------------------------------------------------ MultiThreadRunner

class _ThreadWorker(StoppableThread):
    def __init__(self, df, q, on_error, name):
        super(_ThreadWorker, self).__init__(name=name, daemon=True)
        self.df, self.queue, self._on_error = df, q, on_error

    def run(self):
        try:
            for dp in repeat_epochs(self.df, self.name):
                if not self.queue_put_stoppable(self.queue, dp):
                    return
        except Exception as err:
            if not self.stopped():
                self._on_error(self.name, err)


class MultiThreadRunner(Closable, DataFlow):
    """Run several DataFlows, one per thread, and yield what they produce (an infinite
    iteration, as in tensorpack).

    Args:
        get_df (-> DataFlow): called once per thread to make its DataFlow (return a new one
            every call).
        num_prefetch (int): size of the queue.
        num_thread (int): number of threads.
    """

    poll_interval = 0.2

    def __init__(self, get_df, num_prefetch, num_thread):
        if int(num_thread) < 1 or int(num_prefetch) < 1:
            raise ValueError("MultiThreadRunner: num_thread and num_prefetch must be >= 1, got {} "
                             "and {}".format(num_thread, num_prefetch))
        self.num_thread = int(num_thread)
        self.queue = queue.Queue(maxsize=int(num_prefetch))
        self._error = None
        self.threads = []
        for k in range(self.num_thread):
            df = get_df()
            if not isinstance(df, DataFlow):
                raise TypeError("MultiThreadRunner: get_df() must return a DataFlow, got {!r}".format(df))
            self.threads.append(_ThreadWorker(df, self.queue, self._record_error,
                                              'MultiThreadRunner thread #{}'.format(k)))

    def _record_error(self, name, err):
        if self._error is None:
            self._error = thread_error(name, err)

    def reset_state(self):
        """Reset every thread's DataFlow (here, in the calling thread) and start the threads."""
        for th in self.threads:
            th.df.reset_state()
        for th in self.threads:
            th.start()
        self._finalizer = weakref.finalize(self, _stop_threads, list(self.threads))

    def __len__(self):
        return len(self.threads[0].df)

    def __iter__(self):
        while True:
            if self._error is not None:
                self.close()
                raise self._error
            try:
                dp = self.queue.get(timeout=self.poll_interval)
            except queue.Empty:
                continue
            yield dp

    get_state, set_state = without_position(
        "its threads each run a DataFlow of their own, and their datapoints arrive in the order the "
        "threads produce them", "the datapoints after them come from the threads started anew, not those "
        "that would have followed")


def _stop_threads(threads):
    for th in threads:
        th.stop()
    for th in threads:
        if th is not threading.current_thread():
            th.join(StoppableThread.poll_interval * 5)


# tensorpack's names
PrefetchData = MultiProcessRunner
MultiProcessPrefetchData = MultiProcessRunner
PrefetchDataZMQ = MultiProcessRunnerZMQ
MultiThreadPrefetchData = MultiThreadRunner


class _PlasmaData(ProxyDataFlow):
    """tensorpack's DataFlows through pyarrow's plasma object store, which pyarrow removed
    (version 12): the names import, as programs import them, and making one raises."""

    def __init__(self, ds, socket='/tmp/plasma'):
        raise NotImplementedError(
            "{} is not supported: it needs pyarrow's plasma object store, which pyarrow removed in "
            "version 12. MultiProcessRunnerZMQ sends large arrays between processes without "
            "copies.".format(type(self).__name__))


class PlasmaPutData(_PlasmaData):
    """Not supported (tensorpack's put datapoints into a plasma store): making one raises
    NotImplementedError."""


class PlasmaGetData(_PlasmaData):
    """Not supported (tensorpack's read datapoints back from a plasma store): making one raises
    NotImplementedError."""
