#!/usr/bin/env python
"""Data-parallel training of an MLP on the 8x8 digits with HorovodTrainer, one process per rank.

Launch one copy per rank with mpiexec (MPI engine: pip install "tensorpack_lite[mpi]", any
supported TensorFlow) or horovodrun (Horovod, TensorFlow <= 2.18.1), here 2 ranks on this machine::

    mpiexec -n 2 python examples/horovod/horovod-digits.py
    horovodrun -np 2 -H localhost:2 --gloo python examples/horovod/horovod-digits.py

Each rank trains on its own share of the training digits (every rank's batch is ``--batch``),
the gradients are averaged across ranks each step, and rank 0's initial variables are
broadcast to the others. Only rank 0 logs to ``train_log/horovod-digits``, validates and
saves checkpoints. The log says which engine runs ("... using MPI (mpi4py ...)" or
"... using Horovod"); see docs/horovod.md.
"""

import argparse

from tensorpack_lite import (
    BatchData, ClassificationError, FullyConnected, InferenceRunner, LocallyShuffleData, ModelDesc,
    ModelSaver, ScalarStats, TrainConfig, launch_train_with_config, logger)
from tensorpack_lite import tfv1 as tf
from tensorpack_lite.dataflow.dataset import Digits
from tensorpack_lite.tfutils.summary import add_moving_summary
from tensorpack_lite.train.horovod_trainer import HorovodTrainer, RankShardData


class Model(ModelDesc):
    """A two-layer perceptron on the 64 pixels."""

    def inputs(self):
        return [tf.TensorSpec((None, 8, 8), tf.float32, 'input'),
                tf.TensorSpec((None,), tf.int32, 'label')]

    def build_graph(self, image, label):
        hidden = FullyConnected('fc0', image, 128, activation=tf.nn.relu)
        logits = FullyConnected('fc1', hidden, 10)
        cost = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
            logits=logits, labels=label), name='cross_entropy_loss')
        correct = tf.cast(tf.nn.in_top_k(logits, label, 1), tf.float32)
        accuracy = tf.reduce_mean(correct, name='accuracy')
        tf.subtract(1.0, correct, name='incorrect_vector')
        add_moving_summary(cost, accuracy)
        return cost

    def optimizer(self):
        return tf.train.AdamOptimizer(3e-3)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[1])
    parser.add_argument('--batch', type=int, default=32, help='batch size of each rank (default 32)')
    parser.add_argument('--max-epoch', type=int, default=10, help='number of epochs (default 10)')
    parser.add_argument('--steps-per-epoch', type=int, help="default: one pass over a rank's share")
    parser.add_argument('--mixed-precision', choices=['bf16', 'fp16'],
                        help='compute in 16 bits (docs/mixed_precision.md; default: float32)')
    parser.add_argument('--logdir', default='train_log/horovod-digits',
                        help="rank 0's logs, stats.json and checkpoints (replaced if it exists; "
                             "default %(default)s)")
    args = parser.parse_args()

    trainer = HorovodTrainer()
    if trainer.is_chief:
        logger.set_logger_dir(args.logdir, action='d')
    # Every rank reads the digits in the same order and takes every size-th one, then
    # shuffles its own share.
    share = RankShardData(Digits('train', shuffle=False), trainer.rank, trainer.size)
    train = BatchData(LocallyShuffleData(share, len(share)), args.batch, remainder=False)
    test = BatchData(Digits('test', shuffle=False), 99)   # 297 test digits in 3 batches
    config = TrainConfig(
        model=Model(), dataflow=train,
        callbacks=[ModelSaver(),
                   InferenceRunner(test, [ScalarStats(['cross_entropy_loss', 'accuracy']),
                                          ClassificationError('incorrect_vector')])],
        steps_per_epoch=args.steps_per_epoch or len(train), max_epoch=args.max_epoch,
        mixed_precision=args.mixed_precision)
    launch_train_with_config(config, trainer)
    if trainer.is_chief:
        logger.info("{} ranks; final validation accuracy: {:.4f}".format(
            trainer.size, 1 - trainer.monitors.get_latest('validation_error')))


if __name__ == '__main__':
    main()
