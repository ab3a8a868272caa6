#!/usr/bin/env python
"""Step time of data-parallel trainers with k towers on k virtual CPU devices, against one
tower on the k-fold batch, in one run.

Every variant trains the same model on the same total batch (k x per-tower batch) from
constant inputs (DummyConstantInput, no input pipeline), and its training op is timed with
``sess.run`` in interleaved rounds; medians of the rounds after a warm-up are compared
with the single tower. Virtual CPU devices share the machine's cores, so this measures the
cost of splitting a step into towers (and of reducing their gradients), not a speed-up;
on real GPUs each tower has its own device. Machines here are noisy: read the ratios.

    python benchmarks/multigpu.py --towers 2 --rounds 5
"""

import argparse
import statistics
import time

from tensorpack_lite import tfv1 as tf
from tensorpack_lite.input_source import DummyConstantInput
from tensorpack_lite.tfutils.common import get_default_sess_config
from tensorpack_lite.tfutils.sesscreate import NewSessionCreator
from tensorpack_lite.train import (ModelDesc, SimpleTrainer, SyncMultiGPUTrainerParameterServer,
                                   SyncMultiGPUTrainerReplicated)
from tensorpack_lite.utils import logger


class MLP(ModelDesc):
    """784 -> 512 -> 512 -> 10."""

    def inputs(self):
        return [tf.TensorSpec([None, 784], tf.float32, 'image'), tf.TensorSpec([None], tf.int32, 'label')]

    def build_graph(self, image, label):
        x = image
        for i, width in enumerate([512, 512]):
            x = tf.nn.relu(tf.matmul(x, tf.get_variable('fc{}/W'.format(i), [x.shape[-1], width])) +
                           tf.get_variable('fc{}/b'.format(i), [width], initializer=tf.zeros_initializer()))
        logits = tf.matmul(x, tf.get_variable('out/W', [512, 10]))
        return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=label, logits=logits),
                              name='cost')

    def optimizer(self):
        return tf.train.MomentumOptimizer(1e-3, 0.9)


class Variant:
    """One trainer built in a graph of its own, with a session, ready to time steps."""

    def __init__(self, name, make_trainer, batch, num_cpu):
        self.name = name
        self.graph = tf.Graph()
        with self.graph.as_default():
            trainer = make_trainer()
            model = MLP()
            trainer.setup_graph(model.get_input_signature(), DummyConstantInput([[batch, 784], [batch]]),
                                model.build_graph, model.get_optimizer)
            config = get_default_sess_config()
            config.device_count['CPU'] = num_cpu
            self.sess = NewSessionCreator(config=config).create_session()
            sync = [op for op in self.graph.get_operations()
                    if op.name.endswith('sync_variables_from_main_tower')]
            if sync:   # what the trainer's callback runs before training
                self.sess.run(sync[0])
            self.train_op = trainer.train_op
        self.times = []

    def time_round(self, steps):
        start = time.perf_counter()
        for _ in range(steps):
            self.sess.run(self.train_op)
        self.times.append((time.perf_counter() - start) / steps)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--towers', type=int, default=2)
    parser.add_argument('--batch', type=int, default=64, help='per tower')
    parser.add_argument('--rounds', type=int, default=5)
    parser.add_argument('--steps', type=int, default=20, help='steps per round')
    args = parser.parse_args()
    logger.setLevel('WARNING')
    k, batch = args.towers, args.batch
    devices = ['/cpu:{}'.format(i) for i in range(k)]
    variants = [
        Variant('1 tower, batch {}'.format(k * batch), SimpleTrainer, k * batch, 1),
        Variant('{} towers, parameter server'.format(k),
                lambda: SyncMultiGPUTrainerParameterServer(devices, ps_device='cpu'), batch, k),
        Variant("{} towers, replicated 'gpu'".format(k),
                lambda: SyncMultiGPUTrainerReplicated(devices, mode='gpu'), batch, k),
        Variant("{} towers, replicated 'collective'".format(k),
                lambda: SyncMultiGPUTrainerReplicated(devices, mode='collective'), batch, k),
    ]
    for variant in variants:   # warm-up
        variant.time_round(3)
        variant.times.clear()
    for _ in range(args.rounds):
        for variant in variants:
            variant.time_round(args.steps)
    base = statistics.median(variants[0].times)
    print("total batch {} = {} towers x {} per tower; median of {} rounds of {} steps".format(
        k * batch, k, batch, args.rounds, args.steps))
    for variant in variants:
        median = statistics.median(variant.times)
        print("{:<36s} {:8.2f} ms/step   ratio to 1 tower: {:.2f}".format(
            variant.name, median * 1e3, median / base))
    for variant in variants:
        variant.sess.close()


if __name__ == '__main__':
    main()
