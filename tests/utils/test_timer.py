"""utils: execute_only_once, the file helpers and download (file:// and a local HTTP server),
change_gpu, logger.addFilter, OnlineMoments, IterSpeedCounter, intensity_to_rgb,
dump_dataflow_images, PALETTE_RGB, enable_call_trace, NVMLContext (a missing library and a
fake one built with gcc), loadcaffe (a fake pycaffe and a fake protoc), and that no utils
module imports TensorFlow at import time."""

import logging

import pytest

from tensorpack_lite.utils.timer import IterSpeedCounter


def test_iter_speed_counter_logs_every_n_calls(log_records):
    counter = IterSpeedCounter(3)
    for _ in range(7):
        counter()
    lines = [m for m in log_records.messages(logging.INFO) if m.startswith('IterSpeed:')]
    assert len(lines) == 2
    assert ', 3 times, ' in lines[0] and ', 6 times, ' in lines[1]
    named = IterSpeedCounter(2, name='reader')
    named()
    named()
    assert any(m.startswith('reader: ') and ', 2 times, ' in m for m in log_records.messages(logging.INFO))
    with pytest.raises(ValueError, match='print_every must be >= 1'):
        IterSpeedCounter(0)
