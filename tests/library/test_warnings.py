"""A run prints no warning caused by the library's own code (issue 15).

Each case runs in a fresh interpreter, as a user runs it, with every Python warning shown
(``-W always``) and TensorFlow's C++ log at its default level, and fails on any of: a
deprecation notice, a Python warning, a TensorFlow warning or error line (such as the
``CANCELLED: Enqueue operation was cancelled`` of a stopped queue), a variable reported
"not found in the graph", and a warning or error of tensorpack_lite's logger. TensorFlow's own
start-up notices (CPU features, absl's first line) are informational and allowed.

The cases: the main example (``examples/basics/mnist-convnet.py``), and DCGAN, which trains
from a QueueInput and then restores its Adam-trained checkpoint into a predictor to sample.
"""

import os
import re
import subprocess
import sys

import pytest
from helpers.paths import REPO_DIR
from helpers.processes import subprocess_env

REPO = REPO_DIR
MNIST = os.path.join(REPO, 'examples', 'basics', 'mnist-convnet.py')
DCGAN = os.path.join(REPO, 'examples', 'GAN', 'DCGAN.py')

# What counts as a warning, by where it comes from; each pattern is matched per line.
NOISE = {
    'deprecation': re.compile(r'deprecat', re.IGNORECASE),
    'python warning': re.compile(r'\b\w*Warning: '),
    'TensorFlow C++ warning/error': re.compile(r'^[WEF]\d{4} '),
    'TensorFlow Python warning/error': re.compile(r'^(WARNING|ERROR):tensorflow'),
    'variable not found': re.compile(r'not found in the'),
    'tensorpack_lite logger warning/error': re.compile(r'^\[[^]]*\] (\x1b\[[\d;]*m)*(WRN|ERR)\b'),
}


def noise(output):
    """``{kind: [lines]}`` for the lines of ``output`` that report a warning or an error."""
    found = {}
    for line in output.splitlines():
        for kind, pattern in NOISE.items():
            if pattern.search(line):
                found.setdefault(kind, []).append(line)
    return found


def start(script, args, cwd):
    env = subprocess_env(TF_CPP_MIN_LOG_LEVEL='0', PYTHONWARNINGS='always')
    return subprocess.Popen([sys.executable, '-W', 'always', script] + args, cwd=str(cwd), env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.fixture(scope='module')
def runs(tmp_path_factory):
    """Both runs, started together (each is mostly single-threaded): name -> (stdout, stderr)."""
    cwd = tmp_path_factory.mktemp('warnings')
    procs = {
        'mnist': start(MNIST, ['--max-epoch', '2', '--steps-per-epoch', '3',
                               '--logdir', str(cwd / 'mnist')], cwd),
        'dcgan': start(DCGAN, ['--max-epoch', '1', '--steps-per-epoch', '3', '--batch', '16',
                               '--logdir', str(cwd / 'dcgan')], cwd),
    }
    results = {}
    for name, proc in procs.items():
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, (name, out[-3000:], err[-3000:])
        results[name] = (out, err)
    return results


def test_noise_patterns_catch_each_kind_of_warning():
    """The patterns recognize the messages issue 15 reported (and allow TF's start-up notes)."""
    reported = [
        'WARNING:tensorflow:From /x/decorator_utils.py:153: GraphKeys.VARIABLES (from '
        'tensorflow.python.framework.ops) is deprecated and will be removed in a future version.',
        'W0000 00:00:1795443051.295470   27263 local_rendezvous.cc:412] Local rendezvous is aborting '
        'with status: CANCELLED: Enqueue operation was cancelled',
        '[1123 14:10:51 @sessinit.py:61] WRN The following variables are in the checkpoint, but not '
        'found in the graph: optimize/beta1_power, optimize/beta2_power',
        '/x/y.py:3: UserWarning: something',
    ]
    assert noise('\n'.join(reported)) == {
        'deprecation': reported[:1],
        'TensorFlow Python warning/error': reported[:1],
        'TensorFlow C++ warning/error': reported[1:2],
        'variable not found': reported[2:3],
        'tensorpack_lite logger warning/error': reported[2:3],
        'python warning': reported[3:],
    }
    startup = ('WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n'
               'I0000 00:00:1795443037.211960   27065 cpu_feature_guard.cc:227] This TensorFlow binary '
               'is optimized to use available CPU instructions in performance-critical operations.\n'
               '[1123 14:10:51 @sessinit.py:171] Restoring 24 variables from checkpoint /x/model-3 ...')
    assert noise(startup) == {}


def test_main_example_prints_no_warning(runs):
    out, err = runs['mnist']
    assert 'Final validation accuracy' in out
    assert noise(out) == {}
    assert noise(err) == {}


def test_queue_training_and_restore_into_a_predictor_print_no_warning(runs):
    out, err = runs['dcgan']
    # it did train from the queue, then restore the checkpoint (which holds Adam's scoped
    # power accumulators, training-only) into the sampling predictor
    assert "[QueueInput] EnqueueThread: QueueInput to queue 'QueueInput/input_queue' exited." in out
    skipped = [line for line in out.splitlines() if 'SaverRestore: skipping' in line]
    assert len(skipped) == 1 and 'training-only tensors of the checkpoint' in skipped[0]
    assert {'optimize/beta1_power', 'optimize/beta2_power', 'global_step'} <= set(
        skipped[0].split(': ')[-1].split(', '))
    assert 'Samples written to' in out
    assert noise(out) == {}
    assert noise(err) == {}
