#!/usr/bin/env python
"""Steps per second of the library's training paths against bare session loops, in one run.

For each model (an MLP 784-256-10 and a small convnet on 28x28x1, batch 64):
  (a) bare:        ``sess.run(train_op)`` on a batch that lives in the graph
  (b) bare feed:   ``sess.run(train_op, feed_dict)`` over numpy batches
  (c) default:     DataFlow of numpy batches -> default InputSource -> SimpleTrainer ->
                   default callbacks and monitors (the path ``launch_train_with_config`` takes)
  (d) dummy:       DummyConstantInput -> SimpleTrainer -> default callbacks and monitors
Each is timed per epoch; the first epoch is warm-up; a run's rate is the median of the
rest. The paths run one after the other in rounds, in alternating order (forward, then
backward), so that drift hits all alike. Printed per path: the median rate over the rounds,
its ratio to the median rate of (a), the median over rounds of the ratio to (a) in the same
round (paired), and the range of the rates. Machines here are noisy: read the ratios, not
the absolute numbers, and give it many rounds.

    python benchmarks/trainer_overhead.py --rounds 5
"""

import argparse
import os
import statistics
import tempfile
import time

import numpy as np

from tensorpack_lite import tfv1 as tf
from tensorpack_lite.dataflow import DataFromList
from tensorpack_lite.input_source import DummyConstantInput
from tensorpack_lite.tfutils.sesscreate import NewSessionCreator
from tensorpack_lite.tfutils.tower import TrainTowerContext
from tensorpack_lite.train import ModelDesc, SimpleTrainer, TrainConfig, launch_train_with_config
from tensorpack_lite.utils import logger
from timing import EpochTimer

BATCH = 64


class MLP(ModelDesc):
    def inputs(self):
        return [tf.TensorSpec([None, 784], tf.float32, 'image'), tf.TensorSpec([None], tf.int32, 'label')]

    def logits(self, image):
        hidden = tf.nn.relu(tf.matmul(image, tf.get_variable('fc0/W', [784, 256])) +
                            tf.get_variable('fc0/b', [256], initializer=tf.zeros_initializer()))
        return tf.matmul(hidden, tf.get_variable('fc1/W', [256, 10]))

    def build_graph(self, image, label):
        xent = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=label, logits=self.logits(image))
        return tf.reduce_mean(xent, name='cost')

    def optimizer(self):
        return tf.train.GradientDescentOptimizer(1e-3)


class ConvNet(MLP):
    def logits(self, image):
        x = tf.reshape(image, [-1, 28, 28, 1])
        for i, channels in enumerate([16, 32]):
            kernel = tf.get_variable('conv{}/W'.format(i), [3, 3, x.shape[-1], channels])
            x = tf.nn.relu(tf.nn.conv2d(x, kernel, strides=1, padding='SAME'))
            x = tf.nn.max_pool2d(x, 2, 2, 'VALID')
        x = tf.reshape(x, [-1, 7 * 7 * 32])
        return tf.matmul(x, tf.get_variable('fc/W', [7 * 7 * 32, 10]))


def make_batches(count):
    rng = np.random.RandomState(0)
    return [[rng.rand(BATCH, 784).astype('float32'), rng.randint(0, 10, BATCH).astype('int32')]
            for _ in range(count)]


def bare_loop(model_cls, batches, epochs, feed):
    """(a) and (b): the same model and optimizer, run by a plain loop."""
    with tf.Graph().as_default():
        model = model_cls()
        if feed:
            image = tf.placeholder(tf.float32, [None, 784])
            label = tf.placeholder(tf.int32, [None])
        else:
            image, label = tf.constant(batches[0][0]), tf.constant(batches[0][1])
        with TrainTowerContext(''):
            cost = model.build_graph(image, label)
        train_op = model.get_optimizer().minimize(cost)
        sess = NewSessionCreator().create_session()
        sess.graph.finalize()
        times = []
        for _ in range(epochs):
            start = time.perf_counter()
            for x, y in batches:
                if feed:
                    sess.run(train_op, feed_dict={image: x, label: y})
                else:
                    sess.run(train_op)
            times.append(time.perf_counter() - start)
        sess.close()
    return times


def library_path(model_cls, batches, epochs, logdir, dummy):
    """(c) and (d): launch_train_with_config with its defaults."""
    with tf.Graph().as_default():
        logger.set_logger_dir(logdir, action='d')
        timer = EpochTimer()
        if dummy:
            source = dict(data=DummyConstantInput([[BATCH, 784], [BATCH]]))
        else:
            source = dict(dataflow=DataFromList(batches, shuffle=False))
        config = TrainConfig(model=model_cls(), callbacks=[timer], steps_per_epoch=len(batches),
                             max_epoch=epochs, **source)
        launch_train_with_config(config, SimpleTrainer())
    return timer.times


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--epochs', type=int, default=4, help='epochs per run (the first is warm-up)')
    parser.add_argument('--rounds', type=int, default=5,
                        help='the paths run one after the other this many times, in alternating order')
    parser.add_argument('--mlp-steps', type=int, default=200, help='steps per epoch, MLP')
    parser.add_argument('--conv-steps', type=int, default=60, help='steps per epoch, convnet')
    args = parser.parse_args()
    os.environ.setdefault('TENSORPACK_PROGRESS_REFRESH', '30')
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, model_cls, steps in (('mlp', MLP, args.mlp_steps), ('convnet', ConvNet, args.conv_steps)):
            batches = make_batches(steps)
            paths = {
                '(a) bare': lambda: bare_loop(model_cls, batches, args.epochs, feed=False),
                '(b) bare feed': lambda: bare_loop(model_cls, batches, args.epochs, feed=True),
                '(c) default path': lambda: library_path(model_cls, batches, args.epochs,
                                                         os.path.join(tmp, name + '-c'), dummy=False),
                '(d) DummyConstantInput': lambda: library_path(model_cls, batches, args.epochs,
                                                               os.path.join(tmp, name + '-d'), dummy=True),
            }
            rates = {path: [] for path in paths}
            for round_index in range(args.rounds):
                order = list(paths) if round_index % 2 == 0 else list(reversed(list(paths)))
                for path in order:
                    rates[path].append(steps / statistics.median(paths[path]()[1:]))
            reference = rates['(a) bare']
            for path, values in rates.items():
                rate = statistics.median(values)
                paired = statistics.median(v / r for v, r in zip(values, reference))
                results.append((name, path, rate, rate / statistics.median(reference), paired,
                                min(values), max(values)))
    print("\nsteps/s: median over {} rounds (alternating order) of the median of {} timed epochs. Ratio "
          "to (a): of the medians; paired: median of the per-round ratios".format(
              args.rounds, args.epochs - 1))
    print("{:<8} {:<24} {:>9} {:>7} {:>7} {:>17}".format('model', 'path', 'steps/s', 'ratio', 'paired',
                                                         'range (steps/s)'))
    for name, path, rate, ratio, paired, low, high in results:
        print("{:<8} {:<24} {:>9.1f} {:>7.3f} {:>7.3f} {:>8.1f}-{:<8.1f}".format(
            name, path, rate, ratio, paired, low, high))


if __name__ == '__main__':
    main()
