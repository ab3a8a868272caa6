#!/usr/bin/env python
"""Steps per second of real models (ResNet-50 in NCHW and NHWC, VGG-16, AlexNet, a GroupNorm
ResNet-50, a CIFAR ResNet-20; ``real_model_zoo.py``) through this library's default path against
the bare loop of the same graph and tensorpack 0.11's default path, in one run.

The paths, per model:
  (a) bare:       ``sess.run([train_op, update_ops])`` in a plain ``tf.compat.v1.Session()``, the
                  batch a constant in the graph (this library's layers build the graph)
  (b) bare queue: (a) with the batch through a ``FIFOQueue`` fed by a plain Python thread, as a
                  TF1 user writes it: what moving the batch costs without this library
  (c) default:    ``launch_train_with_config(TrainConfig(model, dataflow=FakeData(random=False)),
                  trainer)``: the default InputSource, callbacks and monitors (StepTimeMonitor too)
  (d) in-graph:   (c) with ``DummyConstantInput``: this library's loop and callbacks, the batch held
                  in the graph as (a)'s is
  (e) tensorpack: tensorpack 0.11's own ``launch_train_with_config`` with the same model built by
                  its layers, the same DataFlow and trainer, all its defaults (its session config
                  has ONE intra-op thread); only when ``import tensorpack`` works
  (f) one thread: (c) with tensorpack's session config (one intra-op thread: ops run single-threaded,
                  two at once on TensorFlow's inter-op pool)
  (g) no check:   (c) with ``trainer.CHECK_COST = False``: no NaN check of the cost at all (the check
                  of (c) tests the cost's terms but its weight decay, which no step computes)
  (h) bare, ungated: (a) with the gradients computed as tensorpack's trainers compute them,
                  ``gate_gradients=GATE_NONE`` (``minimize()``'s default, (a)'s, is ``GATE_OP``;
                  this library's trainers add to it the ordered BiasAdd and MatMul gradients of
                  ``tfutils/gradient_order.py``, which give them what ``GATE_OP`` gives (a))
  (i) no monitor: (c) without the StepTimeMonitor (``DEFAULT_CALLBACKS(step_monitor=False)``)
  (j) pool:       (c) with every run on TensorFlow's inter-op thread pool
                  (``TENSORPACK_LITE_CALLER_THREAD_RUNS=0``)
  (k) caller:     (c) with every run that safely can in the caller's thread
                  (``TENSORPACK_LITE_CALLER_THREAD_RUNS=1``; with QueueInput, none can)
The trainer is ``SyncMultiGPUTrainerReplicated(1)`` (what tensorpack's ImageNet programs use: its
default input is QueueInput) or ``SimpleTrainer`` (FeedInput), by ``--trainer``.

Each path's epochs are timed from the first step to the end of the last (each library's
callback, :class:`timing.EpochTiming`); the first epoch is warm-up, a run's rate is the steps over
its median timed epoch. The paths run one after the other in rounds, in alternating order.
Keep epochs at four steps or more (``--steps-scale`` 0.1 gives the CIFAR ResNet three):
(c)'s executors for the run that fetches the summaries are built at the first epoch's end, or,
when the StepTimeMonitor's first trace (the run's third run, through ``sess.run``) is that run,
at the second's, which is then timed (0.4 s on the CIFAR ResNet-20).
Printed per model and path: the median rate over the rounds, its ratio to (a) (of the medians),
the median of the per-round ratios (paired) and their range, and the same three against (e) when
tensorpack ran. Then, for (c), the geometric mean of its per-round ratios to (a) and to (e) with
a 95 % bootstrap interval over the rounds, and where that interval lies against 0.95 and 1. The
machines here are noisy, and so is a session's speed: two sessions of one graph, alive at once and
timed in alternating blocks, differed by up to 5 % (why is not known), so only more rounds
narrow the intervals.

tensorpack 0.11 needs Keras 2 for ``tf.layers`` on TensorFlow 2.16+: in a venv of its own,
``pip install tensorflow-cpu tensorpack==0.11 && pip install --no-deps tf_keras && pip install -e .``,
then run this script there (it sets ``TF_USE_LEGACY_KERAS=1`` itself, and switches graph mode on
once: tensorpack 0.11 does not)::

    python benchmarks/real_models.py --rounds 3 --models resnet50-nchw,cifar-resnet20
    /root/tpvenv/bin/python benchmarks/real_models.py --rounds 3
"""

import os

os.environ.setdefault('TF_USE_LEGACY_KERAS', '1')   # tensorpack 0.11's tf.layers need Keras 2

import argparse  # noqa: E402
import contextlib  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402

import numpy as np  # noqa: E402

from tensorpack_lite import models as lite_models  # noqa: E402
from tensorpack_lite import tfv1 as tf  # noqa: E402
from tensorpack_lite.compat import enable_graph_mode  # noqa: E402
from tensorpack_lite.dataflow import FakeData  # noqa: E402
from tensorpack_lite.input_source import DummyConstantInput  # noqa: E402
from tensorpack_lite.tfutils.argscope import argscope as lite_argscope  # noqa: E402
from tensorpack_lite.tfutils.common import get_default_sess_config  # noqa: E402
from tensorpack_lite.tfutils.tower import TrainTowerContext  # noqa: E402
from tensorpack_lite.train import (ModelDesc, SimpleTrainer, SyncMultiGPUTrainerReplicated,  # noqa: E402
                                   TrainConfig, launch_train_with_config)
from tensorpack_lite.train.defaults import DEFAULT_CALLBACKS  # noqa: E402
from tensorpack_lite.utils import logger  # noqa: E402
from real_model_zoo import MODELS, layer_namespace  # noqa: E402
from timing import EpochTimer, EpochTiming  # noqa: E402

try:
    import tensorpack
except ImportError:
    tensorpack = None

LITE_LAYERS = layer_namespace(lite_models, lite_argscope)
STEPS = {'resnet50-nchw': 10, 'resnet50-nhwc': 10, 'vgg16': 8, 'alexnet': 20, 'resnet50-gn': 8,
         'cifar-resnet20': 30}
"""Steps per epoch: a few seconds of training on 2 cores."""


def model_class(base, layers, name):
    """A ModelDesc of ``base`` (either library's) for the model ``name`` built with ``layers``."""
    build, data_format, side, _, learning_rate = MODELS[name]

    class RealModel(base):
        def inputs(self):
            return [tf.TensorSpec([None, side, side, 3], tf.float32, 'input'),
                    tf.TensorSpec([None], tf.int32, 'label')]

        def build_graph(self, image, label):
            return build(layers, image, label, data_format)

        def optimizer(self):
            return tf.train.MomentumOptimizer(learning_rate, 0.9)

    return RealModel


def fake_data(dataflow_cls, name):
    _, _, side, batch, _ = MODELS[name]
    return dataflow_cls([[batch, side, side, 3], [batch]], size=1000, random=False,
                        dtype=['float32', 'int32'], domain=[(0, 1), (0, 10)])


def bare_batch(name):
    """A fixed batch of model ``name``: the (image, label) arrays of the bare loops."""
    _, _, side, batch, _ = MODELS[name]
    rng = np.random.RandomState(0)
    return [rng.rand(batch, side, side, 3).astype('float32'), rng.randint(0, 10, batch).astype('int32')]


def train_fetches(model, tower, image, label, gate_gradients=tf.train.Optimizer.GATE_OP):
    """``[train_op, update_ops]`` of ``model`` (either library's ``ModelDesc``) built under the
    tower context ``tower`` on ``image`` and ``label``, the gradients gated by ``gate_gradients``
    (``minimize()``'s default, or the trainers' ``GATE_NONE``)."""
    with tower:
        cost = model.build_graph(image, label)
    train_op = model.get_optimizer().minimize(cost, global_step=tf.train.get_or_create_global_step(),
                                              gate_gradients=gate_gradients)
    return [train_op, tf.get_collection(tf.GraphKeys.UPDATE_OPS)]


def bare_train_fetches(name, image, label, gate_gradients=tf.train.Optimizer.GATE_OP):
    """``[train_op, update_ops]`` of (c)'s tower on ``image`` and ``label``."""
    return train_fetches(model_class(ModelDesc, LITE_LAYERS, name)(), TrainTowerContext(''), image, label,
                         gate_gradients)


def timed_epochs(sess, fetches, steps, epochs):
    """The seconds of each of ``epochs`` epochs of ``steps`` runs of ``fetches``."""
    times = []
    for _ in range(epochs):
        timer = EpochTiming()
        timer._before_epoch()
        for _ in range(steps):
            sess.run(fetches)
        timer._after_epoch()
        times += timer.times
    return times


def bare_loop(name, steps, epochs, gate_gradients=tf.train.Optimizer.GATE_OP):
    """(a): the graph of (c)'s tower on a constant batch, in a plain session ((h) with the
    trainers' ``gate_gradients``)."""
    with tf.Graph().as_default():
        fetches = bare_train_fetches(name, *[tf.constant(a) for a in bare_batch(name)], gate_gradients)
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            sess.graph.finalize()
            return timed_epochs(sess, fetches, steps, epochs)


def bare_queue_loop(name, steps, epochs):
    """(b): (a) with the batch through a FIFOQueue (capacity 50, as QueueInput's), fed from the same
    arrays by a plain thread: ``sess.run(enqueue_op, feed_dict)`` in a loop."""
    arrays = bare_batch(name)
    with tf.Graph().as_default():
        placeholders = [tf.placeholder(a.dtype, a.shape) for a in arrays]
        queue = tf.FIFOQueue(50, [p.dtype for p in placeholders], shapes=[a.shape for a in arrays])
        enqueue, close = queue.enqueue(placeholders), queue.close(cancel_pending_enqueues=True)
        fetches = bare_train_fetches(name, *queue.dequeue())
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            sess.graph.finalize()

            def feed():
                try:
                    while True:
                        sess.run(enqueue, feed_dict=dict(zip(placeholders, arrays)))
                except (tf.errors.CancelledError, tf.errors.OutOfRangeError):
                    pass
            thread = threading.Thread(target=feed, daemon=True)
            thread.start()
            try:
                return timed_epochs(sess, fetches, steps, epochs)
            finally:
                sess.run(close)
                thread.join()


@contextlib.contextmanager
def environ(**values):
    old = {key: os.environ.get(key) for key in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in old.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def one_intra_op_thread():
    """tensorpack 0.11's default session config: this library's with one intra-op thread."""
    config = get_default_sess_config()
    config.intra_op_parallelism_threads = 1
    return config


def library_path(name, steps, epochs, logdir, trainer, step_monitor=True, env=None, session_config=None,
                 in_graph=False, check_cost=True):
    """(c), (d), (f), (g), (i), (j) and (k): this library's launch_train_with_config with its
    defaults."""
    with tf.Graph().as_default(), environ(**(env or {})):
        logger.set_logger_dir(logdir, action='d')
        timer = EpochTimer()
        extra = {} if step_monitor else {'extra_callbacks': DEFAULT_CALLBACKS(step_monitor=False)}
        if session_config is not None:
            extra['session_config'] = session_config
        if in_graph:
            _, _, side, batch, _ = MODELS[name]
            extra['data'] = DummyConstantInput([[batch, side, side, 3], [batch]])
        else:
            extra['dataflow'] = fake_data(FakeData, name)
        config = TrainConfig(model=model_class(ModelDesc, LITE_LAYERS, name)(),
                             callbacks=[timer], steps_per_epoch=steps, max_epoch=epochs, **extra)
        lite_trainer = SimpleTrainer() if trainer == 'simple' else SyncMultiGPUTrainerReplicated(1)
        lite_trainer.CHECK_COST = check_cost
        launch_train_with_config(config, lite_trainer)
    return timer.times


def tensorpack_path(name, steps, epochs, logdir, trainer):
    """(e): tensorpack 0.11's launch_train_with_config, its layers, its defaults."""
    class TPEpochTimer(EpochTiming, tensorpack.Callback):
        """:class:`EpochTiming` as a tensorpack callback."""

    layers = layer_namespace(tensorpack.models, tensorpack.argscope)
    with tf.Graph().as_default():
        tensorpack.logger.set_logger_dir(logdir, action='d')
        timer = TPEpochTimer()
        config = tensorpack.TrainConfig(
            model=model_class(tensorpack.ModelDesc, layers, name)(),
            dataflow=fake_data(tensorpack.FakeData, name),
            callbacks=[timer], steps_per_epoch=steps, max_epoch=epochs)
        tensorpack.launch_train_with_config(config, tensorpack.SimpleTrainer() if trainer == 'simple'
                                            else tensorpack.SyncMultiGPUTrainerReplicated(1))
    return timer.times


PATHS = {'a': '(a) bare sess.run', 'b': '(b) (a) through a FIFOQueue', 'c': '(c) default path',
         'd': '(d) (c), the batch in the graph', 'e': '(e) tensorpack 0.11',
         'f': '(f) (c), one intra-op thread', 'g': '(g) (c) without the cost check',
         'h': '(h) (a) with GATE_NONE',
         'i': '(i) (c) without StepTimeMonitor', 'j': "(j) (c) on TF's thread pool",
         'k': "(k) (c) in the caller's thread"}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--models', default=','.join(MODELS),
                        help='comma-separated, of: ' + ', '.join(MODELS))
    parser.add_argument('--paths', default='a,c,e', help='by letter, of ' + ','.join(PATHS) +
                        ' (a is always run: the ratios refer to it; e only when tensorpack is importable)')
    parser.add_argument('--rounds', type=int, default=3)
    parser.add_argument('--epochs', type=int, default=3, help='epochs per run, the first is warm-up')
    parser.add_argument('--steps-scale', type=float, default=1.0, help='multiplies the steps per epoch')
    parser.add_argument('--trainer', choices=['replicated', 'simple'], default='replicated')
    args = parser.parse_args()
    os.environ.setdefault('TENSORPACK_PROGRESS_REFRESH', '30')
    enable_graph_mode()   # tensorpack 0.11 does not switch TF 2.x's eager execution off
    wanted = sorted(set(args.paths.split(',')) | {'a'})
    if tensorpack is None:
        wanted = [p for p in wanted if p != 'e']
    print("TensorFlow {}, tensorpack: {}, trainer: {}".format(
        tf.__version__, tensorpack.__version__ if tensorpack else 'not importable', args.trainer))
    results, verdicts = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(','):
            steps = max(2, int(round(STEPS[name] * args.steps_scale)))
            logdir = os.path.join(tmp, name)
            run = {
                'a': lambda: bare_loop(name, steps, args.epochs),
                'h': lambda: bare_loop(name, steps, args.epochs, tf.train.Optimizer.GATE_NONE),
                'b': lambda: bare_queue_loop(name, steps, args.epochs),
                'c': lambda: library_path(name, steps, args.epochs, logdir + '-c', args.trainer),
                'd': lambda: library_path(name, steps, args.epochs, logdir + '-d', args.trainer,
                                          in_graph=True),
                'e': lambda: tensorpack_path(name, steps, args.epochs, logdir + '-e', args.trainer),
                'f': lambda: library_path(name, steps, args.epochs, logdir + '-f', args.trainer,
                                          session_config=one_intra_op_thread()),
                'g': lambda: library_path(name, steps, args.epochs, logdir + '-g', args.trainer,
                                          check_cost=False),
                'i': lambda: library_path(name, steps, args.epochs, logdir + '-i', args.trainer,
                                          step_monitor=False),
                'j': lambda: library_path(name, steps, args.epochs, logdir + '-j', args.trainer,
                                          env={'TENSORPACK_LITE_CALLER_THREAD_RUNS': '0'}),
                'k': lambda: library_path(name, steps, args.epochs, logdir + '-k', args.trainer,
                                          env={'TENSORPACK_LITE_CALLER_THREAD_RUNS': '1'}),
            }
            rates = {letter: [] for letter in wanted}
            for round_index in range(args.rounds):
                order = wanted if round_index % 2 == 0 else list(reversed(wanted))
                for letter in order:
                    rate = steps / statistics.median(run[letter]()[1:])
                    rates[letter].append(rate)
                    print("[real_models] {} round {} {}: {:.3f} steps/s".format(
                        name, round_index, PATHS[letter], rate), flush=True)
            for letter in wanted:
                results.append((name, PATHS[letter], _compared(rates[letter], rates['a']),
                                _compared(rates[letter], rates['e']) if 'e' in rates else None))
            if 'c' in rates:
                verdicts.append((name, _interval(rates['c'], rates['a']),
                                 _interval(rates['c'], rates['e']) if 'e' in rates else None))
    print("\nsteps/s: median over {} rounds (alternating order) of {} timed epochs' median; ratio to (a) "
          "of the medians; paired: median (range) of the per-round ratios to (a); the same against (e), "
          "tensorpack 0.11, when it ran".format(args.rounds, args.epochs - 1))
    print("{:<15} {:<34} {:>8} {:>6} {:>6} {:>13} {:>6} {:>6} {:>13}".format(
        'model', 'path', 'steps/s', 'ratio', 'paired', 'paired range', '/ (e)', 'paired', 'paired range'))
    for name, path, to_a, to_e in results:
        print("{:<15} {:<34} {:>8.3f}".format(name, path, to_a[0]) + _ratio_columns(to_a) +
              (_ratio_columns(to_e) if to_e else ''))
    if verdicts:
        _print_verdicts(verdicts, args.rounds)


def _compared(rates, reference):
    """``(median rate, ratio of the medians, median, lowest and highest per-round ratio)`` of
    ``rates`` to the ``reference`` path's rates of the same rounds."""
    paired = [rate / other for rate, other in zip(rates, reference)]
    median = statistics.median(rates)
    return (median, median / statistics.median(reference), statistics.median(paired), min(paired),
            max(paired))


def _interval(rates, reference, draws=10000, confidence=0.95):
    """``(geometric mean, low, high)`` of the per-round ratios of ``rates`` to the ``reference``
    path's: their geometric mean and its bootstrap interval (the rounds resampled ``draws`` times,
    a fixed seed), which holds the ratio a longer run would find with probability ``confidence``."""
    logs = np.log(np.asarray(rates) / np.asarray(reference))
    picks = np.random.RandomState(0).randint(0, len(logs), size=(draws, len(logs)))
    means = logs[picks].mean(axis=1)
    tail = (1 - confidence) / 2 * 100
    bounds = np.percentile(means, [tail, 100 - tail])
    return tuple(float(np.exp(v)) for v in (logs.mean(), bounds[0], bounds[1]))


def _verdict(interval, bound):
    """Where ``interval`` lies against ``bound``: 'above', 'below' or 'level' (it holds it)."""
    _, low, high = interval
    return 'above' if low >= bound else 'below' if high < bound else 'level'


def _print_verdicts(verdicts, rounds):
    """(c) against the bare loop (within 5 %?) and against tensorpack 0.11 (at or above?), each
    a geometric mean of the per-round ratios with its 95 % bootstrap interval."""
    print("\n(c) per round, geometric mean [95 % bootstrap interval over the {} rounds]; 'below' only when "
          "the whole interval is below the bound".format(rounds))
    print("{:<15} {:>24} {:>10} {:>24} {:>10}".format('model', '(c) / (a)', 'vs 0.95', '(c) / (e)', 'vs 1'))
    for name, to_a, to_e in verdicts:
        row = "{:<15} {:>24} {:>10}".format(name, _interval_text(to_a), _verdict(to_a, 0.95))
        if to_e:
            row += " {:>24} {:>10}".format(_interval_text(to_e), _verdict(to_e, 1.0))
        print(row)


def _interval_text(interval):
    return "{:.3f} [{:.3f}, {:.3f}]".format(*interval)


def _ratio_columns(compared):
    """The four ratios of a :func:`_compared` tuple, as the summary prints them."""
    return " {:>6.3f} {:>6.3f} {:>6.3f}-{:<6.3f}".format(*compared[1:])


if __name__ == '__main__':
    main()
