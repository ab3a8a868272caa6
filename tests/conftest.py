"""Shared test set-up: quiet TensorFlow, a fresh graph and logger state for every test, and
the fixtures several modules use. Shared non-fixture helpers are in helpers.py."""

import os
import re
import subprocess
import sys

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

# `from helpers import ...` in the test modules, whatever pytest's import mode.
_TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
if _TESTS_DIR not in sys.path:
    sys.path.insert(0, _TESTS_DIR)

import pytest  # noqa: E402

from helpers import capture_logs  # noqa: E402


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


@pytest.fixture
def log_records():
    """Everything the library's logger logs during the test: a ``helpers.LogRecords`` (a list
    of logging.LogRecord with ``messages(level)`` and ``messages_at(level)``)."""
    with capture_logs() as records:
        yield records


@pytest.fixture(scope='module')
def digits():
    """The 8x8 digits scikit-learn ships: images (n, 64) float32 in [0, 1], labels (n,) int32."""
    from sklearn.datasets import load_digits
    data = load_digits()
    return (data.data / 16.0).astype('float32'), data.target.astype('int32')


@pytest.fixture(scope='session')
def horovod_python():
    """The Python of the Horovod environment: $TENSORPACK_LITE_HOROVOD_PYTHON, else the one
    .ci/horovod_env.sh builds (or reuses: seconds once built). Built once per test session."""
    python = os.environ.get('TENSORPACK_LITE_HOROVOD_PYTHON')
    if python:
        return python
    script = os.path.join(os.path.dirname(_TESTS_DIR), '.ci', 'horovod_env.sh')
    proc = subprocess.run(['bash', script], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=3600)
    found = re.findall(r'^HOROVOD_PYTHON=(.+)$', proc.stdout, re.M)
    if proc.returncode != 0 or not found:
        pytest.fail("bash .ci/horovod_env.sh failed (exit {}):\n{}".format(proc.returncode, proc.stdout))
    return found[-1]
