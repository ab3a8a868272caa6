#!/usr/bin/env python
"""What StepTimeMonitor (one of the default callbacks) costs a step, in one run.

For each model -- the README's "Using it" MLP (64-64-10 on the 8x8 digits), the README's
example convnet (examples/basics/mnist-convnet.py, 28x28 digits) and issue 60's MLP
(784-256-10), all at batch 64 -- three paths train on the same numpy batches:

  bare: ``sess.run(train_op, feed_dict)`` over the batches
  off:  the default path (DataFlow -> FeedInput -> SimpleTrainer -> default callbacks and
        monitors) with ``extra_callbacks=DEFAULT_CALLBACKS(step_monitor=False)``
  on:   the same with the default callbacks as they are (StepTimeMonitor included)

Each path's epochs are timed from their first step to the end of their last (the monitor's
once-an-epoch report is not in it), in wall-clock time and in the CPU time of the main thread
(``time.thread_time``: what the loop's thread itself spends, which other processes' load on a
shared machine disturbs much less than the wall clock; on these CPU-only runs the small models'
ops run in that thread); the first epoch is warm-up and a run's figure is the median of the
others. The paths run in rounds, in alternating order. Printed per path: the median over the
rounds of the steps per second, its ratio to bare, and for "on" the median over the rounds of
on/off in the same round (paired) and the cost in us per step, by both clocks.

    python benchmarks/step_monitor_cost.py --rounds 5
"""

import argparse
import os
import statistics
import sys
import tempfile
import time

import numpy as np

from tensorpack_lite import (DEFAULT_CALLBACKS, BatchData, DataFromList, FullyConnected, ModelDesc,
                             SimpleTrainer, TrainConfig, launch_train_with_config, logger)
from tensorpack_lite import tfv1 as tf
from tensorpack_lite.compat import enable_graph_mode
from tensorpack_lite.dataflow.dataset import Digits
from tensorpack_lite.tfutils.sesscreate import NewSessionCreator
from tensorpack_lite.tfutils.tower import TrainTowerContext
from tensorpack_lite.callbacks import Callback
from timing import DenseMLP

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BATCH = 64


class ReadmeMLP(ModelDesc):
    """The model of README.md's "Using it"."""

    def inputs(self):
        return [tf.TensorSpec([None, 8, 8], tf.float32, 'image'), tf.TensorSpec([None], tf.int32, 'label')]

    def build_graph(self, image, label):
        hidden = FullyConnected('fc1', tf.reshape(image, [-1, 64]), 64, activation=tf.nn.relu)
        logits = FullyConnected('fc2', hidden, 10)
        return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=label, logits=logits),
                              name='cost')

    def optimizer(self):
        lr = tf.get_variable('learning_rate', initializer=0.1, trainable=False)
        return tf.train.MomentumOptimizer(lr, 0.9)


class ClockEpochs(Callback):
    """(wall seconds, main-thread CPU seconds) of each epoch's steps."""

    _chief_only = False

    def __init__(self):
        self.times = []

    def _before_epoch(self):
        self._start = (time.perf_counter(), time.thread_time())

    def _after_epoch(self):
        self.times.append((time.perf_counter() - self._start[0], time.thread_time() - self._start[1]))


def load_convnet():
    sys.path.insert(0, os.path.join(REPO, 'examples', 'basics'))
    import importlib.util
    path = os.path.join(REPO, 'examples', 'basics', 'mnist-convnet.py')
    spec = importlib.util.spec_from_file_location('mnist_convnet', path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def batches_of(dataflow, count):
    dataflow.reset_state()
    out = []
    while len(out) < count:
        out.extend([np.asarray(c) for c in dp] for dp in dataflow)
    return out[:count]


def bare(model_fn, batches, epochs):
    with tf.Graph().as_default():
        model = model_fn()
        placeholders = [tf.placeholder(s.dtype, s.shape, s.name) for s in model.get_input_signature()]
        with TrainTowerContext(''):
            cost = model.build_graph(*placeholders)
        train_op = model.get_optimizer().minimize(cost)
        sess = NewSessionCreator().create_session()
        sess.graph.finalize()
        times = []
        for _ in range(epochs):
            start = (time.perf_counter(), time.thread_time())
            for dp in batches:
                sess.run(train_op, feed_dict=dict(zip(placeholders, dp)))
            times.append((time.perf_counter() - start[0], time.thread_time() - start[1]))
        sess.close()
    return times


def default_path(model_fn, batches, epochs, logdir, monitor_on):
    with tf.Graph().as_default():
        logger.set_logger_dir(logdir, action='d')
        timer = ClockEpochs()
        config = TrainConfig(model=model_fn(), dataflow=DataFromList(batches, shuffle=False),
                             callbacks=[timer], extra_callbacks=DEFAULT_CALLBACKS(step_monitor=monitor_on),
                             steps_per_epoch=len(batches), max_epoch=epochs)
        launch_train_with_config(config, SimpleTrainer())
        logger.unset_logger_dir()
    return timer.times


def rates(times, steps):
    """(steps per wall second, steps per main-thread CPU second): medians without the warm-up."""
    return (statistics.median(steps / wall for wall, _ in times[1:]),
            statistics.median(steps / cpu for _, cpu in times[1:]))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--rounds', type=int, default=5)
    parser.add_argument('--epochs', type=int, default=5, help='per run, the first is warm-up')
    parser.add_argument('--models', default='readme,convnet,mlp784')
    args = parser.parse_args()
    enable_graph_mode()
    convnet = load_convnet()
    models = {
        'readme': ('README "Using it" MLP 64-64-10', ReadmeMLP,
                   lambda: batches_of(BatchData(Digits('train'), BATCH, remainder=False), 400)),
        'convnet': ('mnist-convnet.py convnet', convnet.Model,
                    lambda: batches_of(convnet.get_data(None, BATCH, 3)[0], 40)),
        'mlp784': ('MLP 784-256-10', lambda: DenseMLP(BATCH, [256]),
                   lambda: [[np.random.rand(BATCH, 784).astype('float32'),
                             np.random.randint(0, 10, BATCH).astype('int32')] for _ in range(400)]),
    }
    logger.set_logger_dir(tempfile.mkdtemp(prefix='step_monitor_cost_'), action='d')
    print("load average at the start: {}".format(open('/proc/loadavg').read().split()[:3]))
    for key in args.models.split(','):
        title, model_fn, make = models[key]
        batches = make()
        results = {'bare': [], 'off': [], 'on': []}
        for round_ in range(args.rounds):
            order = ['bare', 'off', 'on'] if round_ % 2 == 0 else ['on', 'off', 'bare']
            for path in order:
                with tempfile.TemporaryDirectory() as logdir:
                    if path == 'bare':
                        times = bare(model_fn, batches, args.epochs)
                    else:
                        times = default_path(model_fn, batches, args.epochs, logdir, path == 'on')
                results[path].append(rates(times, len(batches)))
        print("\n{} ({} steps an epoch, {} rounds)".format(title, len(batches), args.rounds))
        for clock, name in ((0, 'wall clock'), (1, 'main-thread CPU')):
            figures = {path: [r[clock] for r in results[path]] for path in results}
            base = statistics.median(figures['bare'])
            print(" {}: steps/s, median (ratio to bare), range".format(name))
            for path in ('bare', 'off', 'on'):
                med = statistics.median(figures[path])
                low, high = min(figures[path]), max(figures[path])
                print("  {:5s} {:9.1f} ({:.3f})  {:.1f}-{:.1f}".format(path, med, med / base, low, high))
            paired = statistics.median(on / off for on, off in zip(figures['on'], figures['off']))
            off = statistics.median(figures['off'])
            cost_us = (1 / statistics.median(figures['on']) - 1 / off) * 1e6
            print("  on/off paired median {:.4f}; on - off {:+.2f} us a step ({:+.2f} % of off's "
                  "step)".format(paired, cost_us, cost_us * off / 1e4))
    print("load average at the end: {}".format(open('/proc/loadavg').read().split()[:3]))


if __name__ == '__main__':
    main()
