#!/usr/bin/env python
"""Data-parallel training of a small convnet on the 8x8 digits, one tower per device.

With GPUs, one tower per GPU. Without, the towers run on virtual CPU devices: the session is
created with ``ConfigProto(device_count={'CPU': N})``, which gives ``/cpu:0`` ... ``/cpu:N-1``
in one process, so the multi-device code paths run on any machine. Each tower takes its own
batch; the gradients are all-reduced and every tower keeps a replica of the variables
(``SyncMultiGPUTrainerReplicated``), or they live in one place (``--trainer ps``).

    python examples/multigpu/multigpu-digits.py                   # 2 towers
    python examples/multigpu/multigpu-digits.py --towers 4 --trainer ps
    python examples/multigpu/multigpu-digits.py --max-epoch 1 --steps-per-epoch 5  # smoke run
"""

import argparse

from tensorpack_lite import (
    BatchData, ClassificationError, Conv2D, InferenceRunner, LinearWrap, ModelDesc,
    ModelSaver, ScalarStats, ScheduledHyperParamSetter, SyncMultiGPUTrainerParameterServer,
    SyncMultiGPUTrainerReplicated, TrainConfig, argscope, launch_train_with_config, logger)
from tensorpack_lite import tfv1 as tf
from tensorpack_lite.dataflow.dataset import Digits
from tensorpack_lite.tfutils.common import get_default_sess_config
from tensorpack_lite.tfutils.summary import add_moving_summary
from tensorpack_lite.utils.gpu import get_num_gpu


class Model(ModelDesc):
    """Two 3x3 convolutions, a pooling, a hidden layer with dropout; 8x8 inputs."""

    def inputs(self):
        return [tf.TensorSpec((None, 8, 8), tf.float32, 'input'),
                tf.TensorSpec((None,), tf.int32, 'label')]

    def build_graph(self, image, label):
        image = tf.expand_dims(image * 2 - 1, 3)
        with argscope(Conv2D, kernel_size=3, activation=tf.nn.relu):
            logits = (LinearWrap(image)
                      .Conv2D('conv0', 32)
                      .Conv2D('conv1', 64)
                      .MaxPooling('pool0', 2)
                      .FullyConnected('fc0', 256, activation=tf.nn.relu)
                      .Dropout('dropout', rate=0.3)
                      .FullyConnected('fc1', 10)())
        cost = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
            logits=logits, labels=label), name='cross_entropy_loss')
        correct = tf.cast(tf.nn.in_top_k(logits, label, 1), tf.float32)
        accuracy = tf.reduce_mean(correct, name='accuracy')
        tf.subtract(1.0, correct, name='incorrect_vector')
        add_moving_summary(cost, accuracy)
        return cost

    def optimizer(self):
        lr = tf.get_variable('learning_rate', initializer=1e-3, trainable=False)
        return tf.train.AdamOptimizer(lr)


def get_towers(num_towers):
    """(towers, session config): the GPUs when there are enough, else virtual CPU devices."""
    config = get_default_sess_config()
    if get_num_gpu() >= num_towers:
        return list(range(num_towers)), config
    logger.info("{} GPU(s) for {} towers: using {} virtual CPU devices.".format(
        get_num_gpu(), num_towers, num_towers))
    config.device_count['CPU'] = num_towers
    return ['/cpu:{}'.format(k) for k in range(num_towers)], config


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[1])
    parser.add_argument('--towers', type=int, default=2, help='number of towers (default 2)')
    parser.add_argument('--trainer', choices=['replicated', 'ps'], default='replicated',
                        help='replicated variables with all-reduce, or a parameter server')
    parser.add_argument('--batch', type=int, default=32, help='batch size of each tower (default 32)')
    parser.add_argument('--max-epoch', type=int, default=10, help='number of epochs (default 10)')
    parser.add_argument('--steps-per-epoch', type=int, help='default: one pass over the training set')
    parser.add_argument('--mixed-precision', choices=['bf16', 'fp16'],
                        help='compute in 16 bits (docs/mixed_precision.md; default: float32)')
    parser.add_argument('--logdir', default='train_log/multigpu-digits',
                        help='where logs, stats.json and checkpoints go (replaced if it exists; '
                             'default %(default)s)')
    args = parser.parse_args()

    logger.set_logger_dir(args.logdir, action='d')
    towers, session_config = get_towers(args.towers)
    if args.trainer == 'replicated':
        trainer = SyncMultiGPUTrainerReplicated(towers)
    else:
        trainer = SyncMultiGPUTrainerParameterServer(towers, ps_device='cpu')
    train = BatchData(Digits('train'), args.batch, remainder=False)
    test = BatchData(Digits('test', shuffle=False), 99)   # 297 test digits in 3 batches
    # Each step consumes one batch per tower.
    steps_per_epoch = args.steps_per_epoch or len(train) // len(towers)
    config = TrainConfig(
        model=Model(), dataflow=train, session_config=session_config,
        callbacks=[ModelSaver(),
                   InferenceRunner(test, [ScalarStats(['cross_entropy_loss', 'accuracy']),
                                          ClassificationError('incorrect_vector')]),
                   ScheduledHyperParamSetter('learning_rate', [(args.max_epoch * 2 // 3, 2e-4)])],
        steps_per_epoch=steps_per_epoch, max_epoch=args.max_epoch, mixed_precision=args.mixed_precision)
    launch_train_with_config(config, trainer)
    logger.info("Trained {} towers on {}; final validation accuracy: {:.4f}".format(
        len(towers), ', '.join(str(t) for t in towers), 1 - trainer.monitors.get_latest('validation_error')))


if __name__ == '__main__':
    main()
