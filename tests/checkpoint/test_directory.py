"""A damaged log directory never costs the checkpoints it still holds (issue 31).

A run of 3 epochs with ModelSaver(max_to_keep=3) leaves model-4, model-8, model-12, the
``checkpoint`` state file and stats.json; each test damages a copy the way a crash or a cut
disk copy would (real files), resumes it with max_epoch=5 and checks that it ends like an
uninterrupted run of 5 epochs: stats.json holds epochs 1..5 once, with the same values, and
the final weights are the same.
"""

import logging
import os
import shutil

import numpy as np
import pytest

from helpers.dataflows import labelled_batches
from helpers.stats_records import assert_records_close

from tensorpack_lite.callbacks.saver import CheckpointWriteError, ModelSaver
from tensorpack_lite.compat import tf, tfv1
from tensorpack_lite.input_source.feed import FeedInput
from tensorpack_lite.tfutils.sessinit import SaverRestore, SmartInit
from tensorpack_lite.tfutils.varmanip import get_checkpoint_path, load_chkpt_vars
from tensorpack_lite.train import SimpleTrainer, launch_train_with_config
from tensorpack_lite.train.config import AutoResumeTrainConfig
from tensorpack_lite.utils import logger, stats_json
from helpers.models import DigitsMLP

STEPS = 4
DATA = 'model-12.data-00000-of-00001'


def _train(logdir, digits, max_epoch):
    logger.set_logger_dir(logdir, action='k')
    images, labels = digits
    try:
        with tfv1.Graph().as_default():
            config = AutoResumeTrainConfig(
                model=DigitsMLP(hidden=8), data=FeedInput(labelled_batches(images[:16], labels[:16], 4)),
                callbacks=[ModelSaver(max_to_keep=3)], steps_per_epoch=STEPS, max_epoch=max_epoch)
            launch_train_with_config(config, SimpleTrainer())
    finally:
        logger.unset_logger_dir()


def _values(prefix):
    reader = tf.train.load_checkpoint(prefix)
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}


@pytest.fixture(scope='module')
def runs(tmp_path_factory, digits):
    """A finished run of 3 epochs (to copy and damage) and an uninterrupted one of 5."""
    root = tmp_path_factory.mktemp('damaged')
    three, five = str(root / 'three'), str(root / 'five')
    _train(three, digits, 3)
    _train(five, digits, 5)
    return three, {'stats': stats_json.load_records(five), 'final': _values(os.path.join(five, 'model-20'))}


def _damaged_copy(runs, tmp_path, damage):
    logdir = str(tmp_path / 'log')
    shutil.copytree(runs[0], logdir)
    damage(logdir)
    return logdir


def _garbage_index(logdir):
    with open(os.path.join(logdir, 'checkpoint'), 'w') as f:
        f.write('garbage {{{ not a checkpoint state\n')


def _zeroed_index(logdir):
    path = os.path.join(logdir, 'checkpoint')
    size = os.path.getsize(path)
    with open(path, 'wb') as f:
        f.write(b'\0' * size)


def _no_index(logdir):
    os.remove(os.path.join(logdir, 'checkpoint'))


def _index_names_gone_files(logdir):
    for name in os.listdir(logdir):
        if name.startswith('model-12.'):
            os.remove(os.path.join(logdir, name))


def _truncated_data(logdir):
    path = os.path.join(logdir, DATA)
    os.truncate(path, os.path.getsize(path) // 2)


def _zeroed_data(logdir):
    path = os.path.join(logdir, DATA)
    with open(path, 'r+b') as f:
        f.write(b'\0' * os.path.getsize(path))


def _no_dot_index(logdir):
    os.remove(os.path.join(logdir, 'model-12.index'))


# damage -> (the epoch the run resumes after, what the one warning says, the checkpoint set aside)
CASES = {
    'garbage index file': (_garbage_index, 3, "is not a checkpoint state: line 1", None),
    'zeroed index file': (_zeroed_index, 3, "is not a checkpoint state", None),
    'missing index file': (_no_index, 3, "no '{}/checkpoint' state file: checkpoints found by their files",
                           None),
    'index file names gone files': (_index_names_gone_files, 2, "lists model-12 whose index is gone", None),
    'truncated data file': (_truncated_data, 2, "'{}/model-12' is truncated", 'model-12'),
    'zeroed data file': (_zeroed_data, 2, "Checksum does not match", 'model-12'),
    'missing .index': (_no_dot_index, 2, "'{}/model-12.index' does not exist", 'model-12'),
}


@pytest.mark.parametrize('case', sorted(CASES))
def test_a_damaged_run_resumes_from_its_newest_readable_checkpoint(
        runs, tmp_path, digits, case, log_records):
    damage, resumed_after, says, set_aside = CASES[case]
    logdir = _damaged_copy(runs, tmp_path, damage)
    before = {name: open(os.path.join(logdir, name), 'rb').read()
              for name in os.listdir(logdir) if name.startswith('model-12.')}

    files = sorted(os.listdir(logdir))
    point = AutoResumeTrainConfig.find_resume_point(logdir, STEPS)   # looks, changes nothing
    assert point[:2] == (os.path.join(logdir, 'model-{}'.format(resumed_after * STEPS)), resumed_after)
    assert sorted(os.listdir(logdir)) == files

    del log_records[:]
    _train(logdir, digits, 5)
    warnings = [m for m in log_records.messages_at(logging.WARNING) if 'AutoResumeTrainConfig' in m]
    assert len(warnings) == 1, log_records.messages_at(logging.WARNING)
    assert says.format(logdir) in warnings[0]
    point = 'resuming from model-{} (end of epoch {})'.format(resumed_after * STEPS, resumed_after)
    assert point in warnings[0]
    assert 'Setting starting_epoch to {}.'.format(resumed_after + 1) in log_records.messages()

    records = stats_json.load_records(logdir)
    assert [(r['epoch_num'], r['global_step']) for r in records] == [(e, e * STEPS) for e in range(1, 6)]
    reference = runs[1]
    assert_records_close(records, reference['stats'])
    final = _values(os.path.join(logdir, 'model-20'))
    assert sorted(final) == sorted(reference['final'])
    for name, value in reference['final'].items():
        np.testing.assert_allclose(final[name], value, atol=1e-6, err_msg=name)
    # the newest checkpoints are listed again, at most max_to_keep of them
    listed = tfv1.train.get_checkpoint_state(logdir).all_model_checkpoint_paths
    assert sorted(os.path.basename(p) for p in listed) == ['model-12', 'model-16', 'model-20']
    if set_aside:   # the broken checkpoint is kept, byte for byte, under another name
        assert 'moved {} aside to {}.damaged'.format(set_aside, set_aside) in warnings[0]
        kept = {name.replace('.damaged', ''): open(os.path.join(logdir, name), 'rb').read()
                for name in os.listdir(logdir) if name.startswith(set_aside + '.damaged')}
        assert kept == before


def test_a_run_without_a_readable_checkpoint_of_a_recorded_epoch_starts_over_and_says_why(
        runs, tmp_path, digits, log_records):
    def damage(logdir):
        for step in (4, 8, 12):
            path = os.path.join(logdir, 'model-{}.data-00000-of-00001'.format(step))
            os.truncate(path, 3)
    logdir = _damaged_copy(runs, tmp_path, damage)
    del log_records[:]
    _train(logdir, digits, 5)
    warning, = [m for m in log_records.messages_at(logging.WARNING) if 'AutoResumeTrainConfig' in m]
    assert all('skipped model-{}'.format(step) in warning for step in (4, 8, 12))
    assert warning.endswith('starting from scratch.')
    assert [r['epoch_num'] for r in stats_json.load_records(logdir)] == [1, 2, 3, 4, 5]
    assert sorted(n for n in os.listdir(logdir) if '.damaged.' in n) == sorted(
        'model-{}.damaged.{}'.format(step, suffix) for step in (4, 8, 12)
        for suffix in ('index', 'data-00000-of-00001', 'resume'))   # the resume state goes with it


def test_smart_init_of_a_directory_takes_its_newest_readable_checkpoint(runs, tmp_path, log_records):
    logdir = _damaged_copy(runs, tmp_path, lambda d: (_garbage_index(d), _zeroed_data(d)))
    expected = os.path.join(logdir, 'model-8')
    del log_records[:]
    for make in (SmartInit, SaverRestore):
        assert make(logdir).path == expected
    assert get_checkpoint_path(os.path.join(logdir, 'checkpoint')) == expected
    values = load_chkpt_vars(logdir)
    for name, value in _values(expected).items():
        np.testing.assert_array_equal(values[name], value)
    warnings = log_records.messages_at(logging.WARNING)
    assert len(warnings) == 4   # one per call, each naming both problems
    for warning in warnings:
        assert 'using model-8' in warning and 'is not a checkpoint state' in warning
        assert "skipped Checkpoint '{}/model-12' is corrupt".format(logdir) in warning
    assert os.path.getsize(os.path.join(logdir, DATA)) > 0   # loading never moves or deletes anything

    for step in (4, 8):
        os.truncate(os.path.join(logdir, 'model-{}.data-00000-of-00001'.format(step)), 1)
    with pytest.raises(ValueError, match='No readable checkpoint') as info:
        SmartInit(logdir)
    assert all("model-{}' is".format(step) in str(info.value) for step in (4, 8, 12))


def test_a_failed_save_over_an_earlier_runs_checkpoint_of_that_step_leaves_it(
        runs, tmp_path, digits, monkeypatch):
    """Killed after model-12 was saved but before epoch 3 was recorded: the run resumes from
    model-8 and saves model-12 again. When that save fails (a full disk), the earlier model-12
    and every other checkpoint stay as they were: nothing an earlier run wrote is deleted
    before this run has saved a checkpoint of its own."""
    def damage(logdir):
        stats_json.write_records(logdir, stats_json.load_records(logdir)[:2])
    logdir = _damaged_copy(runs, tmp_path, damage)
    before = {name: open(os.path.join(logdir, name), 'rb').read()
              for name in os.listdir(logdir) if name.startswith(('model-', 'checkpoint'))}

    def full_disk(*args, **kwargs):
        raise OSError(28, 'No space left on device')
    monkeypatch.setattr(tfv1.train.Saver, 'save', full_disk)
    with pytest.raises(CheckpointWriteError, match='model-12'):
        _train(logdir, digits, 5)
    after = {name: open(os.path.join(logdir, name), 'rb').read()
             for name in os.listdir(logdir) if name.startswith(('model-', 'checkpoint'))}
    assert after == before


def test_a_state_file_written_by_tensorflows_saver_reads_without_a_warning(tmp_path, log_records):
    """TensorFlow's own writer of the state file (CheckpointManager's) records timestamps as
    well; they are not damage."""
    with tfv1.Graph().as_default():
        tfv1.get_variable('w', initializer=np.arange(3, dtype='float32'))
        saver = tfv1.train.Saver(max_to_keep=5)
        with tfv1.Session() as sess:
            sess.run(tfv1.global_variables_initializer())
            paths = [saver.save(sess, str(tmp_path / 'model'), global_step=step) for step in (1, 2)]
    tfv1.train.update_checkpoint_state(str(tmp_path), paths[-1], paths, all_model_checkpoint_timestamps=[
        1.7e9, 1.7e9 + 5], last_preserved_timestamp=1.7e9)
    assert 'all_model_checkpoint_timestamps' in open(str(tmp_path / 'checkpoint')).read()
    del log_records[:]
    assert SmartInit(str(tmp_path)).path == str(tmp_path / 'model-2')
    assert log_records.messages_at(logging.WARNING) == []
