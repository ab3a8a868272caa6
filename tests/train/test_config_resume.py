"""A training process killed with SIGKILL mid-epoch and started again with the same
AutoResumeTrainConfig ends exactly like an uninterrupted run."""

import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest
from helpers.paths import REPO_DIR
from helpers.processes import subprocess_env

REPO = REPO_DIR

SCRIPT = textwrap.dedent('''
    import os, sys
    import numpy as np
    from tensorpack_lite.callbacks import Callback, ModelSaver, ScheduledHyperParamSetter
    from tensorpack_lite.dataflow import BatchData, DataFromList
    from tensorpack_lite.train import AutoResumeTrainConfig, SimpleTrainer, launch_train_with_config
    from tensorpack_lite.utils import logger
    from helpers.models import LinearModel     # tests/ is on the PYTHONPATH (helpers.subprocess_env)

    STEPS, EPOCHS = 4, 6

    class KillAt(Callback):
        """Kills this process with SIGKILL (no clean-up at all) after global step N ('step:N'),
        or at the end of epoch N after the checkpoint was saved but before the epoch's
        statistics are written ('epoch:N')."""
        def __init__(self, where):
            self.kind, self.number = where.split(':')[0], int(where.split(':')[1])

        def _trigger_step(self):
            if self.kind == 'step' and self.global_step == self.number:
                os.kill(os.getpid(), 9)

        def _trigger_epoch(self):
            if self.kind == 'epoch' and self.epoch_num == self.number:
                os.kill(os.getpid(), 9)

    rng = np.random.RandomState(0)
    points = [[rng.rand(8).astype('float32'), np.int32(i % 3)] for i in range(32)]
    logger.set_logger_dir(sys.argv[1], action='k')
    callbacks = [ModelSaver(max_to_keep=3, background=False),   # a kill 2 steps after a save finds it
                 ScheduledHyperParamSetter('learning_rate', [(1, 0.1), (3, 0.05), (5, 0.01)])]
    if len(sys.argv) > 2:
        callbacks.append(KillAt(sys.argv[2]))  # after ModelSaver, before the monitors
    model = LinearModel(features=8, classes=3, init=0.1, lr_variable=True, summary=True)
    config = AutoResumeTrainConfig(model=model, dataflow=BatchData(DataFromList(points, shuffle=False), 8),
                                   callbacks=callbacks, steps_per_epoch=STEPS, max_epoch=EPOCHS)
    launch_train_with_config(config, SimpleTrainer())
''')


def run(script, logdir, *args):
    env = subprocess_env()
    return subprocess.run([sys.executable, str(script), str(logdir)] + [str(a) for a in args],
                          env=env, capture_output=True, text=True, timeout=300)


def load_stats(logdir):
    with open(os.path.join(logdir, 'stats.json')) as f:
        return json.load(f)


@pytest.fixture(scope='module')
def workdir(tmp_path_factory):
    """The training script and one uninterrupted reference run, shared by the tests."""
    path = tmp_path_factory.mktemp('resume')
    (path / 'train.py').write_text(SCRIPT)
    out = run(path / 'train.py', path / 'reference')
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return path


@pytest.mark.parametrize('kill_at', ['step:10', 'step:12', 'epoch:3'])
def test_killed_run_resumes_like_an_uninterrupted_one(workdir, kill_at):
    """Killed mid-epoch 3, after its last step, and after its checkpoint but before its stats."""
    script, resumed = workdir / 'train.py', workdir / kill_at.replace(':', '-')
    out = run(script, resumed, kill_at)
    assert out.returncode == -signal.SIGKILL, out.stdout[-3000:] + out.stderr[-3000:]
    killed_stats = load_stats(resumed)
    assert [s['epoch_num'] for s in killed_stats] == [1, 2]

    out = run(script, resumed)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert 'Setting starting_epoch to 3' in out.stdout

    expected, got = load_stats(workdir / 'reference'), load_stats(resumed)
    assert [s['epoch_num'] for s in got] == [1, 2, 3, 4, 5, 6]
    assert [s['global_step'] for s in got] == [s['global_step'] for s in expected] == [4, 8, 12, 16, 20, 24]
    assert [s['learning_rate'] for s in got] == [s['learning_rate'] for s in expected]
    assert [s['learning_rate'] for s in got] == pytest.approx([0.1, 0.1, 0.1, 0.05, 0.05, 0.01])
    # the same data order and the same restored weights give the same costs
    assert [s['cost'] for s in got] == pytest.approx([s['cost'] for s in expected], abs=1e-6)


def test_finished_run_is_not_resumed_again(workdir):
    out = run(workdir / 'train.py', workdir / 'reference')
    assert out.returncode != 0
    assert 'already finished its last epoch (6 >= max_epoch=6)' in out.stdout + out.stderr
