"""models: the names tensorpack 0.11's models exports, PReLU's default and its variable,
Deconv2D, VariableHolder, and rename_tflayer_get_variable (tf.layers' variable names made
tensorpack's, so a FullyConnected can reuse them)."""

import numpy as np

from tensorpack_lite.compat import tf, tfv1
from tensorpack_lite.models import (FullyConnected, rename_tflayer_get_variable)
from helpers.graphs import run


def test_rename_tflayer_get_variable_names():
    with rename_tflayer_get_variable():
        with tfv1.variable_scope('bn'):
            mean = tfv1.get_variable('moving_mean', [3])
            variance = tfv1.get_variable('moving_variance', [3])
            gamma = tfv1.get_variable('gamma', [3])
            op = tf.identity(mean, name='kernel')        # op names are not touched
        top = tfv1.get_variable('kernel', [2])
        with tfv1.variable_scope('bn', reuse=True):
            again = tfv1.get_variable('moving_mean', [3])
    names = [v.op.name for v in (mean, variance, gamma, top)]
    assert names == ['bn/mean/EMA', 'bn/variance/EMA', 'bn/gamma', 'W']
    assert again is mean and op.op.name == 'bn/kernel'
    assert tfv1.get_variable('kernel', [1]).op.name == 'kernel'     # outside: no renaming


def _tflayer_style_dense(x, units):
    """A layer written with tf.layers' variable names."""
    kernel = tfv1.get_variable('kernel', [x.shape[-1], units], initializer=tfv1.constant_initializer(0.5))
    bias = tfv1.get_variable('bias', [units], initializer=tfv1.constant_initializer(1.0))
    return tf.matmul(x, kernel) + bias


def test_rename_tflayer_get_variable_makes_variables_tensorpack_layers_reuse():
    x = tf.ones([2, 3])
    with rename_tflayer_get_variable(), tfv1.variable_scope('fc'):
        ported = _tflayer_style_dense(x, 4)
    with tfv1.variable_scope(tfv1.get_variable_scope(), reuse=True):
        native = FullyConnected('fc', x, 4)
    assert sorted(v.op.name for v in tfv1.global_variables()) == ['fc/W', 'fc/b']
    ported_value, native_value = run([ported, native])
    np.testing.assert_allclose(ported_value, np.full((2, 4), 3 * 0.5 + 1.0))
    np.testing.assert_allclose(native_value, ported_value)
