"""Values that used to go wrong silently: integers that do not fit their input's dtype (they
wrapped around) and a cost that becomes NaN or infinite (training went on)."""

import numpy as np
import pytest

from tensorpack_lite.compat import tfv1
from tensorpack_lite.dataflow import DataFromList
from tensorpack_lite.input_source.feed import FeedInput
from tensorpack_lite.train import SimpleTrainer, TrainConfig, launch_train_with_config

from helpers.callbacks import ReadBack
from helpers.models import LineRegression


def model():
    """cost = mean((x * w - y)^2) with one weight w from 1; y may be NaN/inf in chosen datapoints."""
    return LineRegression(init=1.0, lr=0.1, lr_variable=False)


class _ReadWeight(ReadBack):
    def __init__(self):
        super().__init__()

    def _setup_graph(self):
        self._variables = [v for v in tfv1.global_variables() if v.op.name == 'w']


@pytest.mark.parametrize('bad', [np.nan, np.inf])
def test_non_finite_cost_ends_training_naming_the_step(bad, logdir):
    ones = np.ones(4, np.float32)
    points = [[ones, 2 * ones]] * 6   # steps 1..6 of epoch 1 are fine
    points.append([ones, np.full(4, bad, np.float32)])   # global step 7 = epoch 2, step 2
    points += [[ones, 2 * ones]] * 3
    read = _ReadWeight()
    config = TrainConfig(model=model(), data=FeedInput(DataFromList(points, shuffle=False)),
                         callbacks=[read], steps_per_epoch=5, max_epoch=2)
    with pytest.raises(FloatingPointError) as info:
        launch_train_with_config(config, SimpleTrainer())
    message = str(info.value)
    assert 'cost' in message and ('NaN' if bad != np.inf else 'Inf') in message
    assert 'global step 7 (epoch 2, step 2 of the epoch)' in message
    # 6 good steps from w=1 towards 2: w <- w - 0.1 * 2 * (w - 2) = 2 - 0.8 ** k; the bad step
    # was never applied, so w is still finite
    assert read.values == [pytest.approx(2 - 0.8 ** 6, rel=1e-5)]


def test_cost_check_can_be_switched_off(logdir):
    ones = np.ones(4, np.float32)
    points = [[ones, np.full(4, np.nan, np.float32)]]
    read = _ReadWeight()
    trainer = SimpleTrainer()
    trainer.CHECK_COST = False
    config = TrainConfig(model=model(), data=FeedInput(DataFromList(points, shuffle=False)),
                         callbacks=[read], steps_per_epoch=1, max_epoch=1)
    launch_train_with_config(config, trainer)
    assert np.isnan(read.values[0])
