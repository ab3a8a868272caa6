"""models: the names tensorpack 0.11's models exports, PReLU's default and its variable,
Deconv2D, VariableHolder, and rename_tflayer_get_variable (tf.layers' variable names made
tensorpack's, so a FullyConnected can reuse them)."""

from tensorpack_lite.compat import tf
from tensorpack_lite.models import VariableHolder


def test_variable_holder():
    a, b = tf.constant(1.0), tf.constant(2.0)
    holder = VariableHolder(W=a)
    holder.b = b
    assert holder.W is a and holder.b is b and holder.all() == [a, b]
    assert repr(holder) == 'VariableHolder(W, b)'
