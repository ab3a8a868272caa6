#!/usr/bin/env python
"""Overhead of the Trainer loop against a bare ``sess.run(train_op)`` loop, in one run.

Both run the same graph for the same number of steps; each epoch is timed and the medians
are compared. The trainer runs with its defaults (default callbacks and monitors, a logger
directory, so event files and stats.json are written), which is the path users get.

    python benchmarks/trainer_overhead.py --steps 300 --epochs 7
"""

import argparse
import os
import statistics
import tempfile
import time

import numpy as np

from tensorpack_lite import tfv1 as tf
from tensorpack_lite.callbacks import Callback
from tensorpack_lite.tfutils.sesscreate import NewSessionCreator
from tensorpack_lite.train import Trainer
from tensorpack_lite.utils import logger


def build_model(width, batch):
    """An MLP on constant data; step time grows with ``width``."""
    rng = np.random.RandomState(0)
    x = tf.constant(rng.rand(batch, width).astype('float32'))
    y = tf.constant(rng.randint(0, 10, size=batch).astype('int32'))
    h = x
    for i in range(3):
        w = tf.get_variable('w{}'.format(i), [width, width], initializer=tf.variance_scaling_initializer())
        h = tf.nn.relu(tf.matmul(h, w))
    logits = tf.matmul(h, tf.get_variable('out', [width, 10]))
    xent = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits)
    loss = tf.reduce_mean(xent, name='loss')
    return tf.train.MomentumOptimizer(0.01, 0.9).minimize(loss)


def bare_epochs(width, batch, steps, epochs):
    with tf.Graph().as_default():
        train_op = build_model(width, batch)
        sess = NewSessionCreator().create_session()
        sess.graph.finalize()
        times = []
        for _ in range(epochs):
            start = time.perf_counter()
            for _ in range(steps):
                sess.run(train_op)
            times.append(time.perf_counter() - start)
        sess.close()
    return times


class EpochTimer(Callback):
    """Times each epoch from its first step to its last (excluding end-of-epoch work)."""

    _chief_only = False

    def __init__(self):
        self.times = []

    def _before_epoch(self):
        self._start = time.perf_counter()

    def _after_epoch(self):
        self.times.append(time.perf_counter() - self._start)


def trainer_epochs(width, batch, steps, epochs, logdir):
    with tf.Graph().as_default():
        trainer = Trainer()
        trainer.train_op = build_model(width, batch)
        timer = EpochTimer()
        logger.set_logger_dir(logdir, action='d')
        trainer.train_with_defaults(callbacks=[timer], steps_per_epoch=steps, max_epoch=epochs)
    return timer.times


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[1])
    parser.add_argument('--steps', type=int, default=300, help='steps per epoch')
    parser.add_argument('--epochs', type=int, default=7, help='epochs (the first is warm-up)')
    parser.add_argument('--widths', type=int, nargs='+', default=[32, 256], help='MLP widths to try')
    parser.add_argument('--batch', type=int, default=64)
    args = parser.parse_args()
    os.environ.setdefault('TENSORPACK_PROGRESS_REFRESH', '5')
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for width in args.widths:
            bare = bare_epochs(width, args.batch, args.steps, args.epochs)[1:]
            framed = trainer_epochs(width, args.batch, args.steps, args.epochs,
                                    os.path.join(tmp, 'w{}'.format(width)))[1:]
            bare_ms = 1000 * statistics.median(bare) / args.steps
            framed_ms = 1000 * statistics.median(framed) / args.steps
            rows.append((width, bare_ms, framed_ms, framed_ms / bare_ms))
    print("\nmedian step time over {} timed epochs of {} steps".format(args.epochs - 1, args.steps))
    print("{:>6} {:>12} {:>14} {:>7}".format('width', 'bare (ms)', 'Trainer (ms)', 'ratio'))
    for width, bare_ms, framed_ms, ratio in rows:
        print("{:>6} {:>12.3f} {:>14.3f} {:>7.3f}".format(width, bare_ms, framed_ms, ratio))


if __name__ == '__main__':
    main()
