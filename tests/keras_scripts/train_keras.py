"""Trains a tiny tf_keras model with tensorpack_lite.contrib.keras and prints what the tests of
tests/test_keras.py check, as `key: value` lines. Run with TF_USE_LEGACY_KERAS=1.

Usage: train_keras.py TRAINER LOGDIR    (TRAINER: simple, replicated or ps)
"""

import json
import os
import sys

import numpy as np
import tensorflow.compat.v1 as tf
from tensorflow import keras

from tensorpack_lite import (BatchData, Callback, DataFromList, FeedInput, SimpleTrainer,
                             SyncMultiGPUTrainerParameterServer, SyncMultiGPUTrainerReplicated, logger)
from tensorpack_lite.contrib.keras import KerasModel
from tensorpack_lite.tfutils.sesscreate import NewSessionCreator

KL = keras.layers
trainer_name, logdir = sys.argv[1], sys.argv[2]


def make_data(n, seed):
    """Two Gaussian blobs in 8 dimensions; one-hot labels."""
    rng = np.random.RandomState(seed)
    labels = rng.randint(0, 2, size=n)
    points = rng.randn(n, 8).astype('float32') + np.where(labels[:, None] == 1, 1.5, -1.5).astype('float32')
    return [[p, np.eye(2, dtype='float32')[k]] for p, k in zip(points, labels)]


def get_model(x):
    return keras.Sequential([
        KL.InputLayer(input_tensor=x),
        KL.Dense(16, activation='relu', kernel_regularizer=keras.regularizers.l2(0.01)),
        KL.BatchNormalization(momentum=0.5),
        KL.Dropout(0.5),
        KL.Dense(2, activation='softmax')])


class Probe(Callback):
    """Records the moving mean before and after training, the costs of the training tower,
    and runs the training tower and an inference tower twice each on the same batch."""

    def _setup_graph(self):
        self.predictor = self.trainer.get_predictor(['x', 'y'], ['categorical_crossentropy',
                                                                 'categorical_accuracy'])

    def _before_train(self):
        self.moving_mean_before = self._moving_mean()

    def _moving_mean(self):
        var, = [v for v in tf.global_variables() if v.op.name == 'batch_normalization/moving_mean']
        return self.trainer.sess.run(var)

    def _after_train(self):
        moving_mean = self._moving_mean()
        print('moving_mean_change:', float(np.abs(moving_mean - self.moving_mean_before).max()))
        tower = self.trainer.towers.training()[0]
        points = np.stack([d[0] for d in DATA[:64]])
        labels = np.stack([d[1] for d in DATA[:64]])
        feed = dict(zip(tower.get_tensors(['x', 'y']), [points, labels]))
        costs = tower.get_tensors(['categorical_crossentropy', 'regularize_cost', 'total_loss'])
        first = self.trainer.sess.run(costs, feed_dict=feed)
        second = self.trainer.sess.run(costs, feed_dict=feed)
        print('costs:', json.dumps([float(c) for c in first]))
        print('training_tower_repeatable:', bool(first[0] == second[0]))
        inference = [self.predictor(points, labels) for _ in range(2)]
        print('inference_tower_repeatable:', bool(inference[0][0] == inference[1][0]))
        print('inference_accuracy:', float(inference[0][1]))
        print('update_ops:', len(tf.get_collection(tf.GraphKeys.UPDATE_OPS)))
        print('local_model_variables:', json.dumps(sorted(
            v.op.name for v in tf.local_variables() if v.op.name.startswith('tower1/')
            and 'Adam' not in v.op.name and 'power' not in v.op.name)))


DATA = make_data(512, 0)
logger.set_logger_dir(logdir, action='d')
trainer = {'simple': lambda: SimpleTrainer(),
           'replicated': lambda: SyncMultiGPUTrainerReplicated(['/cpu:0', '/cpu:1'], mode='cpu'),
           'ps': lambda: SyncMultiGPUTrainerParameterServer(['/cpu:0', '/cpu:1'], ps_device='cpu'),
           }[trainer_name]()
train_df = BatchData(DataFromList(DATA, shuffle=True), 32)
model = KerasModel(get_model, input_signature=[tf.TensorSpec([None, 8], tf.float32, 'x')],
                   target_signature=[tf.TensorSpec([None, 2], tf.float32, 'y')],
                   input=FeedInput(train_df) if trainer_name == 'simple' else train_df, trainer=trainer)
model.compile(optimizer=tf.train.AdamOptimizer(0.01), loss='categorical_crossentropy',
              metrics='categorical_accuracy')
config = tf.ConfigProto(device_count={'CPU': 2})
model.fit(validation_data=BatchData(DataFromList(make_data(128, 1), shuffle=False), 32),
          callbacks=[Probe()], steps_per_epoch=16, max_epoch=3,
          session_creator=NewSessionCreator(config=config))
with open(os.path.join(logdir, 'stats.json')) as f:
    stats = json.load(f)
print('stats:', json.dumps(stats))
