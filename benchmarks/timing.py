"""What the benchmarks share: a callback that times epochs, a timed loop of steps, and a dense MLP to
train."""

import time

from tensorpack_lite.callbacks import Callback
from tensorpack_lite.compat import tf, tfv1
from tensorpack_lite.train import ModelDesc

__all__ = ['EpochTiming', 'EpochTimer', 'steps_per_second', 'DenseMLP']


class EpochTiming:
    """The time from each epoch's first step to the end of its last (``times``): mixed into a
    callback class, this library's or another's with the same template methods (tensorpack's)."""

    _chief_only = False

    def __init__(self):
        self.times = []

    def _before_epoch(self):
        self._start = time.perf_counter()

    def _after_epoch(self):
        self.times.append(time.perf_counter() - self._start)


class EpochTimer(EpochTiming, Callback):
    """:class:`EpochTiming` as a callback of this library."""


def steps_per_second(step, steps):
    """Call ``step()`` ``steps`` times; the calls per second."""
    start = time.perf_counter()
    for _ in range(steps):
        step()
    return steps / (time.perf_counter() - start)


class DenseMLP(ModelDesc):
    """784 -> ``widths`` (ReLU) -> 10 on batches of ``batch``, trained by plain SGD: one matmul-heavy
    model whose gradients are big enough for all-reduce to matter."""

    def __init__(self, batch, widths):
        self.batch, self.widths = batch, list(widths)

    def inputs(self):
        return [tf.TensorSpec([self.batch, 784], tf.float32, 'image'),
                tf.TensorSpec([self.batch], tf.int32, 'label')]

    def build_graph(self, image, label):
        x = image
        for i, width in enumerate(self.widths):
            x = tf.nn.relu(tf.matmul(x, tfv1.get_variable('fc{}/W'.format(i), [x.shape[-1], width])))
        logits = tf.matmul(x, tfv1.get_variable('out/W', [self.widths[-1], 10]))
        return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=label, logits=logits),
                              name='cost')

    def optimizer(self):
        return tfv1.train.GradientDescentOptimizer(1e-3)
