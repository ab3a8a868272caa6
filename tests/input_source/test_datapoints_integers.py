"""Values that used to go wrong silently: integers that do not fit their input's dtype (they
wrapped around). A cost that becomes NaN or infinite: tests/train/test_tower_nonfinite_cost.py."""

import numpy as np
import pytest

from tensorpack_lite.compat import tf, tfv1
from tensorpack_lite.input_source.datapoints import DatapointChecker


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
