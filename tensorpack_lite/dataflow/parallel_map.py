"""Apply a function to the datapoints of a DataFlow in parallel: worker threads
(:class:`MultiThreadMapData`) or worker processes fed over ZeroMQ
(:class:`MultiProcessMapData`, also named :class:`MultiProcessMapDataZMQ`). The worker
processes of :class:`MultiProcessMapAndBatchData` also batch what they map.

The parent iterates ``ds`` (so ``ds`` is reset and iterated in the parent only) and keeps up
to ``buffer_size`` datapoints in the workers; worker processes get them a few at a time
(``datapoints_per_message``) and send the arrays of their results through shared memory.
Two modes:

* ``strict=True``: every epoch produces the mapped datapoints of that epoch of ``ds``, each
  exactly once and in the order of ``ds``. ``map_func`` must not return None.
* ``strict=False`` (default): the mapped datapoints of the epoch, each exactly once, in the
  order the workers finish them; those for which ``map_func`` returns None are dropped.

Unlike tensorpack, whose non-strict mode lets consecutive epochs overlap, an epoch here
never contains datapoints of the next one (the buffer drains at the end of each epoch).

With ``strict=True`` the position can be saved (``get_state``): the parent takes ``ds``'s state
after every datapoint it sends to the workers (one ``ds.get_state()`` per datapoint, kept until
its result is produced), and reports the one of the last result produced. ``map_func`` is taken
to draw no random numbers of its own.
"""

import collections
import itertools
import os
import queue
import struct
import threading
import weakref

from ..utils.cpu import usable_cpus
from ..utils.serialize import dumps_frames, loads_frames
from .base import DataFlowReentrantGuard, ProxyDataFlow
from .common import BatchData
from .epochs import repeat_epochs
from .ipc_dir import IPCDir
from .parallel_base import Closable, ParallelBase, len_or_minus_one, thread_error
from .shared_slots import reserve_shared_slots
from .state import (DataFlowStateUnsupported, get_dataflow_state, set_dataflow_state, state_or_error,
                    unsupported_position, without_position)
from .workers import DataFlowWorkerError, WorkerProcesses
from .zmq_pipes import Sockets, ZMQCollector, ZMQWorker

__all__ = ['MultiThreadMapData', 'MultiProcessMapData', 'MultiProcessMapDataZMQ',
           'MultiProcessMapAndBatchData', 'MultiProcessMapAndBatchDataZMQ']

_DROPPED = object()  # what map_func's None becomes on the parent's side


class _InputPositions(object):
    """For a strict parallel map: the state of its input DataFlow right after each datapoint sent
    to the workers, kept until that datapoint's result is produced; then the state to report."""

    def __init__(self, ds):
        self.ds = ds
        self.sent = collections.deque()   # states after the datapoints whose results are not out yet
        self.current = None               # the state after the input of the last result produced
        self.error = None                 # why the input has no state, once known

    def start(self):
        """A new iteration starts (nothing produced yet)."""
        self.sent.clear()
        self.current = self.error = None

    def recorded(self, source):
        """The datapoints of ``source`` (an iteration of the input), its state taken after each."""
        for dp in source:
            if self.error is None:
                state = state_or_error(self.ds)
                if isinstance(state, DataFlowStateUnsupported):
                    self.error = state
                else:
                    self.sent.append(state)
            yield dp

    def produced(self):
        """The result of the oldest datapoint sent is produced."""
        if self.error is None:
            self.current = self.sent.popleft()


class _ParallelMapData(ProxyDataFlow):
    """The buffered, ordered or unordered, epoch logic (template): subclasses give
    ``_start_workers()``, ``_send(first_seq, datapoints)`` (consecutive sequence numbers from
    ``first_seq``) and ``_recv() -> [(seq, result or _DROPPED), ...]``. Datapoints are sent
    ``_chunk`` at a time (fewer at the end of an epoch)."""

    _chunk = 1

    def __init__(self, ds, buffer_size, strict):
        super(_ParallelMapData, self).__init__(ds)
        if int(buffer_size) < 1:
            raise ValueError("{}: buffer_size must be >= 1, got {}".format(type(self).__name__, buffer_size))
        self._buffer_size = int(buffer_size)
        self._strict = bool(strict)
        self._seq = 0         # sequence number of the next datapoint sent
        self._in_flight = 0   # datapoints sent whose result was not received yet
        self._guard = DataFlowReentrantGuard(type(self).__name__)
        self._positions = _InputPositions(ds)

    def reset_state(self):
        super(_ParallelMapData, self).reset_state()
        self._start_workers()

    def __iter__(self):
        return self._guarded_epoch(iter(self.ds))

    def _guarded_epoch(self, source):
        with self._guard:
            yield from self._epoch(source)

    def _fill(self, source):
        """Send datapoints of ``source`` while the buffer has room for a whole chunk (or is
        empty); False once ``source`` is exhausted."""
        chunk = min(self._chunk, self._buffer_size)
        while self._buffer_size - self._in_flight >= chunk or self._in_flight == 0:
            want = min(chunk, self._buffer_size - self._in_flight)
            datapoints = list(itertools.islice(source, want))
            if datapoints:
                self._send(self._seq, datapoints)
                self._seq += len(datapoints)
                self._in_flight += len(datapoints)
            if len(datapoints) < want:
                return False
        return True

    def _epoch(self, source):
        first = self._seq  # results of earlier, abandoned epochs are dropped
        if self._strict:
            self._positions.start()
            source = self._positions.recorded(source)
        exhausted = False
        pending = {}
        next_out = first
        try:
            while True:
                if not exhausted:
                    exhausted = not self._fill(source)
                if self._in_flight == 0:
                    return
                results = self._recv()
                self._in_flight -= len(results)  # before yielding: the consumer may stop at any one
                for seq, result in results:
                    if seq < first:
                        continue
                    if not self._strict:
                        if result is not _DROPPED:
                            yield result
                        continue
                    if result is _DROPPED:
                        raise ValueError("{}: map_func returned None for datapoint #{} of the epoch; that "
                                         "is not allowed with strict=True".format(type(self).__name__,
                                                                                  seq - first))
                    pending[seq] = result
                    while next_out in pending:
                        self._positions.produced()
                        yield pending.pop(next_out)
                        next_out += 1
        finally:
            self._positions.current = None  # between iterations: the input's own state

    def _check_ordered(self):
        if not self._strict:
            raise unsupported_position(
                self, "with strict=False it produces the results in the order the workers finish them",
                "the datapoints after them come in another order and may repeat or miss some of the epoch "
                "(strict=True saves the position)")

    def get_state(self):
        """With ``strict=True``: ``ds``'s state right after it produced the input of the last
        result produced (a snapshot taken as that input was sent to the workers)."""
        self._check_ordered()
        if self._positions.error is not None:
            raise self._positions.error
        if self._positions.current is not None:
            return {'ds': self._positions.current}
        return {'ds': get_dataflow_state(self.ds)}

    def set_state(self, state):
        """With ``strict=True``: the next iteration maps the rest of ``ds``'s restored iteration
        (results of datapoints sent before are dropped)."""
        self._check_ordered()
        self._positions.start()
        set_dataflow_state(self.ds, state['ds'])


# ------------------------------------------------------------------ threads

class _MapThread(threading.Thread):
    def __init__(self, map_func, inq, outq, name):
        super(_MapThread, self).__init__(name=name, daemon=True)
        self.map_func, self.inq, self.outq = map_func, inq, outq

    def run(self):
        while True:
            task = self.inq.get()
            if task is None:
                return
            seq, dp = task
            try:
                result = self.map_func(dp)
            except Exception as err:
                self.outq.put((seq, _ThreadFailure(self.name, err)))
                return
            self.outq.put((seq, _DROPPED if result is None else result))


class _ThreadFailure(object):
    def __init__(self, name, err):
        self.error = thread_error(name, err)


class MultiThreadMapData(Closable, _ParallelMapData):
    """Map the datapoints of ``ds`` with ``map_func`` in ``num_thread`` threads.

    Useful when ``map_func`` releases the GIL (I/O, OpenCV, most numpy). See the module
    docstring for the ``strict`` modes; with ``strict=True`` the position can be saved, at the
    cost of one ``ds.get_state()`` per datapoint.

    Args:
        ds (DataFlow): the datapoints to map.
        num_thread (int): number of threads.
        map_func (callable): datapoint -> datapoint, or None to drop it (non-strict mode).
        buffer_size (int): datapoints kept in the threads' queue.
        strict (bool): produce the datapoints in the order of ``ds``.

    Example::

        df = MultiThreadMapData(DataFromList(files, shuffle=True), num_thread=8,
                                map_func=lambda f: [cv2.imread(f)], buffer_size=100)
    """

    def __init__(self, ds, num_thread=None, map_func=None, buffer_size=200, strict=False):
        if num_thread is None or int(num_thread) < 1 or map_func is None:
            raise ValueError("MultiThreadMapData needs num_thread >= 1 and a map_func, got {} and {!r}"
                             .format(num_thread, map_func))
        super(MultiThreadMapData, self).__init__(ds, buffer_size, strict)
        self.num_thread = int(num_thread)
        self.map_func = map_func
        self._threads = []
        self._failure = None

    def _start_workers(self):
        if self._threads:
            raise RuntimeError("MultiThreadMapData.reset_state() was called twice")
        self._inq, self._outq = queue.Queue(), queue.Queue()
        self._threads = [_MapThread(self.map_func, self._inq, self._outq, 'MultiThreadMapData thread #{}'
                                    .format(k)) for k in range(self.num_thread)]
        for th in self._threads:
            th.start()
        self._finalizer = weakref.finalize(self, _stop_map_threads, self._inq, self._threads)

    def _send(self, first_seq, datapoints):
        self._raise_failure()
        for k, dp in enumerate(datapoints):
            self._inq.put((first_seq + k, dp))

    def _recv(self):
        self._raise_failure()
        seq, result = self._outq.get()
        if isinstance(result, _ThreadFailure):
            self._failure = result.error
            self.close()
            self._raise_failure()
        return [(seq, result)]

    def _raise_failure(self):
        """After a thread failed, the same error at every use (the threads are stopped)."""
        if not self._threads:
            raise RuntimeError("MultiThreadMapData: call reset_state() before iterating")
        if self._failure is not None:
            raise self._failure


def _stop_map_threads(inq, threads):
    for _ in threads:
        inq.put(None)


# ------------------------------------------------------------------ processes

_SEQ = struct.Struct('<q')
_HELLO = -1  # sequence number of the message a worker sends once connected
_WORKER_ID = struct.Struct('<H')  # second frame of every message of a worker: its number


def _sender(frames):
    """The worker that sent a message ``[seq, worker id, ...]``."""
    return _WORKER_ID.unpack_from(frames[1].buffer)[0]


def _dumps_list(datapoints):
    """``dumps_frames(datapoints)``; an error names the component within its datapoint."""
    try:
        return dumps_frames(datapoints)
    except TypeError:
        for dp in datapoints:
            dumps_frames(dp)  # raises naming where in the datapoint
        raise


class _MapWorker(ZMQWorker):
    """Receives chunks of datapoints, ``[seq of the first, frames of the list of
    datapoints...]``, and sends back ``[the same seq, worker id + places, frames of the list
    of results...]``, None standing for a datapoint ``map_func`` dropped; big arrays go
    through the shared-memory ``slots`` when they can (``places``: see
    :meth:`SharedSlots.lend`), and only the others travel as frames."""

    def __init__(self, owner, idx, parent_pid, map_func, task_endpoint, result_endpoint, hwm, slots=None):
        super(_MapWorker, self).__init__(owner, idx, parent_pid)
        self.map_func, self.slots = map_func, slots
        self.task_endpoint, self.result_endpoint, self.hwm = task_endpoint, result_endpoint, hwm

    def _open(self):
        self.pipes = Sockets()
        zmq = self.pipes.zmq
        self.tasks = self.pipes.socket(zmq.PULL, self.hwm)
        self.tasks.connect(self.task_endpoint)
        self.results = self.pipes.socket(zmq.PUSH, self.hwm)
        self.results.connect(self.result_endpoint)
        self.signature = _WORKER_ID.pack(self.idx)
        self.results.send_multipart([_SEQ.pack(_HELLO), self.signature])

    def _loop(self):
        while True:
            frames = self.tasks.recv_multipart(copy=False)
            results = _dumps_list([self.map_func(dp) for dp in loads_frames(frames[1:])])
            places, rest = self.slots.lend(results[1:])
            self.results.send_multipart([frames[0], self.signature + places, results[0]] + rest, copy=False)


class MultiProcessMapDataZMQ(_ParallelMapData, ParallelBase):
    """Map the datapoints of ``ds`` with ``map_func`` in ``num_proc`` worker processes
    (forked in :meth:`reset_state`), which exchange datapoints with the parent over ZeroMQ
    ``ipc://`` pipes. See the module docstring for the ``strict`` modes.

    ``ds`` is reset and iterated in the parent; ``map_func`` runs in the workers (each with
    its own ``np.random`` / ``random`` seed). With ``strict=True`` the position can be saved, at
    the cost of one ``ds.get_state()`` per datapoint (see the module docstring). Datapoints and
    results must be serializable by :func:`~tensorpack_lite.utils.serialize.dumps`; arrays of
    256 KiB or more travel without copies, so ``ds`` must not modify an array after yielding it.
    Arrays of results of 64 KiB to 1 MiB are copied once into shared memory
    (:attr:`shared_memory_slots`); received arrays may be read-only. Workers run OpenCV on one
    thread (:attr:`opencv_threads`). Workers that leave the parent waiting are named in a
    warning every ``idle_warning`` seconds; set ``idle_timeout`` to raise instead of waiting
    forever.

    Args:
        ds (DataFlow): the datapoints to map.
        num_proc (int): number of worker processes (default: half the CPUs this process may use, at least 1).
        map_func (callable): datapoint -> datapoint, or None to drop it (non-strict mode).
        buffer_size (int): datapoints kept in the workers.
        strict (bool): produce the datapoints in the order of ``ds``.

    Example::

        df = MultiProcessMapData(DataFromList(files, shuffle=True), num_proc=4,
                                 map_func=load_and_augment, strict=True)
    """

    startup_timeout = 60.0
    """Seconds :meth:`reset_state` waits for every worker to connect."""

    shared_memory_slots = 64
    """Shared-memory slots per worker for the arrays of results (0: always use the pipe):
    each array of :attr:`shared_memory_min_bytes` to :attr:`shared_memory_slot_bytes`
    is copied once into a free slot instead of twice through the kernel; the parent's
    array views the slot, reused once the array is garbage-collected. Address space is
    reserved before the fork; memory is used as slots fill."""
    shared_memory_slot_bytes = 1 << 20
    """Size of a slot: bigger arrays go through the pipe."""
    shared_memory_min_bytes = 64 << 10
    """Smaller arrays go through the pipe."""

    datapoints_per_message = None
    """Datapoints handed to a worker in one message (their results come back in one): fewer
    messages cost the parent and the workers less CPU per datapoint. None (default): as many
    as still keep every worker supplied, ``buffer_size // (4 * num_proc)``, from 1 to 16."""

    def __init__(self, ds, num_proc=None, map_func=None, buffer_size=200, strict=False):
        if num_proc is None:
            num_proc = max(1, usable_cpus() // 2)
        if int(num_proc) < 1 or map_func is None:
            raise ValueError("MultiProcessMapData needs num_proc >= 1 and a map_func, got {} and {!r}"
                             .format(num_proc, map_func))
        _ParallelMapData.__init__(self, ds, buffer_size, strict)
        ParallelBase.__init__(self)
        self.num_proc = int(num_proc)
        self.map_func = map_func

    def _start_workers(self):
        self._chunk = self.datapoints_per_message or max(1, min(16, self._buffer_size // (4 * self.num_proc)))
        with self._starting():
            name = type(self).__name__
            hwm = 2 * self._buffer_size  # more than can ever be in flight: sends never block
            self._slots = reserve_shared_slots(name, self.num_proc, self.shared_memory_slots,
                                               self.shared_memory_slot_bytes, self.shared_memory_min_bytes)
            pipes = Sockets()
            self._on_close(pipes.close)
            ipc = IPCDir('map')
            self._on_close(ipc.cleanup)
            task_endpoint, result_endpoint = ipc.endpoint('tasks'), ipc.endpoint('results')
            workers = WorkerProcesses([
                _MapWorker(name, k, os.getpid(), self.map_func, task_endpoint, result_endpoint, hwm,
                           self._slots[k]) for k in range(self.num_proc)], ipc, self.opencv_threads)
            self._on_close(workers.close)
            zmq = pipes.zmq
            self._tasks = pipes.socket(zmq.PUSH, hwm)
            self._tasks.bind(task_endpoint)
            results = pipes.socket(zmq.PULL, hwm)
            results.bind(result_endpoint)
            workers.start()
            self._collector = ZMQCollector(results, workers, self._idle_watch(workers), _sender)
        self._wait_for_workers()

    def _wait_for_workers(self):
        """Until every worker has connected (so that the first tasks are spread)."""
        name = type(self).__name__
        connected = set()
        while len(connected) < self.num_proc:
            frames = self._from_workers(lambda: self._collector.recv(self.startup_timeout))
            if frames is None:
                self._failure = DataFlowWorkerError("{}: worker(s) {} did not start within {} s".format(
                    name, sorted(set(range(self.num_proc)) - connected), self.startup_timeout))
                self.close()
                raise self._failure
            connected.add(_sender(frames))

    def _send(self, first_seq, datapoints):
        frames = [_SEQ.pack(first_seq)] + _dumps_list(datapoints)
        self._from_workers(lambda: self._tasks.send_multipart(frames, copy=False))

    def _recv(self):
        frames = self._from_workers(self._collector.recv)
        first = _SEQ.unpack(frames[0].bytes)[0]
        layout = frames[1].bytes
        data = self._slots[_sender(frames)].collect(layout[_WORKER_ID.size:], frames[3:])
        return [(first + k, _DROPPED if result is None else result)
                for k, result in enumerate(loads_frames([frames[2]] + data))]


MultiProcessMapData = MultiProcessMapDataZMQ


# ------------------------------------------------------------------ map and batch in processes

class _DispatchWorker(ZMQWorker):
    """Runs ``ds`` forever and pushes its datapoints, as ``[seq, frames...]``, to the map
    workers; its error report goes to the parent's result socket."""

    def __init__(self, owner, idx, parent_pid, ds, task_endpoint, result_endpoint, hwm):
        super(_DispatchWorker, self).__init__(owner, idx, parent_pid)
        self.ds = ds
        self.task_endpoint, self.result_endpoint, self.hwm = task_endpoint, result_endpoint, hwm

    @property
    def name(self):
        return '{} dispatcher'.format(self.owner)

    def _open(self):
        self.pipes = Sockets()
        zmq = self.pipes.zmq
        self.results = self.pipes.socket(zmq.PUSH, 1)  # for an error report only
        self.results.connect(self.result_endpoint)
        self.tasks = self.pipes.socket(zmq.PUSH, self.hwm)
        self.tasks.bind(self.task_endpoint)
        self.ds.reset_state()

    def _loop(self):
        for seq, dp in enumerate(repeat_epochs(self.ds, self.name)):
            self.tasks.send_multipart([_SEQ.pack(seq)] + dumps_frames(dp), copy=False)


class _MapBatchWorker(_MapWorker):
    """A :class:`_MapWorker` that sends a batch of ``batch_size`` mapped datapoints at a time."""

    def __init__(self, owner, idx, parent_pid, map_func, batch_size, task_endpoint, result_endpoint, hwm):
        super(_MapBatchWorker, self).__init__(owner, idx, parent_pid, map_func, task_endpoint,
                                              result_endpoint, hwm)
        self.batch_size = batch_size

    def _loop(self):
        batch = []
        while True:
            frames = self.tasks.recv_multipart(copy=False)
            result = self.map_func(loads_frames(frames[1:]))
            if result is None:
                continue
            batch.append(result)
            if len(batch) == self.batch_size:
                self.results.send_multipart([frames[0], self.signature]
                                            + dumps_frames(BatchData.aggregate_batch(batch)), copy=False)
                batch = []


class MultiProcessMapAndBatchDataZMQ(ParallelBase):
    """Map the datapoints of ``ds`` with ``map_func`` and batch them, both in ``num_proc``
    worker processes, to hide the cost of batching too.

    A dispatcher process runs ``ds`` epoch after epoch and hands its datapoints to the
    workers; each worker maps them (dropping those for which ``map_func`` returns None) and
    sends a batch, made as :class:`BatchData` does, of every ``batch_size`` it has mapped.
    With ``num_proc=1`` the batches are those of ``BatchData(MapData(ds, map_func),
    batch_size)`` (over an endless repetition of ``ds``); with more workers, a batch holds
    datapoints in any order, possibly from two consecutive passes over ``ds``.

    An iteration produces ``len(ds) // batch_size`` batches (forever if ``ds`` has no
    length), continuing where the previous one stopped. Processes start in
    :meth:`reset_state` (call it once); see :class:`MultiProcessMapDataZMQ` for what
    datapoints may hold and for ``idle_warning`` / ``idle_timeout`` (which watch the map
    workers, not the dispatcher).

    Args:
        ds (DataFlow): the datapoints to map.
        num_proc (int): number of worker processes.
        map_func (callable): datapoint -> datapoint, or None to drop it.
        batch_size (int): datapoints per batch.
        buffer_size (int): datapoints (not batches) buffered; ``batch_size * 10`` by default.

    Example::

        df = MultiProcessMapAndBatchData(DataFromList(files), num_proc=4,
                                         map_func=load_and_augment, batch_size=64)
    """

    def __init__(self, ds, num_proc, map_func, batch_size, buffer_size=None):
        super(MultiProcessMapAndBatchDataZMQ, self).__init__()
        if int(num_proc) < 1 or map_func is None or int(batch_size) < 1:
            raise ValueError("MultiProcessMapAndBatchData needs num_proc >= 1, a map_func and batch_size "
                             ">= 1, got {}, {!r} and {}".format(num_proc, map_func, batch_size))
        self.ds = ds
        self.num_proc, self.map_func, self.batch_size = int(num_proc), map_func, int(batch_size)
        self.buffer_size = self.batch_size * 10 if buffer_size is None else int(buffer_size)
        if self.buffer_size <= self.batch_size:
            raise ValueError("MultiProcessMapAndBatchData: buffer_size ({}) must be larger than batch_size "
                             "({})".format(self.buffer_size, self.batch_size))
        size = len_or_minus_one(ds)
        if 0 <= size < self.batch_size:
            raise ValueError("MultiProcessMapAndBatchData: batch_size={} is larger than len(ds)={}".format(
                self.batch_size, size))
        self._num_batches = size // self.batch_size if size > 0 else -1

    def __len__(self):
        return len(self.ds) // self.batch_size

    def reset_state(self):
        """Start the dispatcher and the workers (once)."""
        with self._starting():
            name = type(self).__name__
            pipes = Sockets()
            self._on_close(pipes.close)
            ipc = IPCDir('mapbatch')
            self._on_close(ipc.cleanup)
            task_endpoint, result_endpoint = ipc.endpoint('tasks'), ipc.endpoint('results')
            worker_hwm = max(self.batch_size, self.buffer_size // self.num_proc)
            workers = WorkerProcesses(
                [_MapBatchWorker(name, k, os.getpid(), self.map_func, self.batch_size, task_endpoint,
                                 result_endpoint, worker_hwm) for k in range(self.num_proc)]
                + [_DispatchWorker(name, self.num_proc, os.getpid(), self.ds, task_endpoint, result_endpoint,
                                   self.buffer_size)], ipc, self.opencv_threads)
            self._on_close(workers.close)
            results = pipes.socket(pipes.zmq.PULL, max(5, self.buffer_size // self.batch_size))
            results.bind(result_endpoint)
            workers.start()
            watch = self._idle_watch(workers, watched=range(self.num_proc))  # not the dispatcher
            self._collector = ZMQCollector(results, workers, watch, _sender)

    def _recv(self):
        while True:
            frames = self._collector.recv()
            if _SEQ.unpack(frames[0].bytes)[0] != _HELLO:  # the workers' greetings are not waited for
                return loads_frames(frames[2:])

    def __iter__(self):
        yield from self._iterate(self._recv, self._num_batches)

    get_state, set_state = without_position(
        "a worker process iterates the DataFlow and the others batch what they map in the order they "
        "finish", "the batches after them come from a new iteration, not those that would have followed")


MultiProcessMapAndBatchData = MultiProcessMapAndBatchDataZMQ
