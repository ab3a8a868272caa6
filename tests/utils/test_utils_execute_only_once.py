"""utils: execute_only_once, the file helpers and download (file:// and a local HTTP server),
change_gpu, logger.addFilter, OnlineMoments, IterSpeedCounter, intensity_to_rgb,
dump_dataflow_images, PALETTE_RGB, enable_call_trace, NVMLContext (a missing library and a
fake one built with gcc), loadcaffe (a fake pycaffe and a fake protoc), and that no utils
module imports TensorFlow at import time."""

import tensorpack_lite.utils
from tensorpack_lite.utils.utils import execute_only_once


def test_execute_only_once_is_per_call_site():
    def site_a():
        return execute_only_once()

    def site_b():
        return execute_only_once()
    assert [site_a(), site_a(), site_a()] == [True, False, False]
    assert [site_b(), site_b()] == [True, False]
    assert tensorpack_lite.utils.execute_only_once is execute_only_once
    assert 'execute_only_once' in tensorpack_lite.utils.__all__
