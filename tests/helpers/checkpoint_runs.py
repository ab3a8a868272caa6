"""Short runs of the bare Trainer on a regression, for the tests of checkpoint writing: the
regression's train op (:func:`build_regression`) and :func:`train`, epochs of STEPS steps with
the callbacks given (a ModelSaver saves at every epoch's end).

Example::

    trainer = train([ModelSaver()], max_epoch=2)    # model-3 and model-6 in the logger directory
"""

import numpy as np

from tensorpack_lite.compat import tf, tfv1
from tensorpack_lite.tfutils.common import get_global_step_var
from tensorpack_lite.tfutils.sesscreate import NewSessionCreator
from tensorpack_lite.tfutils.sessinit import JustCurrentSession
from tensorpack_lite.train.base import Trainer

__all__ = ['STEPS', 'build_regression', 'train']

STEPS = 3   # per epoch; ModelSaver triggers at every epoch's end


def build_regression():
    """A 4 -> 8 -> 3 regression trained with Adam (slot variables too); returns the train op."""
    rng = np.random.RandomState(0)
    x = tf.constant(rng.randn(16, 4).astype('float32'))
    y = tf.constant(rng.randn(16, 3).astype('float32'))
    w0 = tfv1.get_variable('fc0/W', initializer=rng.randn(4, 8).astype('float32'))
    w1 = tfv1.get_variable('fc1/W', initializer=rng.randn(8, 3).astype('float32'))
    loss = tf.reduce_mean(tf.square(tf.matmul(tf.nn.relu(tf.matmul(x, w0)), w1) - y))
    get_global_step_var()
    return tfv1.train.AdamOptimizer(0.05).minimize(loss)


def train(callbacks, max_epoch=3):
    """The bare Trainer on :func:`build_regression` for ``max_epoch`` epochs of STEPS steps, with
    ``callbacks`` and no monitor; returns the trainer."""
    trainer = Trainer()
    trainer.train_op = build_regression()
    trainer.train(callbacks, [], NewSessionCreator(), JustCurrentSession(), STEPS, 1, max_epoch)
    return trainer
