"""models: the names tensorpack 0.11's models exports, PReLU's default and its variable,
Deconv2D, VariableHolder, and rename_tflayer_get_variable (tf.layers' variable names made
tensorpack's, so a FullyConnected can reuse them)."""

import logging

import numpy as np

import tensorpack_lite.models as models
from tensorpack_lite.compat import tf, tfv1
from tensorpack_lite.models import (Conv2DTranspose, Deconv2D, FullyConnected, PReLU, VariableHolder,
                                    rename_tflayer_get_variable)
from tensorpack_lite.models import common
from tensorpack_lite.tfutils.tower import TowerContext

# tensorpack 0.11's models.__all__
TENSORPACK_MODELS = [
    'AvgPooling', 'BNReLU', 'BatchNorm', 'BatchRenorm', 'ConcatWith', 'Conv2D', 'Conv2DTranspose', 'Deconv2D',
    'Dropout', 'FixedUnPooling', 'FullyConnected', 'GlobalAvgPooling', 'InstanceNorm', 'LayerNorm',
    'LinearWrap', 'MaxPooling', 'Maxout', 'PReLU', 'VariableHolder', 'disable_layer_logging',
    'l1_regularizer', 'l2_regularizer', 'layer_register', 'regularize_cost',
    'regularize_cost_from_collection', 'rename_tflayer_get_variable']


def run(fetches, feed=None):
    with tfv1.Session() as sess:
        sess.run(tfv1.global_variables_initializer())
        return sess.run(fetches, feed)


def test_models_exports_tensorpack_names():
    assert [n for n in TENSORPACK_MODELS if n not in models.__all__ or not hasattr(models, n)] == []
    for name in ('layer_register', 'VariableHolder', 'rename_tflayer_get_variable', 'disable_layer_logging'):
        assert name in common.__all__ and getattr(common, name) is getattr(models, name)


def test_prelu_default_alpha_and_its_gradient(log_records):
    x = tf.constant([-2.0, -0.5, 0.0, 3.0])
    out = PReLU('prelu', x)
    alpha = out.variables.alpha
    assert alpha.op.name == 'prelu/alpha' and alpha.shape.as_list() == []
    assert [v.op.name for v in tfv1.trainable_variables()] == ['prelu/alpha']
    # d sum(out) / d alpha = sum(min(x, 0)) = -2.5
    grad = tf.gradients(tf.reduce_sum(out), alpha)[0]
    value, grad_value = run([out, grad])
    np.testing.assert_allclose(value, [-0.002, -0.0005, 0.0, 3.0], rtol=1e-6)
    np.testing.assert_allclose(grad_value, -2.5)
    named = PReLU('prelu2', x, init=0.5, name='ignored')
    assert named.name == 'prelu2/output:0'
    assert any('PReLU(name=...) is deprecated' in m for m in log_records.messages(logging.WARNING))


def test_deconv2d_is_conv2d_transpose():
    assert Deconv2D is Conv2DTranspose
    x = tf.ones([1, 2, 2, 3])
    with TowerContext('', is_training=True):
        out = Deconv2D('deconv', x, 4, 3, strides=2, kernel_initializer=tfv1.ones_initializer())
    assert out.shape.as_list() == [1, 4, 4, 4]
    assert out.variables.W.shape.as_list() == [3, 3, 4, 3] and out.variables.b.op.name == 'deconv/b'


def test_variable_holder():
    a, b = tf.constant(1.0), tf.constant(2.0)
    holder = VariableHolder(W=a)
    holder.b = b
    assert holder.W is a and holder.b is b and holder.all() == [a, b]
    assert repr(holder) == 'VariableHolder(W, b)'


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
