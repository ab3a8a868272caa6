"""utils: execute_only_once, the file helpers and download (file:// and a local HTTP server),
change_gpu, logger.addFilter, OnlineMoments, IterSpeedCounter, intensity_to_rgb,
dump_dataflow_images, PALETTE_RGB, enable_call_trace, NVMLContext (a missing library and a
fake one built with gcc), loadcaffe (a fake pycaffe and a fake protoc), and that no utils
module imports TensorFlow at import time."""

import logging

from tensorpack_lite.utils import logger


def test_logger_add_filter(log_records):
    class DropSecrets(logging.Filter):
        def filter(self, record):
            return 'secret' not in record.getMessage()
    drop = DropSecrets()
    logger.addFilter(drop)
    try:
        logger.info("the secret key")
        logger.info("a public message")
    finally:
        logger._logger.removeFilter(drop)
    logger.info("another secret, after removal")
    assert log_records.messages(logging.INFO) == ["a public message", "another secret, after removal"]
    assert 'addFilter' in logger.__all__
