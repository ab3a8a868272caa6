"""tensorpack_lite.contrib.keras: a tf_keras (Keras 2) model trained by tensorpack_lite's
trainers. Each training runs tests/keras_scripts/train_keras.py in a subprocess with
TF_USE_LEGACY_KERAS=1 (the variable must be set before TensorFlow is imported) and reads the
`key: value` lines it prints; without tf_keras, importing the module raises one ImportError."""

import json
import os
import subprocess
import sys

import pytest

from helpers.paths import TESTS_DIR
from helpers.processes import run_bounded, subprocess_env

HERE = TESTS_DIR
REPO = os.path.dirname(HERE)
SCRIPT = os.path.join(HERE, 'keras_scripts', 'train_keras.py')
TIMEOUT = 300     # a hang, inside the test's own 10 minutes (tox.ini)


def _env():
    return subprocess_env(TF_USE_LEGACY_KERAS='1', TENSORPACK_LOGGER_ACTION='d')


def _tf_keras_works():
    out = subprocess.run([sys.executable, '-c', 'import tf_keras, tensorflow; print(tf_keras.__version__)'],
                         capture_output=True, text=True, timeout=300, env=_env())
    return out.returncode == 0


needs_tf_keras = pytest.mark.skipif(not _tf_keras_works(), reason="tf_keras (extra [keras]) is not installed")


def _train(trainer, tmp_path):
    code, output = run_bounded([sys.executable, SCRIPT, trainer, str(tmp_path / 'log')], TIMEOUT, env=_env())
    assert code == 0, output[-6000:]
    values = {}
    for line in output.splitlines():
        key, sep, value = line.partition(': ')
        if sep and key in ('moving_mean_change', 'costs', 'training_tower_repeatable', 'stats',
                           'inference_tower_repeatable', 'inference_accuracy', 'update_ops',
                           'local_model_variables', 'learning_phase_placeholder'):
            values[key] = json.loads(value.lower() if value in ('True', 'False') else value)
    return values, output


@needs_tf_keras
@pytest.mark.parametrize('trainer', ['simple', 'replicated', 'ps'])
def test_keras_model_trains_on_one_and_two_towers(trainer, tmp_path):
    values, output = _train(trainer, tmp_path)
    stats = values['stats']
    assert [s['epoch_num'] for s in stats] == [1, 2, 3]
    # converges: the training loss of the last epoch is well below the first; validation is good
    assert stats[-1]['categorical_crossentropy'] < 0.5 * stats[0]['categorical_crossentropy']
    assert stats[-1]['categorical_accuracy'] > 0.9
    # InferenceRunner wrote the validation stats of the losses, the metric and total_loss
    assert stats[-1]['validation_categorical_accuracy'] >= 0.95
    assert stats[-1]['validation_categorical_crossentropy'] < 0.2
    last = stats[-1]
    assert last['validation_total_loss'] == pytest.approx(last['validation_categorical_crossentropy'])
    # the L2 regularization of the first Dense layer is in the training cost
    ce, reg, total = values['costs']
    assert reg > 0.01 and total == pytest.approx(ce + reg, rel=1e-5)
    assert stats[-1]['regularize_cost'] > 0.01
    # BatchNormalization's moving averages were updated by the main tower's two UPDATE_OPS
    assert values['update_ops'] == 2
    assert values['moving_mean_change'] > 0.1
    # learning phase: Dropout is on in the training tower, off in an inference tower
    assert values['training_tower_repeatable'] is False
    assert values['inference_tower_repeatable'] is True
    assert values['inference_accuracy'] >= 0.95
    assert values['learning_phase_placeholder'] is False   # each tower has its phase built in
    if trainer == 'replicated':   # tower1 has its own copy, as local variables named like tower0's
        assert values['local_model_variables'] == sorted(
            'tower1/' + name for name in ['dense/kernel', 'dense/bias', 'dense_1/kernel', 'dense_1/bias',
                                          'batch_normalization/gamma', 'batch_normalization/beta',
                                          'batch_normalization/moving_mean',
                                          'batch_normalization/moving_variance'])
        assert "'sync_variables_from_main_tower' copies 22 variables" in output
    else:
        assert values['local_model_variables'] == []


@needs_tf_keras
def test_keras_phase_callback_feeds_the_learning_phase_of_a_model_called_in_a_model_desc(tmp_path):
    """As tensorpack's examples/keras/mnist-keras.py: the layers read Keras's learning phase
    placeholder, which KerasPhaseCallback(True) feeds in training; inference runs without it."""
    values, output = _train('modeldesc', tmp_path)
    assert values['learning_phase_placeholder'] is True
    assert 'Using Keras learning phase keras_learning_phase:0' in output
    stats = values['stats']
    assert stats[-1]['categorical_crossentropy'] < 0.5 * stats[0]['categorical_crossentropy']
    assert stats[-1]['validation_categorical_accuracy'] >= 0.95
    assert values['moving_mean_change'] > 0.1   # BatchNormalization ran in training mode
    assert values['training_tower_repeatable'] is False
    assert values['inference_tower_repeatable'] is True
    ce, reg, total = values['costs']
    assert reg > 0.01 and total == pytest.approx(ce + reg, rel=1e-5)


@needs_tf_keras
def test_without_keras_phase_callback_the_model_desc_trains_in_inference_mode(tmp_path):
    values, _ = _train('modeldesc-nophase', tmp_path)
    assert values['learning_phase_placeholder'] is True
    assert values['moving_mean_change'] == 0.0   # BatchNormalization never saw training mode


@pytest.mark.quick
def test_without_tf_keras_the_import_raises_one_error_saying_what_to_do():
    code = ("import sys; sys.modules['tf_keras'] = None\n"
            "try:\n"
            "    import tensorpack_lite.contrib.keras\n"
            "except ImportError as err:\n"
            "    print('ImportError:', err)\n")
    out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, timeout=300,
                         env=dict(_env(), TF_USE_LEGACY_KERAS=''), cwd=HERE)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = [line for line in out.stdout.splitlines() if line.startswith('ImportError:')]
    assert len(lines) == 1, out.stdout
    assert 'tf_keras' in lines[0] and 'pip install "tensorpack_lite[keras]"' in lines[0]
    assert 'TF_USE_LEGACY_KERAS=1' in lines[0]


@needs_tf_keras
def test_a_keras_3_model_or_bad_arguments_are_named(tmp_path):
    code = r'''
import keras as keras3
import tensorflow.compat.v1 as tf
from tensorpack_lite import BatchData, DataFromList, FeedInput
from tensorpack_lite.contrib.keras import KerasModel, KerasPhaseCallback
import numpy as np

def fails(func, *args, **kwargs):
    try:
        func(*args, **kwargs)
    except (TypeError, ValueError) as err:
        print(type(err).__name__ + ':', str(err).split('.')[0])

fails(KerasPhaseCallback, 1)
df = BatchData(DataFromList([[np.zeros(4, 'float32'), np.zeros(2, 'float32')]] * 4), 2)
sig = [tf.TensorSpec([None, 4], tf.float32, 'x')], [tf.TensorSpec([None, 2], tf.float32, 'y')]
fails(KerasModel, lambda x: None, sig[0], sig[1], input=None)
model = KerasModel(lambda x: keras3.Sequential([keras3.layers.Dense(2)]), sig[0], sig[1], input=FeedInput(df))
fails(model.compile, optimizer='adam', loss='mse')
fails(model.compile, optimizer=tf.train.AdamOptimizer(), loss='mse')
'''
    out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, timeout=300,
                         env=_env(), cwd=str(tmp_path))
    assert out.returncode == 0, out.stderr[-3000:]
    errors = [line for line in out.stdout.splitlines() if line.startswith(('TypeError', 'ValueError'))]
    assert errors == [
        "TypeError: KerasPhaseCallback: isTrain must be a bool, got 1",
        "ValueError: KerasModel: argument 'input' is required",
        "TypeError: optimizer must be a tf",
        "TypeError: get_model must return a tf_keras Model (Keras 2), got <class 'keras",
    ], out.stdout


@needs_tf_keras
def test_keras_digits_example_on_two_virtual_cpus(tmp_path):
    logdir = tmp_path / 'log'
    command = [sys.executable, os.path.join(REPO, 'examples', 'keras', 'keras-digits.py'), '--trainer',
               'replicated', '--max-epoch', '3', '--steps-per-epoch', '10', '--logdir', str(logdir)]
    code, output = run_bounded(command, TIMEOUT, env=_env(), cwd=tmp_path)
    assert code == 0, output[-6000:]
    assert 'training tower 1 on device /cpu:1' in output
    stats = json.loads((logdir / 'stats.json').read_text())
    assert [s['epoch_num'] for s in stats] == [1, 2, 3] and stats[-1]['global_step'] == 30
    assert stats[-1]['validation_categorical_accuracy'] > 0.7
    assert 'model-30.index' in os.listdir(logdir)
    assert 'Final validation accuracy' in output
