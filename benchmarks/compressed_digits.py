#!/usr/bin/env python
"""What gradient compression does to a trained model: the small convnet of
examples/multigpu/multigpu-digits.py on scikit-learn's 8x8 digits, trained by
CollectiveAllReduceTrainer on 2 local worker processes (batch 32 each, Adam 1e-3), exact and
with each compression, for every seed (the variants interleaved; with one seed every variant
shuffles, initializes and drops out the same way, and TensorFlow's deterministic ops make the
exact run repeat bit for bit, so the differences are the compression's). Prints the chief's final validation
accuracy and cross-entropy on the 297 test digits.

    python benchmarks/compressed_digits.py                        # 10 epochs, seeds 1 2 3
    python benchmarks/compressed_digits.py --epochs 2 --seeds 1   # quick
"""

import argparse
import importlib.util
import os
import statistics
import sys

from processes import REPO, report, run_local_cluster, worker_env

EXAMPLE = os.path.join(REPO, 'examples', 'multigpu', 'multigpu-digits.py')
RUN_TIMEOUT = 1200
METRICS = ('validation_accuracy', 'validation_cross_entropy_loss')


def example_model():
    """The ``Model`` class of the multi-GPU digits example."""
    spec = importlib.util.spec_from_file_location('multigpu_digits', EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.Model


def worker(args):
    """One worker (TF_CONFIG from the launcher); the chief prints the final metrics."""
    from tensorpack_lite import (BatchData, InferenceRunner, ScalarStats, TrainConfig,
                                 launch_train_with_config, tfv1)
    from tensorpack_lite.dataflow.dataset import Digits
    from tensorpack_lite.multiprocess.server import create_server
    from tensorpack_lite.train.distributed import CollectiveAllReduceTrainer
    from tensorpack_lite.train.horovod_trainer import RankShardData
    from tensorpack_lite.utils.utils import fix_rng_seed

    fix_rng_seed(args.seed)                      # the same shuffles on both workers
    compression = None if args.compression == 'none' else args.compression
    trainer = CollectiveAllReduceTrainer(['/cpu:0'], create_server(), compression=compression)
    tfv1.set_random_seed(args.seed)              # of the graph (the trainer enabled graph mode)
    train = BatchData(RankShardData(Digits('train'), trainer.task_index, trainer.num_worker), args.batch,
                      remainder=False)
    test = BatchData(Digits('test', shuffle=False), 99)
    validation = InferenceRunner(test, ScalarStats(['cross_entropy_loss', 'accuracy']))
    config = TrainConfig(model=example_model()(), dataflow=train, callbacks=[validation],
                         steps_per_epoch=len(train), max_epoch=args.epochs)
    launch_train_with_config(config, trainer)
    if trainer.is_chief:
        report({m: float(trainer.monitors.get_latest(m)) for m in METRICS})


def run(args, compression, seed):
    """The chief's metrics of one 2-worker run."""
    command = [sys.executable, os.path.abspath(__file__), '--role', 'worker', '--compression', compression,
               '--seed', seed, '--epochs', args.epochs, '--batch', args.batch]
    env = worker_env(TF_DETERMINISTIC_OPS='1')     # a run is then decided by its seed and compression
    return run_local_cluster(command, 2, 'compression {} seed {}'.format(compression, seed),
                             timeout=RUN_TIMEOUT, env=env)


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--epochs', type=int, default=10)
    parser.add_argument('--batch', type=int, default=32, help='per worker')
    parser.add_argument('--seeds', type=int, nargs='+', default=[1, 2, 3])
    parser.add_argument('--compressions', nargs='+', default=['none', 'fp16', 'bf16'],
                        choices=['none', 'fp16', 'bf16'])
    parser.add_argument('--role', choices=['worker'], help=argparse.SUPPRESS)
    parser.add_argument('--compression', default='none', help=argparse.SUPPRESS)
    parser.add_argument('--seed', type=int, default=1, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.role:
        worker(args)
        return
    results = {name: [] for name in args.compressions}
    print("2 workers x batch {}, {} epochs; final validation accuracy / cross-entropy:".format(
        args.batch, args.epochs))
    for seed in args.seeds:
        for name in args.compressions:
            metrics = run(args, name, seed)
            results[name].append(metrics)
            print("  seed {}  {:<5s} {:.4f} / {:.4f}".format(seed, name, *(metrics[m] for m in METRICS)),
                  flush=True)
    print("median over seeds {}:".format(' '.join(str(s) for s in args.seeds)))
    for name, runs in results.items():
        medians = [statistics.median(r[m] for r in runs) for m in METRICS]
        print("  {:<5s} {:.4f} / {:.4f}".format(name, *medians))


if __name__ == '__main__':
    main()
