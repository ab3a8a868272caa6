"""The base Trainer: its loop, hooks, hooked session, stopping, errors and argument checks."""

import numpy as np
import pytest

from tensorpack_lite.loop import dispatch as callback_group
from tensorpack_lite.callbacks.base import Callback, CallbackFactory, ProxyCallback
from tensorpack_lite.callbacks.monitor import MonitorBase
from tensorpack_lite.compat import tf, tfv1
from tensorpack_lite.tfutils.common import get_global_step_var
from tensorpack_lite.tfutils.sesscreate import NewSessionCreator
from tensorpack_lite.tfutils.sessinit import JustCurrentSession, SessionInit
from tensorpack_lite.train.base import StopTraining, Trainer

from helpers.callbacks import ReadBack
from helpers.timing import VirtualClock


def build_regression(seed=0):
    """A linear regression on fixed data; returns (loss, train_op)."""
    rng = np.random.RandomState(seed)
    x = rng.rand(64, 4).astype('float32')
    y = x.dot(np.array([[1.0], [-2.0], [0.5], [3.0]], dtype='float32'))
    w = tfv1.get_variable('w', [4, 1], initializer=tfv1.zeros_initializer())
    loss = tf.reduce_mean(tf.square(tf.matmul(tf.constant(x), w) - tf.constant(y)), name='loss')
    train_op = tfv1.train.GradientDescentOptimizer(0.3).minimize(loss)
    return loss, train_op


def train(trainer, callbacks=(), monitors=(), steps_per_epoch=5, max_epoch=2, starting_epoch=1,
          session_init=None):
    trainer.train(list(callbacks), list(monitors), NewSessionCreator(),
                  session_init or JustCurrentSession(), steps_per_epoch, starting_epoch, max_epoch)


class Recorder(Callback):
    """Records every hook it sees, with the loop position, and the loss fetched per step."""

    def __init__(self):
        self.events = []
        self.losses = []

    def _setup_graph(self):
        self.events.append(('setup_graph',))
        self.loss = self.graph.get_tensor_by_name('loss:0')

    def _before_train(self):
        self.events.append(('before_train', self.global_step))

    def _before_epoch(self):
        self.events.append(('before_epoch', self.epoch_num))

    def _before_run(self, ctx):
        self.events.append(('before_run', self.epoch_num, self.local_step))
        return [self.loss]

    def _after_run(self, ctx, values):
        self.events.append(('after_run', self.epoch_num, self.local_step))
        self.losses.append(values.results[0])

    def _trigger_step(self):
        self.events.append(('trigger_step', self.epoch_num, self.local_step, self.global_step))

    def _after_epoch(self):
        self.events.append(('after_epoch', self.epoch_num))

    def _trigger(self):
        self.events.append(('trigger', self.epoch_num))

    def _after_train(self):
        self.events.append(('after_train',))

    def names(self):
        return [e[0] for e in self.events]


@pytest.mark.quick
def test_train_op_built_before_trainer_trains_and_loss_falls():
    loss, train_op = build_regression()
    trainer = Trainer()
    trainer.train_op = train_op
    rec = Recorder()
    train(trainer, [rec], steps_per_epoch=20, max_epoch=3)
    assert len(rec.losses) == 60
    assert rec.losses[-1] < 0.05 * rec.losses[0]
    assert trainer.global_step == 60
    assert trainer.epoch_num == 3


def test_loop_runs_exact_epochs_and_steps_in_documented_order():
    _, train_op = build_regression()
    trainer = Trainer()
    trainer.train_op = train_op
    rec = Recorder()
    train(trainer, [rec], steps_per_epoch=3, starting_epoch=2, max_epoch=4)
    expected = [('setup_graph',), ('before_train', 0)]
    global_step = 0
    for epoch in (2, 3, 4):
        expected.append(('before_epoch', epoch))
        for step in range(3):
            global_step += 1
            expected += [('before_run', epoch, step), ('after_run', epoch, step),
                         ('trigger_step', epoch, step, global_step)]
        expected += [('after_epoch', epoch), ('trigger', epoch)]
    expected.append(('after_train',))
    assert rec.events == expected
    assert trainer.global_step == 9


def test_fetches_asked_in_before_run_arrive_in_after_run():
    _, train_op = build_regression()
    # a counter that changes only between steps (in _trigger_step, outside the hooked run), so
    # the value each run fetches is known exactly: 0, 1, 2, 3
    counter = tfv1.get_variable('between_steps', [], dtype=tf.int32, initializer=tfv1.zeros_initializer())
    bump = tfv1.assign_add(counter, 1)

    class FetchCounter(Callback):
        def _setup_graph(self):
            self.seen = []
            self.read = tf.identity(counter, name='counter_copy')

        def _before_run(self, ctx):
            return tfv1.train.SessionRunArgs(fetches={'counter': self.read})

        def _after_run(self, ctx, values):
            self.seen.append(int(values.results['counter']))

        def _trigger_step(self):
            self.trainer.sess.run(bump)

    cb = FetchCounter()
    trainer = Trainer()
    trainer.train_op = train_op
    train(trainer, [cb], steps_per_epoch=4, max_epoch=1)
    assert cb.seen == [0, 1, 2, 3]


def test_only_hooked_session_triggers_hooks():
    _, train_op = build_regression()
    counter = tfv1.get_variable('plain_runs', [], dtype=tf.int32, initializer=tfv1.zeros_initializer())
    bump = tfv1.assign_add(counter, 1)

    class TwoSessions(Trainer):
        def run_step(self):
            self.sess.run(bump)  # plain: no hook
            self.sess.run(bump)
            self.hooked_sess.run(self.train_op)

    class Final(Callback):
        def _after_train(self):
            self.plain = self.trainer.sess.run(counter)
            self.global_step_var = self.trainer.sess.run(get_global_step_var())

    rec, final = Recorder(), Final()
    trainer = TwoSessions()
    trainer.train_op = train_op
    train(trainer, [rec, final], steps_per_epoch=4, max_epoch=2)
    assert rec.names().count('before_run') == 8
    assert rec.names().count('after_run') == 8
    assert final.plain == 16
    assert final.global_step_var == 8 == trainer.global_step


def test_run_step_override_gan_style():
    """Two ops, two optimizers, alternating within one step, as GAN trainers do."""
    a = tfv1.get_variable('a', [], initializer=tfv1.constant_initializer(5.0))
    b = tfv1.get_variable('b', [], initializer=tfv1.constant_initializer(-5.0))
    loss_a = tf.square(a - 1.0, name='loss_a')
    loss_b = tf.square(b + 1.0, name='loss_b')
    opt_a = tfv1.train.GradientDescentOptimizer(0.1).minimize(loss_a, var_list=[a])
    opt_b = tfv1.train.GradientDescentOptimizer(0.1).minimize(loss_b, var_list=[b])

    class AlternatingTrainer(Trainer):
        def __init__(self):
            super().__init__()
            self.calls = []

        def run_step(self):
            self.hooked_sess.run(opt_a)
            self.calls.append('a')
            self.sess.run(opt_b)
            self.calls.append('b')

    final = ReadBack(a, b)
    trainer = AlternatingTrainer()
    train(trainer, [final], steps_per_epoch=25, max_epoch=2)
    assert trainer.calls == ['a', 'b'] * 50
    assert final.values[0] == pytest.approx(1.0, abs=1e-3)
    assert final.values[1] == pytest.approx(-1.0, abs=1e-3)
    assert trainer.global_step == 50


def test_missing_train_op_is_a_clear_error():
    build_regression()
    with pytest.raises(NotImplementedError, match='train_op'):
        train(Trainer(), steps_per_epoch=1, max_epoch=1)


def test_stop_training_ends_cleanly():
    _, train_op = build_regression()

    class StopAt(Callback):
        def _trigger_step(self):
            if self.global_step == 7:
                raise StopTraining("enough")

    rec = Recorder()
    trainer = Trainer()
    trainer.train_op = train_op
    train(trainer, [StopAt(), rec], steps_per_epoch=5, max_epoch=10)  # no exception escapes
    assert trainer.global_step == 7
    assert rec.names()[-1] == 'after_train'
    assert trainer.sess._closed


def test_request_stop_from_a_hook_ends_training():
    _, train_op = build_regression()

    class RequestStop(Callback):
        def _after_run(self, ctx, values):
            if self.trainer.global_step >= 3:
                ctx.request_stop()

    rec = Recorder()
    trainer = Trainer()
    trainer.train_op = train_op
    train(trainer, [RequestStop(), rec], steps_per_epoch=10, max_epoch=5)
    assert trainer.global_step == 3
    assert rec.names()[-1] == 'after_train'


def test_raising_callback_is_named_and_after_train_still_runs():
    _, train_op = build_regression()

    class Broken(Callback):
        def _trigger_epoch(self):
            raise ValueError("bad metric")

    rec = Recorder()
    trainer = Trainer()
    trainer.train_op = train_op
    with pytest.raises(ValueError, match='bad metric') as info:
        train(trainer, [rec, Broken()], steps_per_epoch=2, max_epoch=3)
    assert isinstance(info.value.callback, Broken)
    assert any('Broken' in note and 'trigger_epoch' in note for note in info.value.__notes__)
    assert rec.names().count('trigger') == 1  # rec runs before Broken in epoch 1
    assert rec.names()[-1] == 'after_train'
    assert trainer.sess._closed


def test_error_in_before_run_names_the_callback():
    _, train_op = build_regression()

    class BadFetch(Callback):
        def _before_run(self, ctx):
            return ['no_such_tensor:0']

    trainer = Trainer()
    trainer.train_op = train_op
    with pytest.raises(KeyError) as info:
        train(trainer, [BadFetch()], steps_per_epoch=2, max_epoch=1)
    assert isinstance(info.value.callback, BadFetch)
    assert 'no_such_tensor' in str(info.value)


def test_failing_after_train_does_not_hide_the_training_error():
    _, train_op = build_regression()

    class BadEnd(Callback):
        def _after_train(self):
            raise RuntimeError("cleanup failed")

    class BadStep(Callback):
        def _trigger_step(self):
            raise ArithmeticError("step failed")

    rec = Recorder()
    trainer = Trainer()
    trainer.train_op = train_op
    with pytest.raises(ArithmeticError):
        train(trainer, [BadEnd(), BadStep(), rec], steps_per_epoch=2, max_epoch=1)
    assert rec.names()[-1] == 'after_train'  # runs although BadEnd failed before it


def test_keyboard_interrupt_propagates_after_cleanup():
    _, train_op = build_regression()

    class Interrupted(Trainer):
        def run_step(self):
            self.hooked_sess.run(self.train_op)
            if self.global_step == 4:
                raise KeyboardInterrupt

    rec = Recorder()
    trainer = Interrupted()
    trainer.train_op = train_op
    with pytest.raises(KeyboardInterrupt):
        train(trainer, [rec], steps_per_epoch=3, max_epoch=3)
    assert rec.names()[-1] == 'after_train'
    assert trainer.sess._closed


class SetGlobalStep(SessionInit):
    """Initializes the global step as a restored checkpoint would."""

    def __init__(self, value):
        self.value = value

    def _setup_graph(self):
        self.assign = tfv1.assign(get_global_step_var(), self.value)

    def _run_init(self, sess):
        sess.run(self.assign)


def test_global_step_continues_from_restored_value():
    _, train_op = build_regression()

    class Check(Callback):
        def _setup_graph(self):
            self.pairs = []

        def _trigger_epoch(self):
            self.pairs.append((self.global_step, int(self.trainer.sess.run(get_global_step_var()))))

    check, rec = Check(), Recorder()
    trainer = Trainer()
    trainer.train_op = train_op
    train(trainer, [check, rec], steps_per_epoch=4, starting_epoch=6, max_epoch=7,
          session_init=SetGlobalStep(20))
    assert rec.events[1] == ('before_train', 20)
    assert check.pairs == [(24, 24), (28, 28)]


def test_chief_only_callbacks_are_skipped_on_non_chief():
    _, train_op = build_regression()

    class NotChief(Trainer):
        is_chief = False

    chief_cb = Recorder()
    everywhere = Recorder().set_chief_only(False)
    trainer = NotChief()
    trainer.train_op = train_op
    train(trainer, [chief_cb, everywhere], steps_per_epoch=2, max_epoch=1)
    assert chief_cb.events == []
    assert everywhere.names()[-1] == 'after_train'


def test_register_after_setup_is_an_error():
    _, train_op = build_regression()
    trainer = Trainer()
    trainer.train_op = train_op
    trainer.setup_callbacks([], [])
    with pytest.raises(RuntimeError, match='after the callbacks were set up'):
        trainer.register_callback(Recorder())
    with pytest.raises(RuntimeError, match='only be called once'):
        trainer.setup_callbacks([], [])


class NoSession(NewSessionCreator):
    def create_session(self):
        raise AssertionError("a session was created despite bad arguments")


@pytest.mark.parametrize('kwargs, error, words', [
    (dict(steps_per_epoch=0), ValueError, 'steps_per_epoch'),
    (dict(steps_per_epoch=-3), ValueError, 'steps_per_epoch'),
    (dict(steps_per_epoch=2.5), TypeError, 'steps_per_epoch'),
    (dict(starting_epoch=5, max_epoch=3), ValueError,
     r'max_epoch \(3\) is smaller than starting_epoch \(5\)'),
    (dict(callbacks=[Recorder(), 'ModelSaver']), TypeError,
     r"callbacks\[1\] is not a Callback: 'ModelSaver'"),
    (dict(monitors=[Recorder()]), TypeError, r'monitors\[0\] is not a MonitorBase'),
])
def test_bad_arguments_fail_before_any_session(kwargs, error, words):
    _, train_op = build_regression()
    args = dict(callbacks=[], monitors=[], steps_per_epoch=2, starting_epoch=1, max_epoch=2)
    args.update(kwargs)
    trainer = Trainer()
    trainer.train_op = train_op
    ops_before = len(tfv1.get_default_graph().get_operations())
    with pytest.raises(error, match=words):
        trainer.train(args['callbacks'], args['monitors'], NoSession(), JustCurrentSession(),
                      args['steps_per_epoch'], args['starting_epoch'], args['max_epoch'])
    assert len(tfv1.get_default_graph().get_operations()) == ops_before


def test_train_with_defaults_checks_its_arguments():
    _, train_op = build_regression()
    trainer = Trainer()
    trainer.train_op = train_op
    with pytest.raises(ValueError, match='steps_per_epoch'):
        trainer.train_with_defaults(callbacks=[], max_epoch=1)
    with pytest.raises(TypeError, match=r'monitors\[0\] is not a MonitorBase'):
        trainer.train_with_defaults(monitors=[object()], steps_per_epoch=1, max_epoch=1,
                                    session_creator=NoSession())


def test_proxy_and_factory_callbacks_forward_hooks():
    _, train_op = build_regression()
    inner = Recorder()
    triggered = []
    factory = CallbackFactory(trigger=lambda cb: triggered.append(cb.epoch_num))
    trainer = Trainer()
    trainer.train_op = train_op
    train(trainer, [ProxyCallback(inner), factory], steps_per_epoch=2, max_epoch=3)
    assert inner.names().count('after_run') == 6
    assert inner.names().count('trigger') == 3
    assert triggered == [1, 2, 3]


@pytest.fixture
def epoch_clock(monkeypatch):
    """The clock that times the callbacks at the end of an epoch: it moves only when told to."""
    clock = VirtualClock()
    monkeypatch.setattr(callback_group, 'time', clock)
    return clock


def test_slow_callbacks_are_reported(epoch_clock):
    _, train_op = build_regression()
    slow_seconds = callback_group._EpochTimer.total_threshold + 1

    class Slow(Callback):
        def _trigger_epoch(self):
            epoch_clock.advance(slow_seconds)

    trainer = Trainer()
    trainer.train_op = train_op
    train(trainer, [Slow()], steps_per_epoch=1, max_epoch=1)
    report = trainer._callbacks.last_epoch_report
    assert report is not None and 'Slow' in report


def test_fast_callbacks_are_not_reported(epoch_clock):
    _, train_op = build_regression()
    trainer = Trainer()
    trainer.train_op = train_op
    train(trainer, [Recorder()], steps_per_epoch=1, max_epoch=1)
    assert trainer._callbacks.last_epoch_report is None


def test_monitor_receives_scalars_through_trainer_monitors():
    _, train_op = build_regression()

    class Collect(MonitorBase):
        def __init__(self):
            self.scalars = []

        def process_scalar(self, name, value):
            self.scalars.append((name, value))

    class Put(Callback):
        def _trigger_epoch(self):
            self.trainer.monitors.put_scalar('epoch_x2', np.float32(self.epoch_num * 2))

    collect = Collect()
    trainer = Trainer()
    trainer.train_op = train_op
    train(trainer, [Put()], [collect], steps_per_epoch=1, max_epoch=3)
    assert collect.scalars == [('epoch_x2', 2.0), ('epoch_x2', 4.0), ('epoch_x2', 6.0)]
    assert isinstance(collect.scalars[0][1], float)
    assert trainer.monitors.get_latest('epoch_x2') == 6.0
    assert [v for _, v in trainer.monitors.get_history('epoch_x2')] == [2.0, 4.0, 6.0]
    with pytest.raises(KeyError, match='never_put'):
        trainer.monitors.get_latest('never_put')
