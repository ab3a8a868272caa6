"""The training job of benchmarks/isolation_cost.py: one task of a CollectiveAllReduceTrainer
cluster (the launcher sets TF_CONFIG) training a small MLP on random data.

    python -m tensorpack_lite.cluster.launch --workers 2 -- python benchmarks/isolation_cost_job.py

The model: ``--features`` -> ``--hidden`` (ReLU) -> 10 classes, softmax cross-entropy, plain SGD,
one CPU tower per worker, ``--batch`` datapoints per worker and step. The data: random float32
features and labels from a fixed seed, the same on every worker, each worker training on its
share (RankShardData). One epoch of ``--warmup`` + ``--steps`` steps; every iteration (a step
and its callbacks) is timed from one step's end to the next one's, and the chief (worker 0)
prints the median of the ``--steps`` iterations after the warm-up as one line:

    STEPTIME {"median_ms": ..., "mean_ms": ..., "steps": ..., "tensorflow": ...}
"""

import argparse
import json
import statistics
import time

import numpy as np

from tensorpack_lite.callbacks import Callback
from tensorpack_lite.compat import tf, tfv1
from tensorpack_lite.dataflow import BatchData, DataFromList
from tensorpack_lite.train import ModelDesc, TrainConfig, launch_train_with_config

RESULT_PREFIX = 'STEPTIME '
SEED = 1234
CLASSES = 10


class SmallMLP(ModelDesc):
    """features -> hidden (ReLU) -> CLASSES, weights from a fixed seed."""

    def __init__(self, features, hidden):
        self.features, self.hidden = features, hidden

    def inputs(self):
        return [tf.TensorSpec([None, self.features], tf.float32, 'x'),
                tf.TensorSpec([None], tf.int32, 'label')]

    def build_graph(self, x, label):
        rng = np.random.RandomState(SEED)
        w0 = tfv1.get_variable('fc0/W', initializer=(rng.randn(self.features, self.hidden) /
                                                     np.sqrt(self.features)).astype('float32'))
        b0 = tfv1.get_variable('fc0/b', initializer=np.zeros(self.hidden, 'float32'))
        w1 = tfv1.get_variable('fc1/W', initializer=(rng.randn(self.hidden, CLASSES) /
                                                     np.sqrt(self.hidden)).astype('float32'))
        logits = tf.matmul(tf.nn.relu(tf.matmul(x, w0) + b0), w1)
        return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=label, logits=logits),
                              name='cost')

    def optimizer(self):
        return tfv1.train.GradientDescentOptimizer(0.01)


class IterationClock(Callback):
    """The time of every iteration, from one step's end (after the callbacks before this one)
    to the next one's; the first ``warmup`` iterations left out. Chief only."""

    def __init__(self, warmup):
        self.warmup, self.times, self._last, self._count = warmup, [], None, 0

    def _before_epoch(self):
        self._last = time.perf_counter()

    def _trigger_step(self):
        now = time.perf_counter()
        self._count += 1
        if self._count > self.warmup:
            self.times.append(now - self._last)
        self._last = now


def random_samples(count, features):
    """``count`` [x, label] datapoints from the fixed seed (the same on every worker)."""
    rng = np.random.RandomState(SEED)
    x = rng.randn(count, features).astype('float32')
    labels = rng.randint(0, CLASSES, size=count).astype('int32')
    return [[x[i], labels[i]] for i in range(count)]


def main():
    from tensorpack_lite.multiprocess.server import create_server
    from tensorpack_lite.train.distributed import CollectiveAllReduceTrainer
    from tensorpack_lite.train.horovod_trainer import RankShardData

    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--steps', type=int, default=300, help='timed steps')
    parser.add_argument('--warmup', type=int, default=10, help='steps before the timed ones')
    parser.add_argument('--batch', type=int, default=32, help='datapoints per worker and step')
    parser.add_argument('--features', type=int, default=64)
    parser.add_argument('--hidden', type=int, default=256)
    parser.add_argument('--tag', help='ignored: lets the benchmark find its processes')
    args = parser.parse_args()

    server = create_server()
    trainer = CollectiveAllReduceTrainer(['/cpu:0'], server)
    steps = args.warmup + args.steps
    samples = random_samples(steps * args.batch * trainer.num_worker, args.features)
    df = BatchData(RankShardData(DataFromList(samples, shuffle=False), trainer.task_index,
                                 trainer.num_worker), args.batch)
    clock = IterationClock(args.warmup)
    config = TrainConfig(model=SmallMLP(args.features, args.hidden), dataflow=df, callbacks=[clock],
                         extra_callbacks=[], monitors=[], steps_per_epoch=steps, max_epoch=1)
    launch_train_with_config(config, trainer)
    if trainer.is_chief:
        print(RESULT_PREFIX + json.dumps({
            'median_ms': statistics.median(clock.times) * 1e3, 'mean_ms': statistics.mean(clock.times) * 1e3,
            'steps': len(clock.times), 'tensorflow': tf.__version__}), flush=True)


if __name__ == '__main__':
    main()
