"""tfutils: the names tensorpack 0.11's tfutils exports, get_default_sess_config,
get_tf_version_tuple, collect_env_info (also with things missing), argscope for plain
functions and modules (tf.compat.v1.nn.conv2d in a namespace), and under_name_scope's warning
for a name scope that is taken."""

import sys

import numpy as np
import psutil
import pytest

from tensorpack_lite.compat import tf
from tensorpack_lite.tfutils import collect_env
from tensorpack_lite.utils import nvml


def _table_rows(table):
    """The rows of a plain tabulate table as {label: value}."""
    rows = {}
    for line in table.splitlines():
        if line.startswith('---'):
            continue
        label, _, value = line.partition('  ')
        rows[label.strip()] = value.strip()
    return rows


@pytest.fixture
def no_nvml(monkeypatch):
    monkeypatch.setattr(nvml, 'LIBRARY_NAME', 'libnvidia-ml-not-installed.so.1')
    monkeypatch.setattr(nvml, '_library', None)


def test_collect_env_info_rows(no_nvml):
    rows = _table_rows(collect_env.collect_env_info())
    assert rows['sys.platform'] == sys.platform
    assert rows['Python'].startswith('{}.{}.{}'.format(*sys.version_info[:3]))
    assert rows['Numpy'] == np.__version__
    assert rows['TensorFlow'].startswith(tf.__version__ + '/')
    assert rows['TF CUDA support'] == str(tf.test.is_built_with_cuda())
    assert rows['CPU Count'] == str(psutil.cpu_count())
    assert rows['GPU'] == 'not found with NVML (NVMLError)'
    assert rows['tensorpack_lite'].startswith('0.11')
    assert rows['msgpack'] != 'not installed'


def test_collect_env_info_does_not_fail_when_things_are_missing(no_nvml, monkeypatch):
    monkeypatch.setitem(sys.modules, 'cv2', None)          # "not installed"
    monkeypatch.setitem(sys.modules, 'horovod', None)

    def broken():
        raise OSError('no /proc here')
    monkeypatch.setattr(psutil, 'virtual_memory', broken)
    rows = _table_rows(collect_env.collect_env_info())
    assert rows['cv2'] == 'not installed' and rows['Horovod'] == 'not installed'
    assert rows['Machine'] == 'unavailable (OSError: no /proc here)'
    assert 'Free RAM' not in rows and rows['Numpy'] == np.__version__
