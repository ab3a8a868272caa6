#!/usr/bin/env python
"""A Keras 2 (tf_keras) convnet on the 8x8 digits, trained by tensorpack_lite's trainers.

``KerasModel`` builds the Keras model in the tower function: the model gets one tower per
device (``--towers``; virtual CPU devices without GPUs), an ``InferenceRunner`` on the test
digits after every epoch, and ``ModelSaver`` checkpoints. BatchNormalization's moving averages
and the L2 regularization of the dense layer are taken care of. Needs the extra ``[keras]``
(``pip install "tensorpack_lite[keras]"``); run it with ``TF_USE_LEGACY_KERAS=1`` so that
``tf.keras`` is tf_keras too (the script imports ``tf_keras`` itself). See docs/keras.md.

    TF_USE_LEGACY_KERAS=1 python examples/keras/keras-digits.py
    TF_USE_LEGACY_KERAS=1 python examples/keras/keras-digits.py --towers 2 --trainer replicated
"""

import argparse

import numpy as np
import tf_keras as keras

from tensorpack_lite import (BatchData, MapData, ModelSaver, SimpleTrainer,
                             SyncMultiGPUTrainerParameterServer, SyncMultiGPUTrainerReplicated, logger)
from tensorpack_lite import tfv1 as tf
from tensorpack_lite.contrib.keras import KerasModel
from tensorpack_lite.dataflow.dataset import Digits
from tensorpack_lite.tfutils.common import get_default_sess_config
from tensorpack_lite.tfutils.sesscreate import NewSessionCreator
from tensorpack_lite.utils.gpu import get_num_gpu

KL = keras.layers


def get_model(image):
    """The Keras model, built on the tower's input tensor."""
    return keras.Sequential([
        KL.InputLayer(input_tensor=image),
        KL.Conv2D(32, 3, padding='same', activation='relu'),
        KL.BatchNormalization(momentum=0.9),
        KL.Conv2D(64, 3, padding='same', activation='relu'),
        KL.MaxPooling2D(),
        KL.Flatten(),
        KL.Dense(128, activation='relu', kernel_regularizer=keras.regularizers.l2(1e-4)),
        KL.Dropout(0.3),
        KL.Dense(10, activation='softmax')])


def as_keras_data(datapoint):
    """[8x8 image, label] -> [8x8x1 image in [-1, 1], one-hot label]."""
    image, label = datapoint
    return [image[:, :, None] * 2 - 1, np.eye(10, dtype='float32')[label]]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--trainer', choices=['simple', 'replicated', 'ps'], default='simple',
                        help='one tower, or --towers towers with replicated variables or a '
                             'parameter server')
    parser.add_argument('--towers', type=int, default=2,
                        help='towers of the multi-tower trainers (default 2)')
    parser.add_argument('--max-epoch', type=int, default=5, help='number of epochs (default 5)')
    parser.add_argument('--steps-per-epoch', type=int, help='default: one pass over the training set')
    parser.add_argument('--logdir', default='train_log/keras-digits',
                        help='where logs, stats.json and checkpoints go (replaced; default %(default)s)')
    args = parser.parse_args()

    logger.set_logger_dir(args.logdir, action='d')
    config = get_default_sess_config()
    if args.trainer == 'simple':
        trainer = SimpleTrainer()
    else:
        towers = list(range(args.towers))
        if get_num_gpu() < args.towers:
            towers = ['/cpu:{}'.format(k) for k in towers]
            config.device_count['CPU'] = args.towers
        trainer = (SyncMultiGPUTrainerReplicated(towers, mode='cpu') if args.trainer == 'replicated'
                   else SyncMultiGPUTrainerParameterServer(towers, ps_device='cpu'))
    train = BatchData(MapData(Digits('train'), as_keras_data), 32, remainder=False)
    test = BatchData(MapData(Digits('test', shuffle=False), as_keras_data), 99)

    model = KerasModel(get_model,
                       input_signature=[tf.TensorSpec([None, 8, 8, 1], tf.float32, 'image')],
                       target_signature=[tf.TensorSpec([None, 10], tf.float32, 'label')],
                       input=train, trainer=trainer)
    model.compile(optimizer=tf.train.AdamOptimizer(1e-3), loss='categorical_crossentropy',
                  metrics='categorical_accuracy')
    num_towers = 1 if args.trainer == 'simple' else args.towers
    model.fit(validation_data=test, callbacks=[ModelSaver()], max_epoch=args.max_epoch,
              steps_per_epoch=args.steps_per_epoch or len(train) // num_towers,
              session_creator=NewSessionCreator(config=config))
    logger.info("Final validation accuracy: {:.4f}".format(
        trainer.monitors.get_latest('validation_categorical_accuracy')))


if __name__ == '__main__':
    main()
