"""A cost that becomes NaN or infinite, which used to go on silently (tensorpack trained on): the
trainer's check (``CHECK_COST``) stops before the step's update, testing the cost's terms but its
weight decay (tfutils/cost_terms.py)."""

import numpy as np
import pytest

from tensorpack_lite.compat import tf, tfv1
from tensorpack_lite.dataflow import DataFromList
from tensorpack_lite.input_source.feed import FeedInput
from tensorpack_lite.models.regularize import l2_regularizer, regularize_cost
from tensorpack_lite.profiling.graph_walk import ops_run_by
from tensorpack_lite.train import SimpleTrainer, TrainConfig, launch_train_with_config

from helpers.callbacks import ReadBack
from helpers.models import LineRegression


def model():
    """cost = mean((x * w - y)^2) with one weight w from 1; y may be NaN/inf in chosen datapoints."""
    return LineRegression(init=1.0, lr=0.1, lr_variable=False)


class DecayedLine(LineRegression):
    """LineRegression's cost plus a weight decay of w, as tensorpack's models add it:
    'total_cost' = 'cost' + 'wd_cost'."""

    def build_graph(self, x, y=None):
        cost = super().build_graph(x, y)
        decay = regularize_cost('w', l2_regularizer(1e-3), name='wd_cost')
        return tf.add(cost, decay, name='total_cost')


class _ReadWeight(ReadBack):
    def __init__(self):
        super().__init__()

    def _setup_graph(self):
        self._variables = [v for v in tfv1.global_variables() if v.op.name == 'w']


@pytest.mark.parametrize('decay', [False, True], ids=['cost', 'cost-with-weight-decay'])
@pytest.mark.parametrize('bad', [np.nan, np.inf])
def test_non_finite_cost_ends_training_naming_the_step(bad, decay, logdir):
    ones = np.ones(4, np.float32)
    points = [[ones, 2 * ones]] * 6   # steps 1..6 of epoch 1 are fine
    points.append([ones, np.full(4, bad, np.float32)])   # global step 7 = epoch 2, step 2
    points += [[ones, 2 * ones]] * 3
    read = _ReadWeight()
    line = DecayedLine(init=1.0, lr=0.1, lr_variable=False) if decay else model()
    config = TrainConfig(model=line, data=FeedInput(DataFromList(points, shuffle=False)),
                         callbacks=[read], steps_per_epoch=5, max_epoch=2)
    with pytest.raises(FloatingPointError) as info:
        launch_train_with_config(config, SimpleTrainer())
    message = str(info.value)
    assert 'cost' in message and ('NaN' if bad != np.inf else 'Inf') in message
    assert 'global step 7 (epoch 2, step 2 of the epoch)' in message
    assert ('is not finite (its term cost:0)' in message) == decay
    # 6 good steps from w=1 towards 2: w <- w - 0.1 * (2 * (w - 2) + 1e-3 * w) (without the
    # decay 2 - 0.8 ** k); the bad step was never applied, so w is still finite
    expected = 1.0
    for _ in range(6):
        expected -= 0.1 * (2 * (expected - 2) + (1e-3 * expected if decay else 0.0))
    assert read.values == [pytest.approx(expected, rel=1e-5)]
    assert decay or expected == pytest.approx(2 - 0.8 ** 6)


def test_the_check_leaves_out_the_weight_decay_and_still_stops_at_a_non_finite_weight(logdir):
    """The step does not compute the decay (its gradient needs w, not its value); a weight that
    is not finite shows in the data term the check tests."""
    ones = np.ones(4, np.float32)
    trainer = SimpleTrainer()
    config = TrainConfig(model=DecayedLine(init=np.nan, lr=0.1, lr_variable=False),
                         data=FeedInput(DataFromList([[ones, 2 * ones]], shuffle=False)),
                         steps_per_epoch=3, max_epoch=1)
    with pytest.raises(FloatingPointError) as info:
        launch_train_with_config(config, trainer)
    message = str(info.value)
    assert 'The cost total_cost:0 is not finite (its term cost:0)' in message
    assert 'global step 1 (epoch 1, step 1 of the epoch)' in message
    graph = trainer.train_op.graph
    assert [op.name for op in graph.get_operations() if op.type == 'L2Loss'], "the model has a decay"
    run_by_step = {op.type for op in ops_run_by([trainer.train_op])}
    assert 'CheckNumerics' in run_by_step and 'L2Loss' not in run_by_step


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
