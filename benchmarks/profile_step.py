#!/usr/bin/env python
"""Where the default training path spends its Python time, per step.

Trains the MLP of ``trainer_overhead.py`` (784-256-10, batch 64) on the default path
(DataFlow -> FeedInput -> SimpleTrainer -> default callbacks and monitors) and the two bare
loops of ``trainer_overhead.py`` (``sess.run(train_op, feed_dict)``, ``sess.run(train_op)``).
The Python cost of a step is what it spends outside TensorFlow's session-run C call
(``TF_SessionRunCallable`` / ``TF_SessionRun_wrapper``); on the default path, that is the
library's own cost. For each loop:

* Python CPU: the CPU time of the main thread outside the C call, per step (CPU time, so
  that other processes taking the CPU do not count);
* whole step: the wall time of a step;
* stubbed: the CPU time of a step with the C call stubbed out (it returns at once: none of
  these runs fetches a tensor), i.e. Python alone with warm caches.

The first epoch of each run is warm-up; the loops run in alternating order over several
rounds. Printed: medians, and for the stubbed loops the minimum too (Python alone is only
ever slowed down by the machine, so the fastest epoch is its cost). Then the default path's
steps run under cProfile, which gives the functions with the largest own time (the profiler
inflates the Python part). Last, what feeding costs inside the C call (which the bare loop
without feed does not pay): the train op as a session callable with a constant batch or fed
batches, in short alternating chunks.

    python benchmarks/profile_step.py --steps 1000 --rounds 3 --top 30
"""

import argparse
import cProfile
import os
import pstats
import statistics
import tempfile
import time

import numpy as np
from tensorflow.core.protobuf import config_pb2
from tensorflow.python.client import pywrap_tf_session

from tensorpack_lite import tfv1 as tf
from tensorpack_lite.callbacks import Callback
from tensorpack_lite.dataflow import DataFromList
from tensorpack_lite.tfutils.sesscreate import NewSessionCreator
from tensorpack_lite.tfutils.tower import TrainTowerContext
from tensorpack_lite.train import SimpleTrainer, TrainConfig, launch_train_with_config
from tensorpack_lite.utils import logger
from trainer_overhead import MLP, make_batches

_C_CALLS = ('TF_SessionRunCallable', 'TF_SessionRun_wrapper')


def _clock():
    """(wall time, CPU time of this thread)."""
    return time.perf_counter(), time.thread_time()


class _StubbedValues:
    """What a stubbed C call returns: a zero scalar for any fetched tensor (a few callbacks fetch
    a scalar now and then, e.g. the batch size in the first step of an epoch)."""

    def __getitem__(self, index):
        return np.zeros((), np.int32)


class _CCall:
    """Wraps TensorFlow's session-run C calls and adds up the wall and thread CPU time spent
    inside them. While ``stubbed``, the calls return at once (:class:`_StubbedValues`)."""

    def __init__(self):
        self.inside = (0.0, 0.0)
        self.stubbed = False
        self._originals = {}

    def _wrap(self, function, stub):
        def timed(*args):
            if self.stubbed:
                return stub()
            start = _clock()
            try:
                return function(*args)
            finally:
                end = _clock()
                self.inside = tuple(total + e - s for total, e, s in zip(self.inside, end, start))
        return timed

    def __enter__(self):
        for name in _C_CALLS:
            self._originals[name] = getattr(pywrap_tf_session, name)
            setattr(pywrap_tf_session, name, self._wrap(   # sess.run fetches nothing here
                self._originals[name], _StubbedValues if name == 'TF_SessionRunCallable' else list))
        return self

    def __exit__(self, *exc):
        for name, function in self._originals.items():
            setattr(pywrap_tf_session, name, function)


class _Epochs:
    """Measures epochs of ``steps`` steps: (Python CPU, whole step wall, stubbed CPU) in
    microseconds per step, each None where it does not apply."""

    def __init__(self, ccall, steps, stub):
        self._ccall, self._steps, self._stub = ccall, steps, stub
        self.results = []

    def start(self, timed):
        self._timed = timed
        self._ccall.stubbed = self._stub and timed
        self._start, self._inside = _clock(), self._ccall.inside

    def end(self):
        wall, cpu = (end - start for end, start in zip(_clock(), self._start))
        ccall_cpu = self._ccall.inside[1] - self._inside[1]
        self._ccall.stubbed = False
        if not self._timed:
            return
        us = 1e6 / self._steps
        if self._stub:
            self.results.append((None, None, cpu * us))
        else:
            self.results.append(((cpu - ccall_cpu) * us, wall * us, None))


class _EpochCallback(Callback):
    """Starts and ends an :class:`_Epochs` measurement around each epoch (the first untimed)."""

    _chief_only = False

    def __init__(self, epochs):
        self._epochs = epochs

    def _before_epoch(self):
        self._epochs.start(timed=self.epoch_num > self.trainer.loop.starting_epoch)

    def _after_epoch(self):
        self._epochs.end()


def default_path(batches, epochs, logdir, measure):
    train_default_path(batches, epochs, logdir, _EpochCallback(measure))


def train_default_path(batches, epochs, logdir, callback):
    """Train the MLP on ``batches`` the default way (DataFlow -> FeedInput -> SimpleTrainer),
    with ``callback`` added to the defaults."""
    with tf.Graph().as_default():
        logger.set_logger_dir(logdir, action='d')
        config = TrainConfig(model=MLP(), dataflow=DataFromList(batches, shuffle=False),
                             callbacks=[callback], steps_per_epoch=len(batches), max_epoch=epochs)
        launch_train_with_config(config, SimpleTrainer())


def bare_loop(batches, epochs, measure, feed):
    """``sess.run(train_op, feed_dict)`` over the batches, or (``feed=False``) ``sess.run(train_op)``
    on the first batch held in the graph."""
    with tf.Graph().as_default():
        if feed:
            image = tf.placeholder(tf.float32, [None, 784])
            label = tf.placeholder(tf.int32, [None])
        else:
            image, label = tf.constant(batches[0][0]), tf.constant(batches[0][1])
        model = MLP()
        with TrainTowerContext(''):
            cost = model.build_graph(image, label)
        train_op = model.get_optimizer().minimize(cost)
        sess = NewSessionCreator().create_session()
        sess.graph.finalize()
        for epoch in range(epochs):
            measure.start(timed=epoch > 0)
            for x, y in batches:
                if feed:
                    sess.run(train_op, feed_dict={image: x, label: y})
                else:
                    sess.run(train_op)
            measure.end()
        sess.close()


def feed_cost(rounds, chunk=20):
    """What feeding costs inside the C call: the MLP's train op run as session callables,
    alternating ``chunk``-step chunks ``rounds`` times; median microseconds per step."""
    batches = make_batches(500)
    with tf.Graph().as_default():
        image = tf.placeholder(tf.float32, [None, 784])
        label = tf.placeholder(tf.int32, [None])
        model = MLP()
        with TrainTowerContext(''):
            train_op = model.get_optimizer().minimize(model.build_graph(image, label))
            with tf.variable_scope('', reuse=True):
                const_cost = model.build_graph(tf.constant(batches[0][0]), tf.constant(batches[0][1]))
        const_op = model.get_optimizer().minimize(const_cost)
        increment = tf.assign_add(tf.train.get_or_create_global_step(), 1).op
        sess = NewSessionCreator().create_session()

        def make_callable(targets, feeds=()):   # as HookedSession makes them
            options = config_pb2.CallableOptions()
            options.feed.extend(t.name for t in feeds)
            options.target.extend(op.name for op in targets)
            return sess._make_callable_from_options(options)

        callables = {
            'constant batch': make_callable([const_op]),
            'constant batch + global step increment': make_callable([const_op, increment]),
            'fed, a new batch each step': make_callable([train_op], [image, label]),
            'fed, the same batch each step': make_callable([train_op], [image, label]),
        }
        times = {name: [] for name in callables}
        position = 0
        for round_index in range(rounds):
            for name in (list(callables) if round_index % 2 == 0 else list(callables)[::-1]):
                run = callables[name]
                start = time.perf_counter()
                for step in range(chunk):
                    if name.startswith('fed, a new'):
                        run(*batches[(position + step) % len(batches)])
                    elif name.startswith('fed'):
                        run(*batches[0])
                    else:
                        run()
                times[name].append((time.perf_counter() - start) / chunk * 1e6)
            position += chunk
        sess.close()
    print("\nFeeding inside the C call: the MLP's train op as a session callable, {} alternating "
          "chunks of {} steps; median us/step".format(rounds, chunk))
    for name, values in times.items():
        print("  {:<40} {:8.1f}".format(name, statistics.median(values)))


class _ProfiledEpochs(Callback):
    """Profiles the steps of every epoch but the first (warm-up)."""

    _chief_only = False

    def __init__(self, profile):
        self._profile = profile

    def _before_epoch(self):
        if self.epoch_num > self.trainer.loop.starting_epoch:
            self._profile.enable()

    def _after_epoch(self):
        self._profile.disable()


def profiled(batches, epochs, logdir, top):
    """The profile of the default path's steps (warm-up epoch left out)."""
    profile = cProfile.Profile()
    train_default_path(batches, epochs, logdir, _ProfiledEpochs(profile))
    stats = pstats.Stats(profile)
    steps = len(batches) * (epochs - 1)
    in_c = sum(value[2] for (_, _, name), value in stats.stats.items()
               if any(call in name for call in _C_CALLS))
    print("\nUnder cProfile ({} steps): {:.1f} us/step in total, {:.1f} in the C call, {:.1f} outside "
          "it (inflated by the profiler)".format(
              steps, stats.total_tt / steps * 1e6, in_c / steps * 1e6, (stats.total_tt - in_c) / steps * 1e6))
    stats.sort_stats('tottime').print_stats(top)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--steps', type=int, default=500, help='steps per epoch')
    parser.add_argument('--epochs', type=int, default=4, help='epochs per run (the first is warm-up)')
    parser.add_argument('--rounds', type=int, default=3, help='the loops run one after the other '
                        'this many times, in alternating order')
    parser.add_argument('--top', type=int, default=25, help='entries of the profile to print')
    parser.add_argument('--feed-rounds', type=int, default=300, help='alternations of the feeding measure')
    args = parser.parse_args()
    os.environ.setdefault('TENSORPACK_PROGRESS_REFRESH', '30')
    batches = make_batches(args.steps)
    with tempfile.TemporaryDirectory() as tmp:
        logdir = os.path.join(tmp, 'log')
        loops = {
            'default path': lambda measure: default_path(batches, args.epochs, logdir, measure),
            'bare sess.run(op, feed_dict)': lambda measure: bare_loop(batches, args.epochs, measure, True),
            'bare sess.run(op)': lambda measure: bare_loop(batches, args.epochs, measure, False),
        }
        runs = [(name, stub) for name in loops for stub in (False, True)]
        results = {name: [] for name in loops}
        with _CCall() as ccall:
            for round_index in range(args.rounds):
                for name, stub in (runs if round_index % 2 == 0 else runs[::-1]):
                    measure = _Epochs(ccall, args.steps, stub)
                    loops[name](measure)
                    results[name].extend(measure.results)
        print("\nus/step: medians over {} rounds of {} timed epochs of {} steps".format(
            args.rounds, args.epochs - 1, args.steps))
        print("  {:<30} {:>11} {:>11} {:>11} {:>13}".format('', 'Python CPU', 'whole step', 'stubbed',
                                                            'stubbed, min'))
        for name, values in results.items():
            columns = [[v for v in column if v is not None] for column in zip(*values)]
            print("  {:<30} {:11.1f} {:11.1f} {:11.1f} {:13.1f}".format(
                name, *[statistics.median(column) for column in columns], min(columns[2])))
        profiled(batches, args.epochs, os.path.join(tmp, 'profiled'), args.top)
    feed_cost(args.feed_rounds)


if __name__ == '__main__':
    main()
