"""Trains a tiny tf_keras model with tensorpack_lite.contrib.keras and prints what the tests of
tests/contrib/test_keras.py check, as `key: value` lines. Run with TF_USE_LEGACY_KERAS=1.

Usage: train_keras.py TRAINER LOGDIR    (TRAINER: simple, replicated or ps: KerasModel on that
trainer; modeldesc: the Keras model called in a ModelDesc trained by a SimpleTrainer, its
learning phase fed by KerasPhaseCallback; modeldesc-nophase: the same without it)
"""

import json
import os
import sys

import numpy as np
import tensorflow.compat.v1 as tf
from tensorflow import keras

from tensorpack_lite import (BatchData, Callback, DataFromList, FeedInput, InferenceRunner, ModelDesc,
                             ScalarStats, SimpleTrainer, SyncMultiGPUTrainerParameterServer,
                             SyncMultiGPUTrainerReplicated, TrainConfig, launch_train_with_config, logger)
from tensorpack_lite.contrib.keras import KerasModel, KerasPhaseCallback
from tensorpack_lite.utils.argtools import memoized
from tensorpack_lite.tfutils.sesscreate import NewSessionCreator
from tensorpack_lite.tfutils.summary import add_moving_summary
from tensorpack_lite.tfutils.tower import get_current_tower_context

KL = keras.layers
trainer_name, logdir = sys.argv[1], sys.argv[2]


def make_data(n, seed):
    """Two Gaussian blobs in 8 dimensions; one-hot labels."""
    rng = np.random.RandomState(seed)
    labels = rng.randint(0, 2, size=n)
    points = rng.randn(n, 8).astype('float32') + np.where(labels[:, None] == 1, 1.5, -1.5).astype('float32')
    return [[p, np.eye(2, dtype='float32')[k]] for p, k in zip(points, labels)]


def get_model(x=None):
    return keras.Sequential(([KL.InputLayer(input_tensor=x)] if x is not None else []) + [
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
        var, = [v for v in tf.global_variables() if v.op.name.endswith('batch_normalization/moving_mean')]
        return self.trainer.sess.run(var)

    def _after_train(self):
        moving_mean = self._moving_mean()
        print('moving_mean_change:', float(np.abs(moving_mean - self.moving_mean_before).max()))
        tower = self.trainer.towers.training()[0]
        points = np.stack([d[0] for d in DATA[:64]])
        labels = np.stack([d[1] for d in DATA[:64]])
        feed = dict(zip(tower.get_tensors(['x', 'y']), [points, labels]))
        placeholders = [op.outputs[0] for op in self.graph.get_operations()
                        if op.name == 'keras_learning_phase']
        print('learning_phase_placeholder:', bool(placeholders))
        feed.update({p: True for p in placeholders})   # what KerasPhaseCallback feeds to training runs
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


class Model(ModelDesc):
    """The same network called in a ModelDesc, as tensorpack's examples/keras/mnist-keras.py does."""

    def inputs(self):
        return [tf.TensorSpec([None, 8], tf.float32, 'x'), tf.TensorSpec([None, 2], tf.float32, 'y')]

    def build_graph(self, x, y):
        model = memoized_model()
        prob = model(x)
        if get_current_tower_context().is_main_training_tower:
            for op in model.updates:
                tf.add_to_collection(tf.GraphKeys.UPDATE_OPS, op)
        ce = tf.reduce_mean(keras.losses.categorical_crossentropy(y, prob), name='categorical_crossentropy')
        acc = tf.reduce_mean(keras.metrics.categorical_accuracy(y, prob), name='categorical_accuracy')
        reg = tf.add_n(model.losses, name='regularize_cost')
        total = tf.add(ce, reg, name='total_loss')
        add_moving_summary(ce, acc, reg, total)
        return total

    def optimizer(self):
        return tf.train.AdamOptimizer(0.01)


memoized_model = memoized(get_model)
DATA = make_data(512, 0)
logger.set_logger_dir(logdir, action='d')
train_df = BatchData(DataFromList(DATA, shuffle=True), 32)
validation_df = BatchData(DataFromList(make_data(128, 1), shuffle=False), 32)
session_creator = NewSessionCreator(config=tf.ConfigProto(device_count={'CPU': 2}))
if trainer_name.startswith('modeldesc'):
    phase = [KerasPhaseCallback(True)] if trainer_name == 'modeldesc' else []
    launch_train_with_config(TrainConfig(
        model=Model(), dataflow=train_df, steps_per_epoch=16, max_epoch=3, session_creator=session_creator,
        callbacks=phase + [Probe(), InferenceRunner(validation_df, ScalarStats(
            ['categorical_crossentropy', 'categorical_accuracy', 'total_loss']))]), SimpleTrainer())
else:
    trainer = {'simple': lambda: SimpleTrainer(),
               'replicated': lambda: SyncMultiGPUTrainerReplicated(['/cpu:0', '/cpu:1'], mode='cpu'),
               'ps': lambda: SyncMultiGPUTrainerParameterServer(['/cpu:0', '/cpu:1'], ps_device='cpu'),
               }[trainer_name]()
    model = KerasModel(get_model, input_signature=[tf.TensorSpec([None, 8], tf.float32, 'x')],
                       target_signature=[tf.TensorSpec([None, 2], tf.float32, 'y')],
                       input=FeedInput(train_df) if trainer_name == 'simple' else train_df, trainer=trainer)
    model.compile(optimizer=tf.train.AdamOptimizer(0.01), loss='categorical_crossentropy',
                  metrics='categorical_accuracy')
    model.fit(validation_data=validation_df, callbacks=[Probe()], steps_per_epoch=16, max_epoch=3,
              session_creator=session_creator)
with open(os.path.join(logdir, 'stats.json')) as f:
    stats = json.load(f)
print('stats:', json.dumps(stats))
