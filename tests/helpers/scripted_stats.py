"""A small regression whose statistics are scripted by epoch, for the callbacks that act on a
statistic (MinSaver, EarlyStopping, the monitors): the model, its dataflow of STEPS batches an
epoch, and :class:`ScriptedStat`.

Example::

    stat = ScriptedStat('val-error', {1: 3.0, 2: 1.0, 3: 2.0})
    config = TrainConfig(model=model(), dataflow=dataflow(), max_epoch=3,
                         callbacks=[ModelSaver(), stat, MinSaver('val-error')])   # the best: epoch 2
"""

import numpy as np

from tensorpack_lite.callbacks.base import Callback
from tensorpack_lite.dataflow import BatchData, DataFromList

from helpers.models import LineRegression

__all__ = ['STEPS', 'ScriptedStat', 'dataflow', 'model']

STEPS = 2  # per epoch: 8 points in batches of 4


def model():
    """A linear regression of 4 features (w from 0.5, gradient descent at 0.1) with a 0/1
    'incorrect_vector' and the moving average of its cost."""
    return LineRegression(dim=4, init=0.5, lr=0.1, lr_variable=False, summary=True)


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
