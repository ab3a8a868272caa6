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
"""

import atexit
import contextlib
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
from ..utils.concurrency import StoppableThread, enable_death_signal, mask_sigint
from ..utils.serialize import dumps_frames, loads_frames
from .base import DataFlow, DataFlowReentrantGuard, ProxyDataFlow
from .epochs import repeat_epochs
from .state import without_position

__all__ = ['MultiProcessRunner', 'MultiProcessRunnerZMQ', 'MultiThreadRunner', 'DataFlowWorkerError',
           'PrefetchData', 'MultiProcessPrefetchData', 'PrefetchDataZMQ', 'MultiThreadPrefetchData',
           'PlasmaPutData', 'PlasmaGetData']


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


def _set_opencv_threads(count):
    """In a worker: give OpenCV ``count`` threads, if OpenCV is loaded (it is not imported
    here). One thread is asked as 0 (OpenCV's "sequential"): ``cv2.setNumThreads(1)`` in a
    process forked after its parent used OpenCV's thread pool hangs (OpenCV 5.0, pthreads)."""
    cv2 = sys.modules.get('cv2')
    if count is None or cv2 is None or not hasattr(cv2, 'setNumThreads'):
        return
    cv2.setNumThreads(0 if int(count) <= 1 else int(count))


_GUARD_TAKES_SIGTERM = hasattr(signal, 'sigtimedwait')


def _start_guard(parent_pid, on_sigterm, on_parent_gone, interval=1.0):
    """In a worker whose threads all block SIGTERM: start the thread that takes the SIGTERM
    sent to the process (``on_sigterm()``) and notices the parent gone (``on_parent_gone()``,
    where the death signal is not available or was tied to a thread that ended). Both must
    end the process.

    Python runs signal handlers in the main thread only, and the kernel may hand a process's
    signal to any thread that does not block it: a handler then waits until the main thread
    leaves whatever C call it is in (a ZeroMQ poll without timeout: for ever). A thread that
    waits for the signal itself acts at once. Without ``sigtimedwait`` (macOS) SIGTERM is not
    blocked (:data:`_GUARD_TAKES_SIGTERM`) and ends the worker by its default action."""
    def guard():
        while True:
            if not _GUARD_TAKES_SIGTERM:
                time.sleep(interval)
            elif signal.sigtimedwait([signal.SIGTERM], interval) is not None:
                on_sigterm()
            if os.getppid() != parent_pid:
                on_parent_gone()
    threading.Thread(target=guard, name='worker-guard', daemon=True).start()


class _ProcessWorker(object):
    """The body of one worker process (template): ``_open()``, ``_loop()``, ``_close()``;
    a failure is sent to the parent with ``_report(text)``, then the process exits with 1.

    A worker given an :class:`_IPCDir` (``ipc``) joins it when it starts and leaves it on
    every way out: the end of :meth:`run`, SIGTERM (the parent's :meth:`_WorkerProcesses.close`
    or the death signal; taken by the guard thread, and the worker still dies by SIGTERM), and
    the guard noticing the parent gone.
    """

    ipc = None
    """The :class:`_IPCDir` of the parent's endpoints, set by :class:`_WorkerProcesses`."""

    opencv_threads = None
    """OpenCV threads in this worker (None: OpenCV's default), set by :class:`_WorkerProcesses`."""

    leave_grace = 5.0
    """Seconds a leaving worker waits for the other members of the ipc directory (see
    :meth:`_leave`)."""

    def __init__(self, owner, idx, parent_pid):
        self.owner = owner
        self.idx = idx
        self.parent_pid = parent_pid
        self._membership = None

    @property
    def name(self):
        return '{} worker #{}'.format(self.owner, self.idx)

    def run(self):
        # SIGTERM goes to the guard thread only (see _start_guard): blocked here first, so that
        # every thread started later (the guard, pyzmq's, a queue's feeder) has it blocked too;
        # one sent meanwhile waits for the guard. No handler inherited from the parent.
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        if _GUARD_TAKES_SIGTERM:
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
        if self.ipc is not None:
            self._membership = self.ipc.join()
            if self._membership is None:  # removed: the parent and every other worker are gone
                os._exit(1)
        enable_death_signal(_warn=self.idx == 0)
        if os.getppid() != self.parent_pid:  # the parent died before the death signal was set
            self._leave_and_exit()
        _start_guard(self.parent_pid, self._leave_and_die_by_sigterm, self._leave_and_exit)
        _set_opencv_threads(self.opencv_threads)
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
            self._leave()

    def _leave(self):
        """Leave the ipc directory (if any), waiting up to :attr:`leave_grace` seconds for the
        other members to leave (the threads of a dying parent hold its lock for a moment
        after the death signal was sent; a parent that closes removes the directory first,
        so this does not wait then)."""
        if self._membership is not None:
            self._membership.leave(wait=self.leave_grace)

    def _leave_and_exit(self):
        self._leave()
        os._exit(1)

    def _leave_and_die_by_sigterm(self):
        """In the guard thread: leave (after a leave in progress in another thread, if any),
        then end the process by the SIGTERM it was sent, unblocked in this thread only."""
        self._leave()
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
        os.kill(os.getpid(), signal.SIGTERM)  # taken by this thread on its way back from kill()
        os._exit(1)  # not reached

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


class _WorkerProcesses(object):
    """The worker processes of one parallel DataFlow.

    They start with SIGINT ignored (Ctrl-C goes to the parent only), and :meth:`close` ends
    them: the ipc directory (an :class:`_IPCDir`, of which each of them is then a member; see
    :class:`_ProcessWorker`) is removed first, so that no worker waits for it, then every
    worker gets SIGTERM at once, and those still running after :attr:`join_timeout` seconds
    get SIGKILL. The workers of every parallel DataFlow still open when the interpreter exits
    are ended together (:class:`_OpenWorkers`).
    """

    join_timeout = 5.0

    def __init__(self, workers, ipc=None, opencv_threads=None):
        ctx = _start_method_context()
        self.workers, self.ipc = workers, ipc
        for worker in workers:
            worker.ipc, worker.opencv_threads = ipc, opencv_threads
        self.names = [w.name for w in workers]
        self.procs = [ctx.Process(target=w.run, name=w.name) for w in workers]
        self._owner_pid = os.getpid()

    def start(self):
        _OPEN_WORKERS.add(self)
        with mask_sigint():  # Ctrl-C then reaches the parent only
            for worker, proc in zip(self.workers, self.procs):
                worker.before_fork()
                proc.start()
                worker.after_fork()

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
        self.stop()
        self.join(time.monotonic() + self.join_timeout)

    def stop(self):
        """Remove the ipc directory, then send SIGTERM to every worker still running (no
        waiting: :meth:`join` waits)."""
        if os.getpid() != self._owner_pid:
            return
        _OPEN_WORKERS.discard(self)
        if self.ipc is not None:  # first: the workers leaving then find nothing to wait for
            self.ipc.cleanup()
        for p in self.procs:
            if p.pid is not None and p.exitcode is None:
                p.terminate()

    def join(self, deadline):
        """Wait until ``deadline`` (``time.monotonic()``) for the workers told to stop, then
        SIGKILL those still running and reap them."""
        if os.getpid() != self._owner_pid:
            return
        started = [p for p in self.procs if p.pid is not None]
        for p in started:
            p.join(max(0.0, deadline - time.monotonic()))
        stragglers = [p for p in started if p.exitcode is None]
        for p in stragglers:
            p.kill()
        for p in stragglers:
            p.join(self.join_timeout)


class _OpenWorkers(object):
    """The :class:`_WorkerProcesses` of this process that were started and not stopped yet.

    At interpreter exit (``atexit``, which runs before multiprocessing's own exit hook and
    the dataflows' finalizers), :meth:`close_all` ends them all together: every ipc directory
    is removed, every worker gets SIGTERM, then they are joined against one deadline. So a
    program that leaves its parallel DataFlows open exits at once, whatever the number of
    workers.
    """

    def __init__(self):
        self._open = weakref.WeakSet()
        self._pid = None  # the process whose atexit hook is registered

    def add(self, workers):
        if self._pid != os.getpid():  # first use, or a forked child that inherited the set
            self._open = weakref.WeakSet()
            self._pid = os.getpid()
            atexit.register(self.close_all)
        self._open.add(workers)

    def discard(self, workers):
        self._open.discard(workers)

    def close_all(self):
        if self._pid != os.getpid():
            return
        every = list(self._open)
        with mask_sigint():  # a Ctrl-C now would leave the workers to the death signal
            for workers in every:
                workers.stop()
            deadline = time.monotonic() + _WorkerProcesses.join_timeout
            for workers in every:
                workers.join(deadline)


_OPEN_WORKERS = _OpenWorkers()


class _IPCDir(object):
    """A private temporary directory for ``ipc://`` endpoints, shared by a parent and its
    worker processes and removed by the last of them to leave.

    Each member holds a shared ``flock`` on the directory through a descriptor of its own
    (:meth:`join`: the parent when it makes the directory, each worker when it starts); the
    kernel drops the lock when the process ends, however it ends. A member that leaves drops
    its lock, then tries to lock the directory exclusively without waiting: that succeeds
    only when no other member is left, and then it removes the directory. So a worker that
    ends never removes the endpoints of a living parent, and when the parent is killed
    (SIGKILL, or SIGTERM without a handler) the last of its workers to exit removes them.
    The parent's :meth:`cleanup` removes the directory in any case (its workers are ended
    by then).
    """

    _MAX_PATH = 103  # sockaddr_un.sun_path: 108 bytes on Linux, 104 on macOS, with a final NUL
    _MAX_SUFFIX = 36  # '/tplite-runner-XXXXXXXX/' + the endpoint's name

    def __init__(self, prefix):
        base = tempfile.gettempdir()
        if len(base) + self._MAX_SUFFIX > self._MAX_PATH:
            base = '/tmp'
        self.path = tempfile.mkdtemp(prefix='tplite-{}-'.format(prefix), dir=base)
        self._owner_pid = os.getpid()
        self._membership = self.join()

    def endpoint(self, name):
        return 'ipc://' + os.path.join(self.path, name)

    def join(self):
        """Make the calling process a member: its :class:`_Membership`, or None when the
        directory is gone already."""
        return _Membership.take(self.path)

    def cleanup(self):
        """In the parent: leave, and remove the directory whoever is left."""
        if os.getpid() == self._owner_pid:
            self._membership.leave()
            shutil.rmtree(self.path, ignore_errors=True)


class _Membership(object):
    """One process's shared lock on an :class:`_IPCDir` (see there).

    Children forked from this process close the descriptors of its memberships at once
    (``os.register_at_fork``), so that each lock counts one process: a worker takes its own
    lock when it starts, and a process forked by something else holds none.
    """

    _held = set()  # descriptors of the memberships of this process
    _fork_hook_registered = False

    def __init__(self, path, fd):
        self.path, self._fd, self._pid = path, fd, os.getpid()
        self._lock = threading.Lock()
        self._leaving_threads = set()

    @classmethod
    def take(cls, path):
        import fcntl
        if not _Membership._fork_hook_registered:
            os.register_at_fork(after_in_child=cls._close_inherited)
            _Membership._fork_hook_registered = True
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            return None
        fcntl.flock(fd, fcntl.LOCK_SH)
        cls._held.add(fd)
        return cls(path, fd)

    @classmethod
    def _close_inherited(cls):
        for fd in cls._held:
            try:
                os.close(fd)
            except OSError:
                pass
        cls._held.clear()

    def leave(self, wait=0.0):
        """Drop the lock; remove the directory if no other member is left, or if they all
        leave within ``wait`` seconds. Idempotent and safe from a signal handler: returns
        False, doing nothing, when it interrupts a leave in progress in the same thread."""
        me = threading.get_ident()
        if me in self._leaving_threads:
            return False
        self._leaving_threads.add(me)
        try:
            with self._lock:
                if self._fd is not None and os.getpid() == self._pid:
                    self._held.discard(self._fd)
                    os.close(self._fd)
                    self._fd = None
                    self._remove_when_last(time.monotonic() + wait)
        finally:
            self._leaving_threads.discard(me)
        return True

    def _remove_when_last(self, deadline):
        import fcntl
        while True:
            try:
                probe = os.open(self.path, os.O_RDONLY)
            except OSError:
                return  # removed by another member
            try:
                fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                pass  # another member is left (or is checking, and will remove it)
            else:
                shutil.rmtree(self.path, ignore_errors=True)
                return
            finally:
                os.close(probe)
            if time.monotonic() >= deadline:
                return
            time.sleep(0.02)


def _zmq():
    try:
        import zmq
    except ImportError:
        raise ImportError("This DataFlow needs pyzmq: pip install pyzmq") from None
    return zmq


class _Sockets(object):
    """A ZeroMQ context and its sockets, closed together by :meth:`close` (a no-op in a
    forked child, which must not touch its parent's sockets).

    The sockets are held here, not only in pyzmq's weak set of the context's sockets: when a
    dataflow in a reference cycle is garbage-collected, the collector clears the weak
    references into the cycle before it runs the dataflow's cleanup, and terminating a
    context whose sockets are still open (but no longer in its set) waits for ever."""

    copy_below = 256 << 10
    """Frames smaller than this (bytes) are copied into their message rather than lent to
    ZeroMQ: a lent frame costs pyzmq a message to its garbage-collection thread (a wake-up
    and the GIL) when ZeroMQ is done with it, more than copying a few hundred KiB."""

    def __init__(self):
        self.zmq = _zmq()
        self.context = self.zmq.Context()
        self._sockets = []
        self._owner_pid = os.getpid()

    def socket(self, kind, hwm):
        sock = self.context.socket(kind)
        self._sockets.append(sock)
        sock.set_hwm(hwm)
        sock.copy_threshold = self.copy_below
        return sock

    def close(self, linger=0.0):
        """Close the sockets (waiting up to ``linger`` seconds to send what is queued)."""
        if os.getpid() != self._owner_pid:
            return
        linger_ms = int(linger * 1000)
        for sock in self._sockets:
            sock.close(linger=linger_ms)   # a closed socket ignores it
        self._sockets = []
        self.context.destroy(linger=linger_ms)  # closes any other socket, then terminates


def _soonest(*times):
    """The smallest of ``times`` that are not None; None if all are."""
    given = [t for t in times if t is not None]
    return min(given) if given else None


class _IdleWatch(object):
    """Watches a parent waiting for its workers. Each wait (:meth:`start_wait`) with nothing
    arriving logs a warning every ``warn_after`` seconds, and raises
    :class:`DataFlowWorkerError` after ``timeout`` seconds (None: never); both name the
    watched workers (index, pid) and how long each has been silent, longest first.

    Args:
        owner (str): who waits, for the messages.
        workers (_WorkerProcesses): the workers (names and pids).
        warn_after, timeout (float or None): seconds.
        watched (list[int]): the workers that send datapoints (default: all).
    """

    def __init__(self, owner, workers, warn_after, timeout, watched=None):
        self.owner, self.workers = owner, workers
        self.warn_after, self.timeout = warn_after, timeout
        now = time.monotonic()
        watched = range(len(workers.procs)) if watched is None else watched
        self._last_heard = {k: None for k in watched}
        self._started = now
        self._wait_start = self._next_warning = now

    def heard(self, idx):
        """A message from worker ``idx`` arrived."""
        if idx in self._last_heard:
            self._last_heard[idx] = time.monotonic()

    def start_wait(self):
        now = time.monotonic()
        self._wait_start = now
        self._next_warning = None if self.warn_after is None else now + self.warn_after

    def seconds_left(self):
        """Seconds until :meth:`check` has something to do (None: never)."""
        due = _soonest(self._next_warning, self._deadline())
        return None if due is None else max(0.0, due - time.monotonic())

    def check(self):
        """Warn, then raise, if it is time to (a warning that is due is never skipped)."""
        now = time.monotonic()
        waited = now - self._wait_start
        if self._next_warning is not None and now >= self._next_warning:
            self._next_warning = now + self.warn_after
            logger.warn("[{}] Nothing arrived from the workers for {:.0f} s; silent: {}. A worker may be "
                        "stuck (a blocking read, a deadlock) or slow; `py-spy dump --pid <pid>` shows "
                        "where. Set {}.idle_timeout to fail instead of waiting.".format(
                            self.owner, waited, self._silent(now), self.owner))
        if self.timeout is not None and waited >= self.timeout:
            raise DataFlowWorkerError(
                "{}: nothing arrived from the workers for {:.0f} s (idle_timeout={}); silent: {}. "
                "A worker may be stuck (a blocking read, a deadlock); `py-spy dump --pid <pid>` shows "
                "where.".format(self.owner, waited, self.timeout, self._silent(now)))

    def _deadline(self):
        return None if self.timeout is None else self._wait_start + self.timeout

    def _silent(self, now):
        def since(k):
            last = self._last_heard[k]
            return self._started if last is None else last
        parts = []
        for k in sorted(self._last_heard, key=since):
            what = 'nothing since it started' if self._last_heard[k] is None else 'nothing'
            parts.append("{} (pid {}): {} for {:.0f} s".format(
                self.workers.names[k], self.workers.procs[k].pid, what, now - since(k)))
        return '; '.join(parts)


_ERROR_TAG = b''  # first frame of a worker's error report (a datapoint's header is never empty)


class _ZMQCollector(object):
    """Receives multi-part messages from worker processes on a PULL socket, watching the
    workers at the same time: a worker's error report or death raises
    :class:`DataFlowWorkerError` at once, and silence is reported by ``watch``
    (an :class:`_IdleWatch`). ``worker_of(frames)`` tells which worker sent a message."""

    report_grace = 1.0
    """Seconds to wait, after a worker ended, for the error report it may have sent."""

    def __init__(self, pull_socket, workers, watch, worker_of):
        zmq = _zmq()
        self.socket = pull_socket
        self.workers = workers
        self.watch, self.worker_of = watch, worker_of
        self._poller = zmq.Poller()
        self._poller.register(pull_socket, zmq.POLLIN)
        for fd in workers.sentinels:
            self._poller.register(fd, zmq.POLLIN)

    def recv(self, timeout=None):
        """The frames of the next message that is not an error report; None if ``timeout``
        seconds pass first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        self.watch.start_wait()
        while True:
            wait = _soonest(self.watch.seconds_left(),
                            None if deadline is None else deadline - time.monotonic())
            wait_ms = None if wait is None else max(0, int(wait * 1000) + 1)
            ready = dict(self._poller.poll(wait_ms))
            if len(ready) > (self.socket in ready):  # a worker ended: do not wait for the others
                self._raise_for_dead_worker()
            if self.socket in ready:
                frames = self._check(self.socket.recv_multipart(copy=False))
                self.watch.heard(self.worker_of(frames))
                return frames
            if deadline is not None and time.monotonic() >= deadline:
                return None
            self.watch.check()

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
    collection or at exit, and report workers that leave the parent waiting.

    Example::

        df = MultiProcessRunnerZMQ(ds, num_proc=4)
        df.idle_timeout = 600   # fail if the workers send nothing for 10 minutes
    """

    idle_warning = 60.0
    """Seconds of waiting with nothing arriving from the workers after which a warning names
    them (index, pid, how long each has been silent); repeated every such period. None:
    no warning."""

    idle_timeout = None
    """Seconds of waiting with nothing arriving after which reading raises
    :class:`DataFlowWorkerError` naming the silent workers (and closes the dataflow). None:
    wait forever (as tensorpack)."""

    opencv_threads = 1
    """Threads OpenCV may use in each worker process (``cv2.setNumThreads`` when the worker
    starts, if OpenCV is imported by then). 1 (default): the workers are the parallelism,
    and OpenCV's own threads in every worker would only compete for the same cores. None:
    leave OpenCV's setting alone."""

    def __init__(self):
        self._reset_done = False
        self._failure = None
        self._guard = DataFlowReentrantGuard(type(self).__name__)

    @contextlib.contextmanager
    def _starting(self):
        """Around the start of the workers, in :meth:`reset_state`: once only; if anything
        fails, what was made so far (registered with :meth:`_on_close`) is released."""
        if self._reset_done:
            raise RuntimeError("{}.reset_state() was called twice: it starts the worker "
                               "processes, so call it once".format(type(self).__name__))
        self._reset_done = True
        self._cleanups = []
        self._finalizer = multiprocessing.util.Finalize(self, _run_all, args=(self._cleanups,),
                                                        exitpriority=10)
        try:
            yield
        except BaseException:
            self.close()
            raise

    def _on_close(self, action):
        """Run ``action`` (a callable not holding ``self``) once: at :meth:`close`, when this
        object is garbage-collected, or when the process exits -- also a process started by
        ``multiprocessing``, which would otherwise wait for our workers before exiting.
        Actions run in the reverse order of registration (the last made is released first)."""
        self._cleanups.insert(0, action)

    def _idle_watch(self, workers, watched=None):
        return _IdleWatch(type(self).__name__, workers, self.idle_warning, self.idle_timeout, watched)

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
    """Closes the parent's end of the pipe of ``pipe_worker`` (if it was made)."""
    def close():
        if pipe_worker.reader is not None:
            pipe_worker.reader.close()
    return close


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


_WORKER_COPIES = without_position(
    "its worker processes each run a copy of the DataFlow, whose position stays in the worker",
    "the datapoints after them come from the workers started anew, not those that would have followed")


# ------------------------------------------------------------------ MultiProcessRunnerZMQ

class _SharedSlots(object):
    """Shared-memory slots through which one worker hands big arrays to the parent with a
    single copy (a pipe costs two copies through the kernel, and page faults).

    Made by the parent before the fork (anonymous shared mappings, inherited by the worker):
    ``count`` slots of ``size`` bytes and one state byte per slot (0: free). The worker copies
    an array of ``min_bytes`` or more into a free slot and sends only the slot's number; the
    parent hands out arrays viewing the slot and frees the slot when the last of them is
    garbage-collected. Without a free slot (the consumer keeps arrays), or for an array too
    small or too big, the worker sends the array through the pipe instead. Pages are
    allocated as slots are first used. ``count`` 0: no slot, everything through the pipe.
    """

    def __init__(self, count, size, min_bytes):
        self.count, self.size, self.min_bytes = count, size, min_bytes
        self.memory = mmap.mmap(-1, count * size) if count else None  # MAP_SHARED | MAP_ANONYMOUS
        self.states = mmap.mmap(-1, count) if count else None

    # --- in the worker
    def lend(self, frames):
        """Copy each frame of ``frames`` (memoryviews) that fits into a free slot:
        ``(places, rest)``. ``places`` tells, frame after frame, whether it went into a slot
        (which one, how many bytes) or is among ``rest``, the frames to send in the message."""
        places, rest = [], []
        for frame in frames:
            slot = self._put(frame)
            if slot is None:
                places.append(_IN_MESSAGE)
                rest.append(frame)
            else:
                places.append(_PLACE.pack(_IN_SLOT, slot, frame.nbytes))
        return b''.join(places), rest

    def _put(self, frame):
        """Copy ``frame`` into a free slot: the slot's number, or None."""
        if not self.count or not self.min_bytes <= frame.nbytes <= self.size:
            return None
        slot = self.states.find(b'\0')
        if slot < 0:
            return None
        self.states[slot] = 1
        np.copyto(np.frombuffer(self.memory, np.uint8, frame.nbytes, slot * self.size),
                  np.frombuffer(frame, np.uint8))
        return slot

    # --- in the parent
    def collect(self, places, frames):
        """The frames :meth:`lend` was given, in order, from ``places`` and the ``frames``
        received: an array viewing its slot for each frame that went through one (the slot
        is freed when the last view of it is garbage-collected)."""
        if not self.count:
            return frames
        received, out = iter(frames), []
        for offset in range(0, len(places), _PLACE.size):
            kind, slot, nbytes = _PLACE.unpack_from(places, offset)
            if kind != _IN_SLOT:
                out.append(next(received))
                continue
            arr = np.frombuffer(self.memory, np.uint8, nbytes, slot * self.size)
            # views of arr (and loads_frames' arrays, through memoryviews) keep arr alive
            weakref.finalize(arr, _free_slot, self.states, slot)
            out.append(arr)
        return out


def _free_slot(states, slot):
    states[slot] = 0


def _reserve_shared_slots(owner, num_proc, count, size, min_bytes):
    """The :class:`_SharedSlots` of each of ``num_proc`` workers of the DataFlow class
    ``owner``; a MemoryError saying what to lower when the address space is short."""
    slots = []
    for k in range(num_proc):
        try:
            slots.append(_SharedSlots(max(0, count), size, min_bytes))
        except OSError as err:  # mmap: ENOMEM, e.g. under a limit of the address space (ulimit -v)
            each = count * size
            raise MemoryError(
                "{name}: cannot reserve the shared memory of worker #{k} ({err}). Each of the {n} "
                "workers reserves shared_memory_slots x shared_memory_slot_bytes = {slots} x {size} "
                "bytes ({each:g} MiB; {total:g} MiB in all) of address space. Lower "
                "{name}.shared_memory_slots (0: arrays go through the pipe) or "
                "{name}.shared_memory_slot_bytes, or use fewer workers.".format(
                    name=owner, k=k, err=err, n=num_proc, slots=count, size=size,
                    each=each / 2 ** 20, total=each * num_proc / 2 ** 20)) from err
    return slots


_PLACE = struct.Struct('<cIQ')  # where a data frame travels: kind, slot number, bytes used
_IN_SLOT = b's'
_IN_MESSAGE = _PLACE.pack(b'm', 0, 0)
_WORKER = struct.Struct('<H')  # which worker sent a message (first bytes of its layout)


class _PushWorker(_ProcessWorker):
    """Runs ``ds`` forever and sends every datapoint to the parent, as ``[header, layout,
    frame...]``: ``layout`` is the worker's number and the places of the big arrays
    (:meth:`_SharedSlots.lend`); the frames are those of the arrays that did not go through
    a slot."""

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
        for dp in repeat_epochs(self.ds, self.name):
            frames = dumps_frames(dp)
            places, rest = self.slots.lend(frames[1:])
            self.socket.send_multipart([frames[0], _WORKER.pack(self.idx) + places] + rest, copy=False)

    def _report(self, text):
        if self.pipes is not None:
            self.socket.send_multipart([_ERROR_TAG, text.encode('utf-8')])

    def _close(self):
        if self.pipes is not None:
            self.pipes.close(linger=_ZMQCollector.report_grace)


def _sender_of_datapoint(frames):
    """The worker that sent a datapoint of :class:`_PushWorker`."""
    return _WORKER.unpack_from(frames[1].buffer)[0]


class MultiProcessRunnerZMQ(_ParallelBase):
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
        self._size = _len_or_minus_one(ds)
        self._collector = None
        _warn_duplication(type(self).__name__, self.num_proc)

    def __len__(self):
        return len(self.ds)

    def reset_state(self):
        """Fork the workers (once)."""
        with self._starting():
            name = type(self).__name__
            self._slots = _reserve_shared_slots(name, self.num_proc, self.shared_memory_slots,
                                                self.shared_memory_slot_bytes, self.shared_memory_min_bytes)
            pipes = _Sockets()
            self._on_close(pipes.close)
            ipc = _IPCDir('runner')
            self._on_close(ipc.cleanup)
            endpoint = ipc.endpoint('data')
            workers = _WorkerProcesses([
                _PushWorker(name, k, os.getpid(), self.ds, endpoint, self._hwm, self._slots[k])
                for k in range(self.num_proc)], ipc, self.opencv_threads)
            self._on_close(workers.close)
            socket = pipes.socket(pipes.zmq.PULL, self._hwm)
            socket.bind(endpoint)
            workers.start()
            self._collector = _ZMQCollector(socket, workers, self._idle_watch(workers), _sender_of_datapoint)

    def _recv(self):
        frames = self._collector.recv()
        layout = frames[1].bytes
        data = self._slots[_WORKER.unpack_from(layout)[0]].collect(layout[_WORKER.size:], frames[2:])
        return loads_frames([frames[0]] + data)

    def __iter__(self):
        yield from self._iterate(self._recv, self._size)

    get_state, set_state = _WORKER_COPIES


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


class MultiProcessRunner(_ParallelBase, ProxyDataFlow):
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
        with self._starting():
            self._tokens = _start_method_context().Semaphore(self.num_prefetch)
            name = type(self).__name__
            self._pipe_workers = [_PipeWorker(name, k, os.getpid(), self.ds, self._tokens)
                                  for k in range(self.num_proc)]
            for worker in self._pipe_workers:
                self._on_close(_closer(worker))
            workers = _WorkerProcesses(self._pipe_workers, opencv_threads=self.opencv_threads)
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
