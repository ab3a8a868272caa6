"""The commit protocol of tensorpack_lite.checkpoint: a checkpoint is listed only once complete, a
failed delete of an old checkpoint costs nothing, and the next start removes what an interrupted
write left (checkpoint/commit.py, checkpoint/directory.py, checkpoint/files.py)."""

import errno
import logging
import os

import pytest

from helpers.logs import capture_logs
from helpers.checkpoint_runs import STEPS, train
from tensorpack_lite.callbacks.saver import ModelSaver
from tensorpack_lite.callbacks.trigger import PeriodicTrigger
from tensorpack_lite.checkpoint import (STATE_FILE, CheckpointCommit, Rotation, checkpoint_files,
                                        clean_interrupted_writes, find_resume_states, find_step_checkpoints,
                                        listed_checkpoints, read_checkpoint_state, resume_files, step_of,
                                        verify_checkpoint, write_checkpoint_state)
from tensorpack_lite.checkpoint.resume_state import ResumeState


def touch(directory, *names, size=0):
    for name in names:
        with open(os.path.join(str(directory), name), 'wb') as f:
            f.write(b'x' * size)


@pytest.mark.quick
def test_the_files_of_a_checkpoint_are_listed_one_way(tmp_path):
    touch(tmp_path, 'model-4.data-00000-of-00002', 'model-4.data-00001-of-00002', 'model-4.index',
          'model-4.resume', 'model-4.resume.worker-1', 'model-40.index',
          'model-4.data-00000-of-00002.tempstate9', 'model-4.resume.0123456789ab.tmp',
          'model-4.damaged.index')
    prefix = str(tmp_path / 'model-4')
    assert [os.path.basename(p) for p in checkpoint_files(prefix)] == [
        'model-4.data-00000-of-00002', 'model-4.data-00001-of-00002', 'model-4.index']
    assert [os.path.basename(p) for p in checkpoint_files(prefix, resume=True)][3:] == [
        'model-4.resume', 'model-4.resume.worker-1']
    assert [os.path.basename(p) for p in resume_files(prefix)] == [
        'model-4.resume', 'model-4.resume.worker-1']
    assert step_of(prefix) == 4 and step_of(str(tmp_path / 'model-4.damaged')) is None
    assert find_step_checkpoints(str(tmp_path)) == {4: prefix, 40: str(tmp_path / 'model-40')}
    assert find_resume_states(str(tmp_path), 'worker-1') == {4: prefix}


@pytest.mark.quick
def test_data_without_an_index_is_no_checkpoint(tmp_path):
    touch(tmp_path, 'model-6.data-00000-of-00001', 'model-6.resume')
    assert find_step_checkpoints(str(tmp_path)) == {}
    assert listed_checkpoints(str(tmp_path)) == ({}, [])


def test_the_next_start_removes_what_an_interrupted_write_left_and_nothing_else(tmp_path):
    left = ['model-5.data-00000-of-00001.tempstate17',      # killed during the data write
            'model-6.data-00000-of-00001', 'model-6.resume',   # killed before the index / mid-rotation
            'model-7.index.tempstate3',                        # killed during the index write
            'model-7.resume.0123456789ab.tmp',                 # killed during the .resume write
            'checkpoint.abcdef012345.tmp']                     # killed during the state file's
    kept = ['model-7.data-00000-of-00001', 'model-7.index', 'model-7.resume', 'model-7.resume.worker-1',
            'model-9.resume.worker-1', 'min-val.data-00000-of-00001.tmp', 'stats.json', STATE_FILE,
            'model-3.data-00000-of-00001']   # listed, so complete once: damaged, set aside by a resume
    touch(tmp_path, *left, size=1000)
    touch(tmp_path, *kept)
    write_checkpoint_state(str(tmp_path), [str(tmp_path / 'model-3'), str(tmp_path / 'model-7')])
    os.makedirs(str(tmp_path / 'model-8_temp'))              # a sharded saver's parts
    touch(tmp_path / 'model-8_temp', 'part-00000', size=500)
    with capture_logs() as logs:
        removed = clean_interrupted_writes(str(tmp_path))
    assert sorted(os.listdir(str(tmp_path))) == sorted(kept)
    assert sorted(os.path.basename(p) for p in removed) == sorted(left + ['model-8_temp'])
    lines = [m for m in logs.messages(logging.INFO) if 'interrupted checkpoint write' in m]
    assert len(lines) == 1 and '(7 file(s), 0.0 MB)' in lines[0] and 'model-6.resume' in lines[0]
    with capture_logs() as logs:
        assert clean_interrupted_writes(str(tmp_path)) == []
    assert not [m for m in logs.messages() if 'interrupted' in m]


def test_rotation_never_deletes_the_newest_and_keeps_resume_points():
    rotation = Rotation(max_to_keep=1, resume_points_kept=1)
    dropped = []
    for step in range(1, 8):
        dropped += rotation.add(step, 'model-{}'.format(step), epoch_end=False, steps_per_epoch=3,
                                resumable=lambda prefix: prefix != 'model-7')
        assert rotation.paths()[-1] == 'model-{}'.format(step)
    # kept: the newest (7), the newest with a resume state (6, the same as the newest epoch end)
    assert rotation.paths() == ['model-6', 'model-7']
    assert sorted(s for s, _ in dropped) == [1, 2, 3, 4, 5]   # 3 once 6 ended an epoch after it


class FailingRemove:
    """``os.remove`` that refuses the files whose name contains ``fragment`` with ``error``."""

    def __init__(self, monkeypatch, fragment, error):
        self.fragment, self.error, self.refused = fragment, error, []
        self.real = os.remove
        monkeypatch.setattr(os, 'remove', self)

    def __call__(self, path, *args, **kwargs):
        if self.fragment in os.path.basename(str(path)):
            self.refused.append(os.path.basename(str(path)))
            raise OSError(self.error, os.strerror(self.error), str(path))
        return self.real(path, *args, **kwargs)


@pytest.mark.parametrize('error', [errno.EACCES, errno.EBUSY, errno.EIO], ids=['EACCES', 'EBUSY', 'EIO'])
def test_an_old_checkpoint_that_cannot_be_deleted_costs_one_warning_and_training_goes_on(
        logdir, monkeypatch, error):
    """The first checkpoint's data cannot be removed: training ends normally, the newest checkpoint
    is listed and reads back, and the warning names the file once though it is tried at every save."""
    refusal = FailingRemove(monkeypatch, 'model-1.data-', error)
    with capture_logs() as logs:
        trainer = train([PeriodicTrigger(ModelSaver(max_to_keep=1), every_k_steps=1, every_k_epochs=None)],
                        max_epoch=2)
    last = 2 * STEPS
    assert trainer.loop.global_step == last and trainer.loop.failure is None
    listed = read_checkpoint_state(logdir)
    assert listed[-1] == os.path.join(logdir, 'model-{}'.format(last))
    verify_checkpoint(listed[-1])
    assert ResumeState.read(listed[-1]).global_step == last
    assert 'model-1' not in [os.path.basename(p) for p in listed]
    assert len(refusal.refused) == last - 1    # tried again at every later save
    warnings = [m for m in logs.messages(logging.WARNING) if 'model-1.data-' in m]
    assert len(warnings) == 1 and 'Cannot delete' in warnings[0] and 'training goes on' in warnings[0]
    # its index went first, so what is left is no checkpoint; the next start removes it
    left = sorted(f for f in os.listdir(logdir) if f.startswith('model-1.'))
    assert left == ['model-1.data-00000-of-00001']
    monkeypatch.undo()
    clean_interrupted_writes(logdir)
    assert not [f for f in os.listdir(logdir) if f.startswith('model-1.')]


def test_the_commit_of_another_process_keeps_only_its_own_resume_states(tmp_path):
    touch(tmp_path, 'model-3.resume.worker-1', 'model-6.resume.worker-1', 'model-6.resume')
    commit = CheckpointCommit(str(tmp_path), Rotation(max_to_keep=1, resume_points_kept=0), 'worker-1')
    commit.start()
    assert commit.rotation.paths() == [str(tmp_path / 'model-3'), str(tmp_path / 'model-6')]
    commit.commit(9, str(tmp_path / 'model-9'), ResumeState(3, 3, 9, 3), epoch_end=True, steps_per_epoch=3)
    commit.delete_dropped()
    assert sorted(os.listdir(str(tmp_path))) == ['model-6.resume', 'model-9.resume.worker-1']
