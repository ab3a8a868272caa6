#!/usr/bin/env python
"""Train a convnet with BatchNorm on CIFAR-10 (or CIFAR-100), validating after every epoch.

The data are the "python version" batches (``cifar-10-batches-py``) in ``--data DIR``;
nothing is downloaded. ``--fake`` trains on random images of the same shape instead, to
check that everything runs (the accuracy is then meaningless).

    python examples/basics/cifar-convnet.py --data ~/data/cifar10
    python examples/basics/cifar-convnet.py --fake --max-epoch 1 --steps-per-epoch 5  # smoke run

Logs, ``stats.json`` and checkpoints go to ``train_log/cifar-convnet`` (``--logdir``); an
existing directory there is replaced. The learning rate is divided by 5 whenever the
validation accuracy has not improved for 10 epochs.
"""

import argparse
import os
import sys

import numpy as np

from tensorpack_lite import (
    BatchData, BatchNorm, BNReLU, ClassificationError, Conv2D, DataFromList, InferenceRunner,
    LinearWrap, MapData, MaxPooling, ModelDesc, ModelSaver, QueueInput, ScalarStats, SimpleTrainer,
    StatMonitorParamSetter, TrainConfig, argscope, get_current_tower_context, l2_regularizer,
    launch_train_with_config, logger, regularize_cost)
from tensorpack_lite import tfv1 as tf
from tensorpack_lite.dataflow.dataset import Cifar10, Cifar100
from tensorpack_lite.tfutils.summary import add_moving_summary
from tensorpack_lite.utils.gpu import get_num_gpu
from tensorpack_lite.utils.utils import get_rng

CROP = 30


class Model(ModelDesc):
    """Six 3x3 convolutions with BatchNorm, two poolings, three fully-connected layers."""

    def __init__(self, num_classes):
        self.num_classes = num_classes

    def inputs(self):
        return [tf.TensorSpec((None, CROP, CROP, 3), tf.float32, 'input'),
                tf.TensorSpec((None,), tf.int32, 'label')]

    def build_graph(self, image, label):
        training = get_current_tower_context().is_training
        if training:
            tf.summary.image('train_image', image, 10)
        data_format = 'channels_last'
        if get_num_gpu() > 0:    # cuDNN is faster with the channels first
            image = tf.transpose(image, [0, 3, 1, 2])
            data_format = 'channels_first'

        with argscope(Conv2D, activation=BNReLU, use_bias=False, kernel_size=3), \
                argscope([Conv2D, MaxPooling, BatchNorm], data_format=data_format):
            logits = (LinearWrap(image)
                      .Conv2D('conv1.1', filters=64)
                      .Conv2D('conv1.2', filters=64)
                      .MaxPooling('pool1', 3, strides=2, padding='same')
                      .Conv2D('conv2.1', filters=128)
                      .Conv2D('conv2.2', filters=128)
                      .MaxPooling('pool2', 3, strides=2, padding='same')
                      .Conv2D('conv3.1', filters=128, padding='valid')
                      .Conv2D('conv3.2', filters=128, padding='valid')
                      .FullyConnected('fc0', 1024 + 512, activation=tf.nn.relu)
                      .Dropout(rate=0.5)
                      .FullyConnected('fc1', 512, activation=tf.nn.relu)
                      .FullyConnected('linear', self.num_classes)())

        cost = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
            logits=logits, labels=label), name='cross_entropy_loss')
        correct = tf.cast(tf.nn.in_top_k(logits, label, 1), tf.float32)
        accuracy = tf.reduce_mean(correct, name='accuracy')
        tf.subtract(1.0, correct, name='incorrect_vector')
        wd_cost = regularize_cost('fc.*/W', l2_regularizer(4e-4), name='regularize_loss')
        add_moving_summary(cost, wd_cost, accuracy)
        return tf.add_n([cost, wd_cost], name='cost')

    def optimizer(self):
        lr = tf.get_variable('learning_rate', initializer=1e-2, trainable=False)
        tf.summary.scalar('lr', lr)
        return tf.train.AdamOptimizer(lr, epsilon=1e-3)


class Augment:
    """Training: a random 30x30 crop, a random horizontal flip; test: the center crop. Then
    each image is standardized (zero mean, unit variance over all its values)."""

    def __init__(self, training):
        self.training = training
        self.rng = get_rng(self)

    def __call__(self, datapoint):
        image, label = datapoint
        height, width = image.shape[:2]
        if self.training:
            y, x = self.rng.randint(0, height - CROP + 1), self.rng.randint(0, width - CROP + 1)
        else:
            y, x = (height - CROP) // 2, (width - CROP) // 2
        image = image[y:y + CROP, x:x + CROP]
        if self.training and self.rng.rand() < 0.5:
            image = image[:, ::-1]
        image = (image - image.mean()) / max(image.std(), 1.0 / np.sqrt(image.size))
        return [image.astype(np.float32), label]


def fake_cifar(train_or_test, num_classes):
    """Random 32x32x3 images in [0, 255] with random labels, shaped like CIFAR's (256 for
    training, 64 for testing)."""
    training = train_or_test == 'train'
    rng = np.random.RandomState(0 if training else 1)
    points = [[rng.uniform(0, 255, (32, 32, 3)).astype(np.float32), np.int32(rng.randint(num_classes))]
              for _ in range(256 if training else 64)]
    return DataFromList(points, shuffle=training)


def get_data(train_or_test, args):
    training = train_or_test == 'train'
    if args.fake:
        ds = fake_cifar(train_or_test, args.classes)
    else:
        ds = (Cifar10 if args.classes == 10 else Cifar100)(train_or_test, dir=args.data)
    ds = MapData(ds, Augment(training))
    return BatchData(ds, args.batch, remainder=not training)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[1])
    source = parser.add_mutually_exclusive_group()
    source.add_argument('--data', help='directory holding cifar-10-batches-py (or its files)')
    source.add_argument('--fake', action='store_true', help='random images instead of CIFAR')
    parser.add_argument('--classes', type=int, choices=[10, 100], default=10, help='CIFAR-10 or CIFAR-100')
    parser.add_argument('--batch', type=int, default=128, help='batch size (default 128)')
    parser.add_argument('--max-epoch', type=int, default=150, help='number of epochs (default 150)')
    parser.add_argument('--steps-per-epoch', type=int, help='default: one pass over the training set')
    parser.add_argument('--mixed-precision', choices=['bf16', 'fp16'],
                        help='compute in 16 bits (docs/mixed_precision.md; default: float32)')
    parser.add_argument('--logdir', default='train_log/cifar-convnet',
                        help='where logs, stats.json and checkpoints go (replaced if it exists; '
                             'default %(default)s)')
    args = parser.parse_args()
    if not args.fake and not args.data:
        parser.error("give --data DIR, the directory of the CIFAR python batches (cifar-10-batches-py, from "
                     "https://www.cs.toronto.edu/~kriz/cifar.html), or --fake for random images")
    try:
        train, test = get_data('train', args), get_data('test', args)
    except FileNotFoundError as err:
        sys.exit("cifar-convnet: {}".format(err))

    logger.set_logger_dir(args.logdir, action='d')
    config = TrainConfig(
        model=Model(args.classes),
        data=QueueInput(train),
        callbacks=[
            ModelSaver(),
            InferenceRunner(test, [ScalarStats(['cross_entropy_loss', 'accuracy']),
                                   ClassificationError('incorrect_vector')]),
            StatMonitorParamSetter('learning_rate', 'validation_accuracy', lambda lr: lr * 0.2,
                                   threshold=0, last_k=10, reverse=True),
        ],
        steps_per_epoch=args.steps_per_epoch or len(train),
        max_epoch=args.max_epoch, mixed_precision=args.mixed_precision)
    trainer = SimpleTrainer()
    launch_train_with_config(config, trainer)
    logger.info("Final validation accuracy: {:.4f} (log in {})".format(
        1 - trainer.monitors.get_latest('validation_error'), os.path.abspath(logger.get_logger_dir())))


if __name__ == '__main__':
    main()
