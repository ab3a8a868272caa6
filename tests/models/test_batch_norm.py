"""BatchNorm and the tower context: batch statistics and moving-average updates in the main
training tower, moving averages in inference towers; the update modes; and a small convnet
trained by SimpleTrainer on the 8x8 digits."""

import logging

import numpy as np
import pytest

from tensorpack_lite.callbacks import Callback
from tensorpack_lite.compat import tf, tfv1
from tensorpack_lite.models import (BatchNorm, BatchRenorm, Conv2D, Dropout, FullyConnected, MaxPooling,
                                    l2_regularizer, regularize_cost)
from tensorpack_lite.tfutils.argscope import argscope
from tensorpack_lite.tfutils.sesscreate import NewSessionCreator
from tensorpack_lite.tfutils.tower import PredictTowerContext, TowerContext, TrainTowerContext
from tensorpack_lite.train import (ModelDesc, SimpleTrainer, SyncMultiGPUTrainerReplicated, TrainConfig,
                                   launch_train_with_config)

from helpers.callbacks import RecordCost
from helpers.dataflows import labelled_batches
from helpers.models import cross_entropy_cost

EPS = 1e-5
RNG = np.random.RandomState(1)


def normalized(data, axes, mean=None, var=None):
    mean = data.mean(axis=axes, keepdims=True) if mean is None else mean
    var = data.var(axis=axes, keepdims=True) if var is None else var
    return (data - mean) / np.sqrt(var + EPS)


def update_ops():
    return tfv1.get_collection(tfv1.GraphKeys.UPDATE_OPS)


def inference_tower(name='infer'):
    """A PredictTowerContext reusing the training variables (enter both)."""
    return tfv1.variable_scope(tfv1.get_variable_scope(), reuse=True), PredictTowerContext(name)


@pytest.fixture
def sess():
    with tfv1.Session() as session:
        yield session


def test_training_tower_normalizes_by_the_batch_and_updates_the_moving_averages(sess):
    x = tfv1.placeholder(tf.float32, [None, 3, 3, 4])
    with TowerContext('', is_training=True):
        out = BatchNorm('bn', x)
    assert out.name == 'bn/output:0'
    assert sorted(v.op.name for v in tfv1.global_variables()) == [
        'bn/beta', 'bn/gamma', 'bn/mean/EMA', 'bn/variance/EMA']
    assert sorted(v.op.name for v in tfv1.trainable_variables()) == ['bn/beta', 'bn/gamma']
    assert sorted(v.op.name for v in tfv1.get_collection(tfv1.GraphKeys.MODEL_VARIABLES)) == [
        'bn/mean/EMA', 'bn/variance/EMA']
    assert [op.name for op in update_ops()] == ['bn/mean_ema_op', 'bn/var_ema_op']
    assert out.variables.mean is out.variables.moving_mean
    assert out.variables.mean.op.name == 'bn/mean/EMA' and out.variables.gamma.op.name == 'bn/gamma'

    sess.run(tfv1.global_variables_initializer())
    first, second = RNG.randn(6, 3, 3, 4) * 2 + 1, RNG.randn(5, 3, 3, 4) - 3
    np.testing.assert_allclose(sess.run(out, {x: first}), normalized(first, (0, 1, 2)), rtol=1e-4, atol=1e-4)
    mean, var = out.variables.mean, out.variables.variance
    np.testing.assert_array_equal(sess.run([mean, var]), [np.zeros(4), np.ones(4)])   # not run yet
    sess.run(update_ops(), {x: first})
    sess.run(update_ops(), {x: second})
    expected_mean = 0.9 * (0.1 * first.mean((0, 1, 2))) + 0.1 * second.mean((0, 1, 2))
    expected_var = 0.9 * (0.9 * 1 + 0.1 * first.var((0, 1, 2))) + 0.1 * second.var((0, 1, 2))
    got_mean, got_var = sess.run([mean, var])
    np.testing.assert_allclose(got_mean, expected_mean, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got_var, expected_var, rtol=1e-4, atol=1e-5)


def test_inference_tower_uses_the_moving_averages_and_adds_no_update(sess):
    x = tfv1.placeholder(tf.float32, [None, 5])
    with TowerContext('', is_training=True):
        BatchNorm('bn', x, momentum=0.5)
    vs, ctx = inference_tower()
    with vs, ctx:
        infer = BatchNorm('bn', x, momentum=0.5)
    assert infer.name == 'infer/bn/output:0'
    assert len(tfv1.global_variables()) == 4 and len(update_ops()) == 2
    sess.run(tfv1.global_variables_initializer())
    data = RNG.randn(4, 5) * 3
    np.testing.assert_allclose(sess.run(infer, {x: data}), data / np.sqrt(1 + EPS), rtol=1e-5)
    sess.run(update_ops(), {x: data})
    ema_mean, ema_var = 0.5 * data.mean(0), 0.5 + 0.5 * data.var(0)
    np.testing.assert_allclose(sess.run(infer, {x: data}), (data - ema_mean) / np.sqrt(ema_var + EPS),
                               rtol=1e-4, atol=1e-4)


def test_only_the_main_training_tower_updates(sess):
    x = tfv1.placeholder(tf.float32, [None, 2, 2, 3])
    with TrainTowerContext('tower0', index=0, total=2):
        out0 = BatchNorm('bn', x)
    with TrainTowerContext('tower1', index=1, total=2):
        out1 = BatchNorm('bn', x)
    assert [op.name for op in update_ops()] == ['tower0/bn/mean_ema_op', 'tower0/bn/var_ema_op']
    assert len(tfv1.global_variables()) == 4 and len(tfv1.get_collection(tfv1.GraphKeys.MODEL_VARIABLES)) == 2
    sess.run(tfv1.global_variables_initializer())
    data = RNG.randn(4, 2, 2, 3)
    got0, got1 = sess.run([out0, out1], {x: data})
    np.testing.assert_allclose(got1, normalized(data, (0, 1, 2)), rtol=1e-4, atol=1e-4)   # batch statistics
    np.testing.assert_allclose(got0, got1, rtol=1e-6)


def test_internal_skip_and_deprecated_internal_update(sess, log_records):
    x = tfv1.placeholder(tf.float32, [None, 3])
    with TowerContext('', is_training=True):
        internal = BatchNorm('internal', x, ema_update='internal')
        skip = BatchNorm('skip', x, ema_update='skip')
        old = BatchNorm('old', x, internal_update=True)
        old_collection = BatchNorm('old2', x, internal_update=False)
    assert [op.name for op in update_ops()] == ['old2/mean_ema_op', 'old2/var_ema_op']
    assert any('internal_update=) is deprecated' in m for m in log_records.messages_at(logging.WARNING))
    sess.run(tfv1.global_variables_initializer())
    data = RNG.randn(8, 3) + 2
    sess.run([internal, skip, old, old_collection], {x: data})
    for layer in (internal, old):      # running the output ran the update
        np.testing.assert_allclose(sess.run(layer.variables.mean), 0.1 * data.mean(0), rtol=1e-4)
    for layer in (skip, old_collection):
        np.testing.assert_array_equal(sess.run(layer.variables.mean), np.zeros(3))


def test_training_false_in_training_and_training_true_in_inference(sess, log_records):
    x = tfv1.placeholder(tf.float32, [None, 3])
    with TowerContext('', is_training=True):
        frozen = BatchNorm('frozen', x, training=False)
        old_name = BatchNorm('old', x, use_local_stat=False, decay=0.5, use_scale=False)
    assert update_ops() == []
    assert 'old/gamma' not in [v.op.name for v in tfv1.global_variables()]
    warnings = log_records.messages_at(logging.WARNING)
    assert any('moving_mean/moving_variance in training' in m for m in warnings)
    with TowerContext('pred', is_training=False):
        batch_stats = BatchNorm('batch', x, training=True, ema_update='internal')
    sess.run(tfv1.global_variables_initializer())
    data = RNG.randn(6, 3) * 4
    got_frozen, got_old, got_batch = sess.run([frozen, old_name, batch_stats], {x: data})
    np.testing.assert_allclose(got_frozen, data / np.sqrt(1 + EPS), rtol=1e-5)
    np.testing.assert_allclose(got_old, data / np.sqrt(1 + EPS), rtol=1e-5)
    np.testing.assert_allclose(got_batch, normalized(data, 0), rtol=1e-4, atol=1e-4)
    # an inference tower that asks for batch statistics also updates (as tensorpack)
    np.testing.assert_allclose(sess.run(batch_stats.variables.mean), 0.1 * data.mean(0), rtol=1e-4)


def test_channels_first_axis_and_virtual_batch(sess):
    x = tfv1.placeholder(tf.float32, [None, 3, 2, 2])
    with TowerContext('', is_training=True):
        nchw = BatchNorm('nchw', x, data_format='NCHW', gamma_initializer=tfv1.constant_initializer(2.0),
                         beta_initializer=tfv1.constant_initializer(1.0))
        by_axis = BatchNorm('axis', x, axis=1)
        ghost = BatchNorm('ghost', x, axis=1, virtual_batch_size=2)
    assert [v.shape.as_list() for v in tfv1.global_variables()][:4] == [[3]] * 4
    sess.run(tfv1.global_variables_initializer())
    data = RNG.randn(4, 3, 2, 2) * 2
    got_nchw, got_axis, got_ghost = sess.run([nchw, by_axis, ghost], {x: data})
    np.testing.assert_allclose(got_nchw, 2 * normalized(data, (0, 2, 3)) + 1, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got_axis, normalized(data, (0, 2, 3)), rtol=1e-4, atol=1e-4)
    halves = [normalized(data[:2], (0, 2, 3)), normalized(data[2:], (0, 2, 3))]
    np.testing.assert_allclose(got_ghost, np.concatenate(halves), rtol=1e-4, atol=1e-4)
    sess.run(update_ops(), {x: data})
    group_means = [data[:2].mean((0, 2, 3)), data[2:].mean((0, 2, 3))]
    np.testing.assert_allclose(sess.run(ghost.variables.mean), 0.1 * np.mean(group_means, 0), rtol=1e-4)


HALF_CASES = {
    'nhwc': ([8, 3, 3, 4], {}),
    'nchw': ([8, 4, 3, 3], {'data_format': 'channels_first'}),
    '2d': ([8, 4], {}),
    'virtual': ([8, 3, 3, 4], {'virtual_batch_size': 4}),
    'sync': ([8, 3, 3, 4], {'sync_statistics': 'nccl'}),
}


@pytest.mark.parametrize('case', sorted(HALF_CASES))
def test_float16_input_keeps_float32_variables_and_float16_output(sess, case):
    # as tensorpack's: float32 variables and statistics, the output in the input's dtype; the
    # numbers those of a float32 layer on the same values, in training and in inference
    shape, kwargs = HALF_CASES[case]
    data = (RNG.randn(*shape) * 3 + 1).astype(np.float16)
    inputs = [tf.constant(data), tf.constant(data, tf.float32)]
    kwargs.update(gamma_initializer=tfv1.constant_initializer(2.0),
                  beta_initializer=tfv1.constant_initializer(0.5))
    with TowerContext('', is_training=True):
        train_out = [BatchNorm(x.dtype.name, x, **kwargs) for x in inputs]
    scope, ctx = inference_tower()
    with scope, ctx:
        infer_out = [BatchNorm(x.dtype.name, x, **kwargs) for x in inputs]
    weights = tf.constant(RNG.randn(*shape), tf.float32)
    grads = [tf.gradients(tf.reduce_sum(tf.cast(out, tf.float32) * weights),
                          [out.variables.gamma, out.variables.beta]) for out in train_out]
    assert {v.op.name: v.dtype.base_dtype for v in tfv1.global_variables()
            if v.op.name.startswith('float16/')} == {
        'float16/beta': tf.float32, 'float16/gamma': tf.float32,
        'float16/mean/EMA': tf.float32, 'float16/variance/EMA': tf.float32}
    assert train_out[0].dtype == infer_out[0].dtype == tf.float16
    sess.run(tfv1.global_variables_initializer())
    (half, half_grads), (full, full_grads) = sess.run(list(zip(train_out, grads)))
    np.testing.assert_allclose(half, full, atol=1e-2)
    np.testing.assert_allclose(half_grads, full_grads, rtol=1e-2, atol=1e-2)
    sess.run(update_ops())
    (half, half_var), (full, full_var) = sess.run([(out, train.variables.variance)
                                                   for out, train in zip(infer_out, train_out)])
    np.testing.assert_allclose(half_var, full_var, rtol=1e-5)
    np.testing.assert_allclose(half, full, atol=1e-2)


@pytest.mark.parametrize('is_training', [True, False], ids=['training', 'inference'])
def test_batch_renorm_float16_input_keeps_float32_variables(sess, is_training):
    data = (RNG.randn(8, 4) * 3 + 1).astype(np.float16)
    outputs = {}
    for dtype in (tf.float16, tf.float32):
        with TowerContext('', is_training=is_training):
            outputs[dtype] = BatchRenorm(dtype.name, tf.constant(data, dtype), rmax=3.0, dmax=5.0)
    assert outputs[tf.float16].dtype == tf.float16
    assert {v.dtype.base_dtype for v in tfv1.global_variables()} == {tf.float32}
    sess.run(tfv1.global_variables_initializer())
    half, full = sess.run([outputs[tf.float16], outputs[tf.float32]])
    np.testing.assert_allclose(half, full, atol=1e-2)


def test_batchnorm_errors_name_the_layer():
    x = tfv1.placeholder(tf.float32, [None, 4])
    with pytest.raises(RuntimeError, match="BatchNorm 'bn' is built outside a TowerContext"):
        BatchNorm('bn', x)
    with TowerContext('', is_training=True):
        with pytest.raises(ValueError,
                           match=r"BatchNorm 'bn3' expects a 2-D or 4-D input, got shape \(2, 3, 4\)"):
            BatchNorm('bn3', tf.ones([2, 3, 4]))
        with pytest.raises(ValueError, match=r"BatchNorm 'ax': axis must be 1 or 1 \(or -1\) for a 2-D"):
            BatchNorm('ax', x, axis=0)
        assert BatchNorm('last', x, axis=-1, ema_update='skip').variables.beta.shape.as_list() == [4]
        with pytest.raises(ValueError, match="BatchNorm 'e': ema_update must be one of"):
            BatchNorm('e', x, ema_update='sometimes')
        with pytest.raises(ValueError, match="BatchNorm 'both': give either internal_update"):
            BatchNorm('both', x, internal_update=True, ema_update='skip')
        with pytest.raises(ValueError, match="BatchNorm 's': sync_statistics must be one of"):
            BatchNorm('s', x, sync_statistics='mpi')
        with pytest.raises(RuntimeError, match="BatchNorm 'h': no mean across ranks is available here"):
            BatchNorm('h', x, sync_statistics='horovod')
        single = BatchNorm('nccl1', x, sync_statistics='NCCL')    # one tower: local statistics
    assert update_ops() == [] and single.name == 'nccl1/output:0'
    # outside towers an explicit training flag works, and updates as a single tower would
    assert BatchNorm('outside', x, training=True).name == 'outside/output:0'
    assert len(update_ops()) == 2


# ----- end to end ------------------------------------------------------------------------------

class DigitsConvNet(ModelDesc):
    """Conv-BN-pool-FC-dropout on the 8x8 digits, with weight decay."""

    def inputs(self):
        return [tf.TensorSpec([None, 64], tf.float32, 'image'), tf.TensorSpec([None], tf.int32, 'label')]

    def build_graph(self, image, label):
        tfv1.set_random_seed(3)
        x = tf.reshape(image, [-1, 8, 8, 1])
        with argscope(Conv2D, kernel_size=3, activation=tf.nn.relu), argscope(BatchNorm, momentum=0.8):
            x = Conv2D('conv0', x, 16, activation=None)
            x = tf.nn.relu(BatchNorm('bn0', x))
            x = MaxPooling('pool0', x, 2)
            x = Conv2D('conv1', x, 16)
        x = Dropout('drop', FullyConnected('fc0', x, 32, activation=tf.nn.relu), rate=0.2)
        logits = FullyConnected('fc1', x, 10)
        wd = regularize_cost('conv.*/W', l2_regularizer(1e-4), name='wd_cost')
        return tf.add(cross_entropy_cost(logits, label), wd, name='total_cost')

    def optimizer(self):
        return tfv1.train.AdamOptimizer(3e-3)


class ReadVariables(Callback):
    """The values of the named variables before and after training."""

    def __init__(self, *names):
        self.names = names
        self.before = self.after = None

    def _setup_graph(self):
        by_name = {v.op.name: v for v in tfv1.global_variables()}
        self.variables = [by_name[n] for n in self.names]

    def _before_train(self):
        self.before = self.trainer.sess.run(self.variables)

    def _after_train(self):
        self.after = self.trainer.sess.run(self.variables)


def test_convnet_trains_with_simple_trainer_and_updates_batchnorm(digits):
    images, labels = digits
    reader = ReadVariables('bn0/mean/EMA', 'bn0/variance/EMA')
    recorder = RecordCost()
    config = TrainConfig(model=DigitsConvNet(), dataflow=labelled_batches(images, labels, 32),
                         callbacks=[reader, recorder], monitors=[], steps_per_epoch=20, max_epoch=2)
    launch_train_with_config(config, SimpleTrainer())
    assert len(recorder.costs) == 40 and np.all(np.isfinite(recorder.costs))
    assert np.mean(recorder.costs[-10:]) < 0.6 * np.mean(recorder.costs[:5])
    np.testing.assert_array_equal(reader.before[0], np.zeros(16))
    assert np.abs(reader.after[0] - reader.before[0]).min() > 1e-4      # every channel moved
    assert np.abs(reader.after[1] - reader.before[1]).min() > 1e-4


def test_convnet_trains_replicated_on_two_virtual_cpus(digits):
    images, labels = digits
    variables = {}

    class ReadAll(Callback):
        def _setup_graph(self):
            variables['UPDATE_OPS'] = [op.name for op in update_ops()]

        def _after_train(self):
            all_vars = tfv1.global_variables() + tfv1.local_variables()
            variables.update(zip([v.op.name for v in all_vars], self.trainer.sess.run(all_vars)))

    config = TrainConfig(model=DigitsConvNet(), dataflow=labelled_batches(images, labels, 16),
                         callbacks=[ReadAll()], monitors=[], steps_per_epoch=8, max_epoch=1,
                         session_creator=NewSessionCreator(config=tfv1.ConfigProto(device_count={'CPU': 2})))
    launch_train_with_config(config, SyncMultiGPUTrainerReplicated(['/cpu:0', '/cpu:1'], mode='cpu'))
    # only the main tower updates; its moving averages are the global ones, the replica's local
    assert variables['UPDATE_OPS'] == ['tower0/bn0/mean_ema_op', 'tower0/bn0/var_ema_op']
    assert np.abs(variables['bn0/mean/EMA']).min() > 1e-4
    assert sorted(v.op.name for v in tfv1.get_collection(tfv1.GraphKeys.MODEL_VARIABLES)) == [
        'bn0/mean/EMA', 'bn0/variance/EMA']
    assert sorted(v.op.name for v in tfv1.local_variables() if v.op.name.endswith('/EMA')) == [
        'tower1/bn0/mean/EMA', 'tower1/bn0/variance/EMA']
