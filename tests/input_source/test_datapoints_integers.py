"""Values that used to go wrong silently: integers that do not fit their input's dtype (they
wrapped around) and a cost that becomes NaN or infinite (training went on)."""

import numpy as np
import pytest

from tensorpack_lite.compat import tf, tfv1
from tensorpack_lite.dataflow import DataFromList
from tensorpack_lite.input_source.datapoints import DatapointChecker
from tensorpack_lite.input_source.feed import FeedInput
from tensorpack_lite.train import ModelDesc, SimpleTrainer, TrainConfig, launch_train_with_config

from helpers import ReadBack


def _checker(*specs):
    placeholders = [tfv1.placeholder(dtype, shape, name=name) for name, dtype, shape in specs]
    return DatapointChecker('Test', placeholders), placeholders


def test_int64_beyond_int32_is_an_error_naming_the_input():
    checker, _ = _checker(('image', tf.float32, [None, 2]), ('label', tf.int32, [None]))
    labels = np.array([1, 2 ** 33 + 3], dtype=np.int64)   # 2**33 + 3 wraps to 3 in int32
    with pytest.raises(ValueError) as info:
        checker.feeds([np.zeros((2, 2), np.float32), labels])
    message = str(info.value)
    assert "input 'label'" in message and 'component 1' in message
    assert str(2 ** 33 + 3) in message and 'int32' in message


def test_narrower_integer_inputs_and_python_ints_are_checked():
    checker, _ = _checker(('pixels', tf.uint8, [3]), ('offset', tf.int8, [2]))
    with pytest.raises(ValueError, match=r"holds 300, which does not fit the uint8 of input 'pixels'"):
        checker.feeds([np.array([0, 300, 5], dtype=np.uint16), [0, 0]])
    with pytest.raises(ValueError, match=r"holds -129, which does not fit the int8 of input 'offset'"):
        checker.feeds([np.zeros(3, np.uint8), [-129, 5]])   # a Python list: int64 first
    # signed values never go into an unsigned input, whatever their range (a dtype error)
    with pytest.raises(TypeError, match=r"dtype int16, but input 'pixels' is uint8"):
        checker.feeds([np.array([0, 1, 5], dtype=np.int16), [0, 0]])


def test_integers_that_fit_are_converted_exactly():
    checker, (image, label) = _checker(('image', tf.float32, [None, 2]), ('label', tf.int32, [None]))
    bound = 2 ** 31 - 1
    feeds = checker.feeds([np.ones((2, 2)), np.array([-bound - 1, bound], dtype=np.int64)])
    assert feeds[label].dtype == np.int32
    assert feeds[label].tolist() == [-bound - 1, bound]
    # an empty batch has no value to look at
    assert checker.feeds([np.ones((0, 2)), np.array([], dtype=np.int64)])[label].shape == (0,)


def test_whole_floats_feed_an_int_input_exactly():
    # tensorpack's HED example feeds edge maps of 0. and 1. (float32) into an int32 input
    checker, (image, edgemap) = _checker(('image', tf.float32, [None, 2]), ('edgemap', tf.int32, [None, 3]))
    maps = np.array([[0., 1., 0.], [-7., 2. ** 31 - 1, -2. ** 31]], dtype=np.float64)
    feeds = checker.feeds([np.ones((2, 2), np.float32), maps])
    assert feeds[edgemap].dtype == np.int32
    assert feeds[edgemap].tolist() == [[0, 1, 0], [-7, 2 ** 31 - 1, -2 ** 31]]
    assert checker.feeds([np.ones((0, 2)), np.ones((0, 3), np.float32)])[edgemap].shape == (0, 3)


@pytest.mark.parametrize('bad, shown', [(0.5, '0.5'), (np.nan, 'nan'), (-np.inf, '-inf')])
def test_floats_that_are_not_whole_numbers_are_an_error_naming_the_input(bad, shown):
    checker, _ = _checker(('edgemap', tf.int32, [None, 3]))
    maps = np.zeros((2, 3), np.float32)
    maps[1, 2] = bad
    with pytest.raises(ValueError, match=r"component 0 of the datapoint \(float32\) holds {}, which is not a "
                                         r"whole number, but input 'edgemap' is int32".format(shown)):
        checker.feeds([maps])


def test_whole_floats_out_of_the_integer_range_are_an_error():
    checker, _ = _checker(('label', tf.int32, [None]), ('pixels', tf.uint8, [None]))
    with pytest.raises(ValueError,
                       match=r"holds 2147483648.0, which does not fit the int32 of input 'label'"):
        checker.feeds([np.array([1., 2. ** 31]), np.zeros(1, np.uint8)])
    with pytest.raises(ValueError, match=r"holds -1.0, which does not fit the uint8 of input 'pixels'"):
        checker.feeds([np.zeros(1, np.int32), np.array([3., -1.], np.float32)])
    # a float beyond int64 (2.0**63 is one more than its largest value)
    checker, _ = _checker(('step', tf.int64, [None]))
    with pytest.raises(ValueError, match=r"holds 9.223372036854776e\+18, which does not fit the int64"):
        checker.feeds([np.array([2. ** 63])])


def test_floats_never_feed_a_bool_input():
    checker, _ = _checker(('mask', tf.bool, [None]))
    with pytest.raises(TypeError, match=r"dtype float32, but input 'mask' is bool"):
        checker.feeds([np.array([0., 1.], np.float32)])


class _LinearModel(ModelDesc):
    """cost = mean((x * w - y)^2) with one weight w; y may be NaN/inf in chosen datapoints."""

    def inputs(self):
        return [tf.TensorSpec([None], tf.float32, 'x'), tf.TensorSpec([None], tf.float32, 'y')]

    def build_graph(self, x, y):
        self.w = tfv1.get_variable('w', [], initializer=tfv1.constant_initializer(1.0))
        return tf.reduce_mean(tf.square(x * self.w - y), name='cost')

    def optimizer(self):
        return tfv1.train.GradientDescentOptimizer(0.1)


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
    config = TrainConfig(model=_LinearModel(), data=FeedInput(DataFromList(points, shuffle=False)),
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
    config = TrainConfig(model=_LinearModel(), data=FeedInput(DataFromList(points, shuffle=False)),
                         callbacks=[read], steps_per_epoch=1, max_epoch=1)
    launch_train_with_config(config, trainer)
    assert np.isnan(read.values[0])
