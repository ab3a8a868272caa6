#!/usr/bin/env python
"""What ``Conv2D``'s empty-batch guard costs a training step, per layer: the guard's own ops
(shape arithmetic, a Pad and a Slice that copy nothing, their gradients) timed where nothing else
is, so that its microseconds are not lost in a real model's noise.

Two graphs of ``--layers`` tiny ``Conv2D`` layers (8 channels, 1x1, on a 4x4 map of 2 examples,
ReLU), trained by SGD: one takes its input through a placeholder of unknown batch size (every
layer guarded, as a ``ModelDesc``'s ``[None, ...]`` inputs make them), the other of known batch
size (no guard). Both in one process, blocks of steps in alternating order; printed: the median
step of each and the difference per layer, in microseconds. 53 layers are a ResNet-50's.

    python benchmarks/empty_batch_guard.py --layers 53 --rounds 30
"""

import argparse
import statistics

import numpy as np

from tensorpack_lite import tfv1 as tf
from tensorpack_lite.compat import enable_graph_mode
from tensorpack_lite.models import Conv2D
from tensorpack_lite.tfutils.tower import TrainTowerContext
from timing import steps_per_second

SHAPE = (2, 4, 4, 8)


def training_step(layers, batch_known):
    """``(session, train_op, input placeholder)`` of the stack, in a graph of its own."""
    graph = tf.Graph()
    with graph.as_default():
        image = tf.placeholder(tf.float32, SHAPE if batch_known else (None,) + SHAPE[1:])
        x = image
        with TrainTowerContext(''):
            for index in range(layers):
                x = Conv2D('conv{}'.format(index), x, SHAPE[-1], 1, activation=tf.nn.relu)
        train_op = tf.train.GradientDescentOptimizer(1e-6).minimize(tf.reduce_sum(x))
        session = tf.Session()
        session.run(tf.global_variables_initializer())
        graph.finalize()
    return session, train_op, image


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--layers', type=int, default=53)
    parser.add_argument('--rounds', type=int, default=30)
    parser.add_argument('--steps', type=int, default=200, help='steps per block')
    args = parser.parse_args()
    enable_graph_mode()
    batch = np.random.RandomState(0).rand(*SHAPE).astype('float32')
    steps = {known: training_step(args.layers, known) for known in (True, False)}
    seconds = {True: [], False: []}
    for round_index in range(args.rounds):
        for known in ((True, False) if round_index % 2 == 0 else (False, True)):
            session, train_op, image = steps[known]

            def step():
                session.run(train_op, {image: batch})
            steps_per_second(step, args.steps // 10)   # warm-up (the executors, the caches)
            seconds[known].append(1 / steps_per_second(step, args.steps))
    plain, guarded = statistics.median(seconds[True]), statistics.median(seconds[False])
    print("{} layers, median step over {} rounds of {} steps: known batch size (no guard) {:.1f} us, "
          "unknown (guarded) {:.1f} us; the guard: {:.2f} us per layer and step".format(
              args.layers, args.rounds, args.steps, plain * 1e6, guarded * 1e6,
              (guarded - plain) * 1e6 / args.layers))


if __name__ == '__main__':
    main()
