"""profiling/flops.py: the FLOPs count_flops finds in a small MLP's training step and in a
convolution and its gradients, against the count by hand."""

from tensorpack_lite import FullyConnected
from tensorpack_lite import tfv1 as tf
from tensorpack_lite.profiling.flops import count_flops
from tensorpack_lite.tfutils.tower import TrainTowerContext


def test_flops_of_a_small_mlp_equal_the_hand_count():
    batch = 16
    x = tf.placeholder(tf.float32, [None, 64])
    y = tf.placeholder(tf.int32, [None])
    with TrainTowerContext(''):
        logits = FullyConnected('fc1', FullyConnected('fc0', x, 32, activation=tf.nn.relu), 10)
    cost = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
    # as SingleCostTrainer computes gradients (GATE_NONE): the input's gradient is not computed
    train_op = tf.train.GradientDescentOptimizer(0.1).minimize(
        cost, gate_gradients=tf.train.Optimizer.GATE_NONE)
    forward = 2 * batch * (64 * 32 + 32 * 10)
    backward = 2 * batch * (64 * 32) + 2 * 2 * batch * (32 * 10)   # fc0: weights; fc1: weights and input
    assert count_flops([train_op], batch) == forward + backward == 161792
    assert count_flops([logits], batch) == forward
    assert count_flops([train_op]) is None             # the batch is unknown


def test_flops_of_a_convolution_equal_the_hand_count():
    image = tf.placeholder(tf.float32, [2, 10, 10, 3])
    kernel = tf.get_variable('k', [3, 3, 3, 5])
    out = tf.nn.conv2d(image, kernel, strides=1, padding='VALID')        # 2 x 8 x 8 x 5 outputs
    forward = 2 * (2 * 8 * 8 * 5) * (3 * 3 * 3)
    assert count_flops([out]) == forward
    grad_kernel, grad_image = tf.gradients(tf.reduce_sum(out), [kernel, image])
    # the gradient of a sum needs the output's (static) shape only, not the forward conv
    assert count_flops([grad_kernel]) == count_flops([grad_image]) == forward
    assert count_flops([out, grad_image, grad_kernel]) == 3 * forward
