"""EarlyStopping: the stop epoch of a scripted statistic, its state across a resume, its errors.
(Several workers: distributed/test_trainers.py::test_early_stopping_on_the_chief_...)"""

import json
import logging
import math

import pytest

from helpers.logs import capture_logs
from helpers.scripted_stats import STEPS, ScriptedStat, dataflow, model
from tensorpack_lite.callbacks import EarlyStopping, MinSaver, ModelSaver, PeriodicTrigger
from tensorpack_lite.checkpoint.resume_state import ResumeState
from tensorpack_lite.compat import tfv1
from tensorpack_lite.train import AutoResumeTrainConfig, SimpleTrainer, TrainConfig, launch_train_with_config
from tensorpack_lite.utils import logger

NAN = float('nan')


def train(values, max_epoch, early_stopping, resume=False, more=(), callbacks=None):
    """Train with 'val-error' scripted by epoch (``values[epoch]``), ``early_stopping`` before
    ModelSaver (or with ``callbacks``); returns the trainer."""
    trainer = SimpleTrainer()
    if callbacks is None:
        callbacks = [ScriptedStat('val-error', values), early_stopping, ModelSaver(), *more]
    with tfv1.Graph().as_default():
        config_class = AutoResumeTrainConfig if resume else TrainConfig
        launch_train_with_config(config_class(model=model(), dataflow=dataflow(), max_epoch=max_epoch,
                                              callbacks=callbacks), trainer)
    return trainer


class DeclaredStat(ScriptedStat):
    """ScriptedStat that declares what it puts (so names are checked before the first step)."""

    def _stat_names(self):
        return [self.name]


def stats_epochs(directory):
    with open(directory / 'stats.json') as f:
        return [r['epoch_num'] for r in json.load(f) if 'steps_per_epoch' in r]


@pytest.mark.quick
@pytest.mark.parametrize('values, kwargs, stop_epoch, best', [
    # 5 then 4 are best; 4.5 and 4.2 are not: stop after epoch 4
    ([None, 5, 4, 4.5, 4.2, 3, 2, 1, 0], dict(patience=2), 4, (2, 4)),
    # better by more than 0.5 only: 4.6 is not (wait 1), 4.2 is (best), 4.0 and 3.8 are not
    ([None, 5, 4.6, 4.2, 4.0, 3.8, 3, 2, 1], dict(patience=2, min_delta=0.5), 5, (3, 4.2)),
    # larger is better; NaN never improves
    ([None, 0.5, 0.7, NAN, 0.69, 0.9, 0.9, 0.9, 0.9], dict(patience=2, mode='max'), 4, (2, 0.7)),
    # patience 1: the first value not better stops
    ([None, 3, 2, 2, 1, 0, 0, 0, 0], dict(patience=1), 3, (2, 2)),
    # always better: runs to max_epoch
    ([None, 8, 7, 6, 5, 4, 3, 2, 1], dict(patience=1), None, (8, 1)),
])
def test_training_stops_after_the_epoch_that_makes_patience_values_without_improvement(
        tmp_path, values, kwargs, stop_epoch, best):
    logger.set_logger_dir(str(tmp_path), action='k')
    es = EarlyStopping('val-error', **kwargs)
    trainer = train(values, 8, es)
    ended = stop_epoch or 8
    assert trainer.loop.epoch_num == ended and trainer.loop.global_step == ended * STEPS
    assert stats_epochs(tmp_path) == list(range(1, ended + 1))
    assert es.stopped_at == (None if stop_epoch is None else stop_epoch * STEPS)
    assert es.best == (best[0] * STEPS, best[1])
    assert trainer.loop.failure is None          # finished, not failed


class StepStat(DeclaredStat):
    """Puts ``values[global_step]`` as statistic ``name`` at each trigger."""

    def _trigger(self):
        self.trainer.monitors.put_scalar(self.name, self.values[self.global_step])


def test_on_a_schedule_of_steps_it_counts_each_new_value_and_stops_after_that_step(tmp_path):
    """A statistic put every 3 steps (as an InferenceRunner in PeriodicTrigger(every_k_steps=3)
    would) and EarlyStopping on the same schedule, 2 steps an epoch: values 4 (step 3), 3 (6), 3.5
    (9), 3.4 (12): patience 2 ends training after step 12, once epoch 6 has ended (its end is in
    stats.json); patience 1 after step 9, in the middle of epoch 5, whose stats.json record has
    the value of step 9."""
    values = {3: 4, 6: 3, 9: 3.5, 12: 3.4, 15: 1}
    for patience, stop_step, epoch in ((2, 12, 6), (1, 9, 5)):
        logger.set_logger_dir(str(tmp_path / str(patience)), action='k')
        es = EarlyStopping('val-error', patience=patience)
        callbacks = [PeriodicTrigger(StepStat('val-error', values), every_k_steps=3),
                     PeriodicTrigger(es, every_k_steps=3), ModelSaver()]
        trainer = train(None, 10, es, callbacks=callbacks)
        assert trainer.loop.global_step == stop_step == es.stopped_at and trainer.loop.epoch_num == epoch
        assert es.best == (6, 3)
        with open(tmp_path / str(patience) / 'stats.json') as f:
            last = json.load(f)[-1]
        assert (last['val-error'], last['global_step'], last['epoch_num']) == (
            values[stop_step], stop_step, epoch)
        assert ('steps_per_epoch' in last) == (stop_step % 2 == 0)    # the epoch's end was recorded


def test_a_resumed_run_keeps_its_patience_and_a_run_it_stopped_stays_stopped(tmp_path):
    """Uninterrupted: best at epoch 2, stop after epoch 5 (patience 3). Stopped after epoch 3 (one
    value without improvement) and resumed: it stops after epoch 5 too, not epoch 6 (a patience
    started again), and MinSaver's best is EarlyStopping's best. Started once more, the run that
    EarlyStopping ended stops before its first step."""
    values = [None, 3, 1, 2, 2, 2, 0.5, 0.5, 0.5, 0.5, 0.5]
    logger.set_logger_dir(str(tmp_path / 'whole'), action='k')
    whole = EarlyStopping('val-error', patience=3)
    assert train(values, 10, whole, resume=True).loop.global_step == 5 * STEPS

    logger.set_logger_dir(str(tmp_path / 'resumed'), action='k')
    first = EarlyStopping('val-error', patience=3)
    train(values, 3, first, resume=True, more=[MinSaver('val-error')])
    assert first.stopped_at is None and first.waited == 1
    resumed = EarlyStopping('val-error', patience=3)
    saver = MinSaver('val-error')
    with capture_logs() as logs:
        trainer = train(values, 10, resumed, resume=True, more=[saver])
    assert "resumed with the best 1 at global_step={} and 1 value(s) without improvement".format(
        2 * STEPS) in "\n".join(logs.messages())
    assert trainer.loop.global_step == 5 * STEPS == resumed.stopped_at == whole.stopped_at
    assert resumed.best == whole.best == (2 * STEPS, 1.0)
    with open(saver.record_path) as f:
        assert json.load(f)['global_step'] == 2 * STEPS
    assert stats_epochs(tmp_path / 'resumed') == [1, 2, 3, 4, 5]

    again = EarlyStopping('val-error', patience=3)
    trainer = train(values, 10, again, resume=True)
    assert trainer.loop.global_step == 5 * STEPS
    assert stats_epochs(tmp_path / 'resumed') == [1, 2, 3, 4, 5]


@pytest.mark.parametrize('kwargs, message', [
    (dict(patience=0), "patience must be a positive int, got 0"),
    (dict(patience=2.5), "patience must be a positive int, got 2.5"),
    (dict(mode='lower'), "mode must be 'min' or 'max', got 'lower'"),
    (dict(min_delta=-1), "min_delta must be a number >= 0, got -1"),
    (dict(min_delta=math.inf), "min_delta must be a number >= 0, got inf"),
])
def test_bad_arguments_are_named(kwargs, message):
    with pytest.raises(ValueError, match=r"EarlyStopping\('val-error'\): " + message.replace('(', r'\(')):
        EarlyStopping('val-error', **kwargs)
    with pytest.raises(TypeError, match="EarlyStopping: the statistic must be named by a non-empty str"):
        EarlyStopping('')


def test_placed_after_model_saver_its_state_of_the_same_trigger_is_in_the_checkpoint(tmp_path):
    logger.set_logger_dir(str(tmp_path), action='k')
    es = EarlyStopping('val-error', patience=1)
    with capture_logs() as logs:
        train([None, 1, 1], 2, es, callbacks=[ModelSaver(), ScriptedStat('val-error', [None, 1, 1]), es])
    assert not [m for m in logs.messages(logging.WARNING) if 'EarlyStopping' in m]
    assert es.stopped_at == 2 * STEPS
    states = ResumeState.read(str(tmp_path / 'model-{}'.format(2 * STEPS))).callbacks.values()
    saved = [state for state in states if isinstance(state, dict) and 'stopped_at' in state]
    assert saved == [{'best': [STEPS, 1.0], 'waited': 1, 'last_seen_step': 2 * STEPS,
                      'stopped_at': 2 * STEPS}]


def test_a_misspelled_statistic_is_an_error_before_the_first_step(tmp_path):
    logger.set_logger_dir(str(tmp_path), action='k')
    with pytest.raises(KeyError, match=r"EarlyStopping\('val-eror'\): the statistic 'val-eror' was never put"
                                       r".*checked before training.* Did you mean 'val-error'\?"):
        es = EarlyStopping('val-eror')
        train([None, 1, 1], 2, es, callbacks=[DeclaredStat('val-error', [None, 1, 1]), es])
