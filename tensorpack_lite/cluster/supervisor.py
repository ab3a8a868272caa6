"""The job supervisor: one policy of attempts, restarts, signals, timeouts and exit codes, which
every launcher drives (the local launcher, :mod:`~tensorpack_lite.cluster.launch`, and Ray's,
:mod:`~tensorpack_lite.cluster.ray`). What differs between them is only how the tasks of an
attempt are placed and started: a :class:`Job` starts each attempt, a :class:`RunningAttempt`
watches its tasks.

The policy (:func:`supervise`):

- an attempt runs until its tasks end; one that failed starts the job again, whole, up to
  :attr:`RestartPolicy.max_restarts` times, :attr:`RestartPolicy.delay` seconds later; an
  attempt that ended for a resize starts it again without counting a restart;
- SIGINT and SIGTERM are passed on to every task of the running attempt, and a second one is
  passed on as SIGKILL; after a signal no attempt starts (one that arrives while waiting to
  restart ends the wait at once);
- ``timeout`` counts from the first start and ends the running attempt (exit code 124, no restart);
- the exit code is the last attempt's (0, or the code of its first failure, 128 + n for a task
  that signal n ended: :func:`shell_exit_code`), 128 + n when signal n ended a job whose last
  attempt succeeded or that never started, 1 when an attempt could not be started.

No TensorFlow is imported here.
"""

import signal
import threading
import time

from ..utils.argtools import is_int

__all__ = ['TIMEOUT_EXIT_CODE', 'FORWARDED_SIGNALS', 'shell_exit_code', 'RestartPolicy', 'RunningAttempt',
           'Job', 'supervise']

TIMEOUT_EXIT_CODE = 124
"""The exit code of a job that its timeout ended (as coreutils' ``timeout``)."""

FORWARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM)
"""The signals a supervised job passes on to its tasks."""


def shell_exit_code(returncode):
    """A process's return code as a shell exit code (signal n -> 128 + n)."""
    return 128 - returncode if returncode < 0 else returncode


class RestartPolicy:
    """How a job starts again after a failed attempt: up to ``max_restarts`` times (0: never),
    ``delay`` seconds after the failure."""

    def __init__(self, max_restarts=0, delay=0.0):
        if not is_int(max_restarts) or max_restarts < 0:
            raise ValueError("RestartPolicy: max_restarts must be an integer >= 0, got {!r}".format(
                max_restarts))
        if delay < 0:
            raise ValueError("RestartPolicy: delay must be >= 0, got {!r}".format(delay))
        self.max_restarts, self.delay = int(max_restarts), float(delay)


class RunningAttempt:
    """The tasks of one start of a job, as the supervisor watches them. Subclasses say when the
    tasks have ended (:meth:`poll`), pass signals on (:meth:`pass_signal`), end them at the
    timeout (:meth:`time_out`) and give the attempt's :attr:`exit_code`."""

    def poll(self):
        """Look at the tasks once, after waiting a moment for one to end; returns whether every
        task has ended (or the attempt gave them up)."""
        raise NotImplementedError

    def pass_signal(self, received, sig):
        """The job received signal ``received``: pass ``sig`` on to every task (``received`` the
        first time, SIGKILL after)."""
        raise NotImplementedError

    def time_out(self, timeout):
        """The job's ``timeout`` (seconds) passed: end every task; :meth:`poll` goes on until they
        have ended."""
        raise NotImplementedError

    def close(self):
        """Release what the attempt holds, once it has ended (or failed to be watched)."""

    @property
    def exit_code(self):
        """Once ended: 0 when it succeeded, else the shell exit code of its first failure."""
        raise NotImplementedError

    @property
    def outcome(self):
        """Once ended: ``'finished'``, ``'failed'`` or ``'resize'`` (ended to start again with
        another size)."""
        return 'finished' if self.exit_code == 0 else 'failed'

    def wait(self, timeout=None):
        """Wait until the tasks have ended; returns :attr:`exit_code`, or
        :data:`TIMEOUT_EXIT_CODE` when they were ended after ``timeout`` seconds."""
        return _watch(self, None if timeout is None else time.monotonic() + timeout, timeout, [])[0]


class Job:
    """What a launcher tells the supervisor: how to start an attempt (:meth:`start_attempt`) and
    what to do and say between two attempts."""

    def start_attempt(self, number, stopping):
        """Start attempt ``number`` (1, 2, ...); returns its :class:`RunningAttempt`, or None
        when it cannot start (the job ends with exit code 1). ``stopping`` is a
        :class:`threading.Event` set when a signal arrives (to stop waiting for room)."""
        raise NotImplementedError

    def before_restart(self, attempt, restart, policy):
        """``attempt`` failed and the job starts again: restart number ``restart`` of
        ``policy.max_restarts`` (say so; e.g. shrink an elastic job)."""

    def before_resize(self, attempt):
        """``attempt`` ended to be resized; the job starts again (no restart is counted)."""

    def give_up(self, attempt, attempts, policy):
        """``attempt`` failed and no restart is left after ``attempts`` attempts (say so)."""


def _watch(attempt, deadline, timeout, received):
    """Watch ``attempt`` until it ends, passing on the signals in ``received`` (a list the
    supervisor's handler appends to) and ending it at ``deadline``; returns ``(exit code, whether
    the deadline ended it)``."""
    forwarded, timed_out = 0, False
    try:
        while not attempt.poll():
            if len(received) > forwarded:
                attempt.pass_signal(received[-1], signal.SIGKILL if forwarded else received[0])
                forwarded = len(received)
            if deadline is not None and not timed_out and time.monotonic() >= deadline:
                timed_out = True
                attempt.time_out(timeout)
    finally:
        attempt.close()
    return (TIMEOUT_EXIT_CODE if timed_out else attempt.exit_code), timed_out


def supervise(job, policy=None, timeout=None, forward_signals=True):
    """Run ``job`` under the policy of the module's doc until it ends; returns the exit code.

    Args:
        job (Job): starts the attempts.
        policy (RestartPolicy): the restarts (default: none).
        timeout (float): seconds from the first start after which the job is ended (124).
        forward_signals (bool): pass SIGINT and SIGTERM on to the tasks (handlers are set for
            the time of the job, then the previous ones restored: call it from the main thread).
    """
    policy = RestartPolicy() if policy is None else policy
    deadline = None if timeout is None else time.monotonic() + timeout
    received, stopping = [], threading.Event()

    def on_signal(sig, _):
        received.append(sig)
        stopping.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in FORWARDED_SIGNALS} if forward_signals else {}
    try:
        code, restarts, number = 0, 0, 0
        while not received:
            number += 1
            attempt = job.start_attempt(number, stopping)
            if attempt is None:
                return 1
            code, timed_out = _watch(attempt, deadline, timeout, received)
            if timed_out or received or attempt.outcome == 'finished':
                break
            if attempt.outcome == 'resize':
                job.before_resize(attempt)
                continue
            if restarts == policy.max_restarts:
                job.give_up(attempt, number, policy)
                break
            restarts += 1
            job.before_restart(attempt, restarts, policy)
            stopping.wait(policy.delay)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 128 + received[0] if received and code == 0 else code
