"""Layers of tensorpack_lite.models: output shapes, variable names and numbers, both data
formats (NCHW against NHWC numbers, on CPUs and GPU towers: models/test_layout_nchw.py), and
clear errors for bad inputs. BatchNorm and towers: models/test_batch_norm.py; argscope,
layer_register, LinearWrap and regularizers: models/test_registry.py."""

import logging

import numpy as np
import pytest

from tensorpack_lite.compat import tf, tfv1
from tensorpack_lite.models import (
    AvgPooling, BatchRenorm, BNReLU, ConcatWith, Conv2D, Conv2DTranspose, Dropout, FixedUnPooling,
    FullyConnected, GlobalAvgPooling, InstanceNorm, LayerNorm, LeakyReLU, Maxout, MaxPooling, PReLU)
from tensorpack_lite.tfutils.tower import TowerContext


def run(fetches, feed=None):
    """Run ``fetches`` in a new session on the default graph, variables initialised."""
    with tfv1.Session() as sess:
        sess.run(tfv1.global_variables_initializer())
        return sess.run(fetches, feed)


def variables_by_name():
    return {v.op.name: v.shape.as_list() for v in tfv1.global_variables()}


def trainable_names():
    return sorted(v.op.name for v in tfv1.trainable_variables())


RNG = np.random.RandomState(0)


# ----- Conv2D ----------------------------------------------------------------------------------

@pytest.mark.quick
def test_conv2d_shapes_names_and_numbers():
    x = tfv1.placeholder(tf.float32, [None, 6, 6, 3])
    out = Conv2D('conv1', x, 4, 3, kernel_initializer=tfv1.ones_initializer(),
                 bias_initializer=tfv1.constant_initializer(0.5))
    assert out.name == 'conv1/output:0'
    assert out.shape.as_list() == [None, 6, 6, 4]
    assert variables_by_name() == {'conv1/W': [3, 3, 3, 4], 'conv1/b': [4]}
    assert out.variables.W.op.name == 'conv1/W' and out.variables.b.op.name == 'conv1/b'
    assert [v.op.name for v in out.variables.all()] == ['conv1/W', 'conv1/b']
    value = run(out, {x: np.ones([2, 6, 6, 3])})
    # 'same' padding with a kernel of ones: 27 inside, 18 on edges, 12 at corners; + 0.5
    assert value[0, 2, 2, 0] == 27.5 and value[0, 0, 3, 1] == 18.5 and value[1, 0, 0, 3] == 12.5


def test_conv2d_strides_valid_dilation_no_bias_and_activation():
    x = tfv1.placeholder(tf.float32, [None, 9, 9, 2])
    strided = Conv2D('s', x, 5, kernel_size=3, strides=2, padding='VALID')
    dilated = Conv2D('d', x, 5, 3, dilation_rate=2, padding='valid', use_bias=False, activation=tf.nn.relu)
    assert strided.shape.as_list() == [None, 4, 4, 5]
    assert dilated.shape.as_list() == [None, 5, 5, 5]     # effective kernel 5
    assert 'd/b' not in variables_by_name() and not hasattr(dilated.variables, 'b')
    assert run(dilated, {x: RNG.randn(2, 9, 9, 2)}).min() >= 0


def test_conv2d_split_is_a_group_convolution():
    x = tfv1.placeholder(tf.float32, [None, 5, 5, 4])
    out = Conv2D('g', x, 6, 3, split=2, use_bias=False)
    assert variables_by_name()['g/W'] == [3, 3, 2, 6]
    W = out.variables.W
    # group i sees input channels 2i..2i+1 and produces output channels 3i..3i+2
    expected = tf.concat([tf.nn.conv2d(x[..., :2], W[..., :3], 1, 'SAME'),
                          tf.nn.conv2d(x[..., 2:], W[..., 3:], 1, 'SAME')], axis=3)
    got, want = run([out, expected], {x: RNG.randn(2, 5, 5, 4)})
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert Conv2D('g2', x, 6, 3, groups=2).variables.W.shape.as_list() == [3, 3, 2, 6]


def test_conv2d_default_initializer_is_untruncated_he_normal():
    x = tfv1.placeholder(tf.float32, [None, 4, 4, 64])
    W = run(Conv2D('c', x, 256, 3).variables.W)
    fan_in = 3 * 3 * 64
    assert abs(W.std() / np.sqrt(2.0 / fan_in) - 1) < 0.03
    assert np.abs(W).max() > 3 * W.std()          # a truncated normal would stop at 2 std
    assert abs(W.mean()) < 0.002


@pytest.mark.parametrize('data_format', ['NCHW', 'channels_first'])
def test_conv2d_and_pooling_build_in_channels_first(data_format):
    x = tfv1.placeholder(tf.float32, [None, 3, 8, 8])
    y = Conv2D('conv', x, 4, 3, strides=2, data_format=data_format)
    assert y.shape.as_list() == [None, 4, 4, 4]
    assert variables_by_name()['conv/W'] == [3, 3, 3, 4]
    assert MaxPooling('pool', y, 2, data_format=data_format).shape.as_list() == [None, 4, 2, 2]
    avg = AvgPooling('avg', y, 3, 1, padding='same', data_format=data_format)
    assert avg.shape.as_list() == [None, 4, 4, 4]
    assert GlobalAvgPooling('gap', y, data_format=data_format).shape.as_list() == [None, 4]
    up = Conv2DTranspose('up', y, 2, 3, 2, data_format=data_format)
    assert up.shape.as_list() == [None, 2, 8, 8]
    assert variables_by_name()['up/W'] == [3, 3, 2, 4]


# ----- Conv2DTranspose -------------------------------------------------------------------------

def test_conv2d_transpose_shapes_and_adjointness():
    x = tfv1.placeholder(tf.float32, [None, 4, 5, 3])
    same = Conv2DTranspose('same', x, 2, 3, strides=2, use_bias=False)
    valid = Conv2DTranspose('valid', x, 2, 4, 2, padding='valid')
    assert same.name == 'same/output:0' and same.shape.as_list() == [None, 8, 10, 2]
    assert valid.shape.as_list() == [None, 10, 12, 2]      # 4 * 2 + (4 - 2)
    assert variables_by_name()['same/W'] == [3, 3, 2, 3]
    assert variables_by_name()['valid/b'] == [2]
    # a transposed convolution is the adjoint of the convolution with the same kernel
    y = tfv1.placeholder(tf.float32, [None, 8, 10, 2])
    conv_y = tf.nn.conv2d(y, same.variables.W, 2, 'SAME')
    lhs, rhs = tf.reduce_sum(same * y), tf.reduce_sum(x * conv_y)
    got_l, got_r = run([lhs, rhs], {x: RNG.randn(2, 4, 5, 3), y: RNG.randn(2, 8, 10, 2)})
    assert abs(got_l - got_r) < 1e-3 * max(1.0, abs(got_l))


def test_conv2d_transpose_unknown_spatial_size():
    x = tfv1.placeholder(tf.float32, [None, None, None, 3])
    out = Conv2DTranspose('d', x, 2, 3, 2)
    assert out.shape.as_list() == [None, None, None, 2]
    assert run(out, {x: np.ones([1, 3, 4, 3])}).shape == (1, 6, 8, 2)


# ----- FullyConnected --------------------------------------------------------------------------

def test_fully_connected_flattens_and_computes():
    x = tfv1.placeholder(tf.float32, [None, 2, 3, 4])
    out = FullyConnected('fc', x, 5, activation=tf.nn.relu)
    assert out.name == 'fc/output:0' and out.shape.as_list() == [None, 5]
    assert variables_by_name() == {'fc/W': [24, 5], 'fc/b': [5]}
    data = RNG.randn(3, 2, 3, 4)
    got, W, b = run([out, out.variables.W, out.variables.b], {x: data})
    np.testing.assert_allclose(got, np.maximum(data.reshape(3, 24) @ W + b, 0), rtol=1e-5, atol=1e-5)


def test_fully_connected_old_argument_names():
    x = tfv1.placeholder(tf.float32, [None, 3])
    out = FullyConnected('fc', x, out_dim=2, W_init=tfv1.ones_initializer(), b_init=tfv1.ones_initializer(),
                         nl=tf.nn.relu)
    np.testing.assert_allclose(run(out, {x: [[1, 2, -10]]}), [[0, 0]])
    np.testing.assert_allclose(run(out, {x: [[1, 2, 3]]}), [[7, 7]])


# ----- LayerNorm, InstanceNorm, BatchRenorm ----------------------------------------------------

def test_layer_norm_numbers_and_names():
    x = tfv1.placeholder(tf.float32, [None, 3, 3, 4])
    out = LayerNorm('ln', x)
    assert out.name == 'ln/output:0'
    assert variables_by_name() == {'ln/beta': [4], 'ln/gamma': [4]}
    data = RNG.randn(2, 3, 3, 4) * 3 + 1
    mean = data.mean(axis=(1, 2, 3), keepdims=True)
    var = data.var(axis=(1, 2, 3), keepdims=True)
    np.testing.assert_allclose(run(out, {x: data}), (data - mean) / np.sqrt(var + 1e-5), rtol=1e-4, atol=1e-4)
    y = tfv1.placeholder(tf.float32, [None, 4, 3, 3])
    ln2 = LayerNorm('ln2', y, data_format='NCHW', center=False)
    assert variables_by_name()['ln2/gamma'] == [4] and 'ln2/beta' not in variables_by_name()
    assert run(ln2, {y: data.transpose(0, 3, 1, 2)}).shape == (2, 4, 3, 3)


def test_instance_norm_normalizes_each_channel_of_each_sample():
    x = tfv1.placeholder(tf.float32, [None, 4, 4, 3])
    out = InstanceNorm('in', x, gamma_initializer=tfv1.constant_initializer(2.0))
    assert variables_by_name() == {'in/beta': [3], 'in/gamma': [3]}
    data = RNG.randn(2, 4, 4, 3) * 5 - 2
    mean = data.mean(axis=(1, 2), keepdims=True)
    var = data.var(axis=(1, 2), keepdims=True)
    np.testing.assert_allclose(run(out, {x: data}), 2 * (data - mean) / np.sqrt(var + 1e-5), rtol=1e-4,
                               atol=1e-4)
    y = tfv1.placeholder(tf.float32, [None, 3, 4, 4])
    nchw = InstanceNorm('in2', y, data_format='channels_first')
    np.testing.assert_allclose(run(nchw, {y: data.transpose(0, 3, 1, 2)}),
                               ((data - mean) / np.sqrt(var + 1e-5)).transpose(0, 3, 1, 2),
                               rtol=1e-4, atol=1e-4)


def test_batch_renorm_names_and_corrections():
    x = tfv1.placeholder(tf.float32, [None, 5])
    with TowerContext('', is_training=True):
        free = BatchRenorm('free', x, 100.0, 100.0)       # r, d unclipped: undoes the normalization
        clipped = BatchRenorm('clipped', x, rmax=1.0, dmax=0.0)   # r = 1, d = 0: plain batch norm
    names = variables_by_name()
    for var in ('beta', 'gamma', 'moving_mean', 'moving_variance', 'renorm_mean', 'renorm_stddev'):
        assert names['free/' + var] == [5]
    assert len(tfv1.get_collection(tfv1.GraphKeys.UPDATE_OPS)) == 8
    data = RNG.randn(16, 5) * 2 + 3
    got_free, got_clipped = run([free, clipped], {x: data})
    np.testing.assert_allclose(got_free, data, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got_clipped, (data - data.mean(0)) / np.sqrt(data.var(0) + 1e-5), rtol=1e-4,
                               atol=1e-4)


def test_batch_renorm_inference_uses_moving_statistics():
    x = tfv1.placeholder(tf.float32, [None, 2, 2, 3])
    with TowerContext('', is_training=False):
        out = BatchRenorm('br', x, 3.0, 5.0)
    assert tfv1.get_collection(tfv1.GraphKeys.UPDATE_OPS) == []
    data = RNG.randn(2, 2, 2, 3)
    np.testing.assert_allclose(run(out, {x: data}), data / np.sqrt(1 + 1e-5), rtol=1e-5)


# ----- pooling ---------------------------------------------------------------------------------

def test_max_and_avg_pooling_numbers():
    data = np.arange(16, dtype='float32').reshape(1, 4, 4, 1)
    x = tfv1.placeholder(tf.float32, [None, 4, 4, 1])
    mx = MaxPooling('max', x, 2)
    avg = AvgPooling('avg', x, pool_size=2, strides=2)
    overlapping = MaxPooling('max3', x, 3, 1, padding='same')
    assert mx.name == 'max/output:0' and mx.shape.as_list() == [None, 2, 2, 1]
    got_max, got_avg, got_overlap = run([mx, avg, overlapping], {x: data})
    np.testing.assert_array_equal(got_max[0, :, :, 0], [[5, 7], [13, 15]])
    np.testing.assert_array_equal(got_avg[0, :, :, 0], [[2.5, 4.5], [10.5, 12.5]])
    assert got_overlap.shape == (1, 4, 4, 1) and got_overlap[0, 0, 0, 0] == 5
    assert variables_by_name() == {}


def test_global_avg_pooling():
    x = tfv1.placeholder(tf.float32, [None, 3, 3, 2])
    out = GlobalAvgPooling('gap', x)
    assert out.name == 'gap/output:0' and out.shape.as_list() == [None, 2]
    data = RNG.randn(4, 3, 3, 2)
    np.testing.assert_allclose(run(out, {x: data}), data.mean(axis=(1, 2)), rtol=1e-5, atol=1e-6)


def test_fixed_unpooling_is_a_kronecker_product():
    data = RNG.randn(2, 3, 2, 4).astype('float32')
    x = tfv1.placeholder(tf.float32, [None, 3, 2, 4])
    zero_filled = FixedUnPooling('up', x, 2)
    mat = np.array([[1, 2, 3], [4, 5, 6]], dtype='float32')
    custom = FixedUnPooling('up2', x, (2, 3), unpool_mat=mat)
    assert zero_filled.shape.as_list() == [None, 6, 4, 4] and custom.shape.as_list() == [None, 6, 6, 4]
    got_zero, got_custom = run([zero_filled, custom], {x: data})
    expected_zero = np.zeros([2, 6, 4, 4], 'float32')
    expected_zero[:, ::2, ::2, :] = data
    np.testing.assert_array_equal(got_zero, expected_zero)
    for n in range(2):
        for c in range(4):
            np.testing.assert_allclose(got_custom[n, :, :, c], np.kron(data[n, :, :, c], mat), rtol=1e-6)
    y = tfv1.placeholder(tf.float32, [None, 4, None, 2])
    nchw = FixedUnPooling('up3', y, 2, data_format='NCHW')
    assert nchw.shape.as_list() == [None, 4, None, 4]
    np.testing.assert_array_equal(run(nchw, {y: data.transpose(0, 3, 1, 2)}),
                                  expected_zero.transpose(0, 3, 1, 2))


# ----- Dropout ---------------------------------------------------------------------------------

def test_dropout_drops_in_training_and_is_identity_in_inference():
    x = tf.ones([100, 100])
    with TowerContext('', is_training=True):
        train = Dropout('drop', x, rate=0.3)
    with tfv1.variable_scope(tfv1.get_variable_scope(), reuse=True), TowerContext('infer', is_training=False):
        infer = Dropout('drop', x, rate=0.3)
    got_train, got_infer = run([train, infer])
    kept = got_train != 0
    assert abs(kept.mean() - 0.7) < 0.03
    np.testing.assert_allclose(got_train[kept], 1 / 0.7, rtol=1e-5)
    np.testing.assert_array_equal(got_infer, np.ones([100, 100]))


def test_dropout_argument_forms(log_records):
    x = tf.ones([200, 50])
    with TowerContext('', is_training=True):
        keep = Dropout(x, keep_prob=0.2)          # deprecated, logged
        positional = Dropout('p', x, 0.9)          # tensorpack's positional keep_prob, warned
        explicit_off = Dropout(x, rate=0.5, training=False)
        noise = Dropout(x, rate=0.5, noise_shape=[200, 1])
        with pytest.raises(TypeError, match='only one of'):
            Dropout(x, keep_prob=0.5, rate=0.5)
        with pytest.raises(ValueError, match=r"Dropout 'bad': rate must be in \[0, 1\)"):
            Dropout('bad', x, rate=1.0)
    messages = log_records.messages()
    assert any('keep_prob=) is deprecated' in m for m in messages)
    assert any('probability to KEEP' in m for m in log_records.messages_at(logging.WARNING))
    got_keep, got_pos, got_off, got_noise = run([keep, positional, explicit_off, noise])
    assert abs((got_keep != 0).mean() - 0.2) < 0.03
    assert abs((got_pos != 0).mean() - 0.9) < 0.03
    np.testing.assert_array_equal(got_off, np.ones([200, 50]))
    assert all(len(set(row)) == 1 for row in got_noise)      # whole rows kept or dropped


def test_dropout_outside_a_tower_needs_training():
    x = tf.ones([2, 2])
    with pytest.raises(RuntimeError, match="Dropout 'd' is built outside a TowerContext"):
        Dropout('d', x)
    assert run(Dropout(x, training=False)).tolist() == [[1, 1], [1, 1]]


# ----- nonlinearities and shapes ---------------------------------------------------------------

def test_leaky_relu_prelu_maxout_concat():
    x = tfv1.placeholder(tf.float32, [None, 4])
    leaky = LeakyReLU(x, 0.1)
    prelu = PReLU('prelu', x, init=0.25)
    maxout = Maxout(x, 2)
    concat = ConcatWith(x, [x * 2, x * 3], 1)
    assert variables_by_name() == {'prelu/alpha': []}
    assert prelu.name == 'prelu/output:0' and maxout.shape.as_list() == [None, 2]
    assert concat.shape.as_list() == [None, 12]
    data = np.array([[-2, 1, 3, -4]], 'float32')
    got = run([leaky, prelu, maxout, concat], {x: data})
    np.testing.assert_allclose(got[0], [[-0.2, 1, 3, -0.4]], rtol=1e-6)
    np.testing.assert_allclose(got[1], [[-0.5, 1, 3, -1]], rtol=1e-6)
    np.testing.assert_allclose(got[2], [[1, 3]])
    np.testing.assert_allclose(got[3], np.concatenate([data, 2 * data, 3 * data], 1))
    images = tfv1.placeholder(tf.float32, [None, None, 2, 6])
    pooled = Maxout('mo', images, 3)
    assert pooled.shape.as_list() == [None, None, 2, 2]
    image_data = RNG.randn(1, 3, 2, 6)
    np.testing.assert_allclose(run(pooled, {images: image_data}), image_data.reshape(1, 3, 2, 2, 3).max(-1))


def test_bnrelu_as_activation_puts_batchnorm_under_the_layer():
    x = tfv1.placeholder(tf.float32, [None, 4, 4, 2])
    with TowerContext('', is_training=True):
        out = Conv2D('conv', x, 3, 3, activation=BNReLU)
        alone = BNReLU('bnrelu', x)
    assert trainable_names() == ['bnrelu/bn/beta', 'bnrelu/bn/gamma', 'conv/W', 'conv/b', 'conv/bn/beta',
                                 'conv/bn/gamma']
    assert {'conv/bn/mean/EMA', 'conv/bn/variance/EMA'} <= set(variables_by_name())
    assert out.name == 'conv/output:0'
    got = run(alone, {x: RNG.randn(8, 4, 4, 2)})
    assert got.min() == 0 and 0.3 < (got > 0).mean() < 0.7


# ----- bad inputs ------------------------------------------------------------------------------

def test_wrong_rank_names_the_layer():
    flat = tfv1.placeholder(tf.float32, [None, 64])
    with pytest.raises(ValueError, match=r"Conv2D 'conv1' expects a 4-D input, got shape \(None, 64\)"):
        Conv2D('conv1', flat, 32, 3)
    with pytest.raises(ValueError, match=r"MaxPooling 'pool' expects a 4-D input, got shape \(None, 64\)"):
        MaxPooling('pool', flat, 2)
    with pytest.raises(ValueError, match="Conv2DTranspose 'deconv' expects a 4-D input"):
        Conv2DTranspose('deconv', flat, 32, 3)
    with pytest.raises(ValueError, match="GlobalAvgPooling 'gap' expects a 4-D input"):
        GlobalAvgPooling('gap', flat)
    with pytest.raises(ValueError, match="InstanceNorm 'in' expects a 4-D input"):
        InstanceNorm('in', flat)
    with pytest.raises(ValueError,
                       match=r"LayerNorm 'ln' expects a 2-D or 4-D input, got shape \(None, 2, 32\)"):
        LayerNorm('ln', tf.reshape(flat, [-1, 2, 32]))
    with pytest.raises(ValueError, match=r"FullyConnected 'fc' expects an input of rank >= 2.*\(64,\)"):
        FullyConnected('fc', tf.ones([64]), 10)
    with tfv1.variable_scope('net'):
        with pytest.raises(ValueError, match=r"Maxout \(in scope 'net'\) expects a 2-D or 4-D input"):
            Maxout(tf.reshape(flat, [-1, 2, 32]), 2)
    assert tfv1.global_variables() == []


def test_other_bad_arguments_name_the_layer():
    x = tfv1.placeholder(tf.float32, [None, 8, 8, None])
    with pytest.raises(ValueError, match=r"Conv2D 'c' needs the number of channels .*\(None, 8, 8, None\)"):
        Conv2D('c', x, 4, 3)
    y = tfv1.placeholder(tf.float32, [None, 8, 8, 6])
    with pytest.raises(ValueError, match="Conv2D 'g': split=4 must divide"):
        Conv2D('g', y, 8, 3, split=4)
    with pytest.raises(ValueError, match="Conv2D 'sd': strides .* dilation_rate .* cannot both"):
        Conv2D('sd', y, 8, 3, strides=2, dilation_rate=2)
    with pytest.raises(ValueError, match="Conv2D 'p': padding must be 'same' or 'valid'"):
        Conv2D('p', y, 8, 3, padding='full')
    with pytest.raises(ValueError, match="Unknown data_format 'NWHC'"):
        Conv2D('f', y, 8, 3, data_format='NWHC')
    with pytest.raises(TypeError, match=r"Conv2D 'pos' takes at most 2 positional"):
        Conv2D('pos', y, 8, 3, 2)
    with pytest.raises(TypeError, match="'out_channel' and 'filters' mean the same"):
        Conv2D('dup', y, kernel_size=3, filters=4, out_channel=4)
    with pytest.raises(TypeError, match=r"Conv2D must be called as Conv2D\('name', input, \.\.\.\)"):
        Conv2D(y, 8, 3)
    with pytest.raises(TypeError, match="Conv2D 'np': its input must be a tf.Tensor"):
        Conv2D('np', np.ones([1, 8, 8, 3]), 8, 3)
    with pytest.raises(ValueError, match=r"Maxout: num_unit=4 must divide the number of channels \(6\)"):
        Maxout(y, 4)
    with pytest.raises(ValueError, match="FixedUnPooling 'u': unpool_mat must have the shape"):
        FixedUnPooling('u', y, 2, unpool_mat=np.ones([3, 3], 'float32'))
