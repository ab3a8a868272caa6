"""tfutils: the names tensorpack 0.11's tfutils exports, get_default_sess_config,
get_tf_version_tuple, collect_env_info (also with things missing), argscope for plain
functions and modules (tf.compat.v1.nn.conv2d in a namespace), and under_name_scope's warning
for a name scope that is taken."""

import re

import pytest

from tensorpack_lite.compat import tf, tfv1
from tensorpack_lite.tfutils.common import get_default_sess_config, get_tf_version_tuple


def test_get_default_sess_config_fields():
    conf = get_default_sess_config()
    assert isinstance(conf, tfv1.ConfigProto)
    assert conf.allow_soft_placement is True
    assert conf.gpu_options.allow_growth is True
    assert conf.gpu_options.per_process_gpu_memory_fraction == pytest.approx(0.99)
    assert conf.intra_op_parallelism_threads == 0      # left to TensorFlow (see docs/differences.md)
    assert get_default_sess_config(0.5).gpu_options.per_process_gpu_memory_fraction == pytest.approx(0.5)
    assert get_default_sess_config() is not conf       # a new proto each time, free to modify


def test_get_tf_version_tuple():
    major, minor = re.match(r'(\d+)\.(\d+)', tf.__version__).groups()
    assert get_tf_version_tuple() == (int(major), int(minor))
    assert get_tf_version_tuple() >= (2, 0)
