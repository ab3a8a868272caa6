"""The training loop's shared parts (tensorpack_lite.loop): the run state a trainer advances and
callbacks read, the schedule, the dispatcher's merged requests, and the one feed check."""

import numpy as np
import pytest

from tensorpack_lite.compat import tf, tfv1
from tensorpack_lite.dataflow import DataFromList
from tensorpack_lite.input_source.feed import FeedInput
from tensorpack_lite.loop import Callback, Callbacks, Schedule, TrainLoop
from tensorpack_lite.session.caller_thread import runs_safely_in_caller_thread
from tensorpack_lite.session.hooked_session import CheckedFeeds, HookedSession
from tensorpack_lite.tfutils.sesscreate import NewSessionCreator
from tensorpack_lite.tfutils.sessinit import JustCurrentSession
from tensorpack_lite.train import Trainer


class Questions(Callback):
    """Records, at every before_run, what the trainer's loop answers."""

    def __init__(self):
        self.seen = []

    def _before_run(self, _):
        loop = self.trainer.loop
        self.seen.append((loop.epoch_num, loop.local_step, loop.global_step, loop.is_first_run_of_step,
                          loop.is_last_step_of_epoch, loop.is_last_epoch))


class TwoRunsPerStep(Trainer):
    def run_step(self):
        self.hooked_sess.run(self.noop)
        self.hooked_sess.run(self.noop)


@pytest.mark.quick
def test_the_loop_answers_the_callbacks_questions():
    trainer = TwoRunsPerStep()
    trainer.noop = tf.no_op()
    questions = Questions()
    trainer.train([questions], [], NewSessionCreator(), JustCurrentSession(), steps_per_epoch=2,
                  starting_epoch=2, max_epoch=3)
    # (epoch, step, global step, first run of the step, last step of the epoch, last epoch)
    assert questions.seen == [
        (2, 0, 0, True, False, False), (2, 0, 1, False, False, False),
        (2, 1, 2, True, True, False), (2, 1, 3, False, True, False),
        (3, 0, 4, True, False, True), (3, 0, 5, False, False, True),
        (3, 1, 6, True, True, True), (3, 1, 7, False, True, True)]
    assert trainer.global_step == 8 and trainer.epoch_num == 3


def test_the_loop_has_no_schedule_before_it_starts():
    loop = TrainLoop()
    assert loop.schedule is None
    with pytest.raises(AttributeError, match='no steps_per_epoch before training starts'):
        loop.steps_per_epoch
    with pytest.raises(TypeError, match='takes a Schedule'):
        loop.start((10, 1, 2))


@pytest.mark.parametrize('args, error, words', [
    ((0, 1, 2), ValueError, 'steps_per_epoch must be a positive number of steps, got 0'),
    ((5, 0, 2), ValueError, 'starting_epoch counts from 1, got 0'),
    ((5, 3, 2), ValueError, r'max_epoch \(2\) is smaller than starting_epoch \(3\)'),
    ((5.5, 1, 2), TypeError, r'steps_per_epoch must be an integer \(or a float with a whole value\), '
                             'got 5.5 of type float'),
    ((5, True, 2), TypeError, 'starting_epoch must be an integer .*got True of type bool'),
    ((5, 1, 4.5), TypeError, 'max_epoch must be an integer .*got 4.5 of type float'),
    ((5, 1, float('inf')), TypeError, 'max_epoch must be an integer .*got inf of type float'),
    ((5, 1, '4'), TypeError, "max_epoch must be an integer .*got '4' of type str"),
])
def test_schedule_is_checked_where_it_is_made(args, error, words):
    with pytest.raises(error, match=words):
        Schedule(*args)


def test_schedule_takes_floats_with_whole_values():
    # tensorpack's FasterRCNN computes max_epoch = LR_SCHEDULE[-1] * (8. / NUM_GPUS) // steps: 4.0
    schedule = Schedule(5.0, np.float32(2.0), 360000 * (8. / 1) // 720000)
    assert (schedule.steps_per_epoch, schedule.starting_epoch, schedule.max_epoch) == (5, 2, 4)
    values = (schedule.steps_per_epoch, schedule.starting_epoch, schedule.max_epoch)
    assert [type(v) for v in values] == [int] * 3


def test_schedule_holds_ints():
    schedule = Schedule(np.int64(7), 2, 4)
    assert (schedule.steps_per_epoch, schedule.starting_epoch, schedule.max_epoch) == (7, 2, 4)
    assert type(schedule.steps_per_epoch) is int
    assert repr(schedule) == 'Schedule(steps_per_epoch=7, starting_epoch=2, max_epoch=4)'


class Feeder(Callback):
    def __init__(self, feeds, fetch=None):
        self.feeds, self.fetch, self.results = feeds, fetch, []

    def _before_run(self, _):
        return tfv1.train.SessionRunArgs(self.fetch, feed_dict=self.feeds)

    def _after_run(self, _, values):
        self.results.append(values.results)


def test_dispatcher_merges_members_into_one_request_and_names_a_clash():
    x = tfv1.placeholder(tf.float32, [], name='x')
    y = tfv1.placeholder(tf.float32, [], name='y')
    a, b = Feeder({x: 1.0}, fetch=x * 10), Feeder({y: 2.0}, fetch={'sum': x + y})
    silent = Feeder(None)
    group = Callbacks([a, b, silent])
    with tfv1.Session() as sess:
        hooked = HookedSession(sess, group.get_hooks())
        assert hooked.run(x - y) == -1.0
        assert (a.results, b.results, silent.results) == ([10.0], [{'sum': 3.0}], [None])
        clash = Callbacks([a, Feeder({x: 3.0})])
        with pytest.raises(RuntimeError, match=r'Callback Feeder feeds .*x:0.*already fed') as info:
            HookedSession(sess, clash.get_hooks()).run(x)
    assert 'raised by callback Feeder in before_run()' in info.value.__notes__[0]


def test_checked_feeds_are_fed_as_they_are_and_others_are_checked():
    x = tfv1.placeholder(tf.float32, [None, 2], name='x')
    total = tf.reduce_sum(x)
    with tfv1.Session() as sess:
        plain = HookedSession(sess, [Callbacks([Feeder({x: np.ones((3, 3))})]).get_hooks()[0]])
        with pytest.raises(ValueError, match=r"Cannot feed value of shape \(3, 3\) for Tensor x:0"):
            plain.run(total)
        # a CheckedFeeds is trusted: not checked again, so a shape it should not have reaches
        # the session callable, which does not check placeholder shapes (9 ones are summed)
        trusted = HookedSession(sess, [Callbacks([Feeder(CheckedFeeds({x: np.ones((3, 3), 'float32')}))])
                                       .get_hooks()[0]])
        assert trusted.run(total) == 9.0
        fine = HookedSession(sess, [Callbacks([Feeder(CheckedFeeds({x: np.ones((2, 2), 'float32')}))])
                                    .get_hooks()[0]])
        assert fine.run(total) == 4.0


def test_feed_input_feeds_arrays_of_the_inputs_dtypes_checked_once():
    source = FeedInput(DataFromList([[[1, 2], 7]], shuffle=False))   # python ints
    source.setup([tf.TensorSpec([2], tf.float32, 'v'), tf.TensorSpec([], tf.int32, 'k')])
    source.reset_state()
    feeds = source.get_callbacks()[-1].before_run(None).feed_dict
    assert isinstance(feeds, CheckedFeeds) and not feeds.unchecked
    v, k = source.get_input_tensors()
    assert feeds[v].dtype == np.float32 and feeds[v].tolist() == [1.0, 2.0]
    assert feeds[k].dtype == np.int32 and feeds[k] == 7


def test_merged_feeds_leave_each_requesters_dict_unchanged_and_a_single_feeder_is_passed_on():
    x = tfv1.placeholder(tf.float32, [], name='x')
    y = tfv1.placeholder(tf.float32, [], name='y')
    plain, checked = {x: 1.0}, CheckedFeeds({y: np.float32(2.0)})
    with tfv1.Session() as sess:
        assert HookedSession(sess, Callbacks([Feeder(plain), Feeder(checked)]).get_hooks()).run(x + y) == 3.0
        # the caller's feeds merged with a feeder's
        assert HookedSession(sess, Callbacks([Feeder(checked)]).get_hooks()).run(
            x + y, feed_dict={x: 5.0}) == 7.0
    assert plain == {x: 1.0} and dict(checked) == {y: 2.0} and not checked.unchecked
    merged = Callbacks([Feeder(plain), Feeder(checked)]).before_run(None).feed_dict
    assert isinstance(merged, CheckedFeeds) and merged.unchecked == {x} and set(merged) == {x, y}
    # one feeder: its checked feeds reach the session as they are, not copied
    assert Callbacks([Feeder(checked)]).before_run(None).feed_dict is checked


# ----- which compiled runs execute in the caller's thread -------------------------------------

def _train_op_of_one_device():
    x = tfv1.placeholder(tf.float32, [None, 3], name='x')
    w = tfv1.get_variable('w', initializer=np.ones((3, 1), np.float32))
    cost = tf.reduce_mean(tf.matmul(x, w))
    return cost, tfv1.train.GradientDescentOptimizer(0.1).minimize(cost), w


def test_a_one_device_step_runs_in_the_caller_thread_with_the_same_results():
    cost, train_op, w = _train_op_of_one_device()
    assert runs_safely_in_caller_thread([cost, train_op])
    batch = CheckedFeeds({tf.compat.v1.get_default_graph().get_tensor_by_name('x:0'):
                          np.arange(6, dtype=np.float32).reshape(2, 3)})
    with tfv1.Session() as sess:
        sess.run(tfv1.global_variables_initializer())
        hooked = HookedSession(sess, Callbacks([Feeder(batch)]).get_hooks())
        costs = [hooked.run([cost, train_op])[0] for _ in range(3)]
        w = sess.run(w)
    # plain numpy: cost = mean(x @ w), gradient of w = mean of x's rows
    x = np.arange(6, dtype=np.float64).reshape(2, 3)
    expected_w, expected_costs = np.ones((3, 1)), []
    for _ in range(3):
        expected_costs.append(float(np.mean(x @ expected_w)))
        expected_w = expected_w - 0.1 * x.mean(axis=0).reshape(3, 1)
    np.testing.assert_allclose(costs, expected_costs, rtol=1e-6)
    np.testing.assert_allclose(w, expected_w, rtol=1e-6)
