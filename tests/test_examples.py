"""The bundled examples run as scripts (short smoke runs) and write what they promise."""

import json
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_example(relpath, args, cwd):
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get('PYTHONPATH', ''),
               TF_CPP_MIN_LOG_LEVEL='2')
    return subprocess.run([sys.executable, os.path.join(REPO, relpath)] + args, cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


def test_digits_custom_trainer(tmp_path):
    logdir = tmp_path / 'log'
    out = run_example('examples/basics/digits-custom-trainer.py',
                      ['--max-epoch', '3', '--logdir', str(logdir)], cwd=tmp_path)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    stats = json.loads((logdir / 'stats.json').read_text())
    assert [s['epoch_num'] for s in stats] == [1, 2, 3]
    assert stats[-1]['global_step'] == 3 * 23  # 1500 training digits in batches of 64
    assert stats[-1]['val_loss'] < stats[0]['val_loss']
    assert stats[-1]['val_accuracy'] > 0.7
    assert any(name.startswith('events.out.tfevents') for name in os.listdir(logdir))
    assert 'Final test accuracy' in out.stdout


def test_digits_custom_trainer_help(tmp_path):
    out = run_example('examples/basics/digits-custom-trainer.py', ['--help'], cwd=tmp_path)
    assert out.returncode == 0 and '--max-epoch' in out.stdout
