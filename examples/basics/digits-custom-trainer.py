#!/usr/bin/env python
"""Train a small MLP on the 8x8 handwritten digits with a custom Trainer.

No ModelDesc, no InputSource: the graph is plain tf.compat.v1, a DataFlow produces the
batches and the trainer's ``run_step`` feeds them. The data are the real digits that
scikit-learn ships (1797 images), so nothing is downloaded.

    python examples/basics/digits-custom-trainer.py --max-epoch 10
"""

import argparse

import numpy as np

from tensorpack_lite import tfv1 as tf
from tensorpack_lite.callbacks import Callback
from tensorpack_lite.dataflow import BatchData, DataFromList
from tensorpack_lite.train import Trainer
from tensorpack_lite.utils import logger


def load_digits_split(num_test=297):
    """(train, test) lists of [image (64,) float32 in [0, 1], label int32]."""
    from sklearn.datasets import load_digits
    digits = load_digits()
    images = (digits.data / 16.0).astype('float32')
    labels = digits.target.astype('int32')
    points = [[img, lab] for img, lab in zip(images, labels)]
    return points[:-num_test], points[-num_test:]


def build_graph(hidden=128):
    """An MLP classifier. Returns the placeholders and the tensors the trainer needs."""
    image = tf.placeholder(tf.float32, [None, 64], name='image')
    label = tf.placeholder(tf.int32, [None], name='label')
    init = tf.variance_scaling_initializer(2.0)
    with tf.variable_scope('fc0'):
        w = tf.get_variable('W', [64, hidden], initializer=init)
        b = tf.get_variable('b', [hidden], initializer=tf.zeros_initializer())
        h = tf.nn.relu(tf.matmul(image, w) + b)
    with tf.variable_scope('fc1'):
        w = tf.get_variable('W', [hidden, 10], initializer=init)
        b = tf.get_variable('b', [10], initializer=tf.zeros_initializer())
        logits = tf.matmul(h, w) + b
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=label, logits=logits),
                          name='cross_entropy_loss')
    correct = tf.cast(tf.equal(tf.argmax(logits, 1, output_type=tf.int32), label), tf.float32)
    accuracy = tf.reduce_mean(correct, name='accuracy')
    train_op = tf.train.AdamOptimizer(3e-3).minimize(loss)
    return image, label, loss, accuracy, train_op


class FeedingTrainer(Trainer):
    """Feeds one batch of a DataFlow per step; the DataFlow restarts when it runs out."""

    def __init__(self, dataflow, image, label, train_op):
        super().__init__()
        self.dataflow = dataflow
        self.image, self.label = image, label
        self.train_op = train_op
        self.dataflow.reset_state()
        self._batches = iter(())

    def _next_batch(self):
        for batch in self._batches:
            return batch
        self._batches = iter(self.dataflow)
        return next(self._batches)

    def run_step(self):
        images, labels = self._next_batch()
        self.hooked_sess.run(self.train_op, feed_dict={self.image: images, self.label: labels})


class Validation(Callback):
    """Puts the training loss of the last step and the test accuracy after every epoch."""

    def __init__(self, test_points, image, label, loss, accuracy):
        self.images = np.stack([p[0] for p in test_points])
        self.labels = np.array([p[1] for p in test_points])
        self.tensors = (image, label, loss, accuracy)

    def _trigger(self):
        image, label, loss, accuracy = self.tensors
        val_loss, val_acc = self.trainer.sess.run(
            [loss, accuracy], feed_dict={image: self.images, label: self.labels})
        self.trainer.monitors.put_scalar('val_loss', val_loss)
        self.trainer.monitors.put_scalar('val_accuracy', val_acc)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[1])
    parser.add_argument('--max-epoch', type=int, default=15, help='number of epochs')
    parser.add_argument('--batch', type=int, default=64, help='batch size')
    parser.add_argument('--logdir', default='train_log/digits-custom-trainer',
                        help='where logs, stats.json and event files go (replaced if it exists)')
    args = parser.parse_args()

    logger.set_logger_dir(args.logdir, action='d')
    train_points, test_points = load_digits_split()
    dataflow = BatchData(DataFromList(train_points, shuffle=True), args.batch)
    tf.disable_eager_execution()  # the graph is built by hand, before the trainer exists
    image, label, loss, accuracy, train_op = build_graph()

    trainer = FeedingTrainer(dataflow, image, label, train_op)
    validation = Validation(test_points, image, label, loss, accuracy)
    trainer.train_with_defaults(callbacks=[validation], steps_per_epoch=len(dataflow),
                                max_epoch=args.max_epoch)
    logger.info("Final test accuracy: {:.4f}".format(trainer.monitors.get_latest('val_accuracy')))


if __name__ == '__main__':
    main()
