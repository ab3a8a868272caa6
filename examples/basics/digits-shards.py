#!/usr/bin/env python
"""Write the digits as shards to a directory or a bucket, and train from them.

The training digits (the embedded ``Digits``, 1500 images) are written by ``save_shards`` to
``--data`` (a directory, or ``s3://bucket/key``: credentials and endpoint from the usual
``AWS_*`` variables), unless an index is there already; a small MLP then trains from a
``ShardedData`` over them, fed by ``QueueInput``, and is validated on the test digits. Run it
again with ``--resume`` after a stop: it goes on at its last checkpoint's step, with the data
where they were (docs/dataflow.md, "Sharded datasets on object storage").

    python examples/basics/digits-shards.py --data /tmp/digits-shards --max-epoch 5
    python examples/basics/digits-shards.py --data s3://bucket/digits --max-epoch 5
"""

import argparse

from tensorpack_lite import (AutoResumeTrainConfig, BatchData, FullyConnected, InferenceRunner, ModelDesc,
                             ModelSaver, QueueInput, ScalarStats, SimpleTrainer, launch_train_with_config,
                             logger)
from tensorpack_lite import tfv1 as tf
from tensorpack_lite.dataflow import ShardedData, ShardError, save_shards
from tensorpack_lite.dataflow.dataset import Digits


class Model(ModelDesc):
    def inputs(self):
        return [tf.TensorSpec([None, 8, 8], tf.float32, 'image'), tf.TensorSpec([None], tf.int32, 'label')]

    def build_graph(self, image, label):
        hidden = FullyConnected('fc1', tf.reshape(image, [-1, 64]), 64, activation=tf.nn.relu)
        logits = FullyConnected('fc2', hidden, 10)
        correct = tf.cast(tf.equal(tf.argmax(logits, 1, output_type=tf.int32), label), tf.float32)
        tf.reduce_mean(correct, name='accuracy')
        return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=label, logits=logits),
                              name='cost')

    def optimizer(self):
        return tf.train.AdamOptimizer(3e-3)


def write_once(url, shard_bytes):
    """The digits written to ``url``, unless a complete dataset is there."""
    try:
        return ShardedData(url).index
    except ShardError:
        return save_shards(Digits('train', shuffle=False), url, shard_bytes=shard_bytes)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[1])
    parser.add_argument('--data', required=True, help='where the shards are (a directory or s3://, gs://)')
    parser.add_argument('--shard-bytes', type=int, default=20000, help='bytes per shard (default 20000)')
    parser.add_argument('--cache-dir', help='the local cache of shards (default: a temporary directory)')
    parser.add_argument('--max-epoch', type=int, default=5, help='number of epochs (default 5)')
    parser.add_argument('--batch', type=int, default=32, help='batch size (default 32)')
    parser.add_argument('--logdir', default='train_log/digits-shards',
                        help='where logs and checkpoints go (default train_log/digits-shards)')
    parser.add_argument('--resume', action='store_true', help='go on from the last checkpoint in --logdir')
    args = parser.parse_args()

    index = write_once(args.data, args.shard_bytes)
    logger.info("{} digits in {} shards at {}".format(index['total'], len(index['shards']), args.data))
    logger.set_logger_dir(args.logdir, action='k' if args.resume else 'd')
    train = ShardedData(args.data, seed=1, window=256, lanes=4, cache_dir=args.cache_dir, cache_bytes=1 << 20)
    config = AutoResumeTrainConfig(
        model=Model(), data=QueueInput(BatchData(train, args.batch)), max_epoch=args.max_epoch,
        callbacks=[ModelSaver(), InferenceRunner(BatchData(Digits('test', shuffle=False), 100),
                                                 ScalarStats(['cost', 'accuracy']))])
    trainer = SimpleTrainer()
    launch_train_with_config(config, trainer)
    accuracy = trainer.monitors.get_latest('validation_accuracy')
    logger.info("Final validation accuracy: {:.4f}".format(accuracy))


if __name__ == '__main__':
    main()
