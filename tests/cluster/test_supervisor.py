"""The job supervisor (cluster.supervisor) with fake attempts: restarts counted and bounded, signals
passed on (SIGKILL the second time) and the handlers restored, the timeout (124), exit codes of
processes that a signal ended (128 + n), resizes not counted as restarts, bad policies refused.
The launchers that drive it are tested in test_launch.py and test_ray.py."""

import signal
import subprocess
import sys

import pytest

from tensorpack_lite.cluster.launch import launch
from tensorpack_lite.cluster.supervisor import (FORWARDED_SIGNALS, TIMEOUT_EXIT_CODE, Job, RestartPolicy,
                                                RunningAttempt, shell_exit_code, supervise)


class FakeAttempt(RunningAttempt):
    """Ends after ``polls`` looks (never, with None, until :meth:`time_out`) with ``code`` and
    ``outcome``; ``on_poll(k)`` runs at look k (from 1)."""

    def __init__(self, code=0, polls=1, outcome=None, on_poll=None):
        self.code, self.polls, self._outcome, self.on_poll = code, polls, outcome, on_poll
        self.looks, self.signals, self.timeouts, self.closed = 0, [], [], False

    def poll(self):
        self.looks += 1
        if self.on_poll is not None:
            self.on_poll(self.looks)
        return bool(self.timeouts) or (self.polls is not None and self.looks >= self.polls)

    def pass_signal(self, received, sig):
        self.signals.append((received, sig))

    def time_out(self, timeout):
        self.timeouts.append(timeout)

    def close(self):
        self.closed = True

    @property
    def exit_code(self):
        return self.code

    @property
    def outcome(self):
        return self._outcome or super().outcome


class FakeJob(Job):
    """Starts the attempts of ``attempts`` in order; records the calls between them."""

    def __init__(self, attempts, on_restart=None):
        self.attempts, self.started, self.calls, self.on_restart = list(attempts), [], [], on_restart

    def start_attempt(self, number, stopping):
        self.started.append(number)
        return self.attempts[number - 1]

    def before_restart(self, attempt, restart, policy):
        self.calls.append(('restart', restart, policy.max_restarts))
        if self.on_restart is not None:
            self.on_restart()

    def before_resize(self, attempt):
        self.calls.append(('resize',))

    def give_up(self, attempt, attempts, policy):
        self.calls.append(('give up', attempts))


def handlers():
    return {sig: signal.getsignal(sig) for sig in FORWARDED_SIGNALS}


def test_failed_attempts_are_restarted_and_counted_until_one_succeeds():
    job = FakeJob([FakeAttempt(3), FakeAttempt(1), FakeAttempt(0)])
    assert supervise(job, RestartPolicy(max_restarts=5)) == 0
    assert job.started == [1, 2, 3]
    assert job.calls == [('restart', 1, 5), ('restart', 2, 5)]
    assert all(attempt.closed for attempt in job.attempts)


def test_max_restarts_bounds_the_restarts_and_the_last_failure_is_the_exit_code():
    job = FakeJob([FakeAttempt(3), FakeAttempt(4), FakeAttempt(5), FakeAttempt(0)])
    assert supervise(job, RestartPolicy(max_restarts=2)) == 5
    assert job.started == [1, 2, 3]
    assert job.calls == [('restart', 1, 2), ('restart', 2, 2), ('give up', 3)]


def test_without_a_policy_a_failure_is_not_restarted():
    job = FakeJob([FakeAttempt(3), FakeAttempt(0)])
    assert supervise(job) == 3
    assert job.started == [1] and job.calls == [('give up', 1)]


def test_a_resize_starts_again_without_counting_a_restart():
    job = FakeJob([FakeAttempt(0, outcome='resize'), FakeAttempt(2), FakeAttempt(0, outcome='resize'),
                   FakeAttempt(0)])
    assert supervise(job, RestartPolicy(max_restarts=1)) == 0
    assert job.calls == [('resize',), ('restart', 1, 1), ('resize',)]


def test_a_job_that_cannot_start_exits_with_1():
    job = FakeJob([None])
    assert supervise(job, RestartPolicy(max_restarts=3)) == 1


def test_signals_are_passed_on_sigkill_the_second_time_and_the_handlers_restored():
    def raise_signals(look):
        if look == 1:
            signal.raise_signal(signal.SIGTERM)
        if look == 2:
            signal.raise_signal(signal.SIGINT)

    attempt = FakeAttempt(0, polls=3, on_poll=raise_signals)
    job = FakeJob([attempt, FakeAttempt(0)])
    before = handlers()
    assert supervise(job, RestartPolicy(max_restarts=3)) == 128 + signal.SIGTERM
    assert handlers() == before
    assert attempt.signals == [(signal.SIGTERM, signal.SIGTERM), (signal.SIGINT, signal.SIGKILL)]
    assert job.started == [1]


def test_a_signalled_attempt_that_failed_gives_its_own_code_and_is_not_restarted():
    attempt = FakeAttempt(143, polls=2, on_poll=lambda look: signal.raise_signal(signal.SIGTERM)
                          if look == 1 else None)
    job = FakeJob([attempt, FakeAttempt(0)])
    before = handlers()
    assert supervise(job, RestartPolicy(max_restarts=3)) == 143
    assert handlers() == before
    assert job.started == [1] and job.calls == []


def test_a_signal_while_waiting_to_restart_ends_the_wait_and_the_job_with_the_failures_code():
    job = FakeJob([FakeAttempt(3), FakeAttempt(0)], on_restart=lambda: signal.raise_signal(signal.SIGINT))
    before = handlers()
    assert supervise(job, RestartPolicy(max_restarts=3, delay=3600)) == 3    # the wait ends at once
    assert handlers() == before
    assert job.started == [1] and job.calls == [('restart', 1, 3)]


def test_without_forwarding_the_handlers_are_not_touched():
    seen = []
    attempt = FakeAttempt(0, polls=2, on_poll=lambda look: seen.append(handlers()))
    before = handlers()
    assert supervise(FakeJob([attempt]), forward_signals=False) == 0
    assert seen == [before, before]


def test_the_timeout_ends_the_attempt_with_124_and_no_restart():
    attempt = FakeAttempt(3, polls=None)
    job = FakeJob([attempt, FakeAttempt(0)])
    assert supervise(job, RestartPolicy(max_restarts=5), timeout=0) == TIMEOUT_EXIT_CODE == 124
    assert attempt.timeouts == [0] and attempt.closed
    assert job.started == [1] and job.calls == []


def test_wait_of_an_attempt_times_out_with_124():
    attempt = FakeAttempt(0, polls=None)
    assert attempt.wait(timeout=0) == 124
    assert attempt.timeouts == [0] and attempt.closed
    assert FakeAttempt(7, polls=3).wait() == 7


def test_a_process_that_a_signal_ended_has_the_shell_exit_code_128_plus_n():
    proc = subprocess.run([sys.executable, '-c', 'import os, signal; os.kill(os.getpid(), signal.SIGTERM)'])
    assert proc.returncode == -signal.SIGTERM
    assert shell_exit_code(proc.returncode) == 128 + signal.SIGTERM == 143
    assert shell_exit_code(0) == 0 and shell_exit_code(3) == 3


@pytest.mark.parametrize('max_restarts, delay', [(-1, 0), (1.5, 0), (True, 0), (0, -1)])
def test_a_bad_policy_is_refused(max_restarts, delay):
    with pytest.raises(ValueError, match='max_restarts must be an integer >= 0|delay must be >= 0'):
        RestartPolicy(max_restarts, delay)


def test_launch_refuses_negative_max_restarts_before_starting_anything(tmp_path):
    with pytest.raises(ValueError, match='max_restarts must be an integer >= 0, got -1'):
        launch([sys.executable, '-c', 'open({!r}, "w")'.format(str(tmp_path / 'started'))], 1,
               max_restarts=-1)
    assert not (tmp_path / 'started').exists()
