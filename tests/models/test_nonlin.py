"""models: the names tensorpack 0.11's models exports, PReLU's default and its variable,
Deconv2D, VariableHolder, and rename_tflayer_get_variable (tf.layers' variable names made
tensorpack's, so a FullyConnected can reuse them)."""

import logging

import numpy as np

from tensorpack_lite.compat import tf, tfv1
from tensorpack_lite.models import PReLU
from helpers.graphs import run


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
