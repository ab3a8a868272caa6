"""A parent waiting for its workers: warnings, then an error, naming the workers that stay
silent (:class:`IdleWatch`)."""

import time

from ..utils import logger
from .workers import DataFlowWorkerError

__all__ = ['IdleWatch']


def _soonest(*times):
    """The smallest of ``times`` that are not None; None if all are."""
    given = [t for t in times if t is not None]
    return min(given) if given else None


class IdleWatch(object):
    """Watches a parent waiting for its workers. Each wait (:meth:`start_wait`) with nothing
    arriving logs a warning every ``warn_after`` seconds, and raises
    :class:`DataFlowWorkerError` after ``timeout`` seconds (None: never); both name the
    watched workers (index, pid) and how long each has been silent, longest first.

    Args:
        owner (str): who waits, for the messages.
        workers (WorkerProcesses): the workers (names and pids).
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
        """The parent starts waiting: the clocks of the warning and of the timeout start."""
        now = time.monotonic()
        self._wait_start = now
        self._next_warning = None if self.warn_after is None else now + self.warn_after

    def seconds_left(self, until=None):
        """Seconds until :meth:`check` has something to do, or until ``until`` (a
        ``time.monotonic()`` deadline) if that comes first; None: never."""
        due = _soonest(self._next_warning, self._deadline(), until)
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
