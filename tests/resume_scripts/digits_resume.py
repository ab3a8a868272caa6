"""The program of issue 46, as a user writes it with tensorpack's public API: digits, shuffled,
randomly flipped, batched by 8, 3 epochs of 30 steps, momentum SGD with an epoch schedule,
AutoResumeTrainConfig. The test runs it, stops it (SIGTERM or SIGKILL at a step), runs it again,
and compares the end with an uninterrupted run.

    python digits_resume.py LOGDIR [--input queue|feed] [--towers N] [--save-every K] [--sync-save]
                            [--shuffle-buffer N] [--weight-average DECAY] [--accumulate K]
                            [--shards URL] [--sigterm-at STEP | --sigkill-at STEP]

``--shuffle-buffer N``: each datapoint also carries 20 kB of bytes (an encoded image, say) through a
``LocallyShuffleData(N)``, dropped after it. ``--weight-average DECAY``: a
``WeightAverage(DECAY, every_k_steps=2)`` first among the callbacks. ``--accumulate K``:
``TrainConfig(accumulate=K)``, K micro-batches per update. ``--shards URL``: the datapoints are
streamed from the shards at URL (the same digits, written by the test) by a ``ShardedData``.

Every step's global step is appended to LOGDIR/steps.txt (to count the steps run twice). The
callback that does it, placed after ModelSaver, also counts the steps in its own state (resumed
with the checkpoint) and writes the count to LOGDIR/count.txt at the end.
"""

import argparse
import os
import signal

from tensorpack_lite import (AugmentImageComponent, AutoResumeTrainConfig, BatchData, Callback, DataFromList,
                             FeedInput, FullyConnected, LocallyShuffleData, MapData, ModelDesc, ModelSaver,
                             PeriodicTrigger, QueueInput, ScheduledHyperParamSetter, SimpleTrainer,
                             SyncMultiGPUTrainerReplicated, WeightAverage, imgaug, launch_train_with_config,
                             logger)
from tensorpack_lite import tfv1 as tf
from tensorpack_lite.dataflow import ShardedData
from tensorpack_lite.dataflow.dataset import Digits
from tensorpack_lite.utils.utils import fix_rng_seed

STEPS_PER_EPOCH, BATCH = 30, 8


class Model(ModelDesc):
    def inputs(self):
        return [tf.TensorSpec([None, 8, 8], tf.float32, 'image'), tf.TensorSpec([None], tf.int32, 'label')]

    def build_graph(self, image, label):
        hidden = FullyConnected('fc1', tf.reshape(image, [-1, 64]) / 16.0, 32, activation=tf.nn.relu)
        logits = FullyConnected('fc2', hidden, 10)
        return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=label, logits=logits),
                              name='cost')

    def optimizer(self):
        lr = tf.get_variable('learning_rate', initializer=0.1, trainable=False)
        return tf.train.MomentumOptimizer(lr, 0.9)


class StepLog(Callback):
    """Appends each step's global step to a file and counts the steps in its state; stops the
    process at a step when asked."""

    def __init__(self, path, signal_at, signum):
        self._path, self._signal_at, self._signum = path, signal_at, signum
        self._count = 0

    def _trigger_step(self):
        self._count += 1
        with open(self._path, 'a') as f:
            f.write('{}\n'.format(self.global_step))
        if self.global_step == self._signal_at:
            os.kill(os.getpid(), self._signum)

    def _get_state(self):
        return {'count': self._count}

    def _set_state(self, state):
        self._count = state['count']

    def _after_train(self):
        with open(os.path.join(os.path.dirname(self._path), 'count.txt'), 'w') as f:
            f.write('{}\n'.format(self._count))


def datapoints():
    """The digits of an epoch."""
    train = Digits('train')
    train.reset_state()
    return [[image.astype('float32'), label] for image, label in train][:STEPS_PER_EPOCH * BATCH]


def dataflow(shuffle_buffer=0, shards=None):
    if shards:
        df = ShardedData(shards, seed=5, window=16, lanes=4, cache_bytes=1 << 20)
        return BatchData(AugmentImageComponent(df, [imgaug.Flip(horiz=True)]), BATCH)
    data = datapoints()
    if shuffle_buffer:
        data = [dp + [bytes([k % 256]) * 20000] for k, dp in enumerate(data)]
    df = DataFromList(data, shuffle=True)
    if shuffle_buffer:
        df = MapData(LocallyShuffleData(df, shuffle_buffer), lambda dp: dp[:2])
    df = AugmentImageComponent(df, [imgaug.Flip(horiz=True)])
    return BatchData(df, BATCH)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument('logdir')
    parser.add_argument('--input', choices=['queue', 'feed'], default='queue')
    parser.add_argument('--towers', type=int, default=1)
    parser.add_argument('--save-every', type=int, default=0)
    parser.add_argument('--sync-save', action='store_true', help='ModelSaver(background=False)')
    parser.add_argument('--shuffle-buffer', type=int, default=0)
    parser.add_argument('--weight-average', type=float, default=None)
    parser.add_argument('--accumulate', type=int, default=1)
    parser.add_argument('--shards', default=None)
    parser.add_argument('--sigterm-at', type=int, default=-1)
    parser.add_argument('--sigkill-at', type=int, default=-1)
    args = parser.parse_args()

    fix_rng_seed(1234)
    trainer = (SimpleTrainer() if args.towers == 1 else
               SyncMultiGPUTrainerReplicated(['/cpu:{}'.format(k) for k in range(args.towers)]))
    tf.set_random_seed(1234)     # the trainer's graph (graph mode starts with the trainer)
    logger.set_logger_dir(args.logdir, action='k')
    signal_at, signum = ((args.sigkill_at, signal.SIGKILL) if args.sigkill_at >= 0
                         else (args.sigterm_at, signal.SIGTERM))
    saver = ModelSaver(max_to_keep=3, background=not args.sync_save)
    callbacks = [PeriodicTrigger(saver, every_k_steps=args.save_every, every_k_epochs=1) if args.save_every
                 else saver,
                 ScheduledHyperParamSetter('learning_rate', [(1, 0.05), (2, 0.02)]),
                 StepLog(os.path.join(args.logdir, 'steps.txt'), signal_at, signum)]
    if args.weight_average is not None:
        callbacks.insert(0, WeightAverage(args.weight_average, every_k_steps=2))
    df = dataflow(args.shuffle_buffer, args.shards)
    source = QueueInput(df) if args.input == 'queue' else FeedInput(df)
    session_config = tf.ConfigProto(device_count={'CPU': max(args.towers, 1)},
                                    intra_op_parallelism_threads=1, inter_op_parallelism_threads=1)
    config = AutoResumeTrainConfig(model=Model(), data=source, callbacks=callbacks, max_epoch=3,
                                   steps_per_epoch=STEPS_PER_EPOCH, session_config=session_config,
                                   accumulate=args.accumulate)
    launch_train_with_config(config, trainer)


if __name__ == '__main__':
    main()
