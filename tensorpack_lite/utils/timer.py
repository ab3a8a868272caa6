"""Timing helpers: log how long a block took, accumulate per-name totals, a pausable timer.

Example::

    with timed_operation('loading the dataset'):
        ds = load()
    # -> "Loading the dataset finished, time:1.2345 sec."

    for _ in range(100):
        with total_timer('preprocess'):
            preprocess()
    print_total_timer()   # also runs at interpreter exit

    speed = IterSpeedCounter(100)
    for batch in batches:
        speed()           # logs the time per call every 100 calls
"""

import atexit
from collections import defaultdict
from contextlib import contextmanager
from timeit import default_timer as _now

from . import logger
from .stats import StatCounter

__all__ = ['timed_operation', 'total_timer', 'print_total_timer', 'Timer', 'IterSpeedCounter']


@contextmanager
def timed_operation(msg, log_start=False):
    """Log how long the ``with`` block took once it finishes.

    Args:
        msg (str): what the block does, e.g. ``'building the graph'``; must not be empty.
        log_start (bool): also log ``"Start <msg> ..."`` when the block is entered.
    """
    if not msg:
        raise ValueError("timed_operation() needs a non-empty message")
    if log_start:
        logger.info('Start {} ...'.format(msg))
    start = _now()
    yield
    elapsed = _now() - start
    logger.info('{}{} finished, time:{:.4f} sec.'.format(msg[0].upper(), msg[1:], elapsed))


_TOTAL_TIMER_DATA = defaultdict(StatCounter)


@contextmanager
def total_timer(msg):
    """Add the duration of the ``with`` block to the running statistics kept under ``msg``;
    :func:`print_total_timer` reports them."""
    start = _now()
    yield
    _TOTAL_TIMER_DATA[msg].feed(_now() - start)


def print_total_timer():
    """Log, for every name used with :func:`total_timer`, the total time, the number of
    blocks and the average time. Silent when :func:`total_timer` was never used.
    Registered to run at interpreter exit."""
    for name, stat in _TOTAL_TIMER_DATA.items():
        if stat.count == 0:
            continue
        logger.info('Total Time: {} -> {:.2f} sec, {} times, {:.3g} sec on average'.format(
            name, stat.sum, stat.count, stat.average))


atexit.register(print_total_timer)


class Timer(object):
    """A stopwatch that can be paused: :meth:`seconds` excludes the paused spans.

    It starts running when created (and on :meth:`reset`).
    """

    def __init__(self):
        self.reset()

    def reset(self):
        """Restart from 0, running."""
        self._start = _now()
        self._paused_at = None
        self._paused_total = 0.0

    def start(self):
        """Same as :meth:`reset`."""
        self.reset()

    def pause(self):
        """Stop counting time; error when already paused."""
        if self._paused_at is not None:
            raise RuntimeError("Timer.pause(): the timer is already paused")
        self._paused_at = _now()

    def resume(self):
        """Count time again; error when not paused."""
        if self._paused_at is None:
            raise RuntimeError("Timer.resume(): the timer is not paused")
        self._paused_total += _now() - self._paused_at
        self._paused_at = None

    def is_paused(self):
        """Whether the timer is currently paused."""
        return self._paused_at is not None

    def seconds(self):
        """Seconds counted so far (running time only)."""
        end = self._paused_at if self._paused_at is not None else _now()
        return end - self._start - self._paused_total


class IterSpeedCounter(object):
    """A callable that counts its calls and, every ``print_every`` calls, logs the time since
    the first one and the average time per call.

    Args:
        print_every (int): how many calls between two log lines.
        name (str): how the log line starts (default ``'IterSpeed'``).
    """

    def __init__(self, print_every, name=None):
        self.print_every = int(print_every)
        if self.print_every < 1:
            raise ValueError("IterSpeedCounter: print_every must be >= 1, got {!r}.".format(print_every))
        self.name = name or 'IterSpeed'
        self.cnt = 0
        self.start = None

    def reset(self):
        """Restart the clock (the count goes on)."""
        self.start = _now()

    def __call__(self):
        if self.cnt == 0:
            self.reset()
        self.cnt += 1
        if self.cnt % self.print_every == 0:
            elapsed = _now() - self.start
            logger.info("{}: {:.2f} sec, {} times, {:.3g} sec/time".format(
                self.name, elapsed, self.cnt, elapsed / self.cnt))
