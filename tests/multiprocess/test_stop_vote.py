"""multiprocess/stop_vote.py: the vote to stop that a step's all-reduce carries, in one process."""

from tensorpack_lite.compat import tf, tfv1
from tensorpack_lite.multiprocess.stop_vote import PREEMPTED, REQUESTED, BarrierStopVote, PreemptionVote
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


class Barrier:
    """The part of FinishBarrier that BarrierStopVote uses, on the chief of a test: the smallest
    proposal stands, with why."""

    NEVER = 2 ** 62

    class cluster:
        task_name = '/job:worker/task:1'

    def __init__(self):
        self.stop, self.why = self.NEVER, None

    def propose_stop(self, step, why):
        if step < self.stop:
            self.stop, self.why = step, why

    def agreed_stop(self):
        return self.stop, self.why


def test_the_barrier_vote_stops_two_steps_after_the_proposal_read_one_step_late():
    barrier = Barrier()
    vote = BarrierStopVote(barrier)
    assert vote.agreed_stop(None, 4, False, 'worker 1') is None
    assert vote.agreed_stop(None, 5, True, 'worker 1') is None     # proposes 7; the read started now
    assert barrier.agreed_stop() == (7, PREEMPTED) and vote.proposed == {PREEMPTED: 7}
    assert vote.agreed_stop(None, 6, True, 'worker 1') is None     # proposed once
    assert vote.agreed_stop(None, 7, False, 'worker 1') == (7, PREEMPTED)
    vote.close()


def test_with_accumulation_the_barrier_vote_stops_at_the_end_of_the_second_update():
    barrier = Barrier()
    vote = BarrierStopVote(barrier, steps_per_update=4)
    assert vote.agreed_stop(None, 5, False, 'worker 1', stop_request='enough') is None
    assert barrier.agreed_stop() == (12, REQUESTED)
    assert vote.agreed_stop(None, 11, False, 'worker 1') is None
    assert vote.agreed_stop(None, 12, False, 'worker 1') == (12, REQUESTED)
    vote.close()


def test_both_votes_answer_the_same_question():
    with tf.Graph().as_default():
        vote = PreemptionVote()
        vote.total = (0.0, 1.0)
        assert vote.agreed_stop(None, 9, False, 'worker 1') == (9, REQUESTED)
        vote.total = (0.0, 0.0)
        assert vote.agreed_stop(None, 9, False, 'worker 1') is None


def test_a_vote_that_carries_the_cost_gives_its_mean_and_the_marks_of_one_step():
    """With costs (two towers here), the vote's tensor also carries the marks, a count and the
    cost, so the step's mean cost is the same whether the reduction sums or averages; a mark is
    seen after the next step only (then cleared). Without a cost the tensor is the two votes."""
    with tf.Graph().as_default():
        vote = PreemptionVote()
        costs = [tf.constant(1.5), tf.constant(4.5)]
        carried = [vote.tensor(tf.float32, cost=c) for c in costs]
        assert [t.shape.as_list() for t in carried] == [[6], [6]] and vote.costs_carried == costs
        assert vote.tensor(tf.float32).shape.as_list() == [2]
        vote.set_total((carried[0] + carried[1]) * 3)     # as a sum over 3 processes of 2 towers
        step = tf.no_op()
        with tfv1.Session() as sess:
            sess.run(tfv1.local_variables_initializer())
            hooked = HookedSession(sess, [vote])
            hooked.run(step)
            assert vote.step_cost == 3.0 and vote.marks == set() and vote.total == (0.0, 0.0)
            vote.mark(sess, 'rollback')
            hooked.run(step)
            assert vote.marks == {'rollback'} and vote.step_cost == 3.0
            hooked.run(step)
            assert vote.marks == set()


def test_a_vote_that_carries_the_gradient_norm_gives_its_mean_after_the_cost():
    with tf.Graph().as_default():
        vote = PreemptionVote()
        carried = [vote.tensor(cost=c, gradient_norm=n) for c, n in ((1.5, 2.0), (4.5, 7.0))]
        assert [t.shape.as_list() for t in carried] == [[7], [7]] and len(vote.gradient_norms_carried) == 2
        vote.set_total(carried[0] + carried[1])
        with tfv1.Session() as sess:
            sess.run(tfv1.local_variables_initializer())
            HookedSession(sess, [vote]).run(tf.no_op())
        assert (vote.step_cost, vote.step_gradient_norm, vote.marks) == (3.0, 4.5, set())
