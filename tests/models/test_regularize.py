"""The regularization costs: the L1/L2 regularizers (in the weights' dtype), regularize_cost
over a tower's variables and regularize_cost_from_collection."""

import logging

import numpy as np
import pytest

from tensorpack_lite.compat import tf, tfv1
from tensorpack_lite.models import (
    Conv2D, FullyConnected, l1_regularizer, l2_regularizer, regularize_cost,
    regularize_cost_from_collection)
from tensorpack_lite.tfutils.tower import TowerContext
from helpers.graphs import run


def test_regularize_cost_numbers_and_towers(log_records):
    x = tfv1.placeholder(tf.float32, [None, 3])
    with TowerContext('', is_training=True):
        FullyConnected('fc0', x, 4, kernel_initializer=tfv1.constant_initializer(2.0),
                       bias_initializer=tfv1.constant_initializer(5.0))
        FullyConnected('fc1', x, 2, kernel_initializer=tfv1.constant_initializer(-1.0))
        l2 = regularize_cost('fc.*/W', l2_regularizer(0.1))
        l1 = regularize_cost('fc1/W', l1_regularizer(0.5), name='l1_cost')
        biases = regularize_cost('/b$', tf.nn.l2_loss, name='bias_cost')
        nothing = regularize_cost('conv.*/W', tf.nn.l2_loss)
    with tfv1.variable_scope(tfv1.get_variable_scope(), reuse=True), TowerContext('infer', is_training=False):
        FullyConnected('fc0', x, 4)
        in_inference = regularize_cost('fc.*/W', l2_regularizer(0.1))
    assert l2.name == 'regularize_cost:0' and l1.name == 'l1_cost:0'
    assert nothing.name == 'empty_regularize_cost:0' and in_inference.name == 'infer/empty_regularize_cost:0'
    got = run([l2, l1, biases, nothing, in_inference])
    # 0.1 * (12 * 4 + 6 * 1) / 2; 0.5 * 6; (4 * 25) / 2
    np.testing.assert_allclose(got, [2.7, 3.0, 50.0, 0.0, 0.0], rtol=1e-6)
    assert "The following tensors will be regularized: fc0/W, fc1/W" in log_records.messages(logging.INFO)
    with pytest.raises(ValueError, match="scale must be a number >= 0"):
        l2_regularizer(-1)


def test_regularize_cost_from_collection():
    x = tfv1.placeholder(tf.float32, [None, 2, 2, 1])
    with TowerContext('', is_training=True):
        assert regularize_cost_from_collection().name == 'empty_regularize_cost:0'
        Conv2D('conv', x, 2, 1, kernel_initializer=tfv1.ones_initializer(),
               kernel_regularizer=l2_regularizer(1.0), bias_regularizer=l1_regularizer(3.0),
               bias_initializer=tfv1.constant_initializer(-1.0))
        total = regularize_cost_from_collection(name='reg')
    assert total.name == 'reg:0'
    np.testing.assert_allclose(run(total), 1.0 + 6.0, rtol=1e-6)     # 2 * 1 / 2 + 3 * 2


@pytest.mark.parametrize('dtype', [tf.float16, tf.float32], ids=['float16', 'float32'])
def test_regularizers_give_a_loss_of_the_weights_dtype(dtype):
    # as tf.contrib's: the scale is converted to the weights' dtype (tensorpack's float16 models)
    with TowerContext('', is_training=True):
        w = tfv1.get_variable('fc/W', initializer=tf.constant([[1.0, 2.0], [3.0, -4.0]], dtype))
        l2, l1 = l2_regularizer(0.1)(w), l1_regularizer(0.5)(w)
        total = regularize_cost('fc/W', l2_regularizer(0.1))
    assert (l2.dtype, l1.dtype, total.dtype) == (dtype, dtype, tf.float32)
    # 0.1 * 30 / 2; 0.5 * 10 (0.1 is 0.09998 in float16)
    np.testing.assert_allclose(run([l2, l1, total]), [1.5, 5.0, 1.5],
                               rtol=1e-6 if dtype == tf.float32 else 1e-3)
