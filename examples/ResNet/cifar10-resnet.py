#!/usr/bin/env python
"""Train a pre-activation ResNet on CIFAR-10 (He et al., "Identity Mappings in Deep Residual Networks").

The network has 3 stages of ``n`` residual units (two 3x3 convolutions each) with 16, 32 and 64
channels: depth 6n+2, so ``-n 18`` (the default) is ResNet-110, ``-n 5`` ResNet-32 and ``-n 3``
ResNet-20. A unit that halves the resolution takes a 2x2 average pooling of its input,
zero-padded to twice the channels, as its shortcut.

Training images are padded to 40x40 (``CenterPaste``), cropped back to a random 32x32 window,
flipped at random and have the per-pixel mean of the training set subtracted; test images
have the mean subtracted only. Two worker processes (``MultiProcessRunnerZMQ``) produce the
training batches. The learning rate is 0.01 in the first epoch, 0.1 through epoch 82, 0.01
through epoch 123, 0.001 through epoch 300, then 0.0002 up to epoch 400 (momentum 0.9,
weight decay 2e-4 decaying with the steps): 156k steps, made for GPUs (a step of ResNet-110
took about 11 s on 2 busy CPU cores).

The data are the "python version" batches (``cifar-10-batches-py``) in ``--data DIR``; nothing
is downloaded. ``--fake`` trains on random images of the same shape (a small set, to check that
everything runs: the accuracy is then meaningless).

    python examples/ResNet/cifar10-resnet.py --data ~/data/cifar10 -n 5
    python examples/ResNet/cifar10-resnet.py --fake -n 1 --max-epoch 2 --steps-per-epoch 5  # smoke run

Logs, ``stats.json`` and checkpoints go to ``train_log/cifar10-resnet`` (``--logdir``); an
existing directory there is replaced.
"""

import argparse
import os
import sys

import numpy as np

from tensorpack_lite import (
    AugmentImageComponent, AvgPooling, BatchData, BatchNorm, BNReLU, ClassificationError, Conv2D,
    FullyConnected, FakeData, GlobalAvgPooling, InferenceRunner, ModelDesc, ModelSaver,
    MultiProcessRunnerZMQ, QueueInput, ScalarStats, ScheduledHyperParamSetter, SimpleTrainer, SmartInit,
    SyncMultiGPUTrainerReplicated, TrainConfig, argscope, get_global_step_var, launch_train_with_config,
    logger, regularize_cost)
from tensorpack_lite import tfv1 as tf
from tensorpack_lite.dataflow import dataset, imgaug
from tensorpack_lite.tfutils.summary import add_moving_summary, add_param_summary
from tensorpack_lite.utils.gpu import get_num_gpu

FAKE_SIZES = {'train': 1024, 'test': 128}   # images in the --fake training and test sets


class Model(ModelDesc):
    """Pre-activation ResNet of depth 6n+2 for 32x32 images and 10 classes."""

    def __init__(self, n, data_format='channels_last'):
        self.n = n
        self.data_format = data_format

    def inputs(self):
        return [tf.TensorSpec([None, 32, 32, 3], tf.float32, 'input'),
                tf.TensorSpec([None], tf.int32, 'label')]

    def build_graph(self, image, label):
        image = image / 128.0           # the mean is subtracted already
        channel_axis = 3
        if self.data_format == 'channels_first':
            image = tf.transpose(image, [0, 3, 1, 2])
            channel_axis = 1

        def residual(name, x, increase_dim=False, first=False):
            in_channel = x.shape[channel_axis]
            out_channel, stride = (in_channel * 2, 2) if increase_dim else (in_channel, 1)
            with tf.variable_scope(name):
                preact = x if first else BNReLU(x)   # the first unit follows conv0's BNReLU
                y = Conv2D('conv1', preact, out_channel, strides=stride, activation=BNReLU)
                y = Conv2D('conv2', y, out_channel)
                if increase_dim:
                    x = AvgPooling('pool', x, 2)
                    padding = [[0, 0]] * 4
                    padding[channel_axis] = [in_channel // 2, in_channel // 2]
                    x = tf.pad(x, padding)
                return y + x

        with argscope([Conv2D, AvgPooling, BatchNorm, GlobalAvgPooling], data_format=self.data_format), \
                argscope(Conv2D, use_bias=False, kernel_size=3,
                         kernel_initializer=tf.variance_scaling_initializer(scale=2.0, mode='fan_out')):
            x = Conv2D('conv0', image, 16, activation=BNReLU)
            for stage in range(3):
                for k in range(self.n):
                    x = residual('res{}.{}'.format(stage + 1, k), x,
                                 increase_dim=(stage > 0 and k == 0), first=(stage == 0 and k == 0))
            x = BNReLU('bnlast', x)
            x = GlobalAvgPooling('gap', x)
        logits = FullyConnected('linear', x, 10)
        tf.nn.softmax(logits, name='output')

        cost = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(logits=logits, labels=label),
                              name='cross_entropy_loss')
        wrong = tf.cast(tf.logical_not(tf.nn.in_top_k(logits, label, 1)), tf.float32, name='wrong_vector')
        add_moving_summary(tf.reduce_mean(wrong, name='train_error'))

        # weight decay on every kernel, itself decayed by 5x every 480k steps
        wd_weight = tf.train.exponential_decay(0.0002, get_global_step_var(), 480000, 0.2, True)
        wd_cost = tf.multiply(wd_weight, regularize_cost('.*/W', tf.nn.l2_loss), name='wd_cost')
        add_moving_summary(cost, wd_cost)
        add_param_summary(('.*/W', ['histogram']))
        return tf.add_n([cost, wd_cost], name='cost')

    def optimizer(self):
        lr = tf.get_variable('learning_rate', initializer=0.01, trainable=False)
        tf.summary.scalar('learning_rate-summary', lr)
        return tf.train.MomentumOptimizer(lr, 0.9)


def get_data(train_or_test, args):
    """Batches of [32x32x3 float32 image minus the per-pixel mean, int32 label]."""
    training = train_or_test == 'train'
    if args.fake:
        ds = FakeData([[32, 32, 3], []], FAKE_SIZES[train_or_test], random=True,
                      dtype=['float32', 'int32'], domain=[(0, 255), (0, 10)])
        pp_mean = np.full((32, 32, 3), 127.5, dtype=np.float32)
    else:
        ds = dataset.Cifar10(train_or_test, dir=args.data)
        pp_mean = ds.get_per_pixel_mean(('train',))
    subtract_mean = imgaug.MapImage(lambda image: image - pp_mean)
    if training:
        augmentors = [imgaug.CenterPaste((40, 40)), imgaug.RandomCrop((32, 32)), imgaug.Flip(horiz=True),
                      subtract_mean]
    else:
        augmentors = [subtract_mean]
    ds = AugmentImageComponent(ds, augmentors)
    ds = BatchData(ds, args.batch, remainder=not training)
    if training:
        ds = MultiProcessRunnerZMQ(ds, 2)
    return ds


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[1])
    source = parser.add_mutually_exclusive_group()
    source.add_argument('--data', help='directory holding cifar-10-batches-py (or its files)')
    source.add_argument('--fake', action='store_true', help='random images instead of CIFAR-10')
    parser.add_argument('-n', '--num-units', type=int, default=18,
                        help='residual units in each of the 3 stages: depth 6n+2 (default 18)')
    parser.add_argument('--batch', type=int, default=128, help='batch size of each GPU (default 128)')
    parser.add_argument('--max-epoch', type=int, default=400, help='number of epochs (default 400)')
    parser.add_argument('--steps-per-epoch', type=int, help='default: one pass over the training set')
    parser.add_argument('--load', help='a checkpoint to start from')
    parser.add_argument('--mixed-precision', choices=['bf16', 'fp16'],
                        help='compute in 16 bits (docs/mixed_precision.md; default: float32)')
    parser.add_argument('--logdir', default='train_log/cifar10-resnet',
                        help='where logs, stats.json and checkpoints go (replaced if it exists; '
                             'default %(default)s)')
    args = parser.parse_args()
    if not args.fake and not args.data:
        parser.error("give --data DIR, the directory of the CIFAR-10 python batches (cifar-10-batches-py, "
                     "from https://www.cs.toronto.edu/~kriz/cifar.html), or --fake for random images")
    if args.num_units < 1:
        parser.error("-n must be at least 1, got {}".format(args.num_units))
    try:
        train, test = get_data('train', args), get_data('test', args)
    except FileNotFoundError as err:
        sys.exit("cifar10-resnet: {}".format(err))

    num_gpu = get_num_gpu()
    logger.set_logger_dir(args.logdir, action='d')
    config = TrainConfig(
        model=Model(args.num_units, 'channels_first' if num_gpu > 0 else 'channels_last'),
        data=QueueInput(train),
        callbacks=[
            ModelSaver(),
            InferenceRunner(test, [ScalarStats('cost'), ClassificationError('wrong_vector')]),
            ScheduledHyperParamSetter('learning_rate', [(1, 0.1), (82, 0.01), (123, 0.001), (300, 0.0002)]),
        ],
        steps_per_epoch=args.steps_per_epoch or len(train),
        max_epoch=args.max_epoch,
        session_init=SmartInit(args.load), mixed_precision=args.mixed_precision)
    trainer = SyncMultiGPUTrainerReplicated(num_gpu) if num_gpu > 1 else SimpleTrainer()
    launch_train_with_config(config, trainer)
    logger.info("Final validation error: {:.4f} (log in {})".format(
        trainer.monitors.get_latest('validation_error'), os.path.abspath(logger.get_logger_dir())))


if __name__ == '__main__':
    main()
