"""WeightAverage (issue 60, item 2): the averages after 20 steps are numpy's, computed by hand from
the weights after every step; a run stopped by SIGTERM mid-epoch resumes them exactly; two towers
keep one average; and the one switch, ``averaged=True``, makes InferenceRunner report the averaged
model's cost (the weights put back exactly), a predictor and an export output what the averaged
weights give."""

import os
import sys

import numpy as np
import pytest

from helpers.dataflows import labelled_batches
from helpers.models import DigitsMLPBase
from helpers.paths import TESTS_DIR
from helpers.processes import run_bounded, subprocess_env

from tensorpack_lite.callbacks import (Callback, InferenceRunner, ModelSaver, ScalarStats, WeightAverage)
from tensorpack_lite.compat import tfv1
from tensorpack_lite.input_source import FeedInput, QueueInput
from tensorpack_lite.predict import OfflinePredictor, PredictConfig
from tensorpack_lite.tfutils.common import get_default_sess_config
from tensorpack_lite.tfutils.export import ModelExporter
from tensorpack_lite.tfutils.sesscreate import NewSessionCreator
from tensorpack_lite.tfutils.sessinit import AveragedRestore, SmartInit
from tensorpack_lite.tfutils.varmanip import load_chkpt_vars
from tensorpack_lite.tfutils.weight_average import COUNTER_NAME, average_name
from tensorpack_lite.train import (SimpleTrainer, SyncMultiGPUTrainerReplicated, TrainConfig,
                                   launch_train_with_config)
from tensorpack_lite.utils import logger

WEIGHTS = ['fc0/W', 'fc0/b', 'fc1/W', 'fc1/b']
BATCH, STEPS, EPOCHS = 8, 5, 4        # 20 steps
RESUME_SCRIPT = os.path.join(TESTS_DIR, 'resume_scripts', 'digits_resume.py')


class RecordWeights(Callback):
    """The weights after every step, by global step (one more run per step: the test's cost)."""

    def __init__(self):
        self.steps = []

    def _setup_graph(self):
        variables = {v.op.name: v for v in tfv1.global_variables()}
        self._weights = [variables[name] for name in WEIGHTS]

    def _trigger_step(self):
        self.steps.append((self.global_step, self.trainer.sess.run(self._weights)))


class SnapshotWeights(Callback):
    """The weights when its trigger runs (placed around another callback)."""

    def __init__(self):
        self.values = None

    def _setup_graph(self):
        variables = {v.op.name: v for v in tfv1.global_variables()}
        self._weights = [variables[name] for name in WEIGHTS]

    def _trigger(self):
        self.values = self.trainer.sess.run(self._weights)


def numpy_average(steps, decay, warmup, every):
    """The averages and the decay of each update, by hand: after each global step that is a
    multiple of ``every``, ``a = a * d + w * (1 - d)`` in float32, with d = 0 at the first update,
    then ``min(decay, (1 + t) / (10 + t))`` (or ``decay``)."""
    one, average, decays = np.float32(1), None, []
    for step, weights in steps:
        if step % every:
            continue
        t = len(decays)
        if t == 0:
            d = np.float32(0)
        else:
            d = np.float32(decay)
            if warmup:
                d = min(d, (one + np.float32(t)) / (np.float32(10) + np.float32(t)))
        if average is None:
            average = [np.zeros_like(w) for w in weights]     # the averages' initial values
        average = [a * d + w * (one - d) for a, w in zip(average, weights)]
        decays.append(d)
    return average, decays


def forward(values, images):
    """The MLP's logits in numpy (float64)."""
    w0, b0, w1, b1 = (np.asarray(values[name], np.float64) for name in WEIGHTS)
    return np.maximum(images @ w0 + b0, 0) @ w1 + b1


def mean_cross_entropy(logits, labels):
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_prob = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    return float(-log_prob[np.arange(len(labels)), labels].mean())


def train(logdir, digits, callbacks, trainer=None, session_creator=None, data=None):
    """Train 20 steps with ``callbacks`` and a ModelSaver last; the final checkpoint's values."""
    images, labels = digits
    logger.set_logger_dir(str(logdir), action='k')
    try:
        with tfv1.Graph().as_default():
            data = data or FeedInput(labelled_batches(images[:BATCH * STEPS], labels[:BATCH * STEPS], BATCH))
            config = TrainConfig(model=DigitsMLPBase(hidden=16, lr=0.5), data=data,
                                 callbacks=callbacks + [ModelSaver()], steps_per_epoch=STEPS,
                                 max_epoch=EPOCHS, session_creator=session_creator)
            launch_train_with_config(config, trainer or SimpleTrainer())
    finally:
        logger.unset_logger_dir()
    return load_chkpt_vars(os.path.join(str(logdir), 'model-{}'.format(STEPS * EPOCHS)))


def assert_averages(checkpoint, expected, count):
    assert checkpoint[COUNTER_NAME] == count
    for name, value in zip(WEIGHTS, expected):
        np.testing.assert_array_equal(checkpoint[average_name(name)], value, err_msg=name)


@pytest.fixture(scope='module')
def run(tmp_path_factory, digits):
    """A run of 20 steps with WeightAverage(0.5, every 2 steps: 10 updates, warm-up then the
    decay), an InferenceRunner with averaged=True between two snapshots of the weights, one
    without, and the final checkpoint."""
    logdir = tmp_path_factory.mktemp('weight-average')
    images, labels = digits
    test = [images[-100:], labels[-100:]]
    record, before, after = RecordWeights(), SnapshotWeights(), SnapshotWeights()
    callbacks = [WeightAverage(decay=0.5, warmup=True, every_k_steps=2), record,
                 InferenceRunner(labelled_batches(*test, 50), ScalarStats('cost', prefix='raw')),
                 before,
                 InferenceRunner(labelled_batches(*test, 50), ScalarStats('cost', prefix='averaged'),
                                 tower_name='AveragedTower', averaged=True),
                 after]
    checkpoint = train(logdir, digits, callbacks)
    return {'logdir': str(logdir), 'checkpoint': checkpoint, 'record': record, 'test': test,
            'before': before.values, 'after': after.values, 'stats': callbacks[2].trainer.monitors}


def test_the_averages_are_numpys_after_20_steps_with_warmup(run):
    expected, decays = numpy_average(run['record'].steps, 0.5, True, 2)
    assert [step for step, _ in run['record'].steps] == list(range(1, 21))
    # the first update copies, the warm-up's (1 + t) / (10 + t) until t = 8, then the decay 0.5
    assert decays == pytest.approx([0, 2 / 11, 3 / 12, 4 / 13, 5 / 14, 6 / 15, 7 / 16, 8 / 17, 0.5, 0.5])
    assert_averages(run['checkpoint'], expected, 10)


def test_the_averages_are_numpys_after_20_steps_without_warmup(tmp_path, digits):
    record = RecordWeights()
    checkpoint = train(tmp_path, digits, [WeightAverage(decay=0.9, warmup=False), record])
    expected, decays = numpy_average(record.steps, 0.9, False, 1)
    assert decays == pytest.approx([0] + [0.9] * 19)
    assert_averages(checkpoint, expected, 20)


def test_inference_runner_with_averaged_reports_the_averaged_models_cost_and_puts_the_weights_back(run):
    images, labels = run['test']
    checkpoint = run['checkpoint']
    averaged = {name: checkpoint[average_name(name)] for name in WEIGHTS}
    expected_averaged = mean_cross_entropy(forward(averaged, images), labels)
    expected_raw = mean_cross_entropy(forward(checkpoint, images), labels)
    got_averaged = run['stats'].get_latest('averaged_cost')
    got_raw = run['stats'].get_latest('raw_cost')
    print("last epoch: cost of the averaged weights {:.6f} (numpy {:.6f}), of the weights {:.6f} "
          "(numpy {:.6f})".format(got_averaged, expected_averaged, got_raw, expected_raw))
    assert got_averaged == pytest.approx(expected_averaged, rel=1e-5)
    assert got_raw == pytest.approx(expected_raw, rel=1e-5)
    assert abs(expected_averaged - expected_raw) > 1e-3
    finals = [checkpoint[name] for name in WEIGHTS]
    for name, before, after, final in zip(WEIGHTS, run['before'], run['after'], finals):
        np.testing.assert_array_equal(after, before, err_msg=name)    # put back exactly
        np.testing.assert_array_equal(final, before, err_msg=name)


def predict_config(session_init):
    return PredictConfig(model=DigitsMLPBase(hidden=16), session_init=session_init,
                         input_names=['image'], output_names=['logits'])


def test_a_predictor_and_an_export_with_averaged_output_what_the_averaged_weights_give(run, tmp_path):
    images = run['test'][0]
    checkpoint = run['checkpoint']
    averaged = {name: checkpoint[average_name(name)] for name in WEIGHTS}
    expected = forward(averaged, images)
    logits, = OfflinePredictor(predict_config(SmartInit(run['logdir'], averaged=True)))(images)
    np.testing.assert_allclose(logits, expected, rtol=0, atol=1e-5)
    raw, = OfflinePredictor(predict_config(SmartInit(run['logdir'])))(images)
    np.testing.assert_allclose(raw, forward(checkpoint, images), rtol=0, atol=1e-5)
    assert np.abs(raw - logits).max() > 1e-3

    path = str(tmp_path / 'averaged.pb')
    ModelExporter(predict_config(SmartInit(run['logdir'], averaged=True))).export_compact(path)
    with tfv1.Graph().as_default() as graph:
        tfv1.import_graph_def(tfv1.GraphDef.FromString(open(path, 'rb').read()), name='')
        with tfv1.Session(graph=graph) as sess:
            exported = sess.run('logits:0', {'image:0': images})
    np.testing.assert_allclose(exported, expected, rtol=0, atol=1e-5)


def test_averaged_restore_needs_averages(run, tmp_path):
    plain = {name: run['checkpoint'][name] for name in WEIGHTS}
    with pytest.raises(ValueError, match='holds no weight averages'):
        with tfv1.Graph().as_default():
            OfflinePredictor(predict_config(AveragedRestore(plain)))
    with pytest.raises(TypeError, match=r'averaged=True\) takes'):
        SmartInit(None, averaged=True)


def test_two_towers_keep_one_average_of_the_first_towers_weights(tmp_path, digits):
    """SyncMultiGPUTrainerReplicated on 2 virtual CPUs: one average per weight (none of the
    second tower's replicas), numpy's from the first tower's weights after every step."""
    images, labels = digits
    config = get_default_sess_config()
    config.device_count['CPU'] = 2
    record = RecordWeights()
    data = QueueInput(labelled_batches(images[:2 * BATCH * STEPS], labels[:2 * BATCH * STEPS], BATCH))
    checkpoint = train(tmp_path, digits, [WeightAverage(decay=0.8, every_k_steps=3), record],
                       trainer=SyncMultiGPUTrainerReplicated(['/cpu:0', '/cpu:1'], mode='cpu'),
                       session_creator=NewSessionCreator(config=config), data=data)
    assert sorted(name for name in checkpoint if name.startswith('WeightAverage/')) == sorted(
        [COUNTER_NAME] + [average_name(name) for name in WEIGHTS])
    expected, decays = numpy_average(record.steps, 0.8, True, 3)
    assert len(decays) == 6     # global steps 3, 6, ... 18
    assert_averages(checkpoint, expected, 6)


def test_errors():
    with pytest.raises(ValueError, match=r'decay must be a number in \[0, 1\)'):
        WeightAverage(decay=1.0)
    with pytest.raises(ValueError, match='every_k_steps must be a positive int'):
        WeightAverage(every_k_steps=0)


def _resume_run(logdir, *args, expect=0):
    env = subprocess_env(PYTHONHASHSEED='0')
    code, output = run_bounded([sys.executable, RESUME_SCRIPT, str(logdir), '--weight-average', '0.9']
                               + list(args), 240, env=env)
    assert code == expect, "exit {} (expected {}):\n{}".format(code, expect, output[-5000:])
    return output


def test_sigterm_mid_epoch_resumes_the_averages_exactly(tmp_path):
    """tests/resume_scripts/digits_resume.py (3 epochs of 30 steps, momentum, QueueInput) with
    WeightAverage(0.9, every 2 steps): SIGTERM at step 45 (mid-epoch, between two updates),
    resumed: the final checkpoint's averages and count are the uninterrupted run's."""
    whole, stopped = tmp_path / 'whole', tmp_path / 'stopped'
    _resume_run(whole)
    _resume_run(stopped, '--sigterm-at', '45', expect=143)
    middle = load_chkpt_vars(str(stopped / 'model-45'))
    assert middle[COUNTER_NAME] == 22
    output = _resume_run(stopped)
    assert "(step 15 of 30 of epoch 2, global step 45)" in output
    final, expected = load_chkpt_vars(str(stopped / 'model-90')), load_chkpt_vars(str(whole / 'model-90'))
    averages = sorted(name for name in expected if name.startswith('WeightAverage/'))
    assert len(averages) == 5 and expected[COUNTER_NAME] == 45
    for name in averages:
        difference = float(np.max(np.abs(final[name] - expected[name])))
        print("{}: max |resumed - uninterrupted| = {:.3g}".format(name, difference))
        np.testing.assert_array_equal(final[name], expected[name], err_msg=name)


def test_two_collective_workers_keep_the_same_average(tmp_path):
    """tests/distributed_scripts/train_tiny_multiworker.py on 2 CollectiveAllReduceTrainer workers (2
    epochs of 3 steps, each worker starting from weights of its own: the chief's are broadcast) with
    WeightAverage(0.9, every 2 steps): both end with the same averages, 3 updates, not the weights."""
    from helpers.distributed import Run, load_worker
    run = Run(tmp_path, 2, 0, ['--trainer', 'collective', '--epochs', 2, '--weight-average', 0.9])
    assert [run.returncode('worker', k) for k in range(2)] == [0, 0], run.report()
    workers = [load_worker(tmp_path, k) for k in range(2)]
    averages = [{name: np.asarray(value) for name, value in w['averages'].items()} for w in workers]
    assert sorted(averages[0]) == sorted(averages[1]) == sorted(
        [COUNTER_NAME] + [average_name(name) for name in ('fc0/W', 'fc0/b', 'fc1/W')])
    assert averages[0][COUNTER_NAME] == averages[1][COUNTER_NAME] == 3
    for name in averages[0]:
        np.testing.assert_array_equal(averages[1][name], averages[0][name], err_msg=name)
    assert np.abs(averages[0][average_name('fc0/W')] - workers[0]['weights']['fc0/W']).max() > 1e-4
