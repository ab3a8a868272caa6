"""Layers on an empty batch (normal in detection: no box left) give the right shape and
gradients, whatever the kernel does: TensorFlow's oneDNN Conv2D (the default on x86 CPUs)
returns an empty tensor of the input's shape there, which the next bias_add rejects, and its
fused filter-and-bias gradient kernel fails on an empty batch ("Missing 1-th output")."""

import numpy as np
import pytest

from tensorpack_lite.compat import tf, tfv1
from tensorpack_lite.models import Conv2D, Conv2DTranspose, FullyConnected


def _run(build, shape):
    """The output of ``build(x)`` on ones of ``shape``, and the gradients of its sum with respect to
    ``x`` and the layer's variables."""
    with tf.Graph().as_default():
        x = tfv1.placeholder(tf.float32, [None] + list(shape[1:]))
        out = build(x)
        grads = tf.gradients(tf.reduce_sum(out), [x] + tfv1.trainable_variables())
        with tfv1.Session() as sess:
            sess.run(tfv1.global_variables_initializer())
            return sess.run([out] + grads, {x: np.ones(shape, np.float32)})


def _forward(build, shape):
    with tf.Graph().as_default():
        x = tfv1.placeholder(tf.float32, [None] + list(shape[1:]))
        out = build(x)
        with tfv1.Session() as sess:
            sess.run(tfv1.global_variables_initializer())
            return sess.run(out, {x: np.ones(shape, np.float32)})


@pytest.mark.parametrize('data_format, shape, expected', [
    ('channels_last', (0, 28, 28, 256), (0, 28, 28, 80)),
    ('channels_first', (0, 256, 28, 28), (0, 80, 28, 28)),
    ('channels_last', (2, 28, 28, 256), (2, 28, 28, 80)),
])
def test_conv2d_with_bias_on_an_empty_batch(data_format, shape, expected):
    out = _forward(lambda x: Conv2D('conv', x, 80, 3, data_format=data_format), shape)
    assert out.shape == expected


@pytest.mark.parametrize('data_format, shape, use_bias', [
    ('channels_first', (0, 256, 28, 28), True), ('channels_last', (0, 28, 28, 256), False),
    ('channels_last', (0, 28, 28, 256), True), ('channels_last', (2, 28, 28, 256), True)])
def test_conv2d_gradients_on_an_empty_batch(data_format, shape, use_bias):
    out, grad_x, grad_w, *grad_b = _run(
        lambda x: Conv2D('conv', x, 80, 3, data_format=data_format, use_bias=use_bias), shape)
    assert grad_x.shape == shape and grad_w.shape == (3, 3, 256, 80)
    assert (grad_w == 0).all() == (shape[0] == 0)
    if use_bias:
        assert grad_b[0].shape == (80,) and (grad_b[0] == out.size / 80).all()  # 0 for the empty batch


@pytest.mark.parametrize('kwargs, shape, expected', [
    (dict(kernel_size=3, strides=2, padding='same'), (0, 15, 15, 16), (0, 8, 8, 24)),
    (dict(kernel_size=3, strides=2, padding='valid'), (0, 15, 15, 16), (0, 7, 7, 24)),
    (dict(kernel_size=3, dilation_rate=2, padding='valid'), (0, 15, 15, 16), (0, 11, 11, 24)),
    (dict(kernel_size=1, split=4, data_format='channels_first'), (0, 16, 15, 15), (0, 24, 15, 15)),
    (dict(kernel_size=3, strides=2, padding='valid'), (3, 15, 15, 16), (3, 7, 7, 24)),
    (dict(kernel_size=3, dilation_rate=2, padding='valid'), (3, 15, 15, 16), (3, 11, 11, 24)),
])
def test_conv2d_output_shape_on_empty_and_full_batches(kwargs, shape, expected):
    out = _forward(lambda x: Conv2D('conv', x, 24, **kwargs), shape)
    assert out.shape == expected


@pytest.mark.parametrize('data_format, shape, expected', [
    ('channels_last', (0, 14, 14, 256), (0, 28, 28, 80)),
    ('channels_first', (0, 256, 14, 14), (0, 80, 28, 28)),
])
def test_conv2d_transpose_and_fully_connected_on_an_empty_batch(data_format, shape, expected):
    out = _forward(lambda x: Conv2DTranspose('deconv', x, 80, 2, strides=2, data_format=data_format), shape)
    assert out.shape == expected
    out, grad_x, grad_w, grad_b = _run(lambda x: FullyConnected('fc', x, 7), shape)
    assert out.shape == (0, 7) and grad_x.shape == shape and grad_w.shape == (np.prod(shape[1:]), 7)


def test_the_mask_head_of_tensorpack_fasterrcnn_on_no_detection():
    """A chain of channels-first Conv2D with bias and ReLU, a Conv2DTranspose and a 1x1 Conv2D,
    as the Mask R-CNN head runs when nothing was detected: a reshape of the result was not a
    guard there (the graph rewrites saw through it)."""
    def head(x):
        for k in range(4):
            x = Conv2D('fcn{}'.format(k), x, 16, 3, data_format='channels_first', activation=tf.nn.relu)
        x = Conv2DTranspose("deconv", x, 16, 2, strides=2, data_format="channels_first",
                            activation=tf.nn.relu)
        return Conv2D('conv', x, 80, 1, data_format='channels_first')
    assert _forward(head, (0, 32, 14, 14)).shape == (0, 80, 28, 28)
    assert _forward(head, (3, 32, 14, 14)).shape == (3, 80, 28, 28)


def test_static_shapes_are_kept():
    x = tfv1.placeholder(tf.float32, [None, 256, 28, 28])
    out = Conv2D('conv', x, 80, 3, strides=2, data_format='channels_first')
    assert out.shape.as_list() == [None, 80, 14, 14]
    y = tfv1.placeholder(tf.float32, [4, 15, 15, 16])
    assert Conv2D('conv2', y, 8, 3, padding='valid').shape.as_list() == [4, 13, 13, 8]


@pytest.mark.parametrize('data_format, padding', [('channels_last', 'valid'), ('channels_first', 'same')])
def test_guarded_layer_has_the_gradients_of_the_unguarded_one(data_format, padding):
    """The guard (unknown batch size) changes no value: the output, the gradients and a
    second-order gradient (through the guard's own gradients) equal those of the same layer on a
    batch whose size is known, where there is no guard."""
    shape = (3, 6, 7, 5) if data_format == 'channels_last' else (3, 5, 6, 7)
    data = np.random.RandomState(0).normal(size=shape).astype(np.float32)

    def run(batch):
        with tf.Graph().as_default():
            x = tfv1.placeholder(tf.float32, (batch,) + shape[1:])
            out = Conv2D('conv', x, 4, 3, strides=2, padding=padding, data_format=data_format,
                         activation=tf.nn.relu, kernel_initializer=tfv1.random_normal_initializer(seed=1),
                         bias_initializer=tfv1.constant_initializer(0.1))
            weights = tfv1.trainable_variables()
            loss = tf.reduce_sum(tf.square(out))
            grads = tf.gradients(loss, [x] + weights)
            second = tf.gradients(tf.reduce_sum(tf.square(grads[0])), weights[0])
            ops = {op.type for op in tfv1.get_default_graph().get_operations()}
            with tfv1.Session() as sess:
                sess.run(tfv1.global_variables_initializer())
                return sess.run([out] + grads + second, {x: data}), ops

    guarded, guarded_ops = run(None)
    plain, plain_ops = run(shape[0])
    assert 'Pad' in guarded_ops and 'Pad' not in plain_ops   # the guard is there only when needed
    for a, b in zip(guarded, plain):
        assert a.shape == b.shape
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
    assert np.abs(plain[2]).sum() > 0 and np.abs(plain[-1]).sum() > 0
