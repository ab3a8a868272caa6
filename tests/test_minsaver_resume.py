"""MinSaver / MaxSaver across restarts (the best value is recorded next to the best checkpoint),
and a misspelled statistic reported before training starts."""

import json
import logging
import os

import numpy as np
import pytest

from tensorpack_lite.callbacks.base import Callback
from tensorpack_lite.callbacks.saver import MaxSaver, MinSaver, ModelSaver
from tensorpack_lite.compat import tf, tfv1
from tensorpack_lite.dataflow import BatchData, DataFromList
from tensorpack_lite.tfutils.varmanip import load_chkpt_vars, save_chkpt_vars
from tensorpack_lite.train import (AutoResumeTrainConfig, ModelDesc, SimpleTrainer,
                                   launch_train_with_config)

STEPS = 2  # per epoch: 8 points in batches of 4


class TinyModel(ModelDesc):
    def inputs(self):
        return [tf.TensorSpec([None, 4], tf.float32, 'x'), tf.TensorSpec([None], tf.float32, 'y')]

    def build_graph(self, x, y):
        w = tfv1.get_variable('w', initializer=np.full((4, 1), 0.5, 'float32'))
        return tf.reduce_mean(tf.square(tf.squeeze(tf.matmul(x, w), 1) - y), name='cost')

    def optimizer(self):
        return tfv1.train.GradientDescentOptimizer(0.1)


class ScriptedStat(Callback):
    """Puts ``values[epoch_num]`` as statistic ``name`` at the end of each epoch."""

    def __init__(self, name, values):
        self.name, self.values = name, values

    def _trigger(self):
        self.trainer.monitors.put_scalar(self.name, self.values[self.epoch_num])


def dataflow():
    rng = np.random.RandomState(1)
    points = [[rng.randn(4).astype('float32'), np.float32(rng.randn())] for _ in range(8)]
    return BatchData(DataFromList(points, shuffle=False), 4)


def run(values, max_epoch, saver=None):
    """Train (resuming what the logger directory holds) with 'val-error' scripted by epoch."""
    saver = saver or MinSaver('val-error')
    with tfv1.Graph().as_default():
        config = AutoResumeTrainConfig(model=TinyModel(), dataflow=dataflow(), max_epoch=max_epoch,
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

class FakeMonitors:
    def __init__(self):
        self.history = []

    def get_history(self, name):
        return self.history if name == 'err' else []


def write_model(directory, step, value):
    prefix = os.path.join(directory, 'model-{}'.format(step))
    save_chkpt_vars({'w': np.full((20, 20), value, 'float32'), 'global_step': np.int64(step)}, prefix)
    tfv1.train.update_checkpoint_state(directory, prefix)


def make_saver(directory):
    """A MinSaver('err') set up with a fake trainer whose monitors we script."""
    trainer = type('FakeTrainer', (), {})()
    trainer.monitors = FakeMonitors()
    saver = MinSaver('err', checkpoint_dir=directory)
    saver.setup_graph(trainer)
    return saver


def restarted_best(directory):
    """What a MinSaver started again in ``directory`` takes as the best so far."""
    saver = make_saver(directory)
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
    saver = make_saver(directory)
    write_model(directory, 10, 1.0)
    saver.trainer.monitors.history.append((10, 2.0))
    saver.trigger()
    write_model(directory, 20, 7.0)
    saver.trainer.monitors.history.append((20, 1.5))

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
    saver = make_saver(directory)
    write_model(directory, 10, 1.0)
    saver.trainer.monitors.history.append((10, 2.0))
    saver.trigger()
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

    with open(record, 'w') as f:
        f.write('{"monitor_stat": "err"')  # not JSON
    write_model(directory, 20, 3.0)
    saver = make_saver(directory)
    saver.before_train()
    assert saver.best is None
    saver.trainer.monitors.history.append((20, 9.0))  # worse than the lost 2.0, yet taken
    saver.trigger()
    assert saver.best == (20, 9.0) and step_of(os.path.join(directory, 'min-err')) == 20
