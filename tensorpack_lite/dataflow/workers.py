"""The worker processes of the parallel DataFlows.

:class:`ProcessWorker` is the body of one worker process (a template: open, loop, close, report
a failure to the parent); :class:`WorkerProcesses` starts a DataFlow's workers and ends them
(SIGTERM, then SIGKILL), and those still running when the interpreter exits are ended together.
A worker dies with its parent, even a parent killed with SIGKILL. A failed worker makes its
parent raise :class:`DataFlowWorkerError`.
"""

import atexit
import multiprocessing as mp
import os
import random
import signal
import sys
import threading
import time
import traceback
import weakref
from multiprocessing.connection import wait as wait_for_sentinels

import numpy as np

from ..utils.concurrency import enable_death_signal, mask_sigint
from ..utils.utils import fix_rng_seed, fixed_rng_seed

__all__ = ['DataFlowWorkerError', 'ProcessWorker', 'WorkerProcesses', 'start_method_context', 'describe_exit']


class DataFlowWorkerError(RuntimeError):
    """A worker (process or thread) of a parallel DataFlow failed: it raised, or it died.

    The message names the worker and its exception (with the worker's traceback), or how
    it died (exit code, signal).
    """


def start_method_context():
    """The ``multiprocessing`` context the workers start in: 'fork' where it exists, as
    tensorpack (dataflows are often not picklable)."""
    if 'fork' in mp.get_all_start_methods():
        return mp.get_context('fork')
    return mp.get_context()


def describe_exit(exitcode):
    """How a worker process ended, for a message: "exited with code 1", "was killed by signal
    SIGKILL"."""
    if exitcode is not None and exitcode < 0:
        try:
            return "was killed by signal {}".format(signal.Signals(-exitcode).name)
        except ValueError:
            return "was killed by signal {}".format(-exitcode)
    return "exited with code {}".format(exitcode)


def _reseed_worker(idx):
    """Give worker ``idx`` its own seeds: distinct per worker, reproducible after
    :func:`fix_rng_seed` (worker k then uses the fixed seed + k + 1)."""
    fixed = fixed_rng_seed()
    if fixed is not None:
        seed = (fixed + 1 + idx) % (2 ** 32)
        fix_rng_seed(seed)
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


class ProcessWorker(object):
    """The body of one worker process (template): ``_open()``, ``_loop()``, ``_close()``;
    a failure is sent to the parent with ``_report(text)``, then the process exits with 1.

    A worker given an :class:`IPCDir` (``ipc``) joins it when it starts and leaves it on
    every way out: the end of :meth:`run`, SIGTERM (the parent's :meth:`WorkerProcesses.close`
    or the death signal; taken by the guard thread, and the worker still dies by SIGTERM), and
    the guard noticing the parent gone.
    """

    ipc = None
    """The :class:`IPCDir` of the parent's endpoints, set by :class:`WorkerProcesses`."""

    opencv_threads = None
    """OpenCV threads in this worker (None: OpenCV's default), set by :class:`WorkerProcesses`."""

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


class WorkerProcesses(object):
    """The worker processes of one parallel DataFlow.

    They start with SIGINT ignored (Ctrl-C goes to the parent only), and :meth:`close` ends
    them: the ipc directory (an :class:`IPCDir`, of which each of them is then a member; see
    :class:`ProcessWorker`) is removed first, so that no worker waits for it, then every
    worker gets SIGTERM at once, and those still running after :attr:`join_timeout` seconds
    get SIGKILL. The workers of every parallel DataFlow still open when the interpreter exits
    are ended together (:class:`_OpenWorkers`).
    """

    join_timeout = 5.0

    def __init__(self, workers, ipc=None, opencv_threads=None):
        ctx = start_method_context()
        self.workers, self.ipc = workers, ipc
        for worker in workers:
            worker.ipc, worker.opencv_threads = ipc, opencv_threads
        self.names = [w.name for w in workers]
        self.procs = [ctx.Process(target=w.run, name=w.name) for w in workers]
        self._owner_pid = os.getpid()

    def start(self):
        """Start the worker processes (ended by :meth:`close`, or at the interpreter's exit)."""
        _OPEN_WORKERS.add(self)
        with mask_sigint():  # Ctrl-C then reaches the parent only
            for worker, proc in zip(self.workers, self.procs):
                worker.before_fork()
                proc.start()
                worker.after_fork()

    @property
    def sentinels(self):
        """The workers' sentinels, ready when a worker ends (``multiprocessing.connection.wait``)."""
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
    """The :class:`WorkerProcesses` of this process that were started and not stopped yet.

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
            deadline = time.monotonic() + WorkerProcesses.join_timeout
            for workers in every:
                workers.join(deadline)


_OPEN_WORKERS = _OpenWorkers()
