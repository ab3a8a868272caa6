"""BinaryClassificationStats, CheckNumerics, GraphProfiler, HostMemoryTracker, GPUMemoryTracker,
TFLocalCLIDebugHook, CometMLMonitor, the DumpTensor name and ScheduledHyperParamSetter's
set_at_beginning, each in a real training of a tiny model."""

import os

import numpy as np

from tensorpack_lite.callbacks.debug import DumpTensor, DumpTensors
from tensorpack_lite.compat import tfv1
from tensorpack_lite.train.base import Trainer


class CountingTrainer(Trainer):
    """Runs ``train_op`` in the hooked session; ``after_step(trainer)`` runs after each step
    (through the plain session, unseen by callbacks). ``steps`` counts the steps started."""

    def __init__(self, train_op, after_step=None):
        super().__init__()
        self.train_op = train_op
        self._after_step = after_step
        self.steps = 0

    def run_step(self):
        self.steps += 1
        self.hooked_sess.run(self.train_op)
        if self._after_step is not None:
            self._after_step(self)


def train(trainer, callbacks, steps_per_epoch, max_epoch, monitors=()):
    trainer.train_with_defaults(callbacks=list(callbacks), monitors=list(monitors), extra_callbacks=[],
                                steps_per_epoch=steps_per_epoch, max_epoch=max_epoch)


def _counter_trainer():
    counter = tfv1.get_variable('counter', shape=[], initializer=tfv1.zeros_initializer())
    return CountingTrainer(tfv1.assign_add(counter, 1.0).op)


def test_dump_tensor_is_dump_tensors(logdir):
    assert DumpTensor is DumpTensors
    trainer = _counter_trainer()
    train(trainer, [DumpTensor(['counter'])], steps_per_epoch=3, max_epoch=1)
    assert float(np.load(os.path.join(logdir, 'DumpTensor-3.npz'))['counter']) == 3.0
