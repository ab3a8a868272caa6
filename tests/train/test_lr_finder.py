"""find_learning_rate (issue 70): on the README's model and the digits, the suggested rate is one
the model trains at (a short training at it lowers the loss, 100 times it diverges); the run's
logger and checkpoint directory stays byte for byte what it was, the default graph and the
logger too; the curve is written (JSON, CSV, PNG) and the picture is skipped without matplotlib;
bad arguments are refused naming them; LRFinderResult's two rules on a known curve."""

import csv
import hashlib
import json
import math
import os
import sys

import numpy as np
import pytest

from helpers.callbacks import AssignValues, RecordCost
from helpers.examples import readme_model
from helpers.models import MLP, LineRegression, batches_dataflow

from tensorpack_lite.callbacks import ModelSaver
from tensorpack_lite.compat import tfv1
from tensorpack_lite.dataflow import BatchData, DataFromList, FixedSizeData
from tensorpack_lite.dataflow.dataset import Digits
from tensorpack_lite.input_source import FeedInput
from tensorpack_lite.train import (AutoResumeTrainConfig, LRFinderResult, SimpleTrainer, TrainConfig,
                                   find_learning_rate, launch_train_with_config)
from tensorpack_lite.utils import logger

BATCH = 64


SEED = 1     # the sweeps and trainings of the README model start from the same weights in every run


def digits(shuffle=False):
    """The digits in batches, in a fixed order unless ``shuffle``."""
    return BatchData(Digits('train', shuffle=shuffle), BATCH)


def tree_digest(root):
    """{relative path: sha256} of every file under ``root``."""
    digest = {}
    for directory, _, files in os.walk(root):
        for name in files:
            path = os.path.join(directory, name)
            with open(path, 'rb') as f:
                digest[os.path.relpath(path, root)] = hashlib.sha256(f.read()).hexdigest()
    return digest


def train_at(model_class, rate, steps):
    """The costs of ``steps`` steps of a fresh ``model_class`` at the learning rate ``rate``."""
    costs = RecordCost()
    with tfv1.Graph().as_default():
        tfv1.set_random_seed(SEED)
        trainer = SimpleTrainer()
        trainer.CHECK_COST = False      # a diverging rate gives a NaN cost: recorded, not raised
        config = TrainConfig(model=model_class(), dataflow=FixedSizeData(digits(), steps),
                             callbacks=[costs], monitors=[], extra_callbacks=[], max_epoch=1,
                             session_init=AssignValues({'learning_rate': rate}))
        launch_train_with_config(config, trainer)
    return costs.costs


@pytest.fixture(scope='module')
def readme_run(tmp_path_factory):
    """The README's run after one epoch (a checkpoint and its records in the logger directory),
    then range tests on its AutoResumeTrainConfig, from new weights and from the checkpoint:
    (model class, run directory, digests before and after, the first result, its output
    directory, the log file after)."""
    model_class = readme_model()
    root = tmp_path_factory.mktemp('lr_finder')
    run, out = root / 'run', root / 'lr_find'
    logger.set_logger_dir(str(run), action='k')
    try:
        with tfv1.Graph().as_default():
            launch_train_with_config(TrainConfig(model=model_class(), dataflow=digits(),
                                                 callbacks=[ModelSaver()], max_epoch=1), SimpleTrainer())
        config = AutoResumeTrainConfig(model=model_class(), dataflow=digits(), callbacks=[ModelSaver()],
                                       max_epoch=2)
        assert config.session_init is not None       # it resumes from the checkpoint: read by the sweep
        before = tree_digest(run)
        graph = tfv1.get_default_graph()
        ops = len(graph.get_operations())
        result = find_learning_rate(config, min_lr=1e-5, max_lr=10, num_steps=80, output_dir=str(out),
                                    seed=SEED)
        resumed = find_learning_rate(config, num_steps=10, session_init=config.session_init)
        assert resumed.raw_losses[0] < 1.0 < result.raw_losses[0]     # from the checkpoint's weights
        after = tree_digest(run)
        assert tfv1.get_default_graph() is graph and len(graph.get_operations()) == ops
        assert logger.get_logger_dir() == str(run)
        logger.info("after the range test")      # the same log file, appended to
        with open(run / 'log.log') as f:
            log_text = f.read()
    finally:
        logger.unset_logger_dir()
    return model_class, run, before, after, result, out, log_text


def test_the_run_directory_is_left_as_it_was(readme_run):
    _, run, before, after, result, _, log_text = readme_run
    assert before == after
    assert any(name.endswith('.index') for name in before) and 'stats.json' in before
    assert 'find_learning_rate' not in log_text          # the sweep logged to the terminal only
    assert log_text.rstrip().endswith('after the range test')
    assert sorted(os.listdir(run)) == sorted({path.split(os.sep)[0] for path in before})   # no backup


def test_the_curve_is_recorded_and_stops_where_the_loss_diverges(readme_run):
    _, _, _, _, result, out, _ = readme_run
    lrs = result.lrs
    assert lrs[0] == pytest.approx(1e-5)
    assert np.allclose(np.diff(np.log(lrs)), math.log(10 / 1e-5) / 79)      # exponential
    assert 10 < len(lrs) <= 80 and len(result.losses) == len(result.raw_losses) == len(lrs)
    if result.stop_reason is None:      # a net whose ReLUs all died keeps a loss near ln 10
        assert len(lrs) == 80 and result.losses[-1] > 2 * min(result.losses)
    else:
        assert result.losses[-1] > 4 * min(result.losses) or not math.isfinite(result.raw_losses[-1])
    with open(out / 'lr_finder.json') as f:
        saved = json.load(f)
    assert saved['suggestion'] == result.suggestion and saved['method'] == 'steepest'
    assert [row['lr'] for row in saved['curve']] == lrs
    with open(out / 'lr_finder.csv') as f:
        rows = list(csv.reader(f))
    assert rows[0] == ['lr', 'loss', 'smoothed_loss'] and len(rows) == len(lrs) + 1
    assert float(rows[1][0]) == lrs[0] and float(rows[1][2]) == result.losses[0]
    with open(out / 'lr_finder.png', 'rb') as f:
        assert f.read(8) == b'\x89PNG\r\n\x1a\n'


def test_the_suggestion_is_a_rate_the_readme_model_trains_at(readme_run):
    model_class, _, _, _, result, _, _ = readme_run
    rate = result.suggestion
    assert result.method == 'steepest' and 1e-3 < rate < 1, rate    # the README trains at 0.1
    steps = 60
    at_rate = train_at(model_class, rate, steps)
    assert np.mean(at_rate[:5]) > 1.8       # from chance (ln 10 = 2.3) ...
    assert np.mean(at_rate[-10:]) < 0.5     # ... to a trained model (measured 0.1-0.2)
    too_high = train_at(model_class, rate * 100, steps)
    end = np.mean(too_high[-10:])
    assert not math.isfinite(end) or end > 2 * np.mean(at_rate[-10:]) + 1.0


def test_the_sweep_stops_when_the_loss_diverges():
    """(w - 2)^2 by gradient descent from w = 0: the error is multiplied by 1 - 2 lr each step, so
    the loss falls while lr < 1 and grows from there."""
    config = TrainConfig(model=LineRegression(), dataflow=batches_dataflow([[1.0]], [[2.0]]), max_epoch=1)
    result = find_learning_rate(config, min_lr=1e-3, max_lr=1e3, num_steps=31, smoothing=0)
    assert result.lrs[-1] < 10 and 'above 4 x its minimum' in result.stop_reason
    errors = [2.0]
    for lr in result.lrs:
        errors.append(errors[-1] * (1 - 2 * lr))
    np.testing.assert_allclose(result.raw_losses, np.square(errors[:-1]), rtol=1e-5)
    assert result.losses == result.raw_losses                 # smoothing=0
    assert 1e-2 < result.suggestion < 1 and result.method == 'steepest'
    longer = find_learning_rate(config, min_lr=1e-3, max_lr=1e3, num_steps=31, smoothing=0, divergence=None)
    assert len(longer.lrs) > len(result.lrs)


def test_without_matplotlib_the_picture_is_skipped(tmp_path, monkeypatch, log_records):
    result = LRFinderResult([1e-3, 1e-2, 1e-1], [2.0, 1.0, 3.0], [2.0, 1.0, 3.0])
    monkeypatch.setitem(sys.modules, 'matplotlib.figure', None)     # import fails
    with pytest.raises(ImportError, match='matplotlib'):
        result.plot(tmp_path / 'x.png')
    paths = result.save(tmp_path / 'out')
    assert sorted(os.path.basename(p) for p in paths) == ['lr_finder.csv', 'lr_finder.json']
    assert sorted(os.listdir(tmp_path / 'out')) == ['lr_finder.csv', 'lr_finder.json']
    assert any('no picture of the curve' in m and 'matplotlib' in m for m in log_records.messages())


def test_the_two_rules_on_a_known_curve():
    lrs = [10.0 ** e for e in range(-6, 1)]                 # 1e-6 ... 1
    losses = [2.0, 1.99, 1.9, 1.2, 0.9, 0.8, 5.0]          # steepest between 1e-3 and 1e-2; minimum at 1e-1
    steepest = LRFinderResult(lrs, losses, losses)
    assert steepest.method == 'steepest' and steepest.suggestion == 1e-3
    minimum = LRFinderResult(lrs, losses, losses, method='minimum')
    assert minimum.method == 'minimum' and minimum.suggestion == pytest.approx(1e-2)
    early = LRFinderResult(lrs[:3], [2.0, 1.0, 3.0], [2.0, 1.0, 3.0])      # one point before the minimum
    assert early.method == 'minimum' and early.suggestion == pytest.approx(1e-6)
    assert LRFinderResult(lrs[:2], [1.0, 2.0], [1.0, 2.0]).suggestion is None     # never went down
    noisy = [2.0, 1.5, 1.9, 1.8, 1.2, 0.9, 5.0]           # a fall in the unsettled first points
    assert LRFinderResult(lrs, noisy, noisy).suggestion == 1e-6
    assert LRFinderResult(lrs, noisy, noisy, skip_start=2).suggestion == 1e-2     # (0.9 - 1.8) / 2 decades
    with pytest.raises(ValueError, match='method must be one of'):
        LRFinderResult(lrs, losses, losses, method='valley')
    rows = LRFinderResult([1e-3, 1e-2], [1.0, float('nan')], [1.0, float('nan')]).records()
    assert rows[1] == {'lr': 1e-2, 'loss': None, 'smoothed_loss': None}


def config_of(model):
    return TrainConfig(model=model, dataflow=digits(), max_epoch=1)


@pytest.mark.parametrize('kwargs, match', [
    (dict(min_lr=1.0, max_lr=1.0), 'min_lr must be below max_lr'),
    (dict(min_lr=0.0), 'min_lr must be a number > 0'),
    (dict(max_lr=float('inf')), 'max_lr must be a number > 0'),
    (dict(num_steps=1), 'num_steps must be an int >= 2'),
    (dict(num_steps=10.0), 'num_steps must be an int >= 2'),
    (dict(smoothing=1.0), r'smoothing must be a number in \[0, 1\)'),
    (dict(divergence=1.0), 'divergence must be a number > 1'),
    (dict(method='valley'), 'method must be one of'),
])
def test_bad_arguments_are_refused_naming_them(kwargs, match):
    graph = tfv1.get_default_graph()
    with pytest.raises(ValueError, match=match):
        find_learning_rate(config_of(readme_model()()), **kwargs)
    assert tfv1.get_default_graph() is graph


def test_a_model_without_a_learning_rate_variable_is_refused(tmp_path):
    model = MLP((64, 16, 10), input_name='image')           # GradientDescentOptimizer(0.1): a constant
    config = TrainConfig(model=model, dataflow=BatchData(DataFromList(
        [[np.zeros(64, 'float32'), 1]] * 8, shuffle=False), 4), max_epoch=1)
    logger.set_logger_dir(str(tmp_path / 'run'), action='k')
    try:
        graph = tfv1.get_default_graph()
        with pytest.raises(ValueError, match=r"no variable 'learning_rate' \(lr_name\)"):
            find_learning_rate(config, num_steps=5)
        with pytest.raises(ValueError, match=r"no variable 'lr' \(lr_name\)"):
            find_learning_rate(config, num_steps=5, lr_name='lr')
        assert tfv1.get_default_graph() is graph
        assert logger.get_logger_dir() == str(tmp_path / 'run')     # put back after the error
        assert model.contexts == []           # build_graph ran on a copy of the model
    finally:
        logger.unset_logger_dir()


def test_an_input_source_needs_its_dataflow():
    config = TrainConfig(model=readme_model()(), data=FeedInput(digits()), max_epoch=1)
    with pytest.raises(ValueError, match='dataflow='):
        find_learning_rate(config)
    with pytest.raises(TypeError, match='config must be a TrainConfig'):
        find_learning_rate(config.model)


def test_a_seed_makes_the_sweep_repeatable():
    """With ``seed`` and data in a fixed order two sweeps give the same curve and suggestion;
    another seed starts from other weights (another curve)."""
    model_class = readme_model()
    first, second, other = (find_learning_rate(TrainConfig(model=model_class(), dataflow=digits()),
                                               min_lr=1e-4, max_lr=1, num_steps=20, seed=seed)
                            for seed in (SEED, SEED, SEED + 1))
    assert first.raw_losses == second.raw_losses and first.suggestion == second.suggestion
    assert first.raw_losses != other.raw_losses
