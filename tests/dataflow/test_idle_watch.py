"""dataflow.idle_watch: the warnings and the error that name the workers a parent waits for."""

import logging
import time
from types import SimpleNamespace

import pytest

from helpers.logs import capture_logs
from tensorpack_lite.dataflow.idle_watch import IdleWatch
from tensorpack_lite.dataflow.workers import DataFlowWorkerError


def workers(count):
    """What the watch reads of a WorkerProcesses: the workers' names and processes (pids)."""
    return SimpleNamespace(names=['Flow worker #{}'.format(k) for k in range(count)],
                           procs=[SimpleNamespace(pid=1000 + k) for k in range(count)])


def test_the_timeout_names_every_watched_worker_and_what_it_sent():
    watch = IdleWatch('Flow', workers(3), warn_after=None, timeout=0, watched=[0, 1])
    watch.heard(0)
    watch.heard(2)   # not watched (a dispatcher): not named
    watch.start_wait()
    with pytest.raises(DataFlowWorkerError) as err:
        watch.check()
    message = str(err.value)
    assert 'Flow: nothing arrived from the workers' in message and '(idle_timeout=0)' in message
    assert 'Flow worker #1 (pid 1001): nothing since it started' in message
    assert 'Flow worker #0 (pid 1000): nothing for' in message
    assert message.index('worker #1') < message.index('worker #0')   # the longest silent first
    assert 'worker #2' not in message


def test_a_due_warning_is_logged_and_the_wait_goes_on():
    watch = IdleWatch('Flow', workers(1), warn_after=0, timeout=None)
    watch.start_wait()
    with capture_logs() as records:
        watch.check()   # warns, does not raise
    warnings = records.messages(logging.WARNING)
    assert len(warnings) == 1
    assert warnings[0].startswith('[Flow] Nothing arrived from the workers for')
    assert 'Flow worker #0 (pid 1000): nothing since it started' in warnings[0]
    assert 'Set Flow.idle_timeout to fail instead of waiting' in warnings[0]


def test_seconds_left_until_the_soonest_of_warning_timeout_and_deadline():
    never = IdleWatch('Flow', workers(1), warn_after=None, timeout=None)
    never.start_wait()
    assert never.seconds_left() is None
    assert never.seconds_left(until=time.monotonic() - 1) == 0.0   # a deadline passed: no wait
    hour = IdleWatch('Flow', workers(1), warn_after=None, timeout=3600)
    hour.start_wait()
    assert 0 < hour.seconds_left() <= 3600
    assert hour.seconds_left(until=time.monotonic() - 1) == 0.0
