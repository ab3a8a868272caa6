"""A small regression whose statistics are scripted by epoch, for the callbacks that act on a
statistic (MinSaver, EarlyStopping, the monitors): the model, its dataflow of STEPS batches an
epoch, and :class:`ScriptedStat`.

Example::

    stat = ScriptedStat('val-error', {1: 3.0, 2: 1.0, 3: 2.0})
    config = TrainConfig(model=Model(), dataflow=dataflow(), max_epoch=3,
                         callbacks=[ModelSaver(), stat, MinSaver('val-error')])   # the best: epoch 2
"""

import numpy as np

from tensorpack_lite.callbacks.base import Callback
from tensorpack_lite.compat import tf, tfv1
from tensorpack_lite.dataflow import BatchData, DataFromList
from tensorpack_lite.tfutils.summary import add_moving_summary
from tensorpack_lite.train import ModelDesc

__all__ = ['STEPS', 'Model', 'ScriptedStat', 'dataflow']

STEPS = 2  # per epoch: 8 points in batches of 4


class Model(ModelDesc):
    """A linear regression; also a 0/1 'incorrect_vector' and a moving summary of its cost."""

    def inputs(self):
        return [tf.TensorSpec([None, 4], tf.float32, 'x'), tf.TensorSpec([None], tf.float32, 'y')]

    def build_graph(self, x, y):
        w = tfv1.get_variable('w', initializer=np.full((4, 1), 0.5, 'float32'))
        pred = tf.squeeze(tf.matmul(x, w), 1)
        tf.cast(tf.abs(pred - y) > 1.0, tf.float32, name='incorrect_vector')
        cost = tf.reduce_mean(tf.square(pred - y), name='cost')
        add_moving_summary(cost)
        return cost

    def optimizer(self):
        return tfv1.train.GradientDescentOptimizer(0.1)


class ScriptedStat(Callback):
    """Puts ``values[epoch_num]`` as statistic ``name`` at the end of each epoch."""

    def __init__(self, name, values):
        self.name, self.values = name, values

    def _trigger(self):
        self.trainer.monitors.put_scalar(self.name, self.values[self.epoch_num])


def dataflow():
    rng = np.random.RandomState(1)
    points = [[rng.randn(4).astype('float32'), np.float32(rng.randn())] for _ in range(8)]
    return BatchData(DataFromList(points, shuffle=False), 4)
