"""coordination/protocol.py: what the processes of a job agree on, asked of one process (the
backends' own tests are beside this one; the jobs themselves are in tests/distributed/)."""

import pytest

from tensorpack_lite.callbacks.monitor import JSONWriter, TFEventWriter
from tensorpack_lite.callbacks.steps import MaintainStepCounter
from tensorpack_lite.cluster.preemption import Preempted
from tensorpack_lite.compat import tf, tfv1
from tensorpack_lite.coordination.protocol import BroadcastEveryEpoch, MultiProcessProtocol
from tensorpack_lite.loop.state import Schedule, StopTraining
from tensorpack_lite.multiprocess.stop_vote import PREEMPTED, REQUESTED, PreemptionVote


class Exchange(MultiProcessProtocol):
    """A protocol whose chief's schedule is given."""

    KIND, CHIEF = 'worker', 'the chief'

    def __init__(self, index, chiefs_schedule=None):
        super().__init__(index, 2, 'worker {}'.format(index), index == 0)
        self.chiefs_schedule = chiefs_schedule

    def _exchange_schedule(self, sess, mine):
        return self.chiefs_schedule or mine


class AgreedAt:
    """A vote that answers ``answer`` and records what it was asked."""

    def __init__(self, answer):
        self.answer, self.asked, self.closed = answer, [], False

    def agreed_stop(self, sess, global_step, sigterm_received, voter, stop_request=None):
        self.asked.append((global_step, sigterm_received, voter, stop_request))
        return self.answer

    def close(self):
        self.closed = True


class RecordRuns:
    def __init__(self):
        self.runs = []

    def run(self, fetch, options=None):
        self.runs.append((fetch, options))


def test_the_chief_writes_files_and_its_own_resume_state_the_others_name_theirs(logdir, log_records):
    chief, other = Exchange(0), Exchange(1)
    assert chief.state_owner is None and other.state_owner == 'worker-1'
    assert chief.log_note() is None
    assert other.log_note() == "worker 1: only the chief writes into the logger directory; this worker"
    writers = [TFEventWriter(), JSONWriter()]
    assert [chief.keeps(w) for w in writers] == [True, True]
    assert [other.keeps(w) for w in writers] == [False, False]
    assert other.keeps(MaintainStepCounter())
    assert log_records.messages()[-2:] == ["worker 1: TFEventWriter skipped, only the chief writes files.",
                                           "worker 1: JSONWriter skipped, only the chief writes files."]


def test_every_process_takes_the_chiefs_schedule_and_says_so_when_it_differs(log_records):
    mine, chiefs = Schedule(10, 1, 3), Schedule(10, 2, 3, first_step=4)
    assert Exchange(0).agree_on_schedule(None, mine) is mine
    assert Exchange(1, chiefs).agree_on_schedule(None, mine) is chiefs
    assert log_records.messages() == ["worker 1 follows the chief's schedule: {}.".format(chiefs.describe())]


def test_without_a_vote_nothing_is_agreed_and_the_trainer_stops_alone():
    protocol = Exchange(1)
    assert protocol.check_stop(None, 5, True, 'enough') is False
    assert protocol.hooks() == []


def test_the_agreed_stop_ends_every_process_after_the_same_step_as_preempted_or_finished():
    protocol = Exchange(1)
    protocol.vote = AgreedAt(None)
    assert protocol.check_stop('sess', 5, False, None) is True
    assert protocol.vote.asked == [(5, False, 'worker 1', None)]
    protocol.vote = AgreedAt((7, PREEMPTED))
    preempted = 'another worker received SIGTERM; every worker stops after global step 7'
    with pytest.raises(Preempted, match=preempted):
        protocol.check_stop('sess', 7, False, None)
    protocol.vote = AgreedAt((7, REQUESTED))
    asked = '^every worker stops after global step 7: the chief asked to stop.$'
    with pytest.raises(StopTraining, match=asked):
        protocol.check_stop('sess', 7, False, None)
    with pytest.raises(StopTraining, match='^every worker stops after global step 7: no progress$'):
        protocol.check_stop('sess', 7, False, 'no progress')
    protocol.close()
    assert protocol.vote.closed


def test_the_vote_in_the_graph_is_a_hook_and_skips_the_runs_that_reduce_nothing():
    with tf.Graph().as_default():
        protocol = Exchange(0)
        vote = protocol.stop_vote_in_graph()
        assert isinstance(vote, PreemptionVote) and protocol.vote is vote and protocol.hooks() == [vote]
        vote.set_total(vote.tensor())
        accumulate = tf.no_op(name='accumulate')
        protocol.accumulation_built(accumulate)
        context = tfv1.train.SessionRunContext(tfv1.train.SessionRunArgs(accumulate), None)
        assert vote.before_run(context) is None
        update = tfv1.train.SessionRunContext(tfv1.train.SessionRunArgs(tf.no_op()), None)
        assert vote.before_run(update) is not None


def test_the_broadcast_runs_the_chiefs_copy_then_the_towers_copy_when_there_are_ops():
    protocol, sess = Exchange(0), RecordRuns()
    protocol.broadcast_variables(sess)
    assert sess.runs == []
    protocol.broadcast_op, protocol.post_init_op = 'broadcast', 'into the replicas'
    protocol.broadcast_variables(sess)
    assert sess.runs == [('broadcast', None), ('into the replicas', None)]


def test_broadcast_every_epoch_asks_the_trainer_on_every_process():
    class Trainer:
        calls = 0

        def broadcast_variables(self):
            self.calls += 1

    callback = BroadcastEveryEpoch()
    assert not callback.chief_only
    callback.trainer = Trainer()
    callback.trigger()
    callback.trigger()
    assert callback.trainer.calls == 2
