"""cluster/preemption.py: SIGTERM recorded instead of ending the process while training runs,
Preempted with status 143, the previous action restored, a handler of the program's own left
alone, and a process forked meanwhile still ended by SIGTERM. (Training that receives it: in
train/test_config_resume_failures.py, and under a real Slurm in distributed/test_slurm.py.)"""

import logging
import os
import signal
import time

import pytest

from helpers.logs import capture_logs
from helpers.timing import run_or_hang, wait_until
from tensorpack_lite.cluster.preemption import PREEMPTED_EXIT_CODE, Preempted, PreemptionNotice


def test_sigterm_is_recorded_check_raises_preempted_and_the_action_is_restored():
    before = signal.getsignal(signal.SIGTERM)
    with PreemptionNotice() as notice:
        notice.check()                                  # nothing came yet
        os.kill(os.getpid(), signal.SIGTERM)
        assert wait_until(lambda: notice.received, timeout=60)
        with pytest.raises(Preempted, match='received SIGTERM') as info:
            notice.check()
    assert info.value.code == PREEMPTED_EXIT_CODE == 143
    assert isinstance(info.value, SystemExit) and not isinstance(info.value, Exception)
    assert signal.getsignal(signal.SIGTERM) == before


def test_a_handler_the_program_set_is_left_alone_and_a_warning_says_so():
    seen = []
    handler = lambda signum, frame: seen.append(signum)   # noqa: E731
    previous = signal.signal(signal.SIGTERM, handler)
    try:
        with capture_logs() as logs:
            with PreemptionNotice() as notice:
                os.kill(os.getpid(), signal.SIGTERM)
                assert wait_until(lambda: seen, timeout=60)
        assert not notice.received
        assert logs.messages_at(logging.WARNING) == [
            "SIGTERM (preemption) is not taken here, so it does not mean 'training stops after the current "
            "step': the program set SIGTERM's action itself ({!r}), which is left alone. A preemption "
            "(Slurm, Kubernetes, a spot machine) does what that action does, without a checkpoint of its "
            "own; run training in the main thread with SIGTERM's default action to have one.".format(handler)]
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_outside_the_main_thread_nothing_is_taken_and_a_warning_says_so():
    before = signal.getsignal(signal.SIGTERM)
    with capture_logs() as logs:
        run_or_hang(lambda: PreemptionNotice().__enter__())
    assert signal.getsignal(signal.SIGTERM) == before
    warning, = logs.messages_at(logging.WARNING)
    assert ("this runs in thread 'run_or_hang', and Python runs signal handlers in the main thread "
            "only") in warning
    assert 'ends the process at once, without a checkpoint of its own' in warning


def test_a_process_forked_inside_the_block_is_still_ended_by_sigterm():
    ready, tell = os.pipe()
    with PreemptionNotice() as notice:
        pid = os.fork()
        if pid == 0:                 # the child: would live a minute unless SIGTERM ends it
            os.write(tell, b'up')    # (CPython clears the signals pending in a child it forks)
            time.sleep(60)
            os._exit(0)
        assert os.read(ready, 2) == b'up'
        os.kill(pid, signal.SIGTERM)
        _, status = os.waitpid(pid, 0)
    os.close(ready)
    os.close(tell)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGTERM
    assert not notice.received
