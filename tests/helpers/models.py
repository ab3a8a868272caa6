"""Shared models, beside those in helpers/__init__.py (DigitsMLPBase, LineRegression, WhileLoopRNN)."""

import numpy as np

from helpers import AssignValues, DigitsMLPBase, cross_entropy_cost
from tensorpack_lite.compat import tf, tfv1
from tensorpack_lite.dataflow import DataFromList
from tensorpack_lite.predict.config import PredictConfig
from tensorpack_lite.tfutils.summary import add_moving_summary
from tensorpack_lite.train import ModelDesc


# ----- a linear classifier of 3 features into 2 classes, with known weights ------------------------

W_VALUE = np.array([[1., 2.], [3., 4.], [5., 6.]], np.float32)
B_VALUE = np.array([10., 20.], np.float32)
_RNG = np.random.RandomState(7)
X_BATCHES = [_RNG.randn(n, 3).astype('float32') for n in (4, 2, 3)]
LABEL_BATCHES = [_RNG.randint(0, 2, size=len(x)).astype('int32') for x in X_BATCHES]


class LinearModel(ModelDesc):
    """logits = x W + b, on inputs 'x' [None, 3] and 'label' [None]."""

    def inputs(self):
        return [tf.TensorSpec([None, 3], tf.float32, 'x'), tf.TensorSpec([None], tf.int32, 'label')]

    def build_graph(self, x, label):
        W = tfv1.get_variable('fc/W', [3, 2], initializer=tfv1.zeros_initializer())
        b = tfv1.get_variable('fc/b', [2], initializer=tfv1.zeros_initializer())
        logits = tf.identity(tf.matmul(x, W) + b, name='logits')
        return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=label, logits=logits),
                              name='cost')


def linear_config(output_names):
    return PredictConfig(model=LinearModel(), output_names=output_names,
                         session_init=AssignValues({'fc/W': W_VALUE, 'fc/b': B_VALUE}))


def batches_dataflow(*components):
    """A DataFlow whose datapoints are the given batches, in order."""
    return DataFromList([list(c) for c in zip(*components)], shuffle=False)


# ----- the digits MLP with its cost as a moving summary ---------------------------------------------

class DigitsMLP(DigitsMLPBase):
    def outputs(self, logits, label):
        cost = cross_entropy_cost(logits, label)
        add_moving_summary(cost)
        return cost
