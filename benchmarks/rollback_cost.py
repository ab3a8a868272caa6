#!/usr/bin/env python
"""What RollbackOnAnomaly costs a step when nothing goes wrong, on the README's example convnet
(examples/basics/mnist-convnet.py, 28x28 digits, batch 64).

Two paths train on the same numpy batches through the default path (DataFlow -> FeedInput ->
SimpleTrainer with ``CHECK_COST = False`` -> the default callbacks), without the callback ("off")
and with ``RollbackOnAnomaly('total_cost', snapshot_every=100)`` and its default SpikeRule
("on"). Epochs
are timed as in benchmarks/step_monitor_cost.py (wall clock and main-thread CPU time; the first
epoch is warm-up, a run's figure is the median of the others); the paths alternate in rounds.
Printed: the median steps per second of each path, the paired median of on/off, and the
rollbacks of the 'on' runs (false positives: no batch is bad; the bound is lifted to count them).

    python benchmarks/rollback_cost.py --rounds 5
"""

import argparse
import statistics
import tempfile

from tensorpack_lite import (DataFromList, RollbackOnAnomaly, SimpleTrainer, TrainConfig,
                             launch_train_with_config, logger)
from tensorpack_lite import tfv1 as tf
from tensorpack_lite.compat import enable_graph_mode
from step_monitor_cost import BATCH, ClockEpochs, batches_of, load_convnet, rates


ROLLBACKS = []    # the windows of every 'on' run: false positives, as no batch is bad


def run(model_fn, batches, epochs, logdir, with_rollback):
    with tf.Graph().as_default():
        logger.set_logger_dir(logdir, action='d')
        timer = ClockEpochs()
        rollback = [RollbackOnAnomaly('total_cost', snapshot_every=100, max_rollbacks=10 ** 6)] \
            if with_rollback else []
        trainer = SimpleTrainer()
        trainer.CHECK_COST = False
        config = TrainConfig(model=model_fn(), dataflow=DataFromList(batches, shuffle=False),
                             callbacks=[timer] + rollback, steps_per_epoch=len(batches), max_epoch=epochs)
        launch_train_with_config(config, trainer)
        logger._detach_file_handler()
    if rollback:
        ROLLBACKS.extend(rollback[0].windows)
    return timer.times


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--rounds', type=int, default=5)
    parser.add_argument('--epochs', type=int, default=4, help='per run, the first is warm-up')
    parser.add_argument('--steps', type=int, default=200, help='per epoch')
    args = parser.parse_args()
    enable_graph_mode()
    convnet = load_convnet()
    batches = batches_of(convnet.get_data(None, BATCH, 3)[0], args.steps)
    print("load average at the start: {}".format(open('/proc/loadavg').read().split()[:3]))
    results = {'off': [], 'on': []}
    for round_ in range(args.rounds):
        for path in (['off', 'on'] if round_ % 2 == 0 else ['on', 'off']):
            with tempfile.TemporaryDirectory() as logdir:
                results[path].append(rates(run(convnet.Model, batches, args.epochs, logdir, path == 'on'),
                                           len(batches)))
    print("mnist-convnet.py convnet, batch {}, {} steps an epoch, {} rounds".format(
        BATCH, len(batches), args.rounds))
    for clock, name in ((0, 'wall clock'), (1, 'main-thread CPU')):
        figures = {path: [r[clock] for r in results[path]] for path in results}
        paired = statistics.median(on / off for on, off in zip(figures['on'], figures['off']))
        print(" {}: steps/s off {:.1f}, on {:.1f}; on/off paired median {:.4f} ({:+.2f} % a step)".format(
            name, statistics.median(figures['off']), statistics.median(figures['on']), paired,
            (1 / paired - 1) * 100))
    print(" rollbacks (false positives) in all 'on' runs: {} {}".format(
        len(ROLLBACKS), [(w['last'], w['reason']) for w in ROLLBACKS][:5]))
    print("load average at the end: {}".format(open('/proc/loadavg').read().split()[:3]))


if __name__ == '__main__':
    main()
