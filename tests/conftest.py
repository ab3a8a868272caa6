"""Shared test set-up: quiet TensorFlow, and a fresh graph and logger state for every test."""

import os

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def _fresh_graph_and_logger():
    """Every test starts in an empty default graph and without a logger directory."""
    from tensorpack_lite.compat import tfv1
    from tensorpack_lite.utils import logger
    with tfv1.Graph().as_default():
        yield
    logger._detach_file_handler()


@pytest.fixture
def logdir(tmp_path):
    """A fresh logger directory for the test, detached afterwards."""
    from tensorpack_lite.utils import logger
    path = str(tmp_path / 'train_log')
    logger.set_logger_dir(path, action='d')
    return path
