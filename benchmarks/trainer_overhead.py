#!/usr/bin/env python
"""Steps per second of the library's training paths against bare session loops, in one run.

For each model (an MLP 784-256-10 and a small convnet on 28x28x1, batch 64):
  (a) bare:        ``sess.run(train_op)`` on a batch that lives in the graph
  (b) bare feed:   ``sess.run(train_op, feed_dict)`` over numpy batches
  (c) default:     DataFlow of numpy batches -> default InputSource -> SimpleTrainer ->
                   default callbacks and monitors (the path ``launch_train_with_config`` takes)
  (d) dummy:       DummyConstantInput -> SimpleTrainer -> default callbacks and monitors
  (e) tensorpack:  tensorpack 0.11's (c), when ``import tensorpack`` works: the same model,
                   DataFlow and TrainConfig given to its ``launch_train_with_config`` and
                   ``SimpleTrainer`` (its defaults: FeedInput, the same callbacks and monitors,
                   and its session config, which has ONE intra-op thread)
  (f) tensorpack, (a)'s config: (e) with the session config of (a) and (c) (TensorFlow's
                   thread pools), so that only the training loop differs from (c)
Each is timed per epoch; the first epoch is warm-up; a run's rate is the median of the
rest. The paths run one after the other in rounds, in alternating order (forward, then
backward), so that drift hits all alike. Printed per path: the median rate over the rounds,
its ratio to the median rate of (a), the median over rounds of the ratio to (a) in the same
round (paired), and the range of the rates. Machines here are noisy: read the ratios, not
the absolute numbers, and give it many rounds.

tensorpack 0.11 is pure Python; install it in a separate virtualenv with this library, e.g.
``python3.11 -m venv /root/tpvenv && /root/tpvenv/bin/pip install tensorflow-cpu tensorpack==0.11
&& /root/tpvenv/bin/pip install -e .``, and run the script with that venv's python. The only
compat shim, done here: graph mode is switched on once for the process before any path runs
(tensorpack 0.11 does not switch TF 2.x's eager execution off itself).

    python benchmarks/trainer_overhead.py --rounds 5
    /root/tpvenv/bin/python benchmarks/trainer_overhead.py --rounds 15 --paths a,c,e,f
"""

import argparse
import os
import statistics
import tempfile
import time

import numpy as np

from tensorpack_lite import tfv1 as tf
from tensorpack_lite.compat import enable_graph_mode
from tensorpack_lite.dataflow import DataFromList
from tensorpack_lite.input_source import DummyConstantInput
from tensorpack_lite.tfutils.common import get_default_sess_config
from tensorpack_lite.tfutils.sesscreate import NewSessionCreator
from tensorpack_lite.tfutils.tower import TrainTowerContext
from tensorpack_lite.train import ModelDesc, SimpleTrainer, TrainConfig, launch_train_with_config
from tensorpack_lite.utils import logger
from timing import EpochTimer

try:
    import tensorpack
except ImportError:
    tensorpack = None

BATCH = 64


class _MLPModel:
    """The MLP, for either library's ModelDesc (the graph is plain ``tf.compat.v1``)."""

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


class _ConvNetModel(_MLPModel):
    def logits(self, image):
        x = tf.reshape(image, [-1, 28, 28, 1])
        for i, channels in enumerate([16, 32]):
            kernel = tf.get_variable('conv{}/W'.format(i), [3, 3, x.shape[-1], channels])
            x = tf.nn.relu(tf.nn.conv2d(x, kernel, strides=1, padding='SAME'))
            x = tf.nn.max_pool2d(x, 2, 2, 'VALID')
        x = tf.reshape(x, [-1, 7 * 7 * 32])
        return tf.matmul(x, tf.get_variable('fc/W', [7 * 7 * 32, 10]))


class MLP(_MLPModel, ModelDesc):
    pass


class ConvNet(_ConvNetModel, ModelDesc):
    pass


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


def tensorpack_path(model_cls, batches, epochs, logdir, same_config):
    """(e) and (f): tensorpack 0.11's launch_train_with_config with its defaults (with (a)'s session
    config when ``same_config``)."""
    class TPEpochTimer(tensorpack.Callback):
        _chief_only = False

        def __init__(self):
            self.times = []

        def _before_epoch(self):
            self._start = time.perf_counter()

        def _after_epoch(self):
            self.times.append(time.perf_counter() - self._start)

    model = type('TP' + model_cls.__name__, (model_cls.__bases__[0], tensorpack.ModelDesc), {})()
    with tf.Graph().as_default():
        tensorpack.logger.set_logger_dir(logdir, action='d')
        timer = TPEpochTimer()
        extra = {}
        if same_config:
            from tensorpack.tfutils.sesscreate import NewSessionCreator as TPSessionCreator
            extra['session_creator'] = TPSessionCreator(config=get_default_sess_config())
        config = tensorpack.TrainConfig(
            model=model, dataflow=tensorpack.DataFromList(batches, shuffle=False), callbacks=[timer],
            steps_per_epoch=len(batches), max_epoch=epochs, **extra)
        tensorpack.launch_train_with_config(config, tensorpack.SimpleTrainer())
    return timer.times


PATHS = {
    'a': '(a) bare', 'b': '(b) bare feed', 'c': '(c) default path', 'd': '(d) DummyConstantInput',
    'e': '(e) tensorpack 0.11', 'f': "(f) tensorpack, (a)'s config",
}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--epochs', type=int, default=4, help='epochs per run (the first is warm-up)')
    parser.add_argument('--rounds', type=int, default=5,
                        help='the paths run one after the other this many times, in alternating order')
    parser.add_argument('--mlp-steps', type=int, default=200, help='steps per epoch, MLP')
    parser.add_argument('--conv-steps', type=int, default=60, help='steps per epoch, convnet')
    parser.add_argument('--paths', default='a,b,c,d,e,f',
                        help='the paths to run, by letter (a is always run: the ratios refer to it); '
                        'e and f only when tensorpack is importable')
    parser.add_argument('--models', default='mlp,convnet', help='mlp, convnet or both')
    args = parser.parse_args()
    os.environ.setdefault('TENSORPACK_PROGRESS_REFRESH', '30')   # read by both libraries' progress bars
    enable_graph_mode()   # the compat shim for tensorpack 0.11 (see the docstring)
    wanted = set(args.paths.split(',')) | {'a'}
    if tensorpack is None:
        wanted -= {'e', 'f'}
    print("tensorpack: {}".format(tensorpack.__version__ if tensorpack else 'not importable'))
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, model_cls, steps in (('mlp', MLP, args.mlp_steps), ('convnet', ConvNet, args.conv_steps)):
            if name not in args.models.split(','):
                continue
            batches = make_batches(steps)
            paths = {
                '(a) bare': lambda: bare_loop(model_cls, batches, args.epochs, feed=False),
                '(b) bare feed': lambda: bare_loop(model_cls, batches, args.epochs, feed=True),
                '(c) default path': lambda: library_path(model_cls, batches, args.epochs,
                                                         os.path.join(tmp, name + '-c'), dummy=False),
                '(d) DummyConstantInput': lambda: library_path(model_cls, batches, args.epochs,
                                                               os.path.join(tmp, name + '-d'), dummy=True),
                PATHS['e']: lambda: tensorpack_path(model_cls, batches, args.epochs,
                                                    os.path.join(tmp, name + '-e'), same_config=False),
                PATHS['f']: lambda: tensorpack_path(model_cls, batches, args.epochs,
                                                    os.path.join(tmp, name + '-f'), same_config=True),
            }
            paths = {PATHS[letter]: paths[PATHS[letter]] for letter in sorted(wanted)}
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
    print("{:<8} {:<30} {:>9} {:>7} {:>7} {:>17}".format('model', 'path', 'steps/s', 'ratio', 'paired',
                                                         'range (steps/s)'))
    for name, path, rate, ratio, paired, low, high in results:
        print("{:<8} {:<30} {:>9.1f} {:>7.3f} {:>7.3f} {:>8.1f}-{:<8.1f}".format(
            name, path, rate, ratio, paired, low, high))


if __name__ == '__main__':
    main()
