"""BinaryClassificationStats, CheckNumerics, GraphProfiler, HostMemoryTracker, GPUMemoryTracker,
TFLocalCLIDebugHook, CometMLMonitor, the DumpTensor name and ScheduledHyperParamSetter's
set_at_beginning, each in a real training of a tiny model."""

import logging

import pytest

from tensorpack_lite.callbacks import gpu_trackers
from tensorpack_lite.callbacks.prof import GPUMemoryTracker
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


@pytest.mark.skipif(gpu_trackers._num_gpus() > 0 or gpu_trackers._num_tf_gpus() > 0,
                    reason='a GPU is visible')
def test_gpu_memory_tracker_without_gpu_is_a_logged_no_op(log_records):
    trainer = _counter_trainer()
    tracker = GPUMemoryTracker()
    assert tracker._indices == [0]
    train(trainer, [tracker], steps_per_epoch=2, max_epoch=2)
    assert trainer.steps == 4
    assert log_records.messages_at(logging.WARNING) == ["GPUMemoryTracker is disabled: no GPU is available."]
    assert not any(name.startswith('PeakMemory') for name in trainer.monitors._scalar_history._history)


def test_gpu_memory_tracker_devices():
    assert GPUMemoryTracker(devices=[1, '/gpu:3'])._indices == [1, 3]
    with pytest.raises(ValueError, match="GPUMemoryTracker: device '/cpu:0' is not a GPU"):
        GPUMemoryTracker(devices=['/cpu:0'])
