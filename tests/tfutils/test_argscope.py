"""tfutils: the names tensorpack 0.11's tfutils exports, get_default_sess_config,
get_tf_version_tuple, collect_env_info (also with things missing), argscope for plain
functions and modules (tf.compat.v1.nn.conv2d in a namespace), and under_name_scope's warning
for a name scope that is taken."""

import logging
import types

import numpy as np
import pytest

from tensorpack_lite.compat import tf, tfv1
from tensorpack_lite.tfutils.argscope import (argscope, enable_argscope_for_function,
                                              enable_argscope_for_module)
from tensorpack_lite.tfutils.tower import PredictTowerContext, TrainTowerContext
from helpers.graphs import run


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
