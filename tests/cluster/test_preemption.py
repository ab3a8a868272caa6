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


def test_a_vote_is_cast_once_and_every_step_after_it_sees_the_total():
    """PreemptionVote in one process (the reduction is the identity; the multi-process ones are
    in distributed/test_trainers.py, distributed/test_mpi.py, distributed/test_horovod.py): no
    vote, then one, seen by the next step's fetch, in the dtype of the tensors it travels with; a
    requested stop is told apart from SIGTERM, which wins."""
    from tensorpack_lite.compat import tf, tfv1
    from tensorpack_lite.tfutils.hooked_session import HookedSession
    from tensorpack_lite.tfutils.preemption_vote import PREEMPTED, REQUESTED, PreemptionVote
    with tf.Graph().as_default():
        vote = PreemptionVote()
        carried = vote.tensor(tf.float16)
        assert carried.dtype == tf.float16 and vote.tensor(tf.int32).dtype == tf.float32
        assert carried.shape.as_list() == [2]
        vote.set_total(carried * 2)     # as a sum over two processes would
        step = tf.no_op()
        with tfv1.Session() as sess:
            sess.run(tfv1.local_variables_initializer())
            hooked = HookedSession(sess, [vote])
            assert vote.due(sess, False, 'this test') is None
            hooked.run(step)
            assert vote.total == (0.0, 0.0) and vote.due(sess, False, 'this test') is None
            assert vote.due(sess, False, 'this test', stop_request='enough') is None   # seen next step
            assert vote.cast == {REQUESTED}
            hooked.run(step)
            assert vote.total == (0.0, 2.0) and vote.due(sess, False, 'this test') == REQUESTED
            assert vote.due(sess, True, 'this test') == REQUESTED     # cast now: seen by the next step
            assert vote.cast == {REQUESTED, PREEMPTED}
            hooked.run(step)
            assert vote.total == (2.0, 2.0) and vote.due(sess, True, 'this test') == PREEMPTED
