"""tfutils: the names tensorpack 0.11's tfutils exports, get_default_sess_config,
get_tf_version_tuple, collect_env_info (also with things missing), argscope for plain
functions and modules (tf.compat.v1.nn.conv2d in a namespace), and under_name_scope's warning
for a name scope that is taken."""

import logging
import re
import sys
import types

import numpy as np
import psutil
import pytest

import tensorpack_lite.tfutils as tfutils
from tensorpack_lite.compat import tf, tfv1
from tensorpack_lite.tfutils import collect_env
from tensorpack_lite.tfutils.argscope import (argscope, enable_argscope_for_function,
                                              enable_argscope_for_module)
from tensorpack_lite.tfutils.common import get_default_sess_config, get_tf_version_tuple
from tensorpack_lite.tfutils.scope_utils import cached_name_scope, under_name_scope
from tensorpack_lite.tfutils.tower import PredictTowerContext, TrainTowerContext
from tensorpack_lite.utils import nvml

# tensorpack 0.11's tfutils.__all__
TENSORPACK_TFUTILS = [
    'ChainInit', 'DictRestore', 'JustCurrentSession', 'SaverRestore', 'SaverRestoreRelaxed', 'SessionInit',
    'SmartInit', 'TowerContext', 'argscope', 'collect_env_info', 'enable_argscope_for_function',
    'enable_argscope_for_module', 'get_arg_scope', 'get_current_tower_context', 'get_default_sess_config',
    'get_global_step_value', 'get_global_step_var', 'get_model_loader', 'get_tf_version_tuple', 'gradproc',
    'optimizer', 'sesscreate', 'sessinit', 'summary', 'tower', 'varreplace']


def run(fetches, feed=None):
    with tfv1.Session() as sess:
        sess.run(tfv1.global_variables_initializer())
        return sess.run(fetches, feed)


def test_tfutils_exports_tensorpack_names():
    missing = [n for n in TENSORPACK_TFUTILS if n not in tfutils.__all__ or not hasattr(tfutils, n)]
    assert missing == []
    assert tfutils.argscope is argscope      # the function, as in tensorpack, not the submodule
    assert isinstance(tfutils.sessinit, types.ModuleType) and tfutils.SmartInit is tfutils.sessinit.SmartInit
    assert tfutils.collect_env_info is collect_env.collect_env_info
    assert tfutils.get_default_sess_config is get_default_sess_config


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


# ----- collect_env_info ------------------------------------------------------------------------

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


# ----- argscope for plain functions and modules -------------------------------------------------

def _conv_inputs():
    image = tf.ones([1, 4, 4, 1])
    kernel = tf.ones([2, 2, 1, 1])
    return image, kernel


def test_argscope_on_tf_conv2d_in_a_namespace(log_records):
    namespace = types.ModuleType('my_nn')
    namespace.conv2d = tfv1.nn.conv2d
    namespace.relu = tfv1.nn.relu
    namespace.DTYPE = tf.float32
    enable_argscope_for_module(namespace)
    assert not hasattr(tfv1.nn.conv2d, '__argscope_enabled__')     # the real module is untouched
    assert namespace.DTYPE is tf.float32
    image, kernel = _conv_inputs()
    with argscope(namespace.conv2d, strides=[1, 1, 1, 1], padding='VALID'):
        valid = namespace.conv2d(image, kernel)
        same = namespace.conv2d(image, kernel, padding='SAME', name='padded')     # a call's argument wins
    assert valid.shape.as_list() == [1, 3, 3, 1] and same.shape.as_list() == [1, 4, 4, 1]
    valid_value, same_value = run([valid, same])
    np.testing.assert_allclose(valid_value[0, :, :, 0], np.full((3, 3), 4.0))     # 2x2 sums of ones
    # SAME pads at the bottom/right: the last row and column only see 2, the corner 1
    expected_same = np.array([[4, 4, 4, 2], [4, 4, 4, 2], [4, 4, 4, 2], [2, 2, 2, 1]], dtype=np.float32)
    np.testing.assert_allclose(same_value[0, :, :, 0], expected_same)
    messages = log_records.messages(logging.INFO)
    assert "'conv2d': [1, 4, 4, 1] --> [1, 3, 3, 1]" in messages
    assert "'padded': [1, 4, 4, 1] --> [1, 4, 4, 1]" in messages
    with pytest.raises(TypeError, match='padding'):
        namespace.conv2d(image, kernel, strides=[1, 1, 1, 1])     # outside the argscope: no default


def test_enable_argscope_for_module_of_plain_functions(log_records):
    module = types.ModuleType('my_layers')

    def scale(x, factor=1.0):
        return x * factor

    def _offset(x, delta=0.0):
        return x + delta

    class NotAFunction(object):
        pass
    module.scale, module._offset, module.NotAFunction = scale, _offset, NotAFunction
    enable_argscope_for_module(module, log_shape=False)
    assert module.NotAFunction is NotAFunction
    wrapped = module.scale
    enable_argscope_for_module(module)            # already enabled: left as it is
    assert module.scale is wrapped
    with argscope(module.scale, factor=3.0):
        with argscope(module._offset, delta=0.5):
            out = module._offset(module.scale(tf.ones([2])))
    np.testing.assert_allclose(run(out), [3.5, 3.5])
    assert module.scale(2.0) == 2.0                 # no argscope: its own default; not a tensor: no log
    assert not [m for m in log_records.messages(logging.INFO) if '-->' in m]
    with pytest.raises(TypeError, match='takes a function, got 3'):
        enable_argscope_for_function(3)


def test_enable_argscope_logs_only_outside_other_towers(log_records):
    double = enable_argscope_for_function(lambda x: x * 2)
    with TrainTowerContext('tower1', index=1, total=2):
        double(tf.ones([3]))
    with PredictTowerContext('towerp'):
        double(tf.ones([4]))
    assert not [m for m in log_records.messages(logging.INFO) if '-->' in m]
    with PredictTowerContext('predict'):             # not named like a tower: logged, as tensorpack
        double(tf.ones([5]))
    with TrainTowerContext('tower0', index=0, total=2):
        double(tf.ones([6]))
    assert [m for m in log_records.messages(logging.INFO) if '-->' in m] == [
        "'<lambda>': [5] --> [5]", "'<lambda>': [6] --> [6]"]


# ----- under_name_scope, cached_name_scope ----------------------------------------------------

@under_name_scope()
def rms(x):
    return tf.sqrt(tf.reduce_mean(tf.square(x)), name='value')


def test_under_name_scope_reenters_a_given_scope(log_records):
    x = tf.ones([2])
    assert rms(x).op.name == 'rms/value'
    assert rms(x).op.name == 'rms_1/value'        # without name_scope=: a new scope each call
    first = rms(x, name_scope='loss_rms')
    second = rms(x, name_scope='loss_rms')        # the same scope again
    assert (first.op.name, second.op.name) == ('loss_rms/value', 'loss_rms/value_1')
    with tf.name_scope('outer'):
        assert rms(x, name_scope='inner').op.name == 'outer/inner/value'
    assert log_records.messages(logging.WARNING) == []


def test_under_name_scope_warns_when_the_name_is_taken(log_records):
    tf.constant(0.0, name='taken')
    out = rms(tf.ones([2]), name_scope='taken')
    assert out.op.name == 'taken_1/value'
    assert log_records.messages(logging.WARNING) == [
        "Calling rms with name_scope='taken', but the name scope is 'taken_1': the name 'taken' is taken "
        "in the graph."]
    with tf.name_scope('outer'):
        tf.constant(0.0, name='busy')
        assert rms(tf.ones([2]), name_scope='busy').op.name == 'outer/busy_1/value'
    assert "the name scope is 'outer/busy_1': the name 'outer/busy' is taken" in \
        log_records.messages(logging.WARNING)[-1]


def test_cached_name_scope_keeps_the_scope_it_first_got():
    tf.constant(0.0, name='stats')
    with cached_name_scope('stats') as scope:
        a = tf.constant(1.0, name='a')
    with cached_name_scope('stats'):
        b = tf.constant(1.0, name='b')
    assert scope == 'stats_1/' and (a.op.name, b.op.name) == ('stats_1/a', 'stats_1/b')
    with tfv1.Graph().as_default():     # per graph
        with cached_name_scope('stats') as scope:
            assert scope == 'stats/'
