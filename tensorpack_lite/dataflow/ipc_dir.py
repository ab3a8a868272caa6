"""The private directory of a parallel DataFlow's ``ipc://`` endpoints (:class:`IPCDir`), shared
by the parent and its worker processes and removed by the last of them to leave, however they end.
"""

import os
import shutil
import tempfile
import threading
import time

__all__ = ['IPCDir']


class IPCDir(object):
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
        """The ``ipc://`` address of the endpoint ``name`` in this directory."""
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
    """One process's shared lock on an :class:`IPCDir` (see there).

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
