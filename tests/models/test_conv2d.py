"""models: the names tensorpack 0.11's models exports, PReLU's default and its variable,
Deconv2D, VariableHolder, and rename_tflayer_get_variable (tf.layers' variable names made
tensorpack's, so a FullyConnected can reuse them)."""

from tensorpack_lite.compat import tf, tfv1
from tensorpack_lite.models import (Conv2DTranspose, Deconv2D)
from tensorpack_lite.tfutils.tower import TowerContext


def test_deconv2d_is_conv2d_transpose():
    assert Deconv2D is Conv2DTranspose
    x = tf.ones([1, 2, 2, 3])
    with TowerContext('', is_training=True):
        out = Deconv2D('deconv', x, 4, 3, strides=2, kernel_initializer=tfv1.ones_initializer())
    assert out.shape.as_list() == [1, 4, 4, 4]
    assert out.variables.W.shape.as_list() == [3, 3, 4, 3] and out.variables.b.op.name == 'deconv/b'
