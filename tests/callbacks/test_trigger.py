"""Scheduling wrappers (PeriodicTrigger, PeriodicCallback, EnableCallbackIf), per-step
callbacks (ProgressBar, SessionRunTimeout, TensorPrinter), graph callbacks (RunOp,
RunUpdateOps, ProcessTensors) and summary callbacks (MovingAverageSummary,
MergeAllSummaries, SimpleMovingAverage), each run in a real Trainer."""

import io

import numpy as np
import pytest

from tensorpack_lite.callbacks.base import Callback
from tensorpack_lite.callbacks.graph import ProcessTensors, RunOp, RunUpdateOps
from tensorpack_lite.callbacks.steps import ProgressBar, SessionRunTimeout, TensorPrinter
from tensorpack_lite.callbacks.summary import (MOVING_SUMMARY_OPS_KEY, MergeAllSummaries,
                                               MergeAllSummaries_RunAlone,
                                               MergeAllSummaries_RunWithOp, MovingAverageSummary,
                                               SimpleMovingAverage)
from tensorpack_lite.callbacks import trigger as trigger_module
from tensorpack_lite.callbacks.trigger import EnableCallbackIf, PeriodicCallback, PeriodicTrigger
from tensorpack_lite.compat import tf, tfv1
from tensorpack_lite.train.base import Trainer

from helpers.callbacks import ReadBack
from helpers.logs import capture_logs
from helpers.timing import VirtualClock, run_or_hang


def build_model():
    """A scalar variable, a loss named 'loss' and a gradient-descent train op."""
    w = tfv1.get_variable('w', initializer=3.0)
    loss = tf.square(w - 1.0, name='loss')
    train_op = tfv1.train.GradientDescentOptimizer(0.1).minimize(loss)
    return w, loss, train_op


def make_counter(name='counter'):
    """An int32 variable and an op adding one to it."""
    counter = tfv1.get_variable(name, initializer=0, dtype=tf.int32, trainable=False)
    return counter, tfv1.assign_add(counter, 1)


def run_training(callbacks, train_op=None, steps_per_epoch=3, max_epoch=2, trainer=None):
    if train_op is None:
        train_op = build_model()[2]
    trainer = trainer or Trainer()
    trainer.train_op = train_op
    trainer.train_with_defaults(callbacks=list(callbacks), monitors=[], steps_per_epoch=steps_per_epoch,
                                max_epoch=max_epoch, extra_callbacks=[])
    return trainer


class Recorder(Callback):
    """Records the loop position at each hook."""

    def __init__(self):
        self.triggers = []      # (epoch_num, global_step) at each trigger()
        self.steps = []         # global_step at each trigger_step()
        self.epochs_begun = []  # epoch_num at each before_epoch()
        self.epochs_ended = []  # epoch_num at each after_epoch()
        self.runs = []          # global_step at each before_run()
        self.after_runs = []    # global_step at each after_run()
        self.lifecycle = []

    def _setup_graph(self):
        self.lifecycle.append('setup_graph')

    def _before_train(self):
        self.lifecycle.append('before_train')

    def _after_train(self):
        self.lifecycle.append('after_train')

    def _before_epoch(self):
        self.epochs_begun.append(self.epoch_num)

    def _after_epoch(self):
        self.epochs_ended.append(self.epoch_num)

    def _before_run(self, ctx):
        self.runs.append(self.global_step)

    def _after_run(self, ctx, values):
        self.after_runs.append(self.global_step)

    def _trigger_step(self):
        self.steps.append(self.global_step)

    def _trigger(self):
        self.triggers.append((self.epoch_num, self.global_step))


# ---------------------------------------------------------------------------------------------
# PeriodicTrigger

@pytest.mark.quick
def test_periodic_trigger_every_k_steps_and_epochs():
    rec = Recorder()
    run_training([PeriodicTrigger(rec, every_k_steps=5, every_k_epochs=2)],
                 steps_per_epoch=3, max_epoch=4)
    # 12 steps: global steps 5 and 10 (in epochs 2 and 4), plus the ends of epochs 2 and 4.
    assert rec.triggers == [(2, 5), (2, 6), (4, 10), (4, 12)]
    # its other hooks are untouched: trigger_step still runs after every step
    assert rec.steps == list(range(1, 13))
    assert rec.runs == list(range(12))
    assert rec.lifecycle == ['setup_graph', 'before_train', 'after_train']


def test_periodic_trigger_replaces_the_per_epoch_trigger():
    rec = Recorder()
    run_training([PeriodicTrigger(rec, every_k_steps=4)], steps_per_epoch=3, max_epoch=3)
    assert rec.triggers == [(2, 4), (3, 8)]


def test_periodic_trigger_before_train():
    rec = Recorder()
    run_training([PeriodicTrigger(rec, every_k_epochs=2, before_train=True)],
                 steps_per_epoch=2, max_epoch=3)
    assert rec.triggers == [(0, 0), (2, 4)]


def test_periodic_trigger_before_train_only():
    rec_only = Recorder()
    run_training([PeriodicTrigger(rec_only, before_train=True)], steps_per_epoch=2, max_epoch=2)
    assert rec_only.triggers == [(0, 0)]


def test_periodic_trigger_every_k_minutes_after_the_first_step_that_ends_past_them(monkeypatch):
    """A virtual clock moves 25 s in every step (a callback before the trigger moves it): with
    every_k_minutes=1 the trigger follows the first step ending 60 s or more after the previous
    trigger (or the start), i.e. every third step."""
    clock = VirtualClock()
    monkeypatch.setattr(trigger_module, 'time', clock)

    class Tick(Callback):
        def _trigger_step(self):
            clock.advance(25)

    rec = Recorder()
    run_training([Tick(), PeriodicTrigger(rec, every_k_minutes=1)], steps_per_epoch=4, max_epoch=3)
    assert rec.triggers == [(1, 3), (2, 6), (3, 9), (3, 12)]
    with pytest.raises(ValueError, match='every_k_minutes'):
        PeriodicTrigger(Recorder(), every_k_minutes=0)


def test_periodic_trigger_bad_arguments():
    with pytest.raises(ValueError, match='never be triggered'):
        PeriodicTrigger(Recorder())
    with pytest.raises(ValueError, match='every_k_steps'):
        PeriodicTrigger(Recorder(), every_k_steps=0)
    with pytest.raises(TypeError, match='every_k_epochs'):
        PeriodicTrigger(Recorder(), every_k_epochs=1.5)
    with pytest.raises(TypeError, match='Callback'):
        PeriodicTrigger(lambda: None, every_k_steps=1)


# ---------------------------------------------------------------------------------------------
# PeriodicCallback and EnableCallbackIf

def test_periodic_callback_every_k_steps():
    rec = Recorder()
    run_training([PeriodicCallback(rec, every_k_steps=2)], steps_per_epoch=3, max_epoch=2)
    assert rec.steps == [2, 4, 6]        # trigger_step after global steps 2, 4, 6
    assert rec.runs == [0, 2, 4]         # before_run while global_step is 0, 2, 4
    assert rec.after_runs == [1, 3, 5]   # paired with those before_runs
    assert rec.triggers == [(2, 6)]      # the end of epoch 1 (global step 3) is skipped
    assert rec.epochs_begun == [1] and rec.epochs_ended == [2]   # at global steps 0 and 6
    assert rec.lifecycle == ['setup_graph', 'before_train', 'after_train']


def test_periodic_callback_every_k_epochs_includes_last_step():
    rec = Recorder()
    run_training([PeriodicCallback(rec, every_k_epochs=2)], steps_per_epoch=2, max_epoch=3)
    assert rec.epochs_ended == [2, 3]
    assert rec.steps == [3, 4, 6]        # all of epoch 2, and the very last step of training
    assert rec.triggers == [(2, 4), (3, 6)]


def test_periodic_callback_bad_arguments():
    with pytest.raises(ValueError, match='both be None'):
        PeriodicCallback(Recorder())
    with pytest.raises(ValueError, match='every_k_steps'):
        PeriodicCallback(Recorder(), every_k_steps=-3)


def test_enable_callback_if_odd_epochs():
    rec = Recorder()
    run_training([EnableCallbackIf(rec, lambda self: self.epoch_num % 2 == 1)],
                 steps_per_epoch=2, max_epoch=3)
    assert rec.epochs_begun == [1, 3]
    assert rec.epochs_ended == [1, 3]
    assert rec.runs == [0, 1, 4, 5]
    assert rec.steps == [1, 2, 5, 6]
    assert rec.triggers == [(1, 2), (3, 6)]
    assert rec.lifecycle == ['setup_graph', 'before_train', 'after_train']


def test_enable_callback_if_after_run_follows_before_run():
    # global_step is incremented between before_run and after_run: re-asking pred there would flip it
    rec = Recorder()
    run_training([EnableCallbackIf(rec, lambda self: self.global_step % 2 == 0)],
                 steps_per_epoch=3, max_epoch=2)
    assert rec.runs == [0, 2, 4]
    assert rec.after_runs == [1, 3, 5]


def test_enable_callback_if_never():
    rec = Recorder()
    run_training([EnableCallbackIf(rec, lambda self: False)], steps_per_epoch=2, max_epoch=2)
    assert (rec.runs, rec.steps, rec.triggers, rec.epochs_begun) == ([], [], [], [])
    assert rec.lifecycle == ['setup_graph', 'before_train', 'after_train']


def test_enable_callback_if_gates_trigger():
    rec = Recorder()
    gated = EnableCallbackIf(rec, lambda self: self.global_step % 3 == 0)
    run_training([PeriodicTrigger(gated, every_k_steps=1)], steps_per_epoch=4, max_epoch=2)
    assert rec.triggers == [(1, 3), (2, 6)]


def test_enable_callback_if_bad_arguments():
    with pytest.raises(TypeError, match='pred'):
        EnableCallbackIf(Recorder(), True)
    with pytest.raises(TypeError, match='Callback'):
        EnableCallbackIf(object(), lambda self: True)


# ---------------------------------------------------------------------------------------------
# RunOp, RunUpdateOps, ProcessTensors

@pytest.mark.parametrize('run_before,run_as_trigger,run_step', [
    (True, True, False), (False, True, False), (True, False, False),
    (False, False, True), (True, True, True)])
def test_run_op_modes(run_before, run_as_trigger, run_step):
    spe, epochs = 3, 2
    counter, incr = make_counter()
    readback = ReadBack(counter)
    run_training([RunOp(incr, run_before=run_before, run_as_trigger=run_as_trigger, run_step=run_step),
                  readback], steps_per_epoch=spe, max_epoch=epochs)
    expected = int(run_before) + int(run_as_trigger) * epochs + int(run_step) * spe * epochs
    assert readback.values[0] == expected


def test_run_op_built_by_a_function_in_setup_graph():
    counter = tfv1.get_variable('counter', initializer=0, dtype=tf.int32, trainable=False)
    built = []

    def make_op():
        op = tfv1.assign_add(counter, 10)
        built.append(op.name)
        return op

    readback = ReadBack(counter)
    cb = RunOp(make_op, run_before=False, verbose=True)
    assert built == []
    run_training([PeriodicTrigger(cb, every_k_steps=2), readback], steps_per_epoch=3, max_epoch=2)
    assert len(built) == 1 and built[0].startswith('RunOp/')
    assert readback.values[0] == 30   # triggered at global steps 2, 4, 6; no epoch triggers


def test_run_op_bad_input():
    with pytest.raises(TypeError, match='RunOp'):
        RunOp(42)
    _, _, train_op = build_model()
    with pytest.raises(ValueError, match='returned None'):
        run_training([RunOp(lambda: None)], train_op=train_op)


def test_run_update_ops_once_per_step():
    counter, incr = make_counter()
    tfv1.add_to_collection(tfv1.GraphKeys.UPDATE_OPS, incr)
    readback = ReadBack(counter)
    run_training([RunUpdateOps(), readback], steps_per_epoch=4, max_epoch=3)
    assert readback.values[0] == 12


def test_run_update_ops_custom_collection_and_override():
    a, incr_a = make_counter('a')
    b, incr_b = make_counter('b')
    tfv1.add_to_collection('my_updates', incr_a)
    tfv1.add_to_collection('my_updates', incr_b)

    class FirstOnly(RunUpdateOps):
        def _get_update_ops(self):
            return super()._get_update_ops()[:1]

    readback = ReadBack(a, b)
    run_training([FirstOnly('my_updates'), readback], steps_per_epoch=2, max_epoch=2)
    assert list(readback.values) == [4, 0]


def test_run_update_ops_empty_collection_does_nothing():
    cb = RunUpdateOps()
    trainer = run_training([cb], steps_per_epoch=2, max_epoch=1)
    assert cb._op is None
    assert trainer.global_step == 2


def test_process_tensors_gets_the_values():
    w, loss, train_op = build_model()
    tf.multiply(loss, 2.0, name='double_loss')
    seen = []
    readback = ReadBack(w)
    run_training([ProcessTensors(['loss', 'double_loss'], lambda *v: seen.append(v)), readback],
                 train_op=train_op, steps_per_epoch=3, max_epoch=2)
    assert len(seen) == 6
    # plain gradient descent on (w - 1)^2 from w = 3 with lr 0.1: w_k = 1 + 2 * 0.8^k
    w_expected = 1 + 2 * 0.8 ** np.arange(6)
    loss_values = np.array([s[0] for s in seen])
    np.testing.assert_allclose(loss_values, (w_expected - 1) ** 2, rtol=1e-5)
    np.testing.assert_allclose([s[1] for s in seen], 2 * loss_values, rtol=1e-6)
    np.testing.assert_allclose(readback.values[0], 1 + 2 * 0.8 ** 6, rtol=1e-5)


# ---------------------------------------------------------------------------------------------
# MovingAverageSummary, MergeAllSummaries, SimpleMovingAverage

def test_moving_average_summary_runs_collection_per_step():
    counter, incr = make_counter()
    tfv1.add_to_collection(MOVING_SUMMARY_OPS_KEY, incr)
    readback = ReadBack(counter)
    run_training([MovingAverageSummary(), readback], steps_per_epoch=3, max_epoch=3)
    assert readback.values[0] == 9


def test_moving_average_summary_with_train_op():
    _, _, train_op = build_model()
    counter, incr = make_counter()
    tfv1.add_to_collection(MOVING_SUMMARY_OPS_KEY, incr)

    class RunTrainOpOnceMore(Callback):
        def _after_train(self):
            self.trainer.sess.run(train_op)   # the plain session: no hooks
            self.value = self.trainer.sess.run(counter)

    extra = RunTrainOpOnceMore()
    cb = MovingAverageSummary(train_op=train_op.name)
    run_training([cb, extra], train_op=train_op, steps_per_epoch=2, max_epoch=2)
    assert cb.before_run(None) is None      # nothing hooked: it rides on the train op
    assert extra.value == 5


def test_moving_average_summary_empty_collection():
    cb = MovingAverageSummary()
    trainer = run_training([cb], steps_per_epoch=2, max_epoch=1)
    assert cb.before_run(None) is None and trainer.global_step == 2


def _summary_steps(trainer, name):
    return [step for step, _ in trainer.monitors.get_history(name)]


@pytest.mark.parametrize('run_alone', [False, True])
def test_merge_all_summaries_once_per_epoch(run_alone):
    w, _, train_op = build_model()
    tfv1.summary.scalar('w_value', w)
    cb = MergeAllSummaries(run_alone=run_alone)
    assert isinstance(cb, MergeAllSummaries_RunAlone if run_alone else MergeAllSummaries_RunWithOp)
    trainer = run_training([cb], train_op=train_op, steps_per_epoch=3, max_epoch=4)
    history = trainer.monitors.get_history('w_value')
    assert len(history) == 4
    assert [step for step, _ in history] == [3, 6, 9, 12]
    # w decreases from 3 towards 1
    values = [v for _, v in history]
    assert all(1.0 < v < 3.0 for v in values) and values == sorted(values, reverse=True)


@pytest.mark.parametrize('run_alone', [False, True])
def test_merge_all_summaries_every_k_steps(run_alone):
    w, _, train_op = build_model()
    tfv1.summary.scalar('w_value', w)
    trainer = run_training([MergeAllSummaries(period=2, run_alone=run_alone)], train_op=train_op,
                           steps_per_epoch=5, max_epoch=2)
    # steps 2 and 4 of each epoch, and its end (step 5)
    assert _summary_steps(trainer, 'w_value') == [2, 4, 5, 7, 9, 10]


def test_merge_all_summaries_key_and_empty():
    w, _, train_op = build_model()
    tfv1.summary.scalar('in_mine', w, collections=['my_summaries'])
    default = MergeAllSummaries()
    mine = MergeAllSummaries(key='my_summaries')
    trainer = run_training([default, mine], train_op=train_op, steps_per_epoch=2, max_epoch=3)
    assert default.summary_op is None
    assert len(trainer.monitors.get_history('in_mine')) == 3
    with pytest.raises(ValueError, match='period'):
        MergeAllSummaries(period=-1)


def test_simple_moving_average_matches_numpy():
    _, _, train_op = build_model()
    window = 3
    losses = []
    trainer = run_training([ProcessTensors(['loss'], losses.append), SimpleMovingAverage(['loss'], window)],
                           train_op=train_op, steps_per_epoch=4, max_epoch=2)
    history = trainer.monitors.get_history('loss/SMA')
    assert [step for step, _ in history] == [3, 6]
    losses = np.array(losses, dtype=np.float64)
    expected = [losses[step - window:step].mean() for step in (3, 6)]
    np.testing.assert_allclose([v for _, v in history], expected, rtol=1e-6)


def test_simple_moving_average_bad_input():
    with pytest.raises(ValueError, match='window_size'):
        SimpleMovingAverage(['loss'], 0)
    tf.zeros([3], name='vec')
    _, _, train_op = build_model()
    with pytest.raises(ValueError, match='scalars'):
        run_training([SimpleMovingAverage('vec', 2)], train_op=train_op)


# ---------------------------------------------------------------------------------------------
# ProgressBar, SessionRunTimeout, TensorPrinter

def test_progress_bar_shows_steps_and_loss():
    out = io.StringIO()
    bar = ProgressBar(['loss'], file=out)
    run_training([bar], steps_per_epoch=3, max_epoch=2)
    text = out.getvalue()
    assert text.count('3/3') >= 2          # one finished bar per epoch
    assert 'loss=' in text
    assert bar._bar is None                # closed


def test_progress_bar_closed_when_training_fails():
    out = io.StringIO()
    bar = ProgressBar(file=out)

    class Fail(Callback):
        def _trigger_step(self):
            if self.global_step == 2:
                raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match='boom'):
        run_training([bar, Fail()], steps_per_epoch=5, max_epoch=1)
    assert bar._bar is None
    assert '2/5' in out.getvalue()


def test_progress_bar_bad_names():
    with pytest.raises(TypeError, match='names'):
        ProgressBar('loss')
    _, _, train_op = build_model()
    with pytest.raises(KeyError, match='nope'):
        run_training([ProgressBar(['nope'], file=io.StringIO())], train_op=train_op)


def test_session_run_timeout_cancels_a_blocked_step():
    queue = tfv1.FIFOQueue(4, tf.float32)
    dequeue = queue.dequeue()
    rec = Recorder()
    with pytest.raises(tf.errors.DeadlineExceededError):  # rather than waiting forever
        run_or_hang(run_training, [SessionRunTimeout(200), rec], train_op=dequeue, steps_per_epoch=2,
                    max_epoch=1)
    assert rec.lifecycle == ['setup_graph', 'before_train', 'after_train']
    with pytest.raises(ValueError, match='timeout_in_ms'):
        SessionRunTimeout(0)


def test_session_run_timeout_lets_normal_steps_pass():
    trainer = run_training([SessionRunTimeout(10000)], steps_per_epoch=3, max_epoch=1)
    assert trainer.global_step == 3


def test_tensor_printer_logs_values():
    _, _, train_op = build_model()
    losses = []
    with capture_logs() as records:
        run_training([TensorPrinter(['loss']), ProcessTensors(['loss'], losses.append)],
                     train_op=train_op, steps_per_epoch=2, max_epoch=2)
    printed = [m for m in records.messages() if m.startswith('loss:0: ')]
    assert len(printed) == 4
    np.testing.assert_allclose([float(m.split(': ')[1]) for m in printed], losses, rtol=1e-5)
    with pytest.raises(TypeError, match='names'):
        TensorPrinter('loss')
