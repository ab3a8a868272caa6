"""DatapointChecker's fast path: an array of exactly its input's dtype, in a shape that fitted
before, passes as it is; every other datapoint still gets the whole check."""

import numpy as np
import pytest

from tensorpack_lite.compat import tf, tfv1
from tensorpack_lite.input_source.datapoints import DatapointChecker


def _checker():
    image = tfv1.placeholder(tf.float32, [None, 3], name='image')
    label = tfv1.placeholder(tf.int32, [None], name='label')
    return DatapointChecker('Test', [image, label]), image, label


@pytest.mark.quick
def test_arrays_of_the_input_dtype_in_a_known_shape_pass_as_they_are():
    checker, image, label = _checker()
    for _ in range(3):
        pixels, labels = np.ones((2, 3), np.float32), np.array([4, 5], np.int32)
        feeds = checker.feeds([pixels, labels])
        assert feeds[image] is pixels and feeds[label] is labels
    # a batch of another size, then conversions, as before
    feeds = checker.feeds([np.zeros((5, 3), np.float64), [1, 2, 3, 4, 5]])
    assert feeds[image].dtype == np.float32 and feeds[image].shape == (5, 3)
    assert feeds[label].dtype == np.int32 and feeds[label].tolist() == [1, 2, 3, 4, 5]


def test_a_known_shape_does_not_let_a_bad_datapoint_through():
    checker, _, _ = _checker()
    good = [np.ones((2, 3), np.float32), np.array([4, 5], np.int32)]
    checker.feeds(good)
    checker.feeds(good)
    with pytest.raises(ValueError, match=r"component 0 of the datapoint has shape \(2, 4\)"):
        checker.feeds([np.ones((2, 4), np.float32), good[1]])
    with pytest.raises(ValueError, match=r"holds 0.5, which is not a whole number"):
        checker.feeds([good[0], np.array([0.5, 1.0], np.float32)])
    with pytest.raises(ValueError, match=r"holds 8589934595, which does not fit the int32 of input 'label'"):
        checker.feeds([good[0], np.array([2 ** 33 + 3, 1], np.int64)])
    with pytest.raises(TypeError, match=r"dtype complex64, but input 'image' is float32"):
        checker.feeds([np.ones((2, 3), np.complex64), good[1]])
