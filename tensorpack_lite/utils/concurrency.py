"""Threads and processes that can be stopped, and helpers to keep child processes tidy.

Nothing here imports TensorFlow at import time; :class:`ShareSessionThread` imports it
(through :mod:`tensorpack_lite.compat`) only when started.
"""

import atexit
import faulthandler
import multiprocessing as mp
import os
import platform
import queue
import signal
import subprocess
import threading
import weakref
from contextlib import contextmanager

from . import logger
from .argtools import log_once
from .death_signal import set_parent_death_signal

__all__ = ['StoppableThread', 'LoopThread', 'ShareSessionThread', 'DIE',
           'ensure_proc_terminate', 'start_proc_mask_signal', 'mask_sigint',
           'enable_death_signal', 'subproc_call', 'DaemonCall', 'run_with_timeout', 'bound_exit']


class DIE(object):
    """A sentinel to put in a queue to tell its consumer to finish."""


class StoppableThread(threading.Thread):
    """A thread with a stop event.

    The thread's own loop should check :meth:`stopped`; blocking queue operations should go
    through :meth:`queue_put_stoppable` / :meth:`queue_get_stoppable`, which wait in short
    slices and give up once :meth:`stop` was called, so the thread never hangs on a queue.
    """

    poll_interval = 0.2
    """Seconds between two checks of the stop event while blocked on a queue."""

    def __init__(self, evt=None, **kwargs):
        """
        Args:
            evt (threading.Event): the stop event; a new one when None. Sharing one event
                lets several threads be stopped together.
            kwargs: passed to ``threading.Thread`` (e.g. ``name``, ``daemon``, ``target``).
        """
        super(StoppableThread, self).__init__(**kwargs)
        self._stop_evt = threading.Event() if evt is None else evt

    def stop(self):
        """Ask the thread to stop (sets the stop event; does not join)."""
        self._stop_evt.set()

    def stopped(self):
        """Whether :meth:`stop` was called."""
        return self._stop_evt.is_set()

    def queue_put_stoppable(self, q, obj):
        """Put ``obj`` into ``q``, waiting for room unless the thread is stopped.

        Returns:
            bool: True if ``obj`` was put, False if the thread was stopped first.
        """
        while not self.stopped():
            try:
                q.put(obj, timeout=self.poll_interval)
                return True
            except queue.Full:
                pass
        return False

    def queue_get_stoppable(self, q):
        """Take an element from ``q``, waiting for one unless the thread is stopped.

        Returns:
            the element, or None if the thread was stopped first.
        """
        while not self.stopped():
            try:
                return q.get(timeout=self.poll_interval)
            except queue.Empty:
                pass
        return None


class LoopThread(StoppableThread):
    """A daemon thread that calls ``func()`` over and over until stopped."""

    def __init__(self, func, pausable=True):
        """
        Args:
            func: a callable taking no argument.
            pausable (bool): whether :meth:`pause` / :meth:`resume` may be used.
        """
        super(LoopThread, self).__init__()
        self._func = func
        self._pausable = pausable
        self._running = threading.Event()
        self._running.set()
        self.daemon = True

    def run(self):
        while not self.stopped():
            if self._pausable:
                # wait while paused, but keep an eye on the stop event
                while not self._running.wait(self.poll_interval):
                    if self.stopped():
                        return
                if self.stopped():
                    return
            self._func()

    def pause(self):
        """Stop calling ``func`` (a call in progress finishes first)."""
        if not self._pausable:
            raise RuntimeError("This LoopThread was created with pausable=False")
        self._running.clear()

    def resume(self):
        """Call ``func`` again after :meth:`pause`."""
        if not self._pausable:
            raise RuntimeError("This LoopThread was created with pausable=False")
        self._running.set()


class ShareSessionThread(threading.Thread):
    """A thread that runs with a TensorFlow session as its default session.

    The session is the default session when :meth:`start` is called, or, when there is
    none then, the default session of the thread that constructed this object. Use it:

    * by wrapping another thread: ``ShareSessionThread(th).start()`` runs ``th.run()``;
    * with ``target=`` (and ``args=``, ``kwargs=``) as for ``threading.Thread``;
    * by subclassing and writing ``with self.default_sess(): ...`` in ``run()``.
    """

    def __init__(self, th=None, **kwargs):
        """
        Args:
            th (threading.Thread): a thread whose ``run()`` this thread executes; its name
                and daemon flag are copied.
            kwargs: passed to ``threading.Thread``.
        """
        super(ShareSessionThread, self).__init__(**kwargs)
        if th is not None:
            if not isinstance(th, threading.Thread):
                raise TypeError("ShareSessionThread wraps a threading.Thread, got {!r}".format(th))
            self.name = th.name
            self.daemon = th.daemon
        self._th = th
        self._sess = self._current_default_session()

    @staticmethod
    def _current_default_session():
        from ..compat import tfv1
        return tfv1.get_default_session()

    def start(self):
        sess = self._current_default_session()
        if sess is not None:
            self._sess = sess
        super(ShareSessionThread, self).start()

    @contextmanager
    def default_sess(self):
        """Context manager making the captured session the default one in this thread.
        Yields the session (None, with a warning, when none was captured)."""
        if self._sess is not None:
            with self._sess.as_default():
                yield self._sess
        else:
            logger.warn("ShareSessionThread {} was created and started without a default "
                        "session!".format(self.name))
            yield None

    def run(self):
        if self._th is None and getattr(self, '_target', None) is None:
            raise NotImplementedError(
                "ShareSessionThread needs a thread to wrap, a target, or run() overridden")
        with self.default_sess():
            if self._th is not None:
                self._th.run()
            else:
                super(ShareSessionThread, self).run()


class DaemonCall:
    """``func()``, started at once in a daemon thread named ``name``; its result is taken
    later. A call left running never holds up the process's exit by itself (see
    :func:`bound_exit` for what it may be waiting on inside a library).

    Example::

        call = DaemonCall(read_remote_value, 'read')
        ...                       # other work meanwhile
        value = call.result()     # waits; an exception the call raised is raised here
    """

    def __init__(self, func, name):
        self._outcome = {}

        def target():
            try:
                self._outcome['value'] = func()
            except BaseException as err:   # handed to the caller by result()
                self._outcome['error'] = err

        self._thread = threading.Thread(target=target, name=name, daemon=True)
        self._thread.start()

    @property
    def name(self):
        """The name of its thread."""
        return self._thread.name

    @property
    def running(self):
        return self._thread.is_alive()

    def wait(self, timeout=None):
        """Wait at most ``timeout`` seconds (None: until it ends); whether it ended."""
        self._thread.join(None if timeout is None else max(timeout, 0))
        return not self._thread.is_alive()

    def result(self):
        """Wait until it ends; what it returned (what it raised is raised here)."""
        self._thread.join()
        if 'error' in self._outcome:
            raise self._outcome['error']
        return self._outcome['value']


def run_with_timeout(func, timeout, name):
    """Run ``func()`` in a daemon thread named ``name`` and wait for it at most ``timeout``
    seconds. Returns True when it finished (an exception it raised is raised here), False when
    it is still running: it is then abandoned, goes on in the background, and cannot hold up
    the process's exit (see :func:`bound_exit`)."""
    call = DaemonCall(func, name)
    if not call.wait(timeout):
        return False
    call.result()
    return True


_exit_bound = []


def bound_exit(seconds):
    """Make sure the interpreter's exit takes at most ``seconds`` once it begins: after
    something was abandoned in a thread (e.g. blocked in a session that will never answer),
    the exit could wait on it. When the bound passes, faulthandler prints every thread's
    stack and ends the process with status 1. Armed at exit, so a program that goes on
    running is not affected; later calls only keep the shortest bound."""
    if not _exit_bound:
        atexit.register(lambda: faulthandler.dump_traceback_later(_exit_bound[0], exit=True))
        _exit_bound.append(seconds)
    _exit_bound[0] = min(_exit_bound[0], seconds)


def ensure_proc_terminate(proc):
    """Make sure ``proc`` is terminated (and joined) when the current process exits normally.

    Args:
        proc (multiprocessing.Process or list): one process or a list of them. Only weak
            references are kept, so this does not keep process objects alive.
    """
    if isinstance(proc, (list, tuple)):
        for p in proc:
            ensure_proc_terminate(p)
        return
    if not isinstance(proc, mp.process.BaseProcess):
        raise TypeError("ensure_proc_terminate() expects multiprocessing processes, got {!r}"
                        .format(proc))

    def _terminate(ref):
        p = ref()
        if p is None:
            return
        try:
            if not p.is_alive():
                return
        except (AssertionError, ValueError):  # not our child, or already closed
            return
        p.terminate()
        p.join()

    atexit.register(_terminate, weakref.ref(proc))


def _is_main_thread():
    return threading.current_thread() is threading.main_thread()


@contextmanager
def mask_sigint():
    """Ignore SIGINT inside the block (main thread only; signals cannot be changed from
    other threads). Yields whether SIGINT was actually masked."""
    if _is_main_thread():
        old_handler = signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            yield True
        finally:
            # None means the old handler was not installed from Python: fall back to the default
            signal.signal(signal.SIGINT, signal.SIG_DFL if old_handler is None else old_handler)
    else:
        yield False


def _start_method(p):
    """The start method ``p`` will use, without fixing the global default as a side effect."""
    method = getattr(p, '_start_method', None) or mp.get_start_method(allow_none=True)
    if method is None and platform.system() == 'Linux':
        method = 'fork'  # the platform default until Python 3.14
    return method


def start_proc_mask_signal(proc):
    """Start processes with SIGINT ignored in them, so that Ctrl-C reaches the parent only
    (the parent then decides how to end its children).

    Args:
        proc (multiprocessing.Process or list): one process or a list of them.
    """
    if not isinstance(proc, (list, tuple)):
        proc = [proc]
    with mask_sigint():
        for p in proc:
            if _start_method(p) == 'fork':
                log_once("Starting processes with the 'fork' start method copies the parent, "
                         "which may be unsafe (e.g. with threads) and wastes memory. Consider "
                         "multiprocessing.set_start_method('forkserver') or 'spawn'.", 'debug')
            p.start()


def enable_death_signal(_warn=True, sig=signal.SIGTERM):
    """Ask the Linux kernel to send ``sig`` to the calling process when its parent dies, so
    that a worker process does not outlive a killed parent. Call it in the child
    (:func:`~tensorpack_lite.utils.death_signal.set_parent_death_signal`).

    The default is SIGTERM rather than SIGHUP: a run started under ``nohup`` ignores SIGHUP,
    and that disposition is inherited by its workers.

    A no-op (with a debug log) on other systems; a warning (once) if ``prctl`` fails.
    """
    if platform.system() != 'Linux':
        logger.debug("enable_death_signal() is a no-op on {}".format(platform.system()))
        return
    try:
        set_parent_death_signal(sig)
    except OSError as err:
        if _warn:
            log_once("enable_death_signal(): {}; child processes may outlive their parent.".format(err),
                     'warn')


def _kill_group(p):
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except OSError:
        try:
            p.kill()
        except OSError:
            pass


def subproc_call(cmd, timeout=None):
    """Run a command and collect its output (stdout and stderr together).

    Args:
        cmd (str or list): a shell command line (str), or an argument list (run without a shell).
        timeout (float): seconds before the command (and everything it started) is killed.

    Returns:
        tuple: ``(output, returncode)`` with ``output`` as bytes. ``returncode`` is the
        command's exit status, -1 on timeout, -2 when the command could not be run.
        Failures and timeouts are logged.
    """
    shell = isinstance(cmd, str)
    try:
        p = subprocess.Popen(cmd, shell=shell, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL, start_new_session=True)
    except Exception as err:
        logger.warn("Command '{}' failed to run: {}".format(cmd, err))
        return b'', -2
    try:
        output, _ = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(p)
        output, _ = p.communicate()
        logger.warn("Command '{}' timed out after {} sec and was killed.".format(cmd, timeout))
        if output:
            logger.warn(output.decode('utf-8', errors='replace').rstrip())
        return output or b'', -1
    except BaseException:  # e.g. KeyboardInterrupt: do not leave the command running
        _kill_group(p)
        p.wait()
        raise
    if p.returncode != 0:
        logger.warn("Command '{}' failed, return code={}".format(cmd, p.returncode))
        if output:
            logger.warn(output.decode('utf-8', errors='replace').rstrip())
    return output, p.returncode
