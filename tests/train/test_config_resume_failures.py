"""Runs that fail, are killed or fill their disk resume by themselves and end like an
uninterrupted run (issue 13 items 1, 2, 7a, 7c, 7d and 8).

The killed runs are real processes ended by SIGKILL. To pay TensorFlow's import once (it takes
seconds on a busy machine), one driver process imports it and runs each training attempt in a
forked child, which kills itself at a point given by the plan (a global step, an epoch's end,
inside a write of stats.json), so every kill point is deterministic.
"""

import errno
import glob
import json
import logging
import os
import re
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from helpers.paths import REPO_DIR
from helpers.processes import subprocess_env
from helpers.dataflows import labelled_batches
from helpers.processes import kill_process_tree
from helpers.stats_records import assert_records_close

from tensorpack_lite.callbacks.base import Callback
from tensorpack_lite.callbacks.saver import CheckpointWriteError, ModelSaver
from tensorpack_lite.compat import tf, tfv1
from tensorpack_lite.input_source.feed import FeedInput
from tensorpack_lite.train import SimpleTrainer, launch_train_with_config
from tensorpack_lite.train.config import AutoResumeTrainConfig
from tensorpack_lite.tfutils.varmanip import save_chkpt_vars
from tensorpack_lite.utils import logger, stats_json
from helpers.models import DigitsMLP

REPO = REPO_DIR

# ----- the driver: one TensorFlow import, one forked child per training attempt ----------------

DRIVER = textwrap.dedent('''
    """argv[1]: a JSON plan, a list of ["train", logdir, spec, output_file] and ["remove", path].
    Prints a JSON list: the exit of each attempt (-9 when it was killed by SIGKILL)."""
    import json, os, signal, sys, traceback
    import numpy as np
    from tensorpack_lite.callbacks import (Callback, InferenceRunner, MinSaver, ModelSaver,
                                           PeriodicTrigger, ScalarStats)
    from tensorpack_lite.dataflow import BatchData, DataFromList
    from tensorpack_lite.input_source import FeedInput
    from tensorpack_lite.train import AutoResumeTrainConfig, SimpleTrainer, launch_train_with_config
    from tensorpack_lite.utils import logger
    from helpers.models import MLP     # tests/ is on the PYTHONPATH (helpers.subprocess_env)

    STEPS, EPOCHS, BATCH = 4, 6, 4

    def data(seed, n):
        rng = np.random.RandomState(seed)
        return [[rng.randn(8).astype('float32'), np.int32(rng.randint(3))] for _ in range(n)]

    class Interrupt(Callback):
        """Stops the attempt per its spec '<how>:<where>:<n>': how is kill (SIGKILL), term
        (SIGTERM, a preemption notice, sent twice, and once more when training ends, before
        the last checkpoint: the second and third change nothing), fail (an exception) or fill
        (fill the disk, training goes on); where is step (after global step n), epoch (at epoch
        n's end, once every callback and monitor has run and the checkpoint is written) or write
        (inside the n-th write of stats.json, after the temporary file, before its rename)."""

        def __init__(self, spec):
            self.how, self.where, number = spec.split(':')
            self.number = int(number)

        def _before_train(self):
            if self.where == 'write':
                real_replace, writes = os.replace, []

                def replace(src, dst):
                    if str(dst).endswith('stats.json'):
                        writes.append(dst)
                        if len(writes) == self.number:
                            self._stop()
                    return real_replace(src, dst)
                os.replace = replace

        def _trigger_step(self):
            if self.where == 'step' and self.global_step == self.number:
                self._stop()

        def _trigger_epoch(self):
            if self.where == 'epoch' and self.epoch_num == self.number:
                self.after_callbacks(self._stop)

        def _after_train(self):
            if self.how == 'term':
                os.kill(os.getpid(), signal.SIGTERM)

        def _stop(self):
            if self.how == 'kill':
                os.kill(os.getpid(), signal.SIGKILL)
            if self.how == 'term':
                os.kill(os.getpid(), signal.SIGTERM)
                os.kill(os.getpid(), signal.SIGTERM)
            if self.how == 'fail':
                raise RuntimeError('simulated failure at global step {}'.format(self.global_step))
            if self.how == 'fill':
                fd = os.open(os.path.join(os.path.dirname(logger.get_logger_dir()), 'filler'),
                             os.O_WRONLY | os.O_CREAT)
                try:
                    while True:
                        os.write(fd, b'x' * 4096)
                except OSError:
                    pass
                finally:
                    os.close(fd)

    def train(logdir, spec):
        logger.set_logger_dir(logdir, action='k')
        callbacks = [ModelSaver(max_to_keep=2, background=False),   # a kill right after a save finds it
                     PeriodicTrigger(InferenceRunner(BatchData(DataFromList(data(2, 8), shuffle=False), 4),
                                                     [ScalarStats('cost')]), every_k_steps=2),
                     MinSaver('validation_cost')]
        if spec:   # SIGTERM's callback first: its after_train runs before ModelSaver's last save
            callbacks.insert(0 if spec.startswith('term') else len(callbacks), Interrupt(spec))
        config = AutoResumeTrainConfig(
            model=MLP((8, 6, 3), lr=0.5, seed=5, scale=1.0, summary=True),
            data=FeedInput(BatchData(DataFromList(data(1, STEPS * BATCH), shuffle=False), BATCH)),
            callbacks=callbacks, steps_per_epoch=STEPS, max_epoch=EPOCHS)
        launch_train_with_config(config, SimpleTrainer())

    def attempt(logdir, spec, output):
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                fd = os.open(output, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
                os.dup2(fd, 1)
                os.dup2(fd, 2)
                signal.alarm(120)   # a stuck attempt ends
                train(logdir, spec)
                code = 0
            except SystemExit as err:    # Preempted: the exit status it carries
                code = err.code
            except BaseException:
                traceback.print_exc()
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        status = os.waitpid(pid, 0)[1]
        return -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)

    results = []
    for step in json.loads(sys.argv[1]):
        if step[0] == 'remove':
            os.remove(step[1])
            results.append(None)
        else:
            results.append(attempt(*step[1:]))
    print(json.dumps(results))
''')

STEPS, EPOCHS = 4, 6

KILLS = ['kill:epoch:1',   # after epoch 1's record and checkpoint
         'kill:step:6',    # mid-epoch 2, right after a mid-epoch validation
         'kill:write:3',   # inside the write of epoch 3's record: a stale stats.json.<hex>.tmp
         'fail:step:18',   # an error mid-epoch 5: its mid-epoch records are written, model-18 saved
         'kill:step:23']   # mid-epoch 6
"""The attempts of the killed run, in order; the next attempt (without a spec) finishes it."""


def _mount_tmpfs(path, size):
    """Mount a tmpfs of ``size`` on ``path``; the reason when it is not permitted, else None."""
    os.makedirs(path)
    try:
        out = subprocess.run(['mount', '-t', 'tmpfs', '-o', 'size={}'.format(size), 'tmpfs', path],
                             capture_output=True, text=True, timeout=30)
    except OSError as err:
        return 'cannot run mount: {}'.format(err)
    if out.returncode != 0:
        return 'mounting a tmpfs is not permitted here: {}'.format(out.stderr.strip())
    return None


def _checkpoint_values(prefix):
    reader = tf.train.load_checkpoint(prefix)
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}


def _snapshot(logdir, outputs):
    """What the tests compare, read before the tmpfs goes away."""
    return {'stats': stats_json.load_records(logdir),
            'final': _checkpoint_values(os.path.join(logdir, 'model-{}'.format(STEPS * EPOCHS))),
            'best': _checkpoint_values(os.path.join(logdir, 'min-validation_cost')),
            'files': sorted(os.listdir(logdir)),
            'outputs': [open(path).read() for path in outputs]}


@pytest.fixture(scope='module')
def runs(tmp_path_factory):
    """Runs the plan once: an uninterrupted reference run, the killed run and its attempts,
    and (when a tmpfs can be mounted) a run whose disk fills. Returns the snapshots, the
    attempts' exits and the reason the tmpfs run was skipped (or None)."""
    root = tmp_path_factory.mktemp('failures')
    (root / 'driver.py').write_text(DRIVER)
    plan, attempts = [], {}   # attempts: name -> [(index in the plan, output file)]

    def add_attempt(name, spec):
        output = str(root / '{}-{}.out'.format(name, len(attempts.get(name, []))))
        attempts.setdefault(name, []).append((len(plan), output))
        plan.append(['train', str(root / name / 'log'), spec, output])

    add_attempt('reference', '')
    for spec in KILLS + ['']:
        add_attempt('killed', spec)
    add_attempt('preempted', 'term:step:10')
    add_attempt('preempted', '')
    mount_point = str(root / 'disk')
    skip_disk = _mount_tmpfs(mount_point, '4m')
    try:
        if skip_disk is None:
            add_attempt('disk', 'fill:step:10')
            plan.append(['remove', os.path.join(mount_point, 'filler')])
            add_attempt('disk', '')
        env = subprocess_env()
        proc = subprocess.Popen([sys.executable, str(root / 'driver.py'), json.dumps(plan)], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)
        try:
            stdout, stderr = proc.communicate(timeout=240)
        finally:
            kill_process_tree(proc)
            proc.wait()
        assert proc.returncode == 0, stdout[-3000:] + stderr[-3000:]
        results = json.loads(stdout.strip().splitlines()[-1])
        exits = {name: [results[index] for index, _ in steps] for name, steps in attempts.items()}
        snapshots = {name: _snapshot(str(root / name / 'log'), [output for _, output in steps])
                     for name, steps in attempts.items()}
    finally:
        if skip_disk is None:
            subprocess.run(['umount', mount_point], timeout=30, check=False)
    return snapshots, exits, skip_disk


def _assert_same_run(got, expected):
    """Same records (every key, values within 1e-6), same final and best weights."""
    assert_records_close(got['stats'], expected['stats'])
    for which in ('final', 'best'):
        assert sorted(got[which]) == sorted(expected[which])
        for name in expected[which]:
            np.testing.assert_allclose(got[which][name], expected[which][name], atol=1e-6, err_msg=name)


def test_random_kills_with_mid_epoch_validation_resume_every_time(runs):
    snapshots, exits, _ = runs
    reference, killed = snapshots['reference'], snapshots['killed']
    assert exits['reference'] == [0]
    assert exits['killed'] == [-signal.SIGKILL, -signal.SIGKILL, -signal.SIGKILL, 1, -signal.SIGKILL, 0]

    records = reference['stats']
    # The reference has a mid-epoch validation record (step 4k+2) and an epoch record (4k).
    assert [(r['epoch_num'], r['global_step']) for r in records] == [
        (epoch, step) for epoch in range(1, EPOCHS + 1) for step in (4 * epoch - 2, 4 * epoch)]
    assert all('validation_cost' in r for r in records)
    _assert_same_run(killed, reference)
    # The best checkpoint is not simply the last one (the comparison means something).
    best_step = min((r['validation_cost'], r['global_step']) for r in records if r['global_step'] % 4 == 0)[1]
    assert best_step < STEPS * EPOCHS
    assert int(killed['best']['global_step']) == best_step

    out = killed['outputs']
    assert 'Setting starting_epoch to 2' in out[1]                # the record comes before the checkpoint
    assert 'Setting starting_epoch to 2' in out[2]
    assert 'Setting starting_epoch to 3' in out[3]                # model-12 exists, epoch 3 unrecorded
    assert "Removed '" in out[3] and '.tmp' in out[3]            # 7d: the stale temporary
    assert 'simulated failure at global step 18' in out[3]
    # The failure after step 18 left a resume point there (between two steps): the next attempt
    # goes on at step 18 with the failed attempt's records up to it (once each: _assert_same_run).
    assert 'Resuming from checkpoint' in out[4] and '(step 2 of 4 of epoch 5, global step 18)' in out[4]
    assert 'Setting starting_epoch to 5 (from step 2 of it)' in out[4]
    assert 'Setting starting_epoch to 6' in out[5]
    assert not [name for name in killed['files'] if name.endswith('.tmp')]


def test_sigterm_ends_the_step_saves_a_checkpoint_exits_143_and_the_rerun_ends_as_uninterrupted(runs):
    """SIGTERM (a preemption notice) twice mid-epoch 3, at global step 10, and again while
    training ends: training stops before the next step, ModelSaver writes model-10 and its
    resume state, the process exits with 128 + SIGTERM (not killed by the signal: -15); the
    second and third SIGTERM change nothing. The rerun resumes at step 10 and ends as the
    uninterrupted run."""
    snapshots, exits, _ = runs
    assert exits['preempted'] == [128 + signal.SIGTERM, 0]
    preempted, resumed = snapshots['preempted']['outputs']
    assert preempted.count('Received SIGTERM') == 1, preempted[-3000:]
    assert 'Received SIGTERM (preemption): training stops after the current step.' in preempted
    assert 'Training was preempted (SIGTERM) after global step 10' in preempted, preempted[-3000:]
    assert re.search(r'Model saved to .*model-10\.', preempted), preempted[-3000:]
    assert 'Setting starting_epoch to 3 (from step 2 of it)' in resumed
    _assert_same_run(snapshots['preempted'], snapshots['reference'])


def test_disk_full_stops_with_the_checkpoint_named_and_resumes_after_space_is_freed(runs):
    snapshots, exits, skip_disk = runs
    if skip_disk:
        pytest.skip(skip_disk)
    disk = snapshots['disk']
    assert exits['disk'] == [1, 0]
    failed, resumed = disk['outputs']
    assert 'CheckpointWriteError' in failed and 'model-12' in failed
    assert 'Setting starting_epoch to 3' in resumed
    _assert_same_run(disk, snapshots['reference'])


# ----- in-process runs: failures by exception -----------------------------------------------

IN_STEPS, IN_EPOCHS = 10, 3


class FailAt(Callback):
    """Raises after global step ``step``."""

    def __init__(self, step):
        self.step = step

    def _trigger_step(self):
        if self.global_step == self.step:
            raise RuntimeError('simulated failure at global step {}'.format(self.step))


def _attempt(logdir, digits, *callbacks):
    """One training attempt with AutoResumeTrainConfig in ``logdir`` and a fresh graph."""
    logger.set_logger_dir(logdir, action='k')
    images, labels = digits
    with tfv1.Graph().as_default():
        config = AutoResumeTrainConfig(
            model=DigitsMLP(hidden=8), data=FeedInput(labelled_batches(images[:40], labels[:40], 4)),
            callbacks=[ModelSaver(max_to_keep=2)] + list(callbacks),
            steps_per_epoch=IN_STEPS, max_epoch=IN_EPOCHS)
        launch_train_with_config(config, SimpleTrainer())


@pytest.fixture(scope='module')
def uninterrupted(tmp_path_factory, digits):
    """stats.json and the final weights of a run that nothing interrupted."""
    logdir = str(tmp_path_factory.mktemp('uninterrupted') / 'log')
    _attempt(logdir, digits)
    logger.unset_logger_dir()
    return _final_state(logdir)


def _final_state(logdir):
    return {'stats': stats_json.load_records(logdir),
            'final': _checkpoint_values(os.path.join(logdir, 'model-{}'.format(IN_STEPS * IN_EPOCHS)))}


def _assert_same_final_state(got, expected):
    assert [(r['epoch_num'], r['global_step']) for r in got['stats']] == [
        (epoch, epoch * IN_STEPS) for epoch in range(1, IN_EPOCHS + 1)]
    assert_records_close(got['stats'], expected['stats'])
    assert sorted(got['final']) == sorted(expected['final'])
    for name, value in expected['final'].items():
        np.testing.assert_allclose(got['final'][name], value, atol=1e-6, err_msg=name)


def _listed_checkpoints(logdir):
    state = tfv1.train.get_checkpoint_state(logdir)
    return [os.path.basename(path) for path in state.all_model_checkpoint_paths]


def test_failing_at_three_steps_then_fixed_resumes_by_itself(tmp_path, digits, uninterrupted):
    """Item 1: each failure saves a mid-epoch checkpoint; with max_to_keep=2 these used to
    rotate out model-10, the only resume point."""
    logdir = str(tmp_path / 'log')
    for step in (15, 16, 17):
        with pytest.raises(RuntimeError, match='global step {}'.format(step)):
            _attempt(logdir, digits, FailAt(step))
    assert _listed_checkpoints(logdir) == ['model-10', 'model-17']   # at most 2, model-10 kept
    assert [(r['epoch_num'], r['global_step']) for r in stats_json.load_records(logdir)] == [(1, 10)]

    _attempt(logdir, digits)
    _assert_same_final_state(_final_state(logdir), uninterrupted)


def test_checkpoint_write_failure_names_it_and_the_run_resumes(
        tmp_path, digits, uninterrupted, monkeypatch):
    """Item 2 (an injected failure; the real full disk is the tmpfs test above)."""
    logdir = str(tmp_path / 'log')
    real_save = tfv1.train.Saver.save
    attempts_at_20 = []

    def save_fails_at_step_20(saver, sess, save_path, global_step=None, **kwargs):
        if global_step == 20:
            attempts_at_20.append(global_step)
            with open(save_path + '-20.data-00000-of-00001', 'wb') as f:
                f.write(b'partial')
            raise OSError(errno.ENOSPC, 'No space left on device (simulated)')
        return real_save(saver, sess, save_path, global_step=global_step, **kwargs)

    monkeypatch.setattr(tfv1.train.Saver, 'save', save_fails_at_step_20)
    with pytest.raises(CheckpointWriteError) as info:
        _attempt(logdir, digits)
    monkeypatch.undo()
    assert os.path.join(logdir, 'model-20') in str(info.value)
    assert 'No space left on device' in str(info.value)
    assert attempts_at_20 == [20]   # not tried again when training ended because of it
    assert not glob.glob(os.path.join(logdir, 'model-20*'))   # the partial file is gone
    assert _listed_checkpoints(logdir) == ['model-10']

    _attempt(logdir, digits)
    _assert_same_final_state(_final_state(logdir), uninterrupted)


# ----- the resume rule on hand-made directories -------------------------------------------------

def _make_run(directory, checkpoint_steps, records):
    """A log directory with (tiny, readable) checkpoints at ``checkpoint_steps`` listed in the
    state file, and ``records`` as stats.json (none when None)."""
    os.makedirs(directory, exist_ok=True)
    names = ['model-{}'.format(step) for step in checkpoint_steps]
    for step, name in zip(checkpoint_steps, names):
        save_chkpt_vars({'global_step': np.int64(step)}, os.path.join(str(directory), name))
    lines = ['model_checkpoint_path: "{}"'.format(names[-1])]
    lines += ['all_model_checkpoint_paths: "{}"'.format(name) for name in names]
    with open(os.path.join(directory, 'checkpoint'), 'w') as f:
        f.write('\n'.join(lines) + '\n')
    if records is not None:
        with open(os.path.join(directory, 'stats.json'), 'w') as f:
            json.dump(records, f)
    return str(directory)


def _epoch_end(epoch, **scalars):
    return dict(scalars, epoch_num=epoch, global_step=epoch * 4)


def _resume_point(directory):
    point = AutoResumeTrainConfig.find_resume_point(directory, 4)
    return None if point is None else (os.path.basename(point[0]), point[1])


@pytest.mark.parametrize('checkpoints, records, expected', [
    # 7a: a mid-epoch validation record of epoch 3 is last
    ([4, 8, 10], [_epoch_end(1), _epoch_end(2), {'val': 1.0, 'epoch_num': 3, 'global_step': 10}],
     ('model-8', 2)),
    # killed after model-12 was saved, before epoch 3 was recorded
    ([8, 12], [_epoch_end(1), _epoch_end(2)], ('model-8', 2)),
    # item 2: stats.json records epoch 3, whose checkpoint could not be written
    ([4, 8, 11], [_epoch_end(1), _epoch_end(2), _epoch_end(3)], ('model-8', 2)),
    # the epoch-2 checkpoint was rotated out by hand: the newest described one is epoch 1's
    ([4, 10], [_epoch_end(1), _epoch_end(2)], ('model-4', 1)),
    # 7c: stats.json exists and describes no epoch: start from scratch
    ([4], [], None),
    ([4, 6], [{'val': 1.0, 'epoch_num': 1, 'global_step': 2}], None),
    # no stats.json (a run without JSONWriter): the newest end-of-epoch checkpoint
    ([4, 8, 10], None, ('model-8', 2)),
])
def test_resume_point_is_the_newest_checkpoint_stats_json_describes(
        tmp_path, checkpoints, records, expected):
    assert _resume_point(_make_run(tmp_path / 'log', checkpoints, records)) == expected


def test_resume_point_from_scratch_is_logged_and_errors_name_the_culprit(tmp_path, log_records):
    assert _resume_point(_make_run(tmp_path / 'a', [4, 8], [])) is None
    assert any('starting from scratch' in msg and 'stats.json' in msg and '[4, 8]' in msg
               for msg in log_records.messages_at(logging.WARNING))

    mid_epoch_only = _make_run(tmp_path / 'b', [6], None)
    with pytest.raises(ValueError, match='none at the end of an epoch') as info:
        _resume_point(mid_epoch_only)
    assert mid_epoch_only in str(info.value)

    corrupt = _make_run(tmp_path / 'c', [4], None)
    with open(os.path.join(corrupt, 'stats.json'), 'w') as f:
        f.write('[{"epoch_num": 1,')
    with pytest.raises(ValueError, match='stats.json'):
        _resume_point(corrupt)


def test_finished_epochs_tells_epoch_ends_from_mid_epoch_records():
    records = [{'epoch_num': 0, 'global_step': 0},                 # scalars put before training
               {'val': 1.0, 'epoch_num': 1, 'global_step': 2},     # mid-epoch
               {'cost': 2.0, 'epoch_num': 1, 'global_step': 4},
               {'cost': 2.0, 'epoch_num': 2},                      # no step: not trusted
               {'val': 1.0, 'epoch_num': 3, 'global_step': 10},
               {'epoch_num': 3, 'global_step': 12}]
    assert stats_json.finished_epochs(records, 4) == {1: 4, 3: 12}
    assert stats_json.finished_epochs([], 4) == {}
