#!/usr/bin/env python
"""Train a small convnet on handwritten digits, validating after every epoch.

By default the data are the real 8x8 digits scikit-learn ships (nothing to download),
resized to 28x28 and randomly shifted for training; the default run (20 epochs) reaches
97.6-98.7% accuracy on the 297 test digits in about a minute on 2 CPU cores (five of them
are hard enough that every run gets them wrong). With ``--data DIR`` it trains on MNIST
read from the standard IDX files in DIR (gzipped or not).

    python examples/basics/mnist-convnet.py                      # Digits
    python examples/basics/mnist-convnet.py --data ~/mnist_data  # MNIST
    python examples/basics/mnist-convnet.py --max-epoch 2 --steps-per-epoch 5  # smoke run
    python examples/basics/mnist-convnet.py --mixed-precision bf16  # bfloat16 (docs/mixed_precision.md)
    python examples/basics/mnist-convnet.py --resume --mlflow http://127.0.0.1:5000  # tracked in MLflow
    python examples/basics/mnist-convnet.py --early-stop 3  # stop when validation accuracy stalls

Logs, ``stats.json``, TensorBoard events and checkpoints go to ``train_log/mnist-convnet``
(``--logdir``); an existing directory there is replaced, unless ``--resume`` is given: then a
run stopped there (Ctrl-C, SIGTERM, a crash) goes on from its last checkpoint. ``--mlflow
URI`` tracks the run in MLflow (``pip install mlflow``; docs/callbacks.md), in the same MLflow
run after a resume.
"""

import argparse

import numpy as np

from tensorpack_lite import (
    DEFAULT_MONITORS, AutoResumeTrainConfig, BatchData, BNReLU, ClassificationError, Conv2D, EarlyStopping,
    InferenceRunner,
    LinearWrap, MaxSaver, MLflowMonitor, ModelDesc, ModelSaver, ProxyDataFlow, ScalarStats,
    ScheduledHyperParamSetter, SimpleTrainer, TrainConfig, argscope, l2_regularizer,
    launch_train_with_config, logger, regularize_cost)
from tensorpack_lite import tfv1 as tf
from tensorpack_lite.dataflow.dataset import Digits, Mnist
from tensorpack_lite.tfutils.summary import add_moving_summary, add_param_summary
from tensorpack_lite.utils.utils import get_rng

IMAGE_SIZE = 28


class Model(ModelDesc):
    """Four 3x3 convolutions with BatchNorm, two poolings, a 512-unit hidden layer with dropout."""

    def inputs(self):
        return [tf.TensorSpec((None, IMAGE_SIZE, IMAGE_SIZE), tf.float32, 'input'),
                tf.TensorSpec((None,), tf.int32, 'label')]

    def build_graph(self, image, label):
        image = tf.expand_dims(image * 2 - 1, 3)   # [0, 1] -> [-1, 1], add a channel axis
        with argscope(Conv2D, kernel_size=3, activation=BNReLU, use_bias=False, filters=32):
            logits = (LinearWrap(image)
                      .Conv2D('conv0')
                      .MaxPooling('pool0', 2)
                      .Conv2D('conv1')
                      .Conv2D('conv2')
                      .MaxPooling('pool1', 2)
                      .Conv2D('conv3')
                      .FullyConnected('fc0', 512, activation=tf.nn.relu)
                      .Dropout('dropout', rate=0.5)
                      .FullyConnected('fc1', 10)())
        tf.nn.softmax(logits, name='prob')

        cost = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
            logits=logits, labels=label), name='cross_entropy_loss')
        correct = tf.cast(tf.nn.in_top_k(logits, label, 1), tf.float32)
        accuracy = tf.reduce_mean(correct, name='accuracy')
        # ClassificationError reads this vector (1 for a wrong prediction) in the inference tower.
        wrong = tf.subtract(1.0, correct, name='incorrect_vector')
        train_error = tf.reduce_mean(wrong, name='train_error')

        wd_cost = regularize_cost('fc.*/W', l2_regularizer(1e-5), name='regularize_loss')
        total_cost = tf.add_n([cost, wd_cost], name='total_cost')
        add_moving_summary(cost, wd_cost, total_cost, accuracy, train_error)
        add_param_summary(('.*/W', ['histogram', 'rms']))
        return total_cost

    def optimizer(self):
        lr = tf.get_variable('learning_rate', initializer=1e-3, trainable=False)
        tf.summary.scalar('learning_rate-summary', lr)
        return tf.train.AdamOptimizer(lr)


class RandomShift(ProxyDataFlow):
    """Shifts the image (component 0, HxW) of every datapoint by up to ``max_shift`` pixels
    in each direction, filling with zeros: the small translations a handwritten digit may have.
    """

    def __init__(self, ds, max_shift):
        super().__init__(ds)
        self.max_shift = int(max_shift)

    def reset_state(self):
        super().reset_state()
        self.rng = get_rng(self)

    def __iter__(self):
        pad = self.max_shift
        for image, label in self.ds:
            height, width = image.shape
            padded = np.pad(image, pad)
            dy, dx = self.rng.randint(0, 2 * pad + 1, size=2)
            yield [padded[dy:dy + height, dx:dx + width], label]


def get_data(data_dir, batch, max_shift):
    """(training batches, test batches): MNIST from ``data_dir``, or Digits at 28x28."""
    if data_dir:
        train, test = Mnist('train', dir=data_dir), Mnist('test', dir=data_dir)
    else:
        train, test = Digits('train', image_size=IMAGE_SIZE), Digits('test', image_size=IMAGE_SIZE)
    if max_shift > 0:
        train = RandomShift(train, max_shift)
    # Equal test batches (297 = 3 x 99 digits, 10000 = 100 x 100 MNIST images), so that
    # ScalarStats' mean over batches is the mean over images.
    test_batch = max(k for k in range(1, 257) if len(test) % k == 0)
    return BatchData(train, batch, remainder=False), BatchData(test, test_batch)


def lr_schedule(epochs):
    """1e-3 for the first half of the epochs, then three steps down to 3e-5 for the last
    tenth: a list of (epoch, learning rate), one per epoch at most."""
    points = {}
    for fraction, lr in ((0.5, 3e-4), (0.75, 1e-4), (0.9, 3e-5)):
        points[max(2, int(epochs * fraction))] = lr    # a later point wins a shared epoch
    return sorted(points.items())


def get_config(args):
    train, test = get_data(args.data, args.batch, args.shift)
    epochs = args.max_epoch
    callbacks = [
        InferenceRunner(test, [ScalarStats(['cross_entropy_loss', 'accuracy']),
                               ClassificationError('incorrect_vector')]),
        ModelSaver(),
        MaxSaver('validation_accuracy'),
        ScheduledHyperParamSetter('learning_rate', lr_schedule(epochs)),
    ]
    if args.early_stop:   # after the InferenceRunner, before ModelSaver (see EarlyStopping)
        callbacks.insert(1, EarlyStopping('validation_accuracy', patience=args.early_stop, mode='max'))
    monitors = None
    if args.mlflow:
        monitors = DEFAULT_MONITORS() + [MLflowMonitor(args.mlflow, experiment_name='mnist-convnet',
                                                       params={'batch': args.batch, 'shift': args.shift})]
    config_class = AutoResumeTrainConfig if args.resume else TrainConfig
    return config_class(
        model=Model(),
        dataflow=train,
        callbacks=callbacks,
        monitors=monitors,
        steps_per_epoch=args.steps_per_epoch or len(train),
        max_epoch=epochs,
        mixed_precision=args.mixed_precision)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[1])
    parser.add_argument('--data', help='directory of the MNIST IDX files (default: the embedded Digits)')
    parser.add_argument('--max-epoch', type=int, default=20, help='number of epochs (default 20)')
    parser.add_argument('--steps-per-epoch', type=int, help='default: one pass over the training set')
    parser.add_argument('--batch', type=int, default=64, help='batch size (default 64)')
    parser.add_argument('--shift', type=int, default=3,
                        help='random training shifts of up to this many pixels (default 3; 0: none)')
    parser.add_argument('--mixed-precision', choices=['bf16', 'fp16'],
                        help='compute in 16 bits (docs/mixed_precision.md; default: float32)')
    parser.add_argument('--logdir', default='train_log/mnist-convnet',
                        help='where logs, stats.json and checkpoints go (replaced if it exists, unless '
                             '--resume; default %(default)s)')
    parser.add_argument('--resume', action='store_true',
                        help='go on from the last checkpoint in --logdir, if any')
    parser.add_argument('--mlflow', metavar='URI',
                        help='track the run in MLflow at this tracking URI, e.g. http://127.0.0.1:5000')
    parser.add_argument('--early-stop', type=int, metavar='EPOCHS',
                        help='stop after this many epochs without a better validation accuracy')
    args = parser.parse_args()

    logger.set_logger_dir(args.logdir, action='k' if args.resume else 'd')
    config = get_config(args)
    trainer = SimpleTrainer()
    launch_train_with_config(config, trainer)
    logger.info("Final validation accuracy: {:.4f}".format(
        1 - trainer.monitors.get_latest('validation_error')))


if __name__ == '__main__':
    main()
