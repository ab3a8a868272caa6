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
See docs/dataflow.md for choosing a runner, start methods and cleanup guarantees.
"""

import itertools
import mmap
import multiprocessing as mp
import multiprocessing.util
import os
import pickle
import queue
import random
import shutil
import signal
import struct
import sys
import tempfile
import threading
import time
import traceback
import weakref
from multiprocessing.connection import wait as wait_for_sentinels

import numpy as np

from ..utils import logger
from ..utils import utils as _utils
from ..utils.concurrency import StoppableThread, enable_death_signal, ensure_proc_terminate, mask_sigint
from ..utils.serialize import dumps_frames, loads_frames
from .base import DataFlow, DataFlowReentrantGuard, ProxyDataFlow

__all__ = ['MultiProcessRunner', 'MultiProcessRunnerZMQ', 'MultiThreadRunner', 'DataFlowWorkerError',
           'PrefetchData', 'MultiProcessPrefetchData', 'PrefetchDataZMQ', 'MultiThreadPrefetchData']


class DataFlowWorkerError(RuntimeError):
    """A worker (process or thread) of a parallel DataFlow failed: it raised, or it died.

    The message names the worker and its exception (with the worker's traceback), or how
    it died (exit code, signal).
    """


# ------------------------------------------------------------------ worker process plumbing

def _start_method_context():
    """'fork' where it exists, as tensorpack: dataflows are often not picklable."""
    if 'fork' in mp.get_all_start_methods():
        return mp.get_context('fork')
    return mp.get_context()


def _describe_exit(exitcode):
    if exitcode is not None and exitcode < 0:
        try:
            return "was killed by signal {}".format(signal.Signals(-exitcode).name)
        except ValueError:
            return "was killed by signal {}".format(-exitcode)
    return "exited with code {}".format(exitcode)


def _reseed_worker(idx):
    """Give worker ``idx`` its own seeds: distinct per worker, reproducible after
    :func:`fix_rng_seed` (worker k then uses the fixed seed + k + 1)."""
    fixed = _utils._RNG_SEED
    if fixed is not None:
        seed = (fixed + 1 + idx) % (2 ** 32)
        _utils.fix_rng_seed(seed)
    else:
        seed = (os.getpid() * 1000003 + time.time_ns() + idx) % (2 ** 32)
    np.random.seed(seed)
    random.seed(seed)


def _watch_parent(parent_pid, interval=1.0):
    """Exit as soon as the parent is gone (where the death signal is not available or was
    tied to a thread that ended)."""
    def watch():
        while True:
            if os.getppid() != parent_pid:
                os._exit(1)
            time.sleep(interval)
    threading.Thread(target=watch, name='parent-watchdog', daemon=True).start()


class _ProcessWorker(object):
    """The body of one worker process (template): ``_open()``, ``_loop()``, ``_close()``;
    a failure is sent to the parent with ``_report(text)``, then the process exits with 1."""

    def __init__(self, owner, idx, parent_pid):
        self.owner = owner
        self.idx = idx
        self.parent_pid = parent_pid

    @property
    def name(self):
        return '{} worker #{}'.format(self.owner, self.idx)

    def run(self):
        enable_death_signal(_warn=self.idx == 0)
        if os.getppid() != self.parent_pid:  # the parent died before the death signal was set
            os._exit(1)
        _watch_parent(self.parent_pid)
        _reseed_worker(self.idx)
        try:
            self._open()
            self._loop()
        except BaseException as err:
            text = "{} (pid {}) raised {}: {}\n--- traceback in the worker ---\n{}".format(
                self.name, os.getpid(), type(err).__name__, err, traceback.format_exc())
            try:
                self._report(text)
            finally:
                sys.exit(1)
        finally:
            self._close()

    def before_fork(self):
        """In the parent, just before this worker is forked."""

    def after_fork(self):
        """In the parent, just after this worker was forked."""

    def _open(self):
        pass

    def _loop(self):
        raise NotImplementedError("{} must implement _loop()".format(type(self).__name__))

    def _report(self, text):
        raise NotImplementedError("{} must implement _report()".format(type(self).__name__))

    def _close(self):
        pass


def _repeat_forever(ds, owner):
    """The datapoints of ``ds``, epoch after epoch; an error if a whole epoch is empty."""
    while True:
        produced = False
        for dp in ds:
            produced = True
            yield dp
        if not produced:
            raise RuntimeError("{}: an epoch of {} produced no datapoint".format(
                owner, type(ds).__name__))


class _WorkerProcesses(object):
    """The worker processes of one parallel DataFlow.

    They start with SIGINT ignored (Ctrl-C goes to the parent only), are terminated at exit
    of the parent, and :meth:`close` ends them (SIGTERM, then SIGKILL).
    """

    join_timeout = 5.0

    def __init__(self, workers):
        ctx = _start_method_context()
        self.workers = workers
        self.names = [w.name for w in workers]
        self.procs = [ctx.Process(target=w.run, name=w.name) for w in workers]
        self._owner_pid = os.getpid()

    def start(self):
        with mask_sigint():  # Ctrl-C then reaches the parent only
            for worker, proc in zip(self.workers, self.procs):
                worker.before_fork()
                proc.start()
                worker.after_fork()
        ensure_proc_terminate(self.procs)

    @property
    def sentinels(self):
        return [p.sentinel for p in self.procs]

    def dead(self, timeout=0):
        """``(name, process)`` of a worker that ended, or None."""
        ended = wait_for_sentinels(self.sentinels, timeout)
        for name, p in zip(self.names, self.procs):
            if p.sentinel in ended:
                p.join(self.join_timeout)
                return name, p
        return None

    def close(self):
        if os.getpid() != self._owner_pid:  # an inherited copy in a forked child
            return
        for p in self.procs:
            if p.pid is not None and p.exitcode is None:
                p.terminate()
        deadline = time.time() + self.join_timeout
        for p in self.procs:
            if p.pid is None:
                continue
            p.join(max(0.0, deadline - time.time()))
            if p.exitcode is None:
                p.kill()
                p.join(self.join_timeout)


class _IPCDir(object):
    """A private temporary directory for ``ipc://`` endpoints, removed by :meth:`cleanup`."""

    _MAX_PATH = 103  # sockaddr_un.sun_path: 108 bytes on Linux, 104 on macOS, with a final NUL
    _MAX_SUFFIX = 36  # '/tplite-runner-XXXXXXXX/' + the endpoint's name

    def __init__(self, prefix):
        base = tempfile.gettempdir()
        if len(base) + self._MAX_SUFFIX > self._MAX_PATH:
            base = '/tmp'
        self.path = tempfile.mkdtemp(prefix='tplite-{}-'.format(prefix), dir=base)
        self._owner_pid = os.getpid()

    def endpoint(self, name):
        return 'ipc://' + os.path.join(self.path, name)

    def cleanup(self):
        if os.getpid() == self._owner_pid:
            shutil.rmtree(self.path, ignore_errors=True)


def _zmq():
    try:
        import zmq
    except ImportError:
        raise ImportError("This DataFlow needs pyzmq: pip install pyzmq") from None
    return zmq


class _Sockets(object):
    """A ZeroMQ context and its sockets, closed together by :meth:`close` (a no-op in a
    forked child, which must not touch its parent's sockets)."""

    def __init__(self):
        self.zmq = _zmq()
        self.context = self.zmq.Context()
        self._owner_pid = os.getpid()

    def socket(self, kind, hwm):
        sock = self.context.socket(kind)
        sock.set_hwm(hwm)
        return sock

    def close(self, linger=0.0):
        """Close the sockets (waiting up to ``linger`` seconds to send what is queued)."""
        if os.getpid() != self._owner_pid:
            return
        self.context.destroy(linger=int(linger * 1000))  # closes every socket, then terminates


_ERROR_TAG = b''  # first frame of a worker's error report (a datapoint's header is never empty)


class _ZMQCollector(object):
    """Receives multi-part messages from worker processes on a PULL socket, watching the
    workers at the same time: a worker's error report or death raises
    :class:`DataFlowWorkerError` at once."""

    report_grace = 1.0
    """Seconds to wait, after a worker ended, for the error report it may have sent."""

    def __init__(self, pull_socket, workers):
        zmq = _zmq()
        self.socket = pull_socket
        self.workers = workers
        self._poller = zmq.Poller()
        self._poller.register(pull_socket, zmq.POLLIN)
        for fd in workers.sentinels:
            self._poller.register(fd, zmq.POLLIN)

    def recv(self, timeout=None):
        """The frames of the next message that is not an error report; None if ``timeout``
        seconds pass first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            wait_ms = None if deadline is None else max(0, int((deadline - time.monotonic()) * 1000))
            ready = dict(self._poller.poll(wait_ms))
            if len(ready) > (self.socket in ready):  # a worker ended: do not wait for the others
                self._raise_for_dead_worker()
            if self.socket in ready:
                return self._check(self.socket.recv_multipart(copy=False))
            if deadline is not None and time.monotonic() >= deadline:
                return None

    def _check(self, frames):
        if frames[0].bytes == _ERROR_TAG:
            raise DataFlowWorkerError(frames[1].bytes.decode('utf-8', 'replace'))
        return frames

    def _raise_for_dead_worker(self):
        dead = self.workers.dead()
        if dead is None:
            return
        name, proc = dead
        deadline = time.time() + self.report_grace
        while self.socket.poll(max(0, int((deadline - time.time()) * 1000))):
            self._check(self.socket.recv_multipart(copy=False))  # raises on the report
        raise DataFlowWorkerError("{} (pid {}) {} without reporting an error (killed, or out of "
                                  "memory?)".format(name, proc.pid, _describe_exit(proc.exitcode)))


class _Closable(object):
    """A parallel DataFlow whose workers, once started, are ended by a finalizer."""

    _finalizer = None

    def close(self):
        """Stop the workers and release what they use (idempotent). Also happens
        automatically when the dataflow is garbage-collected or the program exits."""
        if self._finalizer is not None:
            self._finalizer()


def _thread_error(name, err):
    """The :class:`DataFlowWorkerError` for ``err`` raised in the thread ``name``."""
    error = DataFlowWorkerError("{} raised {}: {}\n--- traceback in the thread ---\n{}".format(
        name, type(err).__name__, err, ''.join(traceback.format_exception(err))))
    error.__cause__ = err
    return error


class _ParallelBase(_Closable, DataFlow):
    """What the process runners share: reset once, fail for good after a worker failure,
    release everything (workers, sockets, ipc directory) on :meth:`close`, at garbage
    collection or at exit."""

    def __init__(self):
        self._reset_done = False
        self._failure = None
        self._guard = DataFlowReentrantGuard(type(self).__name__)

    def _check_reset(self):
        if self._reset_done:
            raise RuntimeError("{}.reset_state() was called twice: it starts the worker "
                               "processes, so call it once".format(type(self).__name__))
        self._reset_done = True

    def _set_cleanup(self, *actions):
        """Run ``actions`` (callables not holding ``self``) once: at :meth:`close`, when this
        object is garbage-collected, or when the process exits -- also a process started by
        ``multiprocessing``, which would otherwise wait for our workers before exiting."""
        self._finalizer = multiprocessing.util.Finalize(self, _run_all, args=(actions,),
                                                        exitpriority=10)

    def _from_workers(self, get):
        """``get()``; after a worker failure (this one or an earlier one), everything is
        closed and the failure raised, now and at every later call."""
        if not self._reset_done:
            raise RuntimeError("{}: call reset_state() before iterating".format(type(self).__name__))
        if self._failure is None and not self._finalizer.still_active():
            raise RuntimeError("{} was closed".format(type(self).__name__))
        if self._failure is None:
            try:
                return get()
            except DataFlowWorkerError as err:
                self._failure = err
                self.close()
        raise self._failure

    def _iterate(self, get_one, size):
        with self._guard:
            for k in itertools.count():
                if size > 0 and k >= size:
                    return
                yield self._from_workers(get_one)


def _closer(pipe_worker):
    return lambda: pipe_worker.reader.close()


def _run_all(actions):
    for action in actions:
        try:
            action()
        except Exception:
            logger.exception("Error while cleaning up a parallel DataFlow:")


def _len_or_minus_one(ds):
    try:
        return len(ds)
    except NotImplementedError:
        return -1


def _warn_duplication(name, num):
    if num > 1:
        logger.info("[{}] Runs {} copies of the dataflow: this assumes its datapoints are "
                    "i.i.d. (an epoch then holds duplicates). To see every datapoint once, map "
                    "with MultiProcessMapData instead (see docs/dataflow.md).".format(name, num))


# ------------------------------------------------------------------ MultiProcessRunnerZMQ

class _SharedSlots(object):
    """Shared-memory slots through which one worker hands big arrays to the parent with a
    single copy (a pipe costs two copies through the kernel, and page faults).

    Made by the parent before the fork (anonymous shared mappings, inherited by the worker):
    ``count`` slots of ``size`` bytes and one state byte per slot (0: free). The worker copies
    an array into a free slot and sends only the slot's number; the parent hands out arrays
    viewing the slot and frees the slot when the last of them is garbage-collected. Without
    a free slot (the consumer keeps arrays), or for an array too big, the worker sends the
    array through the pipe instead. Pages are allocated as slots are first used.
    """

    min_bytes = 1 << 20
    """Arrays smaller than this go through the pipe."""

    def __init__(self, count, size):
        self.count, self.size = count, size
        self.memory = mmap.mmap(-1, count * size)  # MAP_SHARED | MAP_ANONYMOUS
        self.states = mmap.mmap(-1, count)

    # --- in the worker
    def put(self, frame):
        """Copy ``frame`` (a memoryview) into a free slot: the slot's descriptor, or None."""
        if not self.min_bytes <= frame.nbytes <= self.size:
            return None
        slot = self.states.find(b'\0')
        if slot < 0:
            return None
        self.states[slot] = 1
        np.copyto(np.frombuffer(self.memory, np.uint8, frame.nbytes, slot * self.size),
                  np.frombuffer(frame, np.uint8))
        return _SLOT.pack(slot, frame.nbytes)

    # --- in the parent
    def take(self, descriptor):
        """A uint8 array viewing the slot described; the slot is freed with the array."""
        slot, nbytes = _SLOT.unpack(descriptor)
        arr = np.frombuffer(self.memory, np.uint8, nbytes, slot * self.size)
        # views of arr (and loads_frames' arrays, through memoryviews) keep arr alive
        weakref.finalize(arr, _free_slot, self.states, slot)
        return arr


def _free_slot(states, slot):
    states[slot] = 0


_SLOT = struct.Struct('<IQ')  # slot number, bytes used
_IN_PIPE, _IN_SLOT = b'p', b's'  # where each data frame of a message is
_WORKER = struct.Struct('<H')  # which worker sent a message (first bytes of its layout)


class _PushWorker(_ProcessWorker):
    """Runs ``ds`` forever and sends every datapoint to the parent, as
    ``[header, layout, frame...]``: ``layout`` gives the worker's number, then for each big
    array whether its frame holds its bytes (sent zero-copy) or the descriptor of a slot."""

    def __init__(self, owner, idx, parent_pid, ds, endpoint, hwm, slots):
        super(_PushWorker, self).__init__(owner, idx, parent_pid)
        self.ds, self.endpoint, self.hwm, self.slots = ds, endpoint, hwm, slots
        self.pipes = None

    def _open(self):
        self.pipes = _Sockets()
        self.socket = self.pipes.socket(self.pipes.zmq.PUSH, self.hwm)
        self.socket.connect(self.endpoint)
        self.ds.reset_state()

    def _loop(self):
        for dp in _repeat_forever(self.ds, self.name):
            frames = dumps_frames(dp)
            layout = bytearray(_WORKER.pack(self.idx) + _IN_PIPE * (len(frames) - 1))
            if self.slots is not None:
                for k in range(1, len(frames)):
                    descriptor = self.slots.put(frames[k])
                    if descriptor is not None:
                        frames[k], layout[_WORKER.size + k - 1] = descriptor, _IN_SLOT[0]
            self.socket.send_multipart([frames[0], bytes(layout)] + frames[1:], copy=False)

    def _report(self, text):
        if self.pipes is not None:
            self.socket.send_multipart([_ERROR_TAG, text.encode('utf-8')])

    def _close(self):
        if self.pipes is not None:
            self.pipes.close(linger=_ZMQCollector.report_grace)


class MultiProcessRunnerZMQ(_ParallelBase):
    """Run ``ds`` in ``num_proc`` worker processes that send datapoints through a ZeroMQ
    ``ipc://`` pipe.

    Workers are forked in :meth:`reset_state` (call it once); each resets its own copy of
    ``ds`` (own RNG seed) and runs it epoch after epoch.

    * ``num_proc=1``: the datapoints of ``ds`` in the same order.
    * ``num_proc>1``: each worker produces all of ``ds``, so an epoch (``len(ds)``
      datapoints) mixes the workers' outputs: the same distribution only if the datapoints
      are i.i.d.; to see every datapoint once, use :class:`MultiProcessMapData` instead.

    Arrays of 16 KiB or more travel without copies in the worker: a dataflow must not modify
    an array after yielding it. Arrays of 1 MiB or more go through shared memory when a slot
    is free (one copy in all; see :attr:`shared_memory_slots`). Received arrays are views of
    the message or of a slot; small ones are read-only.

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

    def __init__(self, ds, num_proc=1, hwm=50):
        super(MultiProcessRunnerZMQ, self).__init__()
        if int(num_proc) < 1:
            raise ValueError("MultiProcessRunnerZMQ: num_proc must be >= 1, got {}".format(num_proc))
        self.ds = ds
        self.num_proc = int(num_proc)
        self._hwm = int(hwm)
        self._size = _len_or_minus_one(ds)
        self._collector = None
        _warn_duplication(type(self).__name__, self.num_proc)

    def __len__(self):
        return len(self.ds)

    def reset_state(self):
        """Fork the workers (once)."""
        self._check_reset()
        name = type(self).__name__
        ipc = _IPCDir('runner')
        endpoint = ipc.endpoint('data')
        self._slots = [_SharedSlots(self.shared_memory_slots, self.shared_memory_slot_bytes)
                       if self.shared_memory_slots > 0 else None for _ in range(self.num_proc)]
        workers = _WorkerProcesses([
            _PushWorker(name, k, os.getpid(), self.ds, endpoint, self._hwm, self._slots[k])
            for k in range(self.num_proc)])
        pipes = _Sockets()
        self._set_cleanup(workers.close, pipes.close, ipc.cleanup)
        socket = pipes.socket(pipes.zmq.PULL, self._hwm)
        socket.bind(endpoint)
        workers.start()
        self._collector = _ZMQCollector(socket, workers)

    def _recv(self):
        frames = self._collector.recv()
        header, layout, data = frames[0], frames[1].bytes, frames[2:]
        where = layout[_WORKER.size:]
        if _IN_SLOT[0] in where:
            slots = self._slots[_WORKER.unpack_from(layout)[0]]
            data = [slots.take(frame.bytes) if w == _IN_SLOT[0] else frame
                    for w, frame in zip(where, data)]
        return loads_frames([header] + data)

    def __iter__(self):
        yield from self._iterate(self._recv, self._size)


# ------------------------------------------------------------------ MultiProcessRunner

class _PipeWorker(_ProcessWorker):
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
        for dp in _repeat_forever(self.ds, self.name):
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


class MultiProcessRunner(_ParallelBase, ProxyDataFlow):
    """Run ``ds`` in ``num_proc`` worker processes that send pickled datapoints through
    ``multiprocessing`` pipes, at most ``num_prefetch`` of them waiting at a time. Same
    guarantees as :class:`MultiProcessRunnerZMQ`, without ZeroMQ, but slower for big arrays.

    Args:
        ds (DataFlow): the dataflow to run.
        num_prefetch (int): how many datapoints may wait to be read.
        num_proc (int): number of worker processes.
    """

    def __init__(self, ds, num_prefetch, num_proc):
        ProxyDataFlow.__init__(self, ds)
        _ParallelBase.__init__(self)
        if int(num_proc) < 1 or int(num_prefetch) < 1:
            raise ValueError("MultiProcessRunner: num_proc and num_prefetch must be >= 1, got {} "
                             "and {}".format(num_proc, num_prefetch))
        self.num_proc = int(num_proc)
        self.num_prefetch = int(num_prefetch)
        self._size = _len_or_minus_one(ds)
        _warn_duplication(type(self).__name__, self.num_proc)

    def reset_state(self):
        """Fork the workers (once)."""
        self._check_reset()
        self._tokens = _start_method_context().Semaphore(self.num_prefetch)
        name = type(self).__name__
        self._pipe_workers = [_PipeWorker(name, k, os.getpid(), self.ds, self._tokens)
                              for k in range(self.num_proc)]
        workers = _WorkerProcesses(self._pipe_workers)
        self._set_cleanup(workers.close, *[_closer(w) for w in self._pipe_workers])
        workers.start()
        self._workers = workers
        self._turn = 0

    def _get(self):
        readers = [w.reader for w in self._pipe_workers]
        while True:
            ready = wait_for_sentinels(readers + self._workers.sentinels)
            self._turn = (self._turn + 1) % len(readers)  # take turns among ready workers
            for k in itertools.chain(range(self._turn, len(readers)), range(self._turn)):
                if readers[k] in ready:
                    return self._read(k)
            dead = self._workers.dead()  # a worker ended and its pipe is empty
            if dead is not None:
                name, proc = dead
                raise DataFlowWorkerError("{} (pid {}) {} without reporting an error".format(
                    name, proc.pid, _describe_exit(proc.exitcode)))

    def _read(self, k):
        try:
            msg = self._pipe_workers[k].reader.recv_bytes()
        except EOFError:
            proc = self._workers.procs[k]
            proc.join(self._workers.join_timeout)
            raise DataFlowWorkerError("{} (pid {}) {} without reporting an error".format(
                self._workers.names[k], proc.pid, _describe_exit(proc.exitcode))) from None
        if msg[:1] == _REPORT_TAG:
            raise DataFlowWorkerError(msg[1:].decode('utf-8', 'replace'))
        self._tokens.release()
        return pickle.loads(memoryview(msg)[1:])

    def __iter__(self):
        yield from self._iterate(self._get, self._size)


# ------------------------------------------------------------------ MultiThreadRunner

class _ThreadWorker(StoppableThread):
    def __init__(self, df, q, on_error, name):
        super(_ThreadWorker, self).__init__(name=name, daemon=True)
        self.df, self.queue, self._on_error = df, q, on_error

    def run(self):
        try:
            for dp in _repeat_forever(self.df, self.name):
                if not self.queue_put_stoppable(self.queue, dp):
                    return
        except Exception as err:
            if not self.stopped():
                self._on_error(self.name, err)


class MultiThreadRunner(_Closable, DataFlow):
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
            self._error = _thread_error(name, err)

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
