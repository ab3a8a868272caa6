"""models: the names tensorpack 0.11's models exports, PReLU's default and its variable,
Deconv2D, VariableHolder, rename_tflayer_get_variable (tf.layers' variable names made
tensorpack's, so a FullyConnected can reuse them), and the layers' numbers of outputs."""

import numpy as np
import pytest

from tensorpack_lite.compat import tf, tfv1
from tensorpack_lite.models import (Conv2D, Conv2DTranspose, FullyConnected, rename_tflayer_get_variable)
from tensorpack_lite.tfutils.tower import TowerContext
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


OUTPUT_COUNTS = {
    'Conv2D': (lambda name, x, n: Conv2D(name, x, n, 1), 'filters', [1, 1, 4, 8]),
    'Conv2D-split': (lambda name, x, n: Conv2D(name, x, n, 1, split=2), 'filters', [1, 1, 2, 8]),
    'Conv2DTranspose': (lambda name, x, n: Conv2DTranspose(name, x, n, 1), 'filters', [1, 1, 8, 4]),
    'FullyConnected': (lambda name, x, n: FullyConnected(name, x, n), 'units', [64, 8]),
}


@pytest.mark.parametrize('layer', sorted(OUTPUT_COUNTS))
def test_number_of_outputs_may_be_a_whole_float(layer):
    # tensorpack's programs give e.g. n_in / 2; a fraction is an error (tensorpack truncated it)
    make, argument, kernel_shape = OUTPUT_COUNTS[layer]
    x = tf.ones([2, 4, 4, 4])
    with TowerContext('', is_training=True):
        out = make('whole', x, 16 / 2)
        with pytest.raises(ValueError, match=r"{} 'fraction': {} must be a whole number, got 12\.5".format(
                layer.split('-')[0], argument)):
            make('fraction', x, 12.5)
        with pytest.raises(TypeError, match="{} 'text': {} must be an int, got '8'".format(
                layer.split('-')[0], argument)):
            make('text', x, '8')
    assert out.variables.W.shape.as_list() == kernel_shape and out.shape[-1] == 8
    assert out.variables.b.shape.as_list() == [8]
    assert run(out).shape[-1] == 8
