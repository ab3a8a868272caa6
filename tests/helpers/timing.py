"""Time without timing thresholds. A test never asserts how long something took: CPU load can slow
anything down. "It does not hang" is a generous watchdog whose expiry can only mean a hang
(:data:`HANG_TIMEOUT`, :func:`run_or_hang`, :func:`wait_until`); durations come from a
:class:`VirtualClock`."""

import threading
import time

from tensorpack_lite.compat import tfv1

__all__ = ['HANG_TIMEOUT', 'run_or_hang', 'wait_until', 'VirtualClock']

HANG_TIMEOUT = 120
"""Seconds after which something that should end is taken to hang (load only slows it down)."""


def run_or_hang(func, *args, **kwargs):
    """``func(*args, **kwargs)`` in a daemon thread (inside the caller's default graph): its
    result, or its exception re-raised here; the test fails if it has not ended after
    :data:`HANG_TIMEOUT` seconds.

    Example::

        with pytest.raises(DataFlowWorkerError):
            run_or_hang(list, df)     # raises, rather than waiting forever
    """
    graph = tfv1.get_default_graph()
    outcome = {}

    def target():
        try:
            with graph.as_default():
                outcome['result'] = func(*args, **kwargs)
        except BaseException as err:  # handed to the caller
            outcome['error'] = err

    thread = threading.Thread(target=target, name='run_or_hang', daemon=True)
    thread.start()
    thread.join(HANG_TIMEOUT)
    if thread.is_alive():
        raise AssertionError('{} did not end within {} s: it hangs'.format(
            getattr(func, '__name__', func), HANG_TIMEOUT))
    if 'error' in outcome:
        raise outcome['error']
    return outcome['result']


def wait_until(condition, timeout=HANG_TIMEOUT, interval=0.02):
    """Poll ``condition()`` until it is true (returns True) or ``timeout`` seconds passed
    (returns False): a deadline that only matters when the condition never comes."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)
    return True


class VirtualClock:
    """A clock that moves only when told to, so that timings measured with it are exact whatever
    the load. Stands in for the ``time`` module of the code under test (``perf_counter``,
    ``time``, ``monotonic`` and ``sleep``), or is called itself.

    Example::

        clock = VirtualClock()
        monkeypatch.setattr(prof, 'time', clock)
        clock.advance(0.5)
    """

    def __init__(self, start=1000.0):
        self.now = float(start)

    def __call__(self):
        return self.now

    perf_counter = time = monotonic = __call__

    def advance(self, seconds):
        self.now += seconds

    sleep = advance
