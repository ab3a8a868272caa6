"""RollbackOnAnomaly (issue 70): a poisoned batch (NaN inputs) at step 37, on one tower and on two,
ends with weights bit-identical to a run whose data lacks the rolled-back window, where without
it the weights are NaN; a NaN a ReLU hides from the loss is caught in the weights; a 1000x spike
is rolled back and recorded; ordinary noise rolls back nothing in 2000 steps; a resumed run
replays and undoes a window recorded after its checkpoint; the bound, the learning-rate scaling,
the argument checks; SpikeRule's limit."""

import json
import os
import re
import signal
import sys

import numpy as np
import pytest

from helpers.anomalies import FEATURES, batches, poisoned, without_steps
from helpers.graphs import ReadAllVariables, cpus
from helpers.models import MLP
from helpers.multigpu import cpu_session_creator
from helpers.paths import TESTS_DIR
from helpers.processes import run_bounded, subprocess_env
from helpers.trainers import counter_trainer
from helpers.trainers import train as train_steps

from tensorpack_lite.callbacks import Callback, ModelSaver, RollbackOnAnomaly, SpikeRule
from tensorpack_lite.compat import tf, tfv1
from tensorpack_lite.dataflow import DataFromList
from tensorpack_lite.input_source import FeedInput, QueueInput
from tensorpack_lite.train import (AutoResumeTrainConfig, SimpleTrainer, SyncMultiGPUTrainerReplicated,
                                   TrainConfig, launch_train_with_config)
from tensorpack_lite.tfutils.varmanip import load_chkpt_vars
from tensorpack_lite.utils import logger

ROLLBACK_SCRIPT = os.path.join(TESTS_DIR, 'resume_scripts', 'rollback_resume.py')
SIZES, LINEAR = (FEATURES, 8, 3), (FEATURES, 3)     # LINEAR: no ReLU to hide a NaN from the loss


def no_cost_check(trainer):
    trainer.CHECK_COST = False
    return trainer


def train(data, steps, callbacks=(), towers=1, steps_per_epoch=None, model=None, logdir=None,
          config_class=TrainConfig, max_epoch=None, trainer=None, mixed_precision=None, accumulate=1):
    """Train the MLP on ``data`` (in order) for ``steps`` steps; every variable at the end."""
    readback = ReadAllVariables()
    if logdir is not None:
        logger.set_logger_dir(str(logdir), action='k')
    try:
        with tfv1.Graph().as_default():
            df = DataFromList(data, shuffle=False)
            if towers == 1:
                trainer, source, creator = trainer or no_cost_check(SimpleTrainer()), FeedInput(df), None
            else:
                trainer = no_cost_check(SyncMultiGPUTrainerReplicated(cpus(towers), mode='cpu'))
                source, creator = QueueInput(df), cpu_session_creator(towers)
            per_epoch = steps_per_epoch or steps
            config = config_class(model=model or MLP(SIZES, lr=0.1), data=source,
                                  callbacks=list(callbacks) + [readback], steps_per_epoch=per_epoch,
                                  max_epoch=max_epoch or steps // per_epoch, session_creator=creator,
                                  monitors=[] if logdir is None else None, mixed_precision=mixed_precision,
                                  accumulate=accumulate)
            launch_train_with_config(config, trainer)
    finally:
        if logdir is not None:
            logger.unset_logger_dir()
    return readback.values, trainer


def assert_same_weights(got, expected):
    names = [name for name in expected if name.startswith(('fc', 'tower1/fc'))]
    assert names
    for name in names:
        np.testing.assert_array_equal(got[name], expected[name], err_msg=name)
        assert np.all(np.isfinite(got[name])), name


# ----- a NaN batch ---------------------------------------------------------------------------------

@pytest.mark.parametrize('towers', [1, 2])
def test_a_nan_batch_at_step_37_is_rolled_back_to_the_weights_of_a_run_without_the_window(towers):
    data = batches(60 * towers)
    bad = poisoned(data, 37, towers=towers)
    linear = MLP(LINEAR, lr=0.1)
    plain, _ = train(bad, 60, towers=towers, model=linear)
    assert np.isnan(plain['fc0/W']).all()          # without the callback: NaN for ever after

    rollback = RollbackOnAnomaly('cost', snapshot_every=5, spikes=False)
    got, _ = train(bad, 60, [rollback], towers=towers, model=linear)
    assert [(w['snapshot'], w['first'], w['last']) for w in rollback.windows] == [(35, 36, 37)]
    assert rollback.windows[0]['reason'] == 'loss nan'
    expected, _ = train(without_steps(data, 36, 37, towers), 58, towers=towers, model=linear)
    assert_same_weights(got, expected)
    if towers == 2:
        for name in ['fc0/W', 'fc0/b']:
            np.testing.assert_array_equal(got['tower1/' + name], got[name])


@pytest.mark.parametrize('towers', [1, 2])
def test_with_accumulation_whole_updates_are_rolled_back(towers):
    """accumulate=4 (an update every 4 steps): the snapshot of step 30 lies 2 micro-batches into an
    update and holds the accumulated gradients too; the NaN of step 37 is seen inside the update that
    ends at step 38, so the rollback waits for its end and undoes 31-38 (two updates' worth): the
    run ends bit-identical to one on the data without steps 31-38, whose update after step 30 takes
    the micro-batches of steps 29, 30, 39 and 40 as this one's does."""
    data = batches(40 * towers)
    bad = poisoned(data, 37, towers=towers)
    linear = MLP(LINEAR, lr=0.1)
    plain, _ = train(bad, 40, towers=towers, model=linear, accumulate=4)
    assert np.isnan(plain['fc0/W']).all()
    rollback = RollbackOnAnomaly('cost', snapshot_every=10, spikes=False)
    got, _ = train(bad, 40, [rollback], towers=towers, model=linear, accumulate=4)
    assert [(w['snapshot'], w['first'], w['last']) for w in rollback.windows] == [(30, 31, 38)]
    assert rollback.windows[0]['reason'] == 'loss nan'
    expected, _ = train(without_steps(data, 31, 38, towers), 32, towers=towers, model=linear, accumulate=4)
    assert_same_weights(got, expected)


def test_a_nan_the_relu_hides_from_the_loss_is_caught_in_the_weights():
    """NaN inputs give NaN pre-activations, which the ReLU turns into zeros: the loss stays finite,
    the gradient of the first layer is NaN."""
    data = batches(30)
    bad = poisoned(data, 12)
    blind = RollbackOnAnomaly('cost', snapshot_every=4, spikes=False)
    values, _ = train(bad, 30, [blind])
    assert blind.windows == [] and np.isnan(values['fc0/W']).any()

    watching = RollbackOnAnomaly('cost', snapshot_every=4, spikes=False, check_weights=True)
    got, _ = train(bad, 30, [watching])
    assert [(w['snapshot'], w['first'], w['last'], w['reason']) for w in watching.windows] == [
        (8, 9, 12, 'weights not finite')]
    expected, _ = train(without_steps(data, 9, 12), 26)
    assert_same_weights(got, expected)


# ----- spikes --------------------------------------------------------------------------------------

@pytest.mark.parametrize('value', [-1e35, np.nan])
def test_a_step_the_fp16_loss_scaling_skipped_is_not_rolled_back(value):
    """mixed_precision='fp16' (dynamic loss scaling; TensorFlow's rewrite leaves this small model's
    ops in float32): the batch of step 30 scaled by -1e35 (a finite loss, a spike) or NaN; its
    gradients times the loss scale (2**15) are not finite, so the loss scaling skips its update
    and halves the scale: nothing to undo, and no spike. The run ends bit-identical to the one
    without the callback, the loss scale's one skipped step in both. Without mixed precision the
    same step is rolled back."""
    bad = poisoned(batches(40), 30, value=value)

    def rollback():
        return RollbackOnAnomaly('cost', snapshot_every=10, spikes=SpikeRule(k=8, window=20, warmup=10))

    watched = rollback()
    got, _ = train(bad, 40, [watched], model=MLP(LINEAR), mixed_precision='fp16')
    alone, _ = train(bad, 40, model=MLP(LINEAR), mixed_precision='fp16')
    assert watched.windows == [] and watched.spikes.history[-1][0] == 40
    assert 30 not in [step for step, _ in watched.spikes.history]
    skipped = [name for name in got if name.endswith('skipped_steps')]
    assert skipped and [got[name] for name in skipped] == [1] == [alone[name] for name in skipped]
    assert_same_weights(got, alone)
    in_float32 = rollback()
    train(bad, 40, [in_float32], model=MLP(LINEAR))
    assert [(w['first'], w['last']) for w in in_float32.windows] == [(21, 30)]
    assert in_float32.windows[0]['reason'].startswith('loss nan' if np.isnan(value) else 'loss spike')


def test_a_1000x_batch_at_step_100_is_rolled_back_and_recorded_in_the_monitors(tmp_path):
    """The batch of step 100 scaled by -1000: against the rule the model learned, so its loss is
    about 1000 times the others'."""
    data = batches(150)
    bad = poisoned(data, 100, value=-1000.0)
    rollback = RollbackOnAnomaly('cost', snapshot_every=10, spikes=SpikeRule(k=8, window=50, warmup=20))
    got, trainer = train(bad, 150, [rollback], steps_per_epoch=50, logdir=tmp_path)
    window, = rollback.windows
    assert (window['snapshot'], window['first'], window['last']) == (90, 91, 100)
    assert window['reason'].startswith('loss spike: ') and window['value'] > 100
    assert trainer.monitors.get_history('rollbacks') == [(100, 1)]
    with open(str(tmp_path / 'stats.json')) as f:
        stats = json.load(f)
    assert [s['rollbacks'] for s in stats if 'rollbacks' in s] == [1]
    with open(str(tmp_path / 'rollbacks.json')) as f:
        assert json.load(f) == rollback.windows
    with open(str(tmp_path / 'log.log')) as f:
        log = f.read()
    assert ("at global step 100: restored the snapshot of step 90; the updates of steps 91-100 are "
            "undone") in log
    expected, _ = train(without_steps(data, 91, 100), 140)
    assert_same_weights(got, expected)


def test_ordinary_noise_rolls_back_nothing_in_2000_steps():
    """(The gradient norm watched too.)"""
    rollback = RollbackOnAnomaly('cost', snapshot_every=100, watch_gradient_norm=True)  # default SpikeRules
    train(batches(2000, seed=1, noise=0.5), 2000, [rollback], steps_per_epoch=500)
    assert rollback.windows == []
    assert len(rollback.spikes.history) == len(rollback.gradient_spikes.history) == rollback.spikes.window
    assert all(0 < norm < 10 for _, norm in rollback.gradient_spikes.history)


# ----- the gradient norm -----------------------------------------------------------------------------

class SilentFeature(MLP):
    """MLP(LINEAR) whose weights of the last feature start at 0: while the data leave that feature
    at 0, its gradient is 0 and the loss does not depend on it."""

    def __init__(self):
        super().__init__(LINEAR, lr=0.1)

    def build_graph(self, x, label):
        w = np.random.RandomState(self.seed).randn(*LINEAR).astype('float32') * np.float32(self.scale)
        w[-1] = 0
        logits = tf.matmul(x, tfv1.get_variable('fc0/W', initializer=w)) + \
            tfv1.get_variable('fc0/b', initializer=np.zeros(LINEAR[1], 'float32'))
        return self.outputs(logits, label)


def test_a_batch_that_blows_the_gradient_norm_but_not_the_loss_is_rolled_back():
    """The last feature is 0 but in the batch of step 37, where it is 10^4: that step's loss is
    as any other's (the feature's weights are still 0), its gradient norm about 10^4 times the
    others'. Watching the loss alone lets it through (the feature's weights end about 10^3);
    watching the norm too rolls it back to a run without the window."""
    data = [[np.concatenate([x[:, :-1], np.zeros_like(x[:, -1:])], 1), y] for x, y in batches(40)]
    bad = [[x.copy(), y] for x, y in data]
    bad[36][0][:, -1] = 1e4

    def rollback(**kwargs):
        return RollbackOnAnomaly('cost', snapshot_every=10, spikes=SpikeRule(window=30, warmup=20), **kwargs)

    loss_only = rollback()
    got, _ = train(bad, 40, [loss_only], model=SilentFeature())
    assert loss_only.windows == [] and np.abs(got['fc0/W'][-1]).max() > 100
    watched = rollback(watch_gradient_norm=True)
    got, _ = train(bad, 40, [watched], model=SilentFeature())
    window, = watched.windows
    assert (window['snapshot'], window['first'], window['last']) == (30, 31, 37)
    assert window['reason'].startswith('gradient norm spike: ') and window['value'] < 2
    expected, _ = train(without_steps(data, 31, 37), 33, model=SilentFeature())
    assert_same_weights(got, expected)
    assert np.all(got['fc0/W'][-1] == 0)


# ----- resume --------------------------------------------------------------------------------------

class Crash(RuntimeError):
    pass


class CrashAfter(Callback):
    """Ends the run inside the step after global step ``step``: the checkpoint written at the end
    is not a resume point (a step was cut), as after a crash."""

    def __init__(self, step):
        self.step = step

    def _before_run(self, ctx):
        if self.global_step == self.step:
            raise Crash("crashed in step {}".format(self.step + 1))


def test_a_resumed_run_replays_and_undoes_a_window_recorded_after_its_checkpoint(tmp_path):
    """Checkpoints every 10 steps; a spike at step 25 (a batch scaled by -1000) rolled back to step 20; the
    run dies after step 27, resumed from the checkpoint of step 20 with data where step 25 is
    ordinary (a spike that would not come again): the recorded window 21-25 is undone again."""
    data = batches(40)
    spiky = poisoned(data, 25, value=-1000.0)

    def rollback():
        return RollbackOnAnomaly('cost', snapshot_every=5, spikes=SpikeRule(k=8, window=20, warmup=10))

    def saver():
        return ModelSaver(checkpoint_dir=str(tmp_path))

    first = rollback()
    with pytest.raises(Crash):
        train(spiky, 40, [first, saver(), CrashAfter(27)], steps_per_epoch=10, logdir=tmp_path,
              config_class=AutoResumeTrainConfig)
    assert [(w['first'], w['last']) for w in first.windows] == [(21, 25)]
    resumed = rollback()
    got, _ = train(data, 40, [resumed, saver()], steps_per_epoch=10, logdir=tmp_path,
                   config_class=AutoResumeTrainConfig)
    assert [(w['first'], w['last']) for w in resumed.windows] == [(21, 25)]
    assert resumed.windows[0]['reason'].startswith('replayed: loss spike')
    expected, _ = train(without_steps(data, 21, 25), 35)
    assert_same_weights(got, expected)


# ----- the bound, the learning rate ----------------------------------------------------------------

def test_more_rollbacks_than_max_rollbacks_within_the_period_raise_naming_the_steps():
    data = batches(40)
    for step in (10, 14, 18):
        data = poisoned(data, step)
    rollback = RollbackOnAnomaly('cost', snapshot_every=5, spikes=False, max_rollbacks=2, rollback_period=10)
    with pytest.raises(RuntimeError, match=r"3 rollbacks within 10 steps \(max_rollbacks=2\), at global "
                                           r"steps 10, 14, 18 \(loss nan\)"):
        train(data, 40, [rollback], model=MLP(LINEAR, lr=0.1))
    assert [w['last'] for w in rollback.windows] == [10, 14]

    spaced = RollbackOnAnomaly('cost', snapshot_every=5, spikes=False, max_rollbacks=2, rollback_period=8)
    train(data, 40, [spaced], model=MLP(LINEAR, lr=0.1))      # 10 and 14, then 14 and 18: never 3 in 8
    assert [w['last'] for w in spaced.windows] == [10, 14, 18]


class RecordRate(Callback):
    def _setup_graph(self):
        self._rate = [v for v in tfv1.global_variables() if v.op.name == 'learning_rate'][0]
        self.rates = {}

    def _trigger_step(self):
        self.rates[self.global_step] = float(self.trainer.sess.run(self._rate))


def test_the_learning_rate_is_scaled_for_lr_steps_after_a_rollback():
    """A rate variable of 0.1: x0.25 after the rollback at step 12, for 5 steps, then 0.1 again."""
    class RatedMLP(MLP):
        def optimizer(self):
            return tfv1.train.GradientDescentOptimizer(
                tfv1.get_variable('learning_rate', initializer=0.1, trainable=False))

    record = RecordRate()      # after the rollback callback: sees the rate the next step uses
    rollback = RollbackOnAnomaly('cost', snapshot_every=5, spikes=False, lr_scale=0.25, lr_steps=5)
    train(poisoned(batches(30), 12), 30, [rollback, record], model=RatedMLP(LINEAR))
    scaled = sorted(step for step, rate in record.rates.items() if rate == pytest.approx(0.025))
    assert scaled == [12, 13, 14, 15, 16]
    assert all(rate == pytest.approx(0.1) for step, rate in record.rates.items() if step not in scaled)


# ----- argument and trainer checks -----------------------------------------------------------------

@pytest.mark.parametrize('kwargs, error, match', [
    (dict(loss=''), TypeError, 'loss must be a tensor name'),
    (dict(snapshot_every=0), ValueError, 'snapshot_every must be a positive int, got 0'),
    (dict(max_rollbacks=1.5), ValueError, 'max_rollbacks must be a positive int'),
    (dict(rollback_period=-1), ValueError, 'rollback_period must be a positive int'),
    (dict(lr_steps=0), ValueError, 'lr_steps must be a positive int'),
    (dict(spikes='median'), TypeError, "spikes must be True, False or a SpikeRule, got 'median'"),
    (dict(lr_scale=0), ValueError, 'lr_scale must be a number > 0 or None, got 0'),
    (dict(lr_scale=float('inf')), ValueError, 'lr_scale must be a number > 0'),
    (dict(lr_name=None), TypeError, 'lr_name must be a variable name'),
])
def test_bad_arguments_give_clear_errors(kwargs, error, match):
    with pytest.raises(error, match=match):
        RollbackOnAnomaly(**kwargs)


def test_a_trainer_that_stops_at_a_nan_cost_itself_is_refused():
    with tfv1.Graph().as_default():
        config = TrainConfig(model=MLP(LINEAR), data=FeedInput(DataFromList(batches(4), shuffle=False)),
                             callbacks=[RollbackOnAnomaly()], steps_per_epoch=2, max_epoch=1, monitors=[])
        with pytest.raises(ValueError, match=r"SimpleTrainer.CHECK_COST is True: the trainer stops with a "
                                             r"FloatingPointError .* set trainer.CHECK_COST = False"):
            launch_train_with_config(config, SimpleTrainer())


def test_a_trainer_with_a_loss_scale_skips_a_nan_step_itself_and_is_accepted():
    """With fp16 loss scaling the trainer checks no cost (CHECK_COST left at True): an overflow
    skips the step; the callback sets up and trains."""
    trainer = SimpleTrainer()
    with tfv1.Graph().as_default():
        config = TrainConfig(model=MLP(LINEAR), data=FeedInput(DataFromList(batches(4), shuffle=False)),
                             callbacks=[RollbackOnAnomaly()], steps_per_epoch=2, max_epoch=1, monitors=[],
                             mixed_precision='fp16')
        launch_train_with_config(config, trainer)
    assert trainer.CHECK_COST and not trainer.checks_cost and trainer.global_step == 2


def test_a_multi_process_trainer_is_refused_naming_it():
    class TwoProcessTrainer(SimpleTrainer):
        world_size = 2

    with pytest.raises(NotImplementedError, match=r"TwoProcessTrainer trains in 2 processes"):
        train(batches(4), 2, [RollbackOnAnomaly()], model=MLP(LINEAR),
              trainer=no_cost_check(TwoProcessTrainer()))


def test_accumulation_in_several_processes_needs_snapshots_between_updates():
    class TwoProcessTrainer(SimpleTrainer):
        world_size = 2

    with pytest.raises(ValueError, match=r"accumulate=2 in 2 processes, .* snapshot_every=5 must be a "
                                         r"multiple of 2"):
        train(batches(4), 4, [RollbackOnAnomaly(snapshot_every=5)], model=MLP(LINEAR), accumulate=2,
              trainer=no_cost_check(TwoProcessTrainer()))


def test_a_lr_scale_without_the_rate_variable_is_refused():
    with pytest.raises(ValueError, match=r"no variable 'learning_rate' \(lr_name\)"):
        train(batches(4), 2, [RollbackOnAnomaly(lr_scale=0.5)], model=MLP(LINEAR))


def test_an_unknown_loss_is_named():
    with pytest.raises(KeyError, match="tensor 'total_loss' is not in the graph"):
        train(batches(4), 2, [RollbackOnAnomaly('total_loss')], model=MLP(LINEAR))


# ----- SpikeRule ------------------------------------------------------------------------------------

def test_spike_rule_limit_is_median_plus_k_upper_quartile_spreads_after_the_warmup():
    rule = SpikeRule(k=3, window=5, warmup=3, min_spread=0)
    rule.observe(1, 1.0)
    rule.observe(2, 3.0)
    assert rule.limit() is None and not rule.is_spike(1e9)         # warm-up
    rule.observe(3, 2.0)
    # [1, 2, 3]: median 2, the upper half [2, 3] has the median 2.5
    assert rule.limit() == pytest.approx(2 + 3 * 1.4826 * 0.5)
    assert rule.is_spike(4.3) and not rule.is_spike(4.2)
    for step, value in enumerate([2.0, 2.0, 2.0, 100.0], start=4):
        rule.observe(step, value)
    assert [s for s, _ in rule.history] == [3, 4, 5, 6, 7]            # the window: the latest 5
    assert rule.limit() == pytest.approx(2.0)                         # one outlier moves nothing
    rule.forget_after(4)
    assert rule.history == [(3, 2.0), (4, 2.0)]


def test_spike_rule_measures_the_upper_half_of_a_skewed_loss():
    """Most batches at 1, a few harder ones up to 4: the median absolute deviation is 0 (a
    symmetric rule would call 3, seen before, a spike); the upper half's spread is not."""
    rule = SpikeRule(k=3, window=8, warmup=8, min_spread=0)
    for step, value in enumerate([1.0, 1.0, 4.0, 1.0, 1.0, 2.0, 1.0, 3.0]):
        rule.observe(step, value)
    assert rule.limit() == pytest.approx(1 + 3 * 1.4826 * 1.5)         # upper half [1, 2, 3, 4]: 2.5
    assert not rule.is_spike(3.0) and not rule.is_spike(7.0) and rule.is_spike(8.0)


def test_spike_rule_min_spread_keeps_a_flat_loss_from_spiking_at_every_rise():
    rule = SpikeRule(k=5, window=10, warmup=3, min_spread=0.01)
    for step in range(5):
        rule.observe(step, 2.0)
    assert rule.limit() == pytest.approx(2.0 + 5 * 0.02)
    assert not rule.is_spike(2.05) and rule.is_spike(2.2)


@pytest.mark.parametrize('kwargs, match', [
    (dict(k=0), 'k must be a number > 0'),
    (dict(window=1), 'window must be an int >= 2'),
    (dict(window=10, warmup=11), r'warmup must be an int in \[2, window=10\], got 11'),
    (dict(min_spread=-1), 'min_spread must be a number >= 0'),
])
def test_spike_rule_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        SpikeRule(**kwargs)


def _script(logdir, *args, expect=0):
    code, output = run_bounded([sys.executable, ROLLBACK_SCRIPT, str(logdir)] + [str(a) for a in args], 240,
                               env=subprocess_env(PYTHONHASHSEED='0'))
    assert code == expect, "exit {} (expected {}):\n{}".format(code, expect, output[-5000:])
    return output


def test_sigkill_right_after_a_rollback_then_resume_the_window_stays_skipped(tmp_path):
    """tests/resume_scripts/rollback_resume.py: a spike at step 25, rolled back to step 20, SIGKILL
    right after it (the newest checkpoint: step 20, or 15 when the kill cut its write); resumed on
    data where step 25 is ordinary, the run undoes steps 21-25 again from rollbacks.json and ends
    with the weights of a run whose data lacks them."""
    killed = tmp_path / 'killed'
    _script(killed, '--spike-at', 25, '--sigkill-after', 25, expect=-signal.SIGKILL)
    with open(str(killed / 'rollbacks.json')) as f:
        assert [(w['snapshot'], w['first'], w['last']) for w in json.load(f)] == [(20, 21, 25)]
    output = _script(killed)
    # the checkpoint of step 20 is written in the background: the kill may have cut it
    resumed_at = re.search(r"Resuming from checkpoint .*model-(\d+) \(end of epoch", output)
    assert resumed_at and int(resumed_at.group(1)) in (15, 20), output[-5000:]
    assert "will replay and undo the recorded window(s) 21-25 again" in output
    with open(str(killed / 'rollbacks.json')) as f:
        window, = json.load(f)
    assert (window['first'], window['last']) == (21, 25)
    assert window['reason'].startswith('replayed: loss spike')
    expected, _ = train(without_steps(batches(40), 21, 25), 35, steps_per_epoch=5)
    assert_same_weights(load_chkpt_vars(str(killed / 'model-40')), expected)


def test_a_trainer_without_towers_finds_the_loss_in_the_graph():
    """helpers.trainers' CountingTrainer: a bare Trainer whose 'loss' is NaN when its counter is 4:
    at step 4, rolled back to the snapshot of step 2 (the counter with it), and so again at step 6,
    to the same snapshot, the window then 5-6."""
    class ReadCounter(Callback):
        def _setup_graph(self):
            self.counter = [v for v in tfv1.global_variables() if v.op.name == 'counter'][0]

        def _after_train(self):
            self.value = float(self.trainer.sess.run(self.counter))

    with tfv1.Graph().as_default():
        trainer = counter_trainer()
        counter = [v for v in tfv1.global_variables() if v.op.name == 'counter'][0]
        tfv1.where(tfv1.equal(counter, 4.0), np.float32(np.nan), counter, name='loss')
        rollback, read = RollbackOnAnomaly('loss', snapshot_every=2, spikes=False), ReadCounter()
        train_steps(trainer, [rollback, read], steps_per_epoch=6, max_epoch=1)
    assert [(w['snapshot'], w['first'], w['last']) for w in rollback.windows] == [(2, 3, 4), (2, 5, 6)]
    assert read.value == 2.0
