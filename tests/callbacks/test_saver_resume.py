"""MinSaver / MaxSaver across restarts (the best value is recorded next to the best checkpoint),
and a misspelled statistic reported before training starts."""

import json
import logging
import os

import numpy as np
import pytest

from helpers.scripted_stats import STEPS, ScriptedStat, dataflow, model
from tensorpack_lite.callbacks.base import Callback, CallbackFactory
from tensorpack_lite.callbacks.inference import BinaryClassificationStats, ClassificationError, ScalarStats
from tensorpack_lite.callbacks.inference_runner import InferenceRunner
from tensorpack_lite.callbacks.saver import MaxSaver, MinSaver, ModelSaver
from tensorpack_lite.callbacks.summary import MergeAllSummaries
from tensorpack_lite.callbacks.step_monitor import StepTimeMonitor
from tensorpack_lite.callbacks.trigger import PeriodicTrigger
from tensorpack_lite.compat import tf, tfv1
from tensorpack_lite.tfutils.varmanip import load_chkpt_vars, save_chkpt_vars
from tensorpack_lite.train import AutoResumeTrainConfig, SimpleTrainer, TrainConfig, launch_train_with_config
from tensorpack_lite.utils import stats_json


def run(values, max_epoch, saver=None):
    """Train (resuming what the logger directory holds) with 'val-error' scripted by epoch."""
    saver = saver or MinSaver('val-error')
    with tfv1.Graph().as_default():
        config = AutoResumeTrainConfig(model=model(), dataflow=dataflow(), max_epoch=max_epoch,
                                       callbacks=[ModelSaver(), ScriptedStat('val-error', values), saver])
        launch_train_with_config(config, SimpleTrainer())
    return saver


def step_of(prefix):
    return int(load_chkpt_vars(prefix)['global_step'])


def read_json(path):
    with open(path) as f:
        return json.load(f)


# ---------------------------------------------------------------------------------------------
# Resuming
# ---------------------------------------------------------------------------------------------

def test_resumed_run_keeps_a_better_best_and_records_it(logdir):
    best = os.path.join(logdir, 'min-val-error')
    first = run({1: 3.0, 2: 1.0}, max_epoch=2)
    assert first.best == (2 * STEPS, 1.0)
    assert read_json(os.path.join(logdir, 'best-min-val-error.json')) == {
        'monitor_stat': 'val-error', 'kind': 'min', 'global_step': 2 * STEPS, 'value': 1.0,
        'checkpoint': 'model-{}'.format(2 * STEPS)}
    inode = os.stat(best + '.index').st_ino

    second = run({3: 2.0, 4: 1.5}, max_epoch=4)  # both worse than 1.0
    assert step_of(logdir) == 4 * STEPS             # it did resume and train epochs 3 and 4
    assert second.best == (2 * STEPS, 1.0)
    assert step_of(best) == 2 * STEPS
    assert os.stat(best + '.index').st_ino == inode  # never rewritten
    assert read_json(os.path.join(logdir, 'best-min-val-error.json'))['global_step'] == 2 * STEPS


def test_resumed_run_replaces_the_best_with_a_better_one(logdir):
    run({1: 3.0, 2: 1.0}, max_epoch=2)
    second = run({3: 2.0, 4: 0.5, 5: 0.7}, max_epoch=5)
    assert second.best == (4 * STEPS, 0.5)
    best = os.path.join(logdir, 'min-val-error')
    saved = load_chkpt_vars(best)
    assert int(saved['global_step']) == 4 * STEPS
    np.testing.assert_array_equal(saved['w'], load_chkpt_vars(os.path.join(logdir, 'model-8'))['w'])
    record = read_json(os.path.join(logdir, 'best-min-val-error.json'))
    assert (record['global_step'], record['value']) == (4 * STEPS, 0.5)


def test_epochs_run_again_after_the_resume_point_end_as_an_uninterrupted_run(logdir, tmp_path):
    """Killed after MinSaver recorded epoch 3 but before stats.json did: epoch 3 runs again and
    gives the same value, which must not count as better than itself."""
    values = {1: 3.0, 2: 2.0, 3: 1.0, 4: 1.0, 5: 4.0}
    run(values, max_epoch=3)
    best = os.path.join(logdir, 'min-val-error')
    inode = os.stat(best + '.index').st_ino
    stats = read_json(os.path.join(logdir, 'stats.json'))
    assert [r['epoch_num'] for r in stats] == [1, 2, 3]
    with open(os.path.join(logdir, 'stats.json'), 'w') as f:
        json.dump(stats[:2], f)                     # epoch 3 never recorded

    resumed = run(values, max_epoch=5)
    assert resumed.best == (3 * STEPS, 1.0)         # the tie at epoch 4 is no better either
    assert os.stat(best + '.index').st_ino == inode
    resumed_w = load_chkpt_vars(best)['w']

    # The same five epochs without interruption, in another directory.
    from tensorpack_lite.utils import logger
    logger.set_logger_dir(str(tmp_path / 'uninterrupted'), action='d')
    straight = run(values, max_epoch=5)
    assert straight.best == resumed.best
    np.testing.assert_array_equal(load_chkpt_vars(str(tmp_path / 'uninterrupted' / 'min-val-error'))['w'],
                                  resumed_w)


def test_max_saver_record_is_its_own(logdir, log_records):
    """A record of another statistic or direction under the same file name is not taken."""
    run({1: 0.5, 2: 0.8}, max_epoch=2, saver=MaxSaver('val-error', filename='best'))
    record = os.path.join(logdir, 'best-best.json')
    assert read_json(record)['kind'] == 'max'
    resumed = run({3: 0.9}, max_epoch=3, saver=MinSaver('val-error', filename='best'))
    assert "records the max of 'val-error', not the min of 'val-error'" in ' '.join(
        log_records.messages(logging.WARNING))
    assert resumed.best == (3 * STEPS, 0.9)  # the record was ignored: 0.9 became the best
    assert read_json(record)['kind'] == 'min'


# ---------------------------------------------------------------------------------------------
# Crashes while the best checkpoint and its record are replaced
# ---------------------------------------------------------------------------------------------

class ScriptedMonitors:
    """Stands for a trainer (``monitors`` is itself) whose statistic 'err' we script."""

    def __init__(self):
        self.monitors, self.err = self, []

    def get_history(self, name):
        return self.err if name == 'err' else []


def add_checkpoint(directory, step, fill):
    """A ModelSaver-like checkpoint 'model-<step>' holding w (all ``fill``) and the step."""
    prefix = os.path.join(directory, 'model-{}'.format(step))
    save_chkpt_vars({'w': np.full((20, 20), fill, 'float32'), 'global_step': np.int64(step)}, prefix)
    tfv1.train.update_checkpoint_state(directory, prefix)


def saver_with_a_best(directory):
    """A MinSaver('err') on scripted monitors, which took model-10 (err=2.0) as its best."""
    saver = MinSaver('err', checkpoint_dir=directory)
    saver.setup_graph(ScriptedMonitors())
    add_checkpoint(directory, 10, 1.0)
    saver.trainer.err.append((10, 2.0))
    saver.trigger()
    return saver


def restarted_best(directory):
    """What a MinSaver started again in ``directory`` takes as the best so far."""
    saver = MinSaver('err', checkpoint_dir=directory)
    saver.before_train()
    return saver.best


CRASHES = [('shutil.copyfile', 1, 'old'),  # while copying the data (before the marker)
           ('os.replace', 1, 'old'),       # writing the marker
           ('os.replace', 2, 'new'),       # moving the data into place (after the marker)
           ('os.replace', 3, 'new'),       # moving the index
           ('os.replace', 4, 'new')]       # moving the record


@pytest.mark.parametrize('target, call, outcome', CRASHES)
def test_a_crash_leaves_the_copy_and_its_record_consistent(tmp_path, monkeypatch, target, call, outcome):
    directory = str(tmp_path)
    saver = saver_with_a_best(directory)
    add_checkpoint(directory, 20, 7.0)
    saver.trainer.err.append((20, 1.5))

    real = {'os.replace': os.replace, 'shutil.copyfile': __import__('shutil').copyfile}[target]
    calls = []

    def crashing(src, dst, **kwargs):
        calls.append(dst)
        if len(calls) == call:
            raise OSError("killed at {} #{}".format(target, call))
        return real(src, dst, **kwargs)

    with monkeypatch.context() as m:
        m.setattr(target, crashing)
        with pytest.raises(OSError, match='killed at'):
            saver.trigger()

    best = restarted_best(directory)
    expected = (10, 2.0) if outcome == 'old' else (20, 1.5)
    assert best == expected
    saved = load_chkpt_vars(os.path.join(directory, 'min-err'))
    assert int(saved['global_step']) == expected[0]
    assert np.all(saved['w'] == (1.0 if outcome == 'old' else 7.0))
    record = read_json(os.path.join(directory, 'best-min-err.json'))
    assert (record['global_step'], record['value'], record['checkpoint']) == (
        expected[0], expected[1], 'model-{}'.format(expected[0]))
    assert not [f for f in os.listdir(directory) if f.endswith(('.tmp', '.commit'))]


def test_a_copy_without_record_or_a_record_without_copy_counts_as_absent(tmp_path, log_records):
    directory = str(tmp_path)
    saver_with_a_best(directory)
    record = os.path.join(directory, 'best-min-err.json')

    os.rename(record, record + '.away')
    assert restarted_best(directory) is None
    assert "has no record of its err ({} is missing)".format(record) in ' '.join(log_records.messages())

    os.rename(record + '.away', record)
    for name in os.listdir(directory):
        if name.startswith('min-err.'):
            os.remove(os.path.join(directory, name))
    assert restarted_best(directory) is None
    assert "records a checkpoint {} that does not exist".format(
        os.path.join(directory, 'min-err')) in ' '.join(log_records.messages())


def test_an_unreadable_record_counts_as_absent(tmp_path, log_records):
    directory = str(tmp_path)
    saver = saver_with_a_best(directory)
    record = os.path.join(directory, 'best-min-err.json')
    with open(record, 'w') as f:
        f.write('{"monitor_stat": "err"')  # cut short
    saver.before_train()                    # as when started again
    assert saver.best is None
    assert "cannot read {} (JSONDecodeError".format(record) in ' '.join(log_records.messages())
    add_checkpoint(directory, 20, 3.0)
    saver.trainer.err.append((20, 9.0))     # worse than the lost 2.0, yet taken
    saver.trigger()
    assert saver.best == (20, 9.0) and step_of(os.path.join(directory, 'min-err')) == 20
    assert read_json(record)['value'] == 9.0


# ---------------------------------------------------------------------------------------------
# A misspelled statistic, reported before the first step
# ---------------------------------------------------------------------------------------------

class CountSteps(Callback):
    def __init__(self):
        self.steps = 0

    def _stat_names(self):
        return []  # puts nothing

    def _trigger_step(self):
        self.steps += 1


class DeclaredStat(ScriptedStat):
    """A user's callback that says what it puts."""

    def _stat_names(self):
        return [self.name]


def validation(*infs):
    return InferenceRunner(dataflow(), list(infs) or [ScalarStats('cost'), ClassificationError()])


def train_classifier(callbacks, max_epoch=1):
    counter = CountSteps()
    trainer = SimpleTrainer()
    config = TrainConfig(model=model(), dataflow=dataflow(), max_epoch=max_epoch,
                         callbacks=[ModelSaver()] + callbacks + [counter])
    launch_train_with_config(config, trainer)
    return counter.steps


def declared_in(message):
    """The names the error says the callbacks declare, but the default StepTimeMonitor's."""
    names = message.split('The callbacks declare: ')[1].split('.')[0].split(', ')
    return [name for name in names if not name.startswith(StepTimeMonitor.PREFIX)]


def test_misspelled_stat_raises_before_the_first_step(logdir):
    counter = CountSteps()
    config = TrainConfig(model=model(), dataflow=dataflow(), max_epoch=2,
                         callbacks=[ModelSaver(), validation(), MinSaver('val-error'), counter])
    trainer = SimpleTrainer()
    with pytest.raises(KeyError) as info:
        launch_train_with_config(config, trainer)
    message = str(info.value)
    assert "MinSaver('val-error'): the statistic 'val-error'" in message
    assert "Did you mean 'validation_error'?" in message
    assert declared_in(message) == ['cost', 'validation_cost', 'validation_error']
    assert counter.steps == 0 and trainer.global_step == 0
    assert not [f for f in os.listdir(logdir) if 'val' in f]


def test_misspelled_summary_name_is_suggested_from_the_graph(logdir):
    with pytest.raises(KeyError, match=r"MaxSaver\('cots'\).*Did you mean 'cost'\?"):
        train_classifier([MaxSaver('cots')])


def test_declared_stat_on_a_slower_schedule_is_waited_for(logdir):
    saver = MinSaver('validation_cost')
    steps = train_classifier([PeriodicTrigger(validation(), every_k_epochs=2), saver], max_epoch=3)
    assert steps == 3 * STEPS
    assert saver.best[0] == 2 * STEPS   # the only value, put at the end of epoch 2
    assert step_of(os.path.join(logdir, 'min-validation_cost')) == 2 * STEPS


def test_undeclared_callbacks_turn_the_error_into_a_warning(logdir, log_records):
    saver = MinSaver('val-error')
    train_classifier([validation(), ScriptedStat('val-error', {1: 0.5}), saver])
    warnings = ' '.join(log_records.messages(logging.WARNING))
    assert ("MinSaver('val-error'): no callback declares the statistic 'val-error' (ScriptedStat "
            "cannot tell what they put). Did you mean 'validation_error'?") in warnings
    assert saver.best == (STEPS, 0.5)


def test_a_declared_user_stat_needs_no_warning(logdir, log_records):
    saver = MinSaver('val-error')
    train_classifier([validation(), DeclaredStat('val-error', {1: 0.5}), saver])
    assert not [m for m in log_records.messages(logging.WARNING) if 'declares' in m]
    assert saver.best == (STEPS, 0.5)


def test_a_saver_placed_before_the_producer_reads_the_value_of_the_same_trigger(logdir, log_records):
    saver = MinSaver('validation_cost')
    train_classifier([saver, validation()], max_epoch=3)
    assert not [m for m in log_records.messages(logging.WARNING) if 'comes after it' in m]
    values = stats_json.scalar_history(stats_json.load_records(logdir))['validation_cost']
    assert len(values) == 3
    first_best = min(values, key=lambda point: (point[1], point[0]))
    assert saver.best == first_best
    assert step_of(os.path.join(logdir, 'min-validation_cost')) == first_best[0]


def test_undeclared_and_missing_stat_fails_at_the_first_trigger_with_the_known_names(logdir):
    with pytest.raises(KeyError) as info:
        train_classifier([validation(ClassificationError()), ScriptedStat('other', {1: 0.5}),
                          MinSaver('accuracy')])
    message = str(info.value)
    assert "MinSaver('accuracy'): the statistic 'accuracy' was never put" in message
    assert declared_in(message) == ['cost', 'validation_error']


def test_stat_names_of_the_library_callbacks():
    assert ScalarStats(['cost', 'acc:0'], prefix='val').stat_names() == ['val_cost', 'val_acc']
    assert ScalarStats('cost', prefix='').stat_names() == ['cost']
    assert ClassificationError(summary_name='err').stat_names() == ['err']
    assert BinaryClassificationStats('p', 'l').stat_names() == ['val_precision', 'val_recall']
    assert PeriodicTrigger(DeclaredStat('x', {}), every_k_epochs=2).stat_names() == ['x']
    assert ScriptedStat('x', {}).stat_names() is None        # a user's callback cannot tell
    assert ModelSaver(checkpoint_dir='.').stat_names() == []
    assert CallbackFactory(trigger=lambda cb: None).stat_names() is None

    class MoreStats(ClassificationError):  # a user's subclass may put more than its base
        pass
    assert MoreStats().stat_names() is None

    class BadNames(Callback):
        def _stat_names(self):
            return 'loss'
    with pytest.raises(TypeError, match=r"BadNames._stat_names\(\) must return a list of names"):
        BadNames().stat_names()


def test_merged_summaries_declare_their_scalar_names():
    with tf.name_scope('tower0'):
        tfv1.summary.scalar('loss-summary', tf.constant(1.0))
    tfv1.summary.scalar('lr', tf.constant(0.1))
    tfv1.summary.histogram('weights', tf.constant([1.0]))
    tfv1.summary.scalar('other', tf.constant(2.0), collections=['mine'])
    merged = MergeAllSummaries()
    merged.setup_graph(None)
    assert merged.stat_names() == ['loss', 'lr']   # as put_summary puts them
    mine = MergeAllSummaries(key='mine', run_alone=True)
    mine.setup_graph(None)
    assert mine.stat_names() == ['other']
