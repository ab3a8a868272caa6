"""A channels-first convnet trains on CPU devices with every trainer: the synchronous ones give,
step by step and tower by tower, the costs of the same model in channels-last from the same
initial weights; the asynchronous one (whose towers race) lowers the cost."""

import numpy as np
import pytest

from tensorpack_lite.callbacks import ProcessTensors, RunUpdateOps
from tensorpack_lite.compat import tf, tfv1
from tensorpack_lite.dataflow import DataFromList
from tensorpack_lite.input_source import FeedInput, QueueInput
from tensorpack_lite.models import (AvgPooling, BatchNorm, BNReLU, Conv2D, Conv2DTranspose, FullyConnected,
                                    GlobalAvgPooling, MaxPooling)
from tensorpack_lite.tfutils.argscope import argscope
from tensorpack_lite.tfutils.common import get_default_sess_config
from tensorpack_lite.tfutils.sesscreate import NewSessionCreator
from tensorpack_lite.train import (AsyncMultiGPUTrainer, ModelDesc, SimpleTrainer,
                                   SyncMultiGPUTrainerParameterServer, SyncMultiGPUTrainerReplicated)

from helpers.models import cross_entropy_cost

BATCH = 16     # per tower
STEPS = 8
TOWERS = ['/cpu:0', '/cpu:1']
DATA_FORMATS = ('channels_last', 'channels_first')


def he_normal_from(rng):
    """An initializer drawing from ``rng``: the same values for the same order of variables."""
    def initializer(shape, dtype=tf.float32, partition_info=None):
        fan_in = np.prod(shape[:-1]) if len(shape) > 1 else 1
        return tf.constant(rng.randn(*shape) * np.sqrt(2.0 / fan_in), dtype=dtype)
    return initializer


class DigitsResNet(ModelDesc):
    """The 8x8 digits through a convolution, a residual block, pooling, a transposed
    convolution and global pooling, in ``data_format``; initial weights from a fixed seed."""

    def __init__(self, data_format):
        self.data_format = data_format

    def inputs(self):
        return [tf.TensorSpec([None, 64], tf.float32, 'image'), tf.TensorSpec([None], tf.int32, 'label')]

    def build_graph(self, image, label):
        x = tf.reshape(image, [-1, 8, 8, 1])
        if self.data_format == 'channels_first':
            x = tf.transpose(x, [0, 3, 1, 2])
        layers = [Conv2D, Conv2DTranspose, MaxPooling, AvgPooling, GlobalAvgPooling, BatchNorm]
        init = he_normal_from(np.random.RandomState(7))
        with argscope(layers, data_format=self.data_format), \
                argscope([Conv2D, Conv2DTranspose, FullyConnected], kernel_initializer=init):
            x = Conv2D('conv0', x, 8, 3, activation=BNReLU)
            residual = Conv2D('res/conv1', x, 8, 3, activation=BNReLU)
            x = tf.nn.relu(x + Conv2D('res/conv2', residual, 8, 3))
            x = MaxPooling('pool0', x, 2)                              # 4x4
            x = Conv2DTranspose('up', x, 8, 2, strides=2, activation=tf.nn.relu)  # 8x8
            x = AvgPooling('pool1', x, 3, strides=2, padding='same')   # 4x4
            logits = FullyConnected('fc', GlobalAvgPooling('gap', x), 10)
        return cross_entropy_cost(logits, label)

    def optimizer(self):
        return tfv1.train.MomentumOptimizer(0.1, 0.9)


def session_creator(num_cpus):
    config = get_default_sess_config()
    config.device_count['CPU'] = num_cpus
    return NewSessionCreator(config=config)


def batches(digits, num_towers):
    """The same ``num_towers`` batches at every step (one per tower, in order)."""
    images, labels = digits
    return [[images[i * BATCH:(i + 1) * BATCH], labels[i * BATCH:(i + 1) * BATCH]]
            for _ in range(STEPS) for i in range(num_towers)]


def tower_costs(make_trainer, data_format, digits):
    """[step][tower] costs of training DigitsResNet(data_format) for STEPS steps."""
    num_towers = 1 if make_trainer is SimpleTrainer else len(TOWERS)
    source_type = FeedInput if num_towers == 1 else QueueInput
    trainer = make_trainer() if num_towers == 1 else make_trainer(TOWERS)
    names = ['cost'] if num_towers == 1 else ['tower{}/cost'.format(i) for i in range(num_towers)]
    steps = []
    recorder = ProcessTensors(names, lambda *costs: steps.append(costs))
    model = DigitsResNet(data_format)
    with tfv1.Graph().as_default():
        trainer.setup_graph(model.get_input_signature(), source_type(DataFromList(batches(digits, num_towers),
                                                                                  shuffle=False)),
                            model.build_graph, model.get_optimizer)
        trainer.train_with_defaults(callbacks=[recorder, RunUpdateOps()], monitors=[], extra_callbacks=[],
                                    steps_per_epoch=STEPS, max_epoch=1, session_creator=session_creator(2))
    return np.array(steps)


SYNC_TRAINERS = {
    'simple': SimpleTrainer,
    'parameter-server': SyncMultiGPUTrainerParameterServer,
    'replicated': SyncMultiGPUTrainerReplicated,
}


@pytest.mark.parametrize('name', sorted(SYNC_TRAINERS))
def test_channels_first_trains_as_channels_last(digits, name):
    costs = {fmt: tower_costs(SYNC_TRAINERS[name], fmt, digits) for fmt in DATA_FORMATS}
    expected_towers = 1 if name == 'simple' else len(TOWERS)
    assert costs['channels_first'].shape == (STEPS, expected_towers)
    np.testing.assert_allclose(costs['channels_first'], costs['channels_last'], rtol=1e-5, atol=1e-5)
    assert costs['channels_first'][-1].mean() < costs['channels_first'][0].mean() - 0.1


def test_channels_first_trains_with_the_async_trainer(digits):
    costs = tower_costs(AsyncMultiGPUTrainer, 'channels_first', digits)
    assert costs.shape == (STEPS, len(TOWERS)) and np.isfinite(costs).all()
    assert costs[-1].mean() < costs[0].mean() - 0.1
