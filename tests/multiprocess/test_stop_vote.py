"""multiprocess/stop_vote.py: the vote to stop that a step's all-reduce carries, in one process."""

from tensorpack_lite.compat import tf, tfv1
from tensorpack_lite.multiprocess.stop_vote import PREEMPTED, REQUESTED, PreemptionVote
from tensorpack_lite.session.hooked_session import HookedSession


def test_a_vote_is_cast_once_and_every_step_after_it_sees_the_total():
    """PreemptionVote in one process (the reduction is the identity; the multi-process ones are
    in distributed/test_trainers.py, distributed/test_mpi.py, distributed/test_horovod.py): no
    vote, then one, seen by the next step's fetch, in the dtype of the tensors it travels with; a
    requested stop is told apart from SIGTERM, which wins."""
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
