"""BatchNorm(sync_statistics=...): K training towers of batch B on virtual CPUs give the output,
moving averages and gradients of one tower of batch K*B ('nccl' over the towers, 'horovod'
through a cross_rank_mean_scope); GPU towers reduce through NCCL; inference towers and
predictors do not synchronise; a replicated trainer trains as one tower on the big batch."""

import functools

import numpy as np
import pytest

from tensorpack_lite.compat import tf, tfv1
from tensorpack_lite.dataflow import DataFromList
from tensorpack_lite.input_source import FeedInput, QueueInput
from tensorpack_lite.models import BatchNorm
from tensorpack_lite.multiprocess.collective import cluster_group, collective_mean
from tensorpack_lite.tfutils.common import get_default_sess_config
from tensorpack_lite.tfutils.sesscreate import NewSessionCreator
from tensorpack_lite.multiprocess.sync_statistics import cross_rank_mean_scope
from tensorpack_lite.tfutils.tower_context import PredictTowerContext, TowerContext, TrainTowerContext
from tensorpack_lite.train import (ModelDesc, SimpleTrainer, SyncMultiGPUTrainerParameterServer,
                                   SyncMultiGPUTrainerReplicated)

from helpers.models import cross_entropy_cost
from helpers.graphs import ReadAllVariables

TOL = 1e-5
MOMENTUM = 0.8
SHAPES = {'NHWC': [4, 3, 3, 5], 'NCHW': [4, 5, 3, 3], 'FC': [6, 5]}    # the batch of one tower


def session_config(k):
    """k virtual CPUs; a step waiting for a member that never comes fails after 60 s."""
    return tfv1.ConfigProto(device_count={'CPU': k}, operation_timeout_in_ms=60000)


def bn_layer(x, layout, sync, **kwargs):
    rng = np.random.RandomState(1)
    chan = 5
    return BatchNorm('bn', x, data_format='channels_first' if layout == 'NCHW' else 'channels_last',
                     momentum=MOMENTUM, sync_statistics=sync, ema_update='internal',
                     gamma_initializer=tfv1.constant_initializer(rng.rand(chan) + 0.5),
                     beta_initializer=tfv1.constant_initializer(rng.randn(chan)), **kwargs)


def loss_of(y, weights):
    return tf.reduce_sum(y * weights)


def build_towers(k, layout, sync, devices):
    """k training towers (own variables, as the replicated trainer builds them) of BatchNorm on
    placeholders; returns their inputs, outputs and [dx, dgamma, dbeta] of each tower."""
    shape = SHAPES[layout]
    inputs, outputs, grads, weights = [], [], [], []
    for i in range(k):
        name = 'tower{}'.format(i)
        tower = TrainTowerContext(name, vs_name=name if i else '', index=i, total=k)
        with tf.device(devices[i]), tower:
            x = tfv1.placeholder(tf.float32, shape)
            y = bn_layer(x, layout, sync)
            w = tfv1.placeholder(tf.float32, shape)
            grads.append(tf.gradients(loss_of(y, w), [x, y.variables.gamma, y.variables.beta]))
        inputs.append(x)
        weights.append(w)
        outputs.append(y)
    return inputs, weights, outputs, grads


def big_batch_reference(data, weights, layout, steps=2):
    """One tower (no synchronisation) on the concatenated batch: outputs, gradients and the
    moving averages after each of `steps` runs."""
    with tfv1.Graph().as_default():
        with TowerContext('', is_training=True):
            x = tfv1.placeholder(tf.float32, data.shape)
            y = bn_layer(x, layout, None)
            grads = tf.gradients(loss_of(y, weights), [x, y.variables.gamma, y.variables.beta])
        moving = [y.variables.mean, y.variables.variance]
        with tfv1.Session() as sess:
            sess.run(tfv1.global_variables_initializer())
            runs = [sess.run([y, grads], {x: data}) + [sess.run(moving)] for _ in range(steps)]
    return runs


def sample(k, layout):
    rng = np.random.RandomState(k)
    shape = [k * SHAPES[layout][0]] + SHAPES[layout][1:]
    return (rng.randn(*shape) * 2 + 0.7).astype('float32'), rng.randn(*shape).astype('float32')


def check_towers_equal_big_batch(k, layout, sync):
    data, weights = sample(k, layout)
    reference = big_batch_reference(data, weights, layout)
    inputs, weight_ph, outputs, grads = build_towers(k, layout, sync, ['/cpu:{}'.format(i)
                                                                       for i in range(k)])
    moving = [outputs[0].variables.mean, outputs[0].variables.variance]
    feed = dict(zip(inputs, np.split(data, k)))
    feed.update(zip(weight_ph, np.split(weights, k)))
    with tfv1.Session(config=session_config(k)) as sess:
        sess.run(tfv1.global_variables_initializer())
        for ref_out, ref_grads, ref_moving in reference:
            got_out, got_grads = sess.run([outputs, grads], feed)
            got_moving = sess.run(moving)
            np.testing.assert_allclose(np.concatenate(got_out), ref_out, rtol=0, atol=TOL)
            got_dx = np.concatenate([g[0] for g in got_grads])
            np.testing.assert_allclose(got_dx, ref_grads[0], rtol=0, atol=TOL)
            # the replicated trainer sums (then averages) the towers' gradients of the variables
            np.testing.assert_allclose(sum(g[1] for g in got_grads), ref_grads[1], rtol=TOL, atol=TOL)
            np.testing.assert_allclose(sum(g[2] for g in got_grads), ref_grads[2], rtol=TOL, atol=TOL)
            np.testing.assert_allclose(got_moving, ref_moving, rtol=0, atol=TOL)
    return reference


CASES = [(k, layout) for k in (2, 3) for layout in ('NHWC', 'NCHW', 'FC')]


@pytest.mark.parametrize('k, layout', CASES, ids=['{}-{}'.format(*c) for c in CASES])
def test_nccl_towers_equal_one_tower_on_the_big_batch(k, layout):
    reference = check_towers_equal_big_batch(k, layout, 'nccl')
    # the statistics are those of the big batch, not of one tower: the test can tell them apart
    data, _ = sample(k, layout)
    axes = {'FC': (0,), 'NCHW': (0, 2, 3), 'NHWC': (0, 1, 2)}[layout]
    moving_mean = reference[0][2][0]
    np.testing.assert_allclose(moving_mean, (1 - MOMENTUM) * data.mean(axes), atol=TOL)
    first_tower = data[:SHAPES[layout][0]]
    assert np.abs(moving_mean - (1 - MOMENTUM) * first_tower.mean(axes)).max() > 1e-3
    collectives = [op for op in tfv1.get_default_graph().get_operations() if op.type == 'CollectiveReduceV2']
    assert len(collectives) == 2 * k      # statistics and their gradient, per tower
    assert {op.get_attr('communication_hint') for op in collectives} == {b'ring'}


@pytest.mark.parametrize('k, layout', [(2, 'NHWC'), (3, 'FC')])
def test_horovod_mode_uses_the_cross_rank_mean_of_the_scope(k, layout):
    """Virtual CPUs stand in for the ranks; the scope's mean is the collective helper."""
    with cross_rank_mean_scope(functools.partial(collective_mean, group=cluster_group(k))):
        check_towers_equal_big_batch(k, layout, 'horovod')


def test_horovod_mode_outside_a_scope_is_an_error_naming_the_layer():
    with TowerContext('', is_training=True):
        with pytest.raises(RuntimeError, match="BatchNorm 'bn': no mean across ranks is available here"):
            bn_layer(tfv1.placeholder(tf.float32, [2, 5]), 'FC', 'horovod')
        with pytest.raises(ValueError, match="BatchNorm 'v': sync_statistics='nccl' and virtual_batch_size"):
            BatchNorm('v', tfv1.placeholder(tf.float32, [4, 5]), sync_statistics='nccl', virtual_batch_size=2)


def test_gpu_towers_reduce_through_nccl_on_their_gpus():
    """Built, not run (no GPU here)."""
    build_towers(2, 'NHWC', 'nccl', ['/gpu:0', '/gpu:1'])
    collectives = [op for op in tfv1.get_default_graph().get_operations() if op.type == 'CollectiveReduceV2']
    assert len(collectives) == 4
    assert [op.get_attr('communication_hint') for op in collectives] == [b'nccl'] * 4
    assert sorted((tf.DeviceSpec.from_string(op.device).device_type,
                   tf.DeviceSpec.from_string(op.device).device_index) for op in collectives) == [
        ('GPU', 0), ('GPU', 0), ('GPU', 1), ('GPU', 1)]
    group_sizes = {int(tf.make_ndarray(op.inputs[1].op.get_attr('value'))) for op in collectives}
    assert group_sizes == {2}


def test_inference_towers_do_not_synchronise():
    data = np.random.RandomState(0).randn(4, 5).astype('float32')
    for training in (None, True):
        with tfv1.Graph().as_default() as graph:
            with TrainTowerContext('tower0', index=0, total=2):
                bn_layer(tf.ones([4, 5]), 'FC', None)
            with tfv1.variable_scope(tfv1.get_variable_scope(), reuse=True), PredictTowerContext('infer'):
                x = tfv1.placeholder(tf.float32, [4, 5])
                y = BatchNorm('bn', x, sync_statistics='nccl', training=training)
            assert not [op for op in graph.get_operations() if op.type == 'CollectiveReduceV2']
            with tfv1.Session() as sess:
                sess.run(tfv1.global_variables_initializer())
                got = sess.run(y, {x: data})
        rng = np.random.RandomState(1)
        gamma, beta = rng.rand(5) + 0.5, rng.randn(5)
        mean, var = (data.mean(0), data.var(0)) if training else (0.0, 1.0)
        np.testing.assert_allclose(got, (data - mean) / np.sqrt(var + 1e-5) * gamma + beta, atol=1e-5)


# ----- training ----------------------------------------------------------------------------------

class BNMLP(ModelDesc):
    """64 -> 16 -> BatchNorm(sync_statistics) -> relu -> 10 on the digits, weights from a seed."""

    def __init__(self, sync):
        self.sync = sync

    def inputs(self):
        return [tf.TensorSpec([None, 64], tf.float32, 'image'), tf.TensorSpec([None], tf.int32, 'label')]

    def build_graph(self, image, label):
        rng = np.random.RandomState(5)
        w0 = tfv1.get_variable('fc0/W', initializer=(rng.randn(64, 16) * 0.2).astype('float32'))
        w1 = tfv1.get_variable('fc1/W', initializer=(rng.randn(16, 10) * 0.2).astype('float32'))
        hidden = BatchNorm('bn', tf.matmul(image, w0), momentum=MOMENTUM, sync_statistics=self.sync,
                           ema_update='internal')     # as synchronised statistics have it
        return cross_entropy_cost(tf.matmul(tf.nn.relu(hidden), w1), label)

    def optimizer(self):
        return tfv1.train.GradientDescentOptimizer(0.5)


VARIABLES = ['fc0/W', 'fc1/W', 'bn/gamma', 'bn/beta', 'bn/mean/EMA', 'bn/variance/EMA']


def train(trainer, model, source, k, steps):
    readback = ReadAllVariables()
    trainer.setup_graph(model.get_input_signature(), source, model.build_graph, model.get_optimizer)
    config = get_default_sess_config()
    config.CopyFrom(session_config(k))
    trainer.train_with_defaults(callbacks=[readback], monitors=[], extra_callbacks=[], steps_per_epoch=steps,
                                max_epoch=1, session_creator=NewSessionCreator(config=config))
    return readback.values


TRAINERS = {
    'replicated-gpu': lambda devices: SyncMultiGPUTrainerReplicated(devices, mode='gpu'),
    'replicated-collective': lambda devices: SyncMultiGPUTrainerReplicated(devices, mode='collective'),
    'ps-cpu': lambda devices: SyncMultiGPUTrainerParameterServer(devices, ps_device='cpu'),
}


@pytest.mark.parametrize('trainer_name', sorted(TRAINERS))
def test_multi_tower_trainer_with_synced_batchnorm_equals_one_tower_on_the_big_batch(digits, trainer_name):
    k, batch, steps = 2, 16, 4
    images, labels = digits
    towers = [[images[n * batch:(n + 1) * batch], labels[n * batch:(n + 1) * batch]]
              for n in range(k * steps)]
    big = [[np.concatenate([towers[s * k + i][c] for i in range(k)]) for c in range(2)] for s in range(steps)]
    with tfv1.Graph().as_default():
        reference = train(SimpleTrainer(), BNMLP(None), FeedInput(DataFromList(big, shuffle=False)), 1, steps)
    rng = np.random.RandomState(5)
    initial = {'fc0/W': rng.randn(64, 16) * 0.2, 'fc1/W': rng.randn(16, 10) * 0.2, 'bn/gamma': 1.0,
               'bn/beta': 0.0, 'bn/mean/EMA': 0.0, 'bn/variance/EMA': 1.0}
    trainer = TRAINERS[trainer_name](['/cpu:0', '/cpu:1'])
    got = train(trainer, BNMLP('nccl'), QueueInput(DataFromList(towers, shuffle=False)), k, steps)
    for name in VARIABLES:
        np.testing.assert_allclose(got[name], reference[name], rtol=0, atol=TOL, err_msg=name)
        assert np.abs(got[name] - initial[name]).max() > 1e-3, name     # trained or moved
        if 'EMA' not in name and 'tower1/' + name in got:     # a replica
            np.testing.assert_allclose(got['tower1/' + name], got[name], rtol=0, atol=TOL, err_msg=name)
    assert trainer_name.startswith('replicated') == ('tower1/bn/gamma' in got)
