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
  (g) floor:       (a) as a session callable whose ops run in the caller's thread
                   (``RunOptions.inter_op_thread_pool = -1``), as the library's hooked session
                   runs them where it is safe (see docs/efficiency.md): no Python at all
  (h) floor feed:  (g) fed the numpy batches: what (c) would cost without any Python of its own;
                   (c) / (h) is the library's own cost, (a) / (h) the thread pool's hand-off
  (i) no monitor:  (c) without the default StepTimeMonitor (``DEFAULT_CALLBACKS(step_monitor=False)``)
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
from tensorflow.core.protobuf.config_pb2 import CallableOptions

from tensorpack_lite import tfv1 as tf
from tensorpack_lite.compat import enable_graph_mode
from tensorpack_lite.dataflow import DataFromList
from tensorpack_lite.input_source import DummyConstantInput
from tensorpack_lite.tfutils.common import get_default_sess_config
from tensorpack_lite.tfutils.sesscreate import NewSessionCreator
from tensorpack_lite.tfutils.tower import TrainTowerContext
from tensorpack_lite.train import ModelDesc, SimpleTrainer, TrainConfig, launch_train_with_config
from tensorpack_lite.train.defaults import DEFAULT_CALLBACKS
from tensorpack_lite.utils import logger
from timing import EpochTimer, EpochTiming

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


def bare_loop(model_cls, batches, epochs, feed, caller_thread=False):
    """(a), (b), (g) and (h): the same model and optimizer, run by a plain loop (with
    ``caller_thread``, as a session callable whose ops run in the calling thread)."""
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
        if caller_thread:
            options = CallableOptions()
            options.target.append(train_op.name)
            options.run_options.inter_op_thread_pool = -1
            if feed:
                options.feed.extend([image.name, label.name])
            run = sess._make_callable_from_options(options)
        times = []
        for _ in range(epochs):
            start = time.perf_counter()
            if caller_thread and feed:
                for x, y in batches:
                    run(x, y)
            elif caller_thread:
                for _ in batches:
                    run()
            else:
                for x, y in batches:
                    if feed:
                        sess.run(train_op, feed_dict={image: x, label: y})
                    else:
                        sess.run(train_op)
            times.append(time.perf_counter() - start)
        sess.close()
    return times


def library_path(model_cls, batches, epochs, logdir, dummy, step_monitor=True):
    """(c), (d) and (i): launch_train_with_config with its defaults (without the step-time monitor
    unless ``step_monitor``)."""
    with tf.Graph().as_default():
        logger.set_logger_dir(logdir, action='d')
        timer = EpochTimer()
        if dummy:
            source = dict(data=DummyConstantInput([[BATCH, 784], [BATCH]]))
        else:
            source = dict(dataflow=DataFromList(batches, shuffle=False))
        if not step_monitor:
            source['extra_callbacks'] = DEFAULT_CALLBACKS(step_monitor=False)
        config = TrainConfig(model=model_cls(), callbacks=[timer], steps_per_epoch=len(batches),
                             max_epoch=epochs, **source)
        launch_train_with_config(config, SimpleTrainer())
    return timer.times


def tensorpack_path(model_cls, batches, epochs, logdir, same_config):
    """(e) and (f): tensorpack 0.11's launch_train_with_config with its defaults (with (a)'s session
    config when ``same_config``)."""
    class TPEpochTimer(EpochTiming, tensorpack.Callback):
        """:class:`EpochTiming` as a tensorpack callback."""

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
    'g': '(g) floor: caller thread', 'h': '(h) floor feed: caller thread',
    'i': '(i) (c) without StepTimeMonitor',
}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--epochs', type=int, default=4, help='epochs per run (the first is warm-up)')
    parser.add_argument('--rounds', type=int, default=5,
                        help='the paths run one after the other this many times, in alternating order')
    parser.add_argument('--mlp-steps', type=int, default=200, help='steps per epoch, MLP')
    parser.add_argument('--conv-steps', type=int, default=60, help='steps per epoch, convnet')
    parser.add_argument('--paths', default='a,b,c,d,e,f,g,h,i',
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
            logdir = os.path.join(tmp, name)
            paths = {
                'a': lambda: bare_loop(model_cls, batches, args.epochs, feed=False),
                'b': lambda: bare_loop(model_cls, batches, args.epochs, feed=True),
                'c': lambda: library_path(model_cls, batches, args.epochs, logdir + '-c', dummy=False),
                'd': lambda: library_path(model_cls, batches, args.epochs, logdir + '-d', dummy=True),
                'e': lambda: tensorpack_path(model_cls, batches, args.epochs, logdir + '-e', False),
                'f': lambda: tensorpack_path(model_cls, batches, args.epochs, logdir + '-f', True),
                'g': lambda: bare_loop(model_cls, batches, args.epochs, feed=False, caller_thread=True),
                'h': lambda: bare_loop(model_cls, batches, args.epochs, feed=True, caller_thread=True),
                'i': lambda: library_path(model_cls, batches, args.epochs, logdir + '-i', dummy=False,
                                          step_monitor=False),
            }
            paths = {letter: paths[letter] for letter in sorted(wanted)}
            rates = {letter: [] for letter in paths}
            for round_index in range(args.rounds):
                order = list(paths) if round_index % 2 == 0 else list(reversed(list(paths)))
                for letter in order:
                    rates[letter].append(steps / statistics.median(paths[letter]()[1:]))
            for letter, values in rates.items():
                paired = [v / r for v, r in zip(values, rates['a'])]
                to_floor = (statistics.median(v / r for v, r in zip(values, rates['h']))
                            if 'h' in rates else float('nan'))
                results.append((name, PATHS[letter], statistics.median(values),
                                statistics.median(values) / statistics.median(rates['a']),
                                statistics.median(paired), min(paired), max(paired), to_floor,
                                min(values), max(values)))
    print("\nsteps/s: median over {} rounds (alternating order) of the median of {} timed epochs. Ratio "
          "to (a): of the medians; paired: median (and range) of the per-round ratios; /(h): median of the "
          "per-round ratios to (h)".format(args.rounds, args.epochs - 1))
    print("{:<8} {:<32} {:>8} {:>6} {:>6} {:>13} {:>6} {:>15}".format(
        'model', 'path', 'steps/s', 'ratio', 'paired', 'paired range', '/(h)', 'range (steps/s)'))
    for name, path, rate, ratio, paired, low_ratio, high_ratio, to_floor, low, high in results:
        print("{:<8} {:<32} {:>8.1f} {:>6.3f} {:>6.3f} {:>6.3f}-{:<6.3f} {:>6.3f} {:>7.0f}-{:<7.0f}".format(
            name, path, rate, ratio, paired, low_ratio, high_ratio, to_floor, low, high))


if __name__ == '__main__':
    main()
