"""Hyper-parameters (GraphVarParam, ObjAttrParam) and their setters (scheduled, by function,
by a monitored statistic, from a file), each in a real training of a tiny ModelDesc."""

import json
import logging
import os

import numpy as np
import pytest

from tensorpack_lite.callbacks.base import Callback
from tensorpack_lite.callbacks.param import (
    GraphVarParam, HumanHyperParamSetter, HyperParamSetterWithFunc, ObjAttrParam,
    ScheduledHyperParamSetter, StatMonitorParamSetter)
from tensorpack_lite.compat import tfv1
from tensorpack_lite.dataflow import BatchData, DataFromList
from tensorpack_lite.tfutils.sesscreate import NewSessionCreator
from tensorpack_lite.train import SimpleTrainer, TrainConfig, launch_train_with_config

from helpers.models import LINE_INITIAL_LR, LineRegression

INITIAL_LR = LINE_INITIAL_LR
STEPS_PER_EPOCH = 2   # 8 points in batches of 4


def dataflow():
    xs = np.linspace(-1, 1, 8).astype('float32')
    return BatchData(DataFromList([[x, 3 * x] for x in xs], shuffle=False), 4)


class RecordLR(Callback):
    """The learning rate each step ran with, fetched along with the step, and the value at
    the end of each epoch, after the triggers of the callbacks placed before this one."""

    def __init__(self):
        self.steps = []          # (epoch_num, global_step before the step, learning rate)
        self.end_of_epoch = {}   # {epoch_num: learning rate after the epoch's triggers}

    def _setup_graph(self):
        var, = [v for v in tfv1.global_variables() if v.name == 'learning_rate:0']
        self.lr = var.read_value()

    def _before_run(self, ctx):
        self._position = (self.epoch_num, self.global_step)
        return [self.lr]

    def _after_run(self, ctx, values):
        self.steps.append(self._position + (float(values.results[0]),))

    def _trigger(self):
        self.end_of_epoch[self.epoch_num] = float(self.trainer.sess.run(self.lr))

    def per_epoch(self):
        """{epoch: learning rate}; fails when a value changed within an epoch."""
        epochs = {}
        for epoch, _, lr in self.steps:
            assert epochs.setdefault(epoch, lr) == lr, "learning rate changed within epoch {}".format(epoch)
        return epochs


class CountingSessionCreator(NewSessionCreator):
    def __init__(self):
        super().__init__()
        self.sessions = 0

    def create_session(self):
        self.sessions += 1
        return super().create_session()


def train(callbacks, max_epoch, starting_epoch=1, session_creator=None):
    """Train LineRegression with ``callbacks`` then a RecordLR; return the recorder."""
    recorder = RecordLR()
    config = TrainConfig(model=LineRegression(), dataflow=dataflow(),
                         callbacks=list(callbacks) + [recorder], max_epoch=max_epoch,
                         starting_epoch=starting_epoch, session_creator=session_creator)
    assert config.steps_per_epoch == STEPS_PER_EPOCH
    launch_train_with_config(config, SimpleTrainer())
    return recorder


def stats_json(logdir, key='learning_rate'):
    with open(os.path.join(logdir, 'stats.json')) as f:
        stats = json.load(f)
    return {record['epoch_num']: record[key] for record in stats if key in record}


def f32(value):
    return float(np.float32(value))


# ---------------------------------------------------------------------------------------------
# ScheduledHyperParamSetter

def test_piecewise_schedule_changes_after_the_given_epochs(logdir, log_records):
    setter = ScheduledHyperParamSetter('learning_rate', [(2, 0.1), (4, 0.01)])
    recorder = train([setter], max_epoch=5)
    # (ep, v): v from epoch ep + 1 on; the initial value before the first point
    expected = {1: INITIAL_LR, 2: INITIAL_LR, 3: 0.1, 4: 0.1, 5: 0.01}
    assert recorder.per_epoch() == {e: f32(v) for e, v in expected.items()}
    assert len(recorder.steps) == 5 * STEPS_PER_EPOCH
    # the variable after each epoch's triggers holds the next epoch's value...
    after = {1: INITIAL_LR, 2: 0.1, 3: 0.1, 4: 0.01, 5: 0.01}
    assert recorder.end_of_epoch == {e: f32(v) for e, v in after.items()}
    # ...while stats.json (and TensorBoard) have the value each epoch ran with
    recorded = stats_json(logdir)
    assert sorted(recorded) == [1, 2, 3, 4, 5]
    np.testing.assert_allclose([recorded[e] for e in range(1, 6)], [expected[e] for e in range(1, 6)],
                               rtol=1e-6)
    changes = [m for m in log_records.messages() if m.startswith('[HyperParamSetter]')]
    assert changes == ["[HyperParamSetter] At global_step=4, learning_rate changes from 0.3 to 0.1",
                       "[HyperParamSetter] At global_step=8, learning_rate changes from 0.1 to 0.01"]
    assert setter.param.readable_name == 'learning_rate'


def test_setting_the_current_value_again_is_not_a_change(log_records):
    recorder = train([ScheduledHyperParamSetter('learning_rate', [(0, INITIAL_LR), (1, 0.1)])], max_epoch=2)
    assert recorder.per_epoch() == {1: f32(INITIAL_LR), 2: f32(0.1)}
    changes = [m for m in log_records.messages() if m.startswith('[HyperParamSetter]')]
    assert changes == ["[HyperParamSetter] At global_step=2, learning_rate changes from 0.3 to 0.1"]


def test_linear_schedule_matches_numpy_interp(logdir):
    points, values = [1, 4, 6], [0.5, 0.2, 0.05]
    recorder = train([ScheduledHyperParamSetter('learning_rate', list(zip(points, values)),
                                                interp='linear')], max_epoch=8)
    used = recorder.per_epoch()
    # epoch e runs with the value set after epoch e - 1; before point 1 the initial value
    assert used[1] == f32(INITIAL_LR)
    expected = np.interp(np.arange(1, 8), points, values)   # constant after the last point
    np.testing.assert_allclose([used[e] for e in range(2, 9)], expected, rtol=1e-6)
    assert len(set(np.round(expected, 6))) == 6   # it really interpolates
    recorded = stats_json(logdir)   # the value each epoch ran with
    np.testing.assert_allclose([recorded[e] for e in range(1, 9)], [used[e] for e in range(1, 9)], rtol=1e-6)


def test_step_based_schedule_changes_at_the_exact_global_steps(logdir):
    schedule = [(0, 0.2), (3, 0.1), (5, 0.05)]
    recorder = train([ScheduledHyperParamSetter('learning_rate', schedule, step_based=True)], max_epoch=4)
    global_steps = [step for _, step, _ in recorder.steps]
    assert global_steps == list(range(4 * STEPS_PER_EPOCH))
    # (s, v): v for the step run at global_step == s and after
    expected = [0.2 if s < 3 else 0.1 if s < 5 else 0.05 for s in global_steps]
    assert [lr for _, _, lr in recorder.steps] == [f32(v) for v in expected]
    # epoch 2 ran steps 2 and 3: the change happened within it
    assert [lr for epoch, _, lr in recorder.steps if epoch == 2] == [f32(0.2), f32(0.1)]


def test_step_based_linear_schedule(logdir):
    points, values = [2, 6], [0.4, 0.0]
    recorder = train([ScheduledHyperParamSetter('learning_rate', list(zip(points, values)),
                                                interp='linear', step_based=True)], max_epoch=4)
    steps = np.array([step for _, step, _ in recorder.steps])
    used = np.array([lr for _, _, lr in recorder.steps])
    assert np.all(used[steps < 2] == f32(INITIAL_LR))
    np.testing.assert_allclose(used[steps >= 2], np.interp(steps[steps >= 2], points, values),
                               rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize('interp, expected', [
    (None, {5: 0.01, 6: 0.01, 7: 0.001, 8: 0.001}),
    ('linear', {5: 0.01 + (0.001 - 0.01) * 1 / 3, 6: 0.01 + (0.001 - 0.01) * 2 / 3, 7: 0.001, 8: 0.001}),
])
def test_resumed_run_starts_with_the_scheduled_value(logdir, interp, expected):
    """starting_epoch=5: epochs 1-4 ran before, and epoch 4 is not a point of the schedule.
    The variable starts at its initial value in this session, yet epoch 5 already runs with
    the value the schedule gives after epoch 4."""
    schedule = [(1, 0.1), (3, 0.01), (6, 0.001)]
    recorder = train([ScheduledHyperParamSetter('learning_rate', schedule, interp=interp)],
                     starting_epoch=5, max_epoch=7)
    assert recorder.per_epoch() == {e: f32(expected[e]) for e in (5, 6, 7)}
    assert recorder.steps[0][:2] == (5, 0)
    # each epoch's record: the value it ran with
    np.testing.assert_allclose([stats_json(logdir)[e] for e in (5, 6, 7)],
                               [expected[e] for e in (5, 6, 7)], rtol=1e-6)


@pytest.mark.parametrize('schedule, match', [
    ([(3, 0.1), (1, 0.01)],
     r"sorted by epoch.*epoch 1 comes after epoch 3 in schedule=\[\(3, 0.1\), \(1, 0.01\)\]"),
    ([(1, 0.1), (1, 0.01)], r"sorted by epoch.*epoch 1 comes after epoch 1"),
    ([(1, 0.1), (0.5, 0.01)], r"schedule\[1\] has epoch 0.5, which is not a non-negative integer"),
    ([(-1, 0.1)], r"schedule\[0\] has epoch -1"),
    ([(1, 'fast')], r"schedule\[0\] has value 'fast', which is not a number"),
    ([(1, 0.1, 2)], r"schedule\[0\] = \(1, 0.1, 2\) is not a \(epoch, value\) pair"),
    ([], r"the schedule is empty"),
])
def test_bad_schedule_is_a_clear_error(schedule, match):
    with pytest.raises(ValueError, match=match):
        ScheduledHyperParamSetter('learning_rate', schedule)


def test_bad_schedule_arguments():
    with pytest.raises(ValueError, match=r"sorted by step.*step 10 comes after step 20"):
        ScheduledHyperParamSetter('learning_rate', [(20, 0.1), (10, 0.01)], step_based=True)
    with pytest.raises(ValueError, match="interp must be None or 'linear', got 'cubic'"):
        ScheduledHyperParamSetter('learning_rate', [(1, 0.1)], interp='cubic')
    with pytest.raises(TypeError, match="schedule must be a list"):
        ScheduledHyperParamSetter('learning_rate', 0.1)
    with pytest.raises(TypeError, match="param must be a HyperParam or the name of a graph variable"):
        ScheduledHyperParamSetter(0.1, [(1, 0.1)])


def test_missing_variable_fails_before_any_session():
    creator = CountingSessionCreator()
    with pytest.raises(ValueError, match=r"no variable named 'learning_rte:0' in the graph"):
        train([ScheduledHyperParamSetter('learning_rte', [(1, 0.1)])], max_epoch=2,
              session_creator=creator)
    assert creator.sessions == 0


def test_similar_variable_names_are_suggested():
    with tfv1.variable_scope('tower0'):
        tfv1.get_variable('learning_rate', initializer=0.1)
    with pytest.raises(ValueError, match=r"'learning_rate:0'.*similar name: tower0/learning_rate:0"):
        GraphVarParam('learning_rate').setup_graph()


# ---------------------------------------------------------------------------------------------
# GraphVarParam and ObjAttrParam

def test_graph_var_param_in_a_finalized_graph():
    lr = tfv1.get_variable('learning_rate', initializer=0.1, trainable=False)
    steps = tfv1.get_variable('k', initializer=3, trainable=False)
    table = tfv1.get_variable('table', initializer=np.zeros(3, 'float32'), trainable=False)
    params = [GraphVarParam('learning_rate'), GraphVarParam('k:0'), GraphVarParam('table', shape=[3])]
    for p in params:
        p.setup_graph()
    assert [p.var for p in params] == [lr, steps, table]
    assert [p.readable_name for p in params] == ['learning_rate', 'k', 'table']
    with tfv1.Session() as sess, sess.as_default():
        sess.run(tfv1.global_variables_initializer())
        sess.graph.finalize()   # setting and reading must not build ops
        params[0].set_value(0.25)
        params[1].set_value(7.0)   # an integral float is fine for an int variable
        params[2].set_value([1, 2, 3])
        assert sess.run(lr) == 0.25 and params[0].get_value() == 0.25
        assert params[1].get_value() == 7
        np.testing.assert_array_equal(params[2].get_value(), [1, 2, 3])
        with pytest.raises(ValueError, match="variable 'k:0' has type int32 and cannot be set to 0.5"):
            params[1].set_value(0.5)
        with pytest.raises(ValueError, match=r"cannot set variable 'table:0' \(shape \(3,\), float32\)"):
            params[2].set_value([1, 2])
    with pytest.raises(ValueError, match=r"variable 'table:0' has shape \(3,\).*shape=\(\)"):
        with tfv1.Graph().as_default():
            tfv1.get_variable('table', initializer=np.zeros(3, 'float32'))
            GraphVarParam('table').setup_graph()


class Player:
    def __init__(self):
        self.exploration = 1.0


class RecordExploration(Callback):
    def __init__(self, player):
        self.player, self.values = player, {}

    def _before_epoch(self):
        self.values[self.epoch_num] = self.player.exploration


def test_obj_attr_param_schedule(logdir):
    player = Player()
    param = ObjAttrParam(player, 'exploration', readable_name='epsilon')
    recorder = RecordExploration(player)
    train([ScheduledHyperParamSetter(param, [(1, 0.5), (3, 0.1)], interp='linear'), recorder],
          max_epoch=4)
    expected = {1: 1.0, 2: 0.5, 3: 0.5 + (0.1 - 0.5) / 2, 4: 0.1}   # no float32 here
    assert recorder.values == pytest.approx(expected, rel=1e-12)
    assert player.exploration == pytest.approx(0.1, rel=1e-12)
    assert stats_json(logdir, 'epsilon') == pytest.approx(expected, rel=1e-12)   # what each epoch ran with
    assert param.readable_name == 'epsilon'
    assert ObjAttrParam(player, 'exploration').readable_name == 'exploration'


def test_obj_attr_param_missing_attribute_fails_before_any_session():
    creator = CountingSessionCreator()
    with pytest.raises(AttributeError, match="has no attribute 'temperature'"):
        train([HyperParamSetterWithFunc(ObjAttrParam(Player(), 'temperature'), lambda e, x: x)],
              max_epoch=1, session_creator=creator)
    assert creator.sessions == 0


# ---------------------------------------------------------------------------------------------
# HyperParamSetterWithFunc

def test_setter_with_func(logdir):
    calls = []

    def halve_after_even_epochs(epoch, old):
        calls.append((epoch, float(old)))
        return old * 0.5 if epoch % 2 == 0 else old

    recorder = train([HyperParamSetterWithFunc('learning_rate', halve_after_even_epochs)], max_epoch=5)
    # called before training (0 epochs finished) and after each epoch
    assert [epoch for epoch, _ in calls] == [0, 1, 2, 3, 4, 5]
    lr = f32(INITIAL_LR)
    expected = {}
    for epoch in range(1, 6):       # the value set after epoch e - 1 is used in epoch e
        if (epoch - 1) % 2 == 0:
            lr = f32(lr * 0.5)
        expected[epoch] = lr
    assert recorder.per_epoch() == expected
    assert [old for _, old in calls[1:]] == [expected[e] for e in range(1, 6)]
    with pytest.raises(TypeError, match="func must be callable"):
        HyperParamSetterWithFunc('learning_rate', 0.5)


# ---------------------------------------------------------------------------------------------
# StatMonitorParamSetter

class PutStat(Callback):
    """Puts values[epoch - 1] as a scalar at the end of each epoch."""

    def __init__(self, name, values):
        self.name, self.values = name, values

    def _trigger(self):
        self.trainer.monitors.put_scalar(self.name, self.values[self.epoch_num - 1])


def lr_changes(recorder):
    """The epochs whose learning rate differs from the previous epoch's."""
    used = recorder.per_epoch()
    return [e for e in sorted(used)[1:] if used[e] != used[e - 1]]


@pytest.mark.parametrize('values, threshold, reverse, changed_after', [
    # stalls from epoch 2 on: the 3 observations of epoch 2-4 show no decrease -> after epoch 4;
    # the history starts afresh: epochs 5-7 -> after epoch 7
    ([1.0, 0.8, 0.8, 0.8, 0.8, 0.8, 0.8, 0.8], 0.0, False, [4, 7]),
    # improves every epoch: never
    ([1.0, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3], 0.0, False, []),
    # improves, but by less than the threshold over 3 observations
    ([1.0, 0.99, 0.98, 0.97, 0.96, 0.95, 0.94, 0.93], 0.05, False, [3, 6]),
    # ... by more than it
    ([1.0, 0.97, 0.94, 0.91, 0.88, 0.85, 0.82, 0.79], 0.05, False, []),
    # an accuracy: must increase
    ([0.1, 0.2, 0.3, 0.4, 0.4, 0.4, 0.5, 0.6], 0.0, True, [6]),
    ([0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8], 0.0, True, []),
])
def test_stat_monitor_param_setter(logdir, log_records, values, threshold, reverse, changed_after):
    setter = StatMonitorParamSetter('learning_rate', 'val-error', lambda x: x * 0.5,
                                    threshold=threshold, last_k=3, reverse=reverse)
    recorder = train([PutStat('val-error', values), setter], max_epoch=8)
    used = recorder.per_epoch()
    assert [e - 1 for e in lr_changes(recorder)] == changed_after
    assert used[1] == f32(INITIAL_LR)
    assert used[8] == f32(INITIAL_LR * 0.5 ** len([e for e in changed_after if e < 8]))
    assert len([m for m in log_records.messages() if 'StatMonitorParamSetter] Triggered' in m]) == \
        len(changed_after)


def test_stat_monitor_param_setter_without_the_stat(logdir, log_records):
    recorder = train([StatMonitorParamSetter('learning_rate', 'val-error', lambda x: x * 0.5, 0, 1)],
                     max_epoch=2)
    assert lr_changes(recorder) == []
    warned = [m for m in log_records.messages(logging.WARNING) if "'val-error'" in m]
    assert warned and all(m.startswith("StatMonitorParamSetter(learning_rate): no value of 'val-error' was "
                                       "put into trainer.monitors yet, and no callback declares it.")
                          for m in warned)
    with pytest.raises(ValueError, match="last_k must be a positive integer, got 0"):
        StatMonitorParamSetter('learning_rate', 'val-error', lambda x: x, 0, 0)


class PutDeclaredStat(PutStat):
    def _stat_names(self):
        return [self.name]


def test_stat_monitor_param_setter_checks_the_name_before_training(logdir, log_records):
    """Read through StatReader: a misspelt name is named before the first step with the closest
    one the callbacks declare (a warning here, since RecordLR cannot tell what it puts; with
    every callback declaring, a KeyError), and waited for, as tensorpack's setter did."""
    setter = StatMonitorParamSetter('learning_rate', 'val-eror', lambda x: x * 0.5, 0, 1)
    recorder = train([PutDeclaredStat('val-error', [1.0, 1.0]), setter], max_epoch=2)
    warned = [m for m in log_records.messages(logging.WARNING) if "'val-eror'" in m]
    assert warned[0] == ("StatMonitorParamSetter(learning_rate): no callback declares the statistic "
                         "'val-eror' (RecordLR cannot tell what they put). Did you mean 'val-error'? The "
                         "callbacks declare: StepTime/callbacks_ms, StepTime/checkpoint_ms, "
                         "StepTime/communication_ms, StepTime/compute_ms, StepTime/flop_utilization, "
                         "StepTime/gflops_per_sec, StepTime/input_ms, StepTime/samples_per_sec, "
                         "StepTime/step_ms, StepTime/steps_per_sec, learning_rate, val-error.")
    assert len(warned) == 3 and lr_changes(recorder) == []     # the check, then one per trigger


def test_stat_monitor_param_setter_waits_for_new_data(logdir, log_records):
    """A stat put only every other epoch is observed once per value."""
    class PutEveryOtherEpoch(Callback):
        def _trigger(self):
            if self.epoch_num % 2 == 1:
                self.trainer.monitors.put_scalar('val-error', 1.0)

    recorder = train([PutEveryOtherEpoch(),
                      StatMonitorParamSetter('learning_rate', 'val-error', lambda x: x * 0.5, 0, 2)],
                     max_epoch=6)
    # observations after epochs 1 and 3 -> change after epoch 3
    assert lr_changes(recorder) == [4]
    assert any("no new value of 'val-error'" in m for m in log_records.messages())


# ---------------------------------------------------------------------------------------------
# HumanHyperParamSetter

class WriteFile(Callback):
    """Writes contents[epoch] to a file at the end of that epoch."""

    def __init__(self, path, contents):
        self.path, self.contents = path, contents

    def _trigger(self):
        if self.epoch_num in self.contents:
            with open(self.path, 'w') as f:
                f.write(self.contents[self.epoch_num])


def test_human_hyper_param_setter(logdir, log_records):
    path = os.path.join(logdir, 'hyper.txt')
    writer = WriteFile(path, {
        2: "# edited by hand\nmomentum:0.9\n\nlearning_rate: 0.05\n",
        3: "learning_rate 0.01\nlearning_rate:fast\n",   # malformed: no change
        4: "learning_rate:2e-2\n",
    })
    setter = HumanHyperParamSetter('learning_rate')
    assert setter.file_name == path
    recorder = train([writer, setter], max_epoch=5)
    assert recorder.per_epoch() == {1: f32(INITIAL_LR), 2: f32(INITIAL_LR), 3: f32(0.05), 4: f32(0.05),
                                    5: f32(0.02)}
    missing = [m for m in log_records.messages() if 'hyper.txt does not exist' in m]
    assert len(missing) == 1   # logged once, not at every epoch
    assert any(m.endswith("hyper.txt:1: cannot parse line 'learning_rate 0.01', expected 'name:value' "
                          "with a number.") for m in log_records.messages())
    assert any(m.endswith("hyper.txt:2: cannot parse line 'learning_rate:fast', expected 'name:value' "
                          "with a number.") for m in log_records.messages())
    assert any("has no entry 'learning_rate:<value>'" in m for m in log_records.messages())


def test_human_hyper_param_setter_needs_a_logger_dir():
    with pytest.raises(ValueError, match="logger directory, which is not set"):
        HumanHyperParamSetter('learning_rate')
