"""BinaryClassificationStats, CheckNumerics, GraphProfiler, HostMemoryTracker, GPUMemoryTracker,
TFLocalCLIDebugHook, CometMLMonitor, the DumpTensor name and ScheduledHyperParamSetter's
set_at_beginning, each in a real training of a tiny model."""

import logging

import pytest

from tensorpack_lite.callbacks import gpu_trackers
from tensorpack_lite.callbacks.prof import GPUMemoryTracker
from helpers.trainers import counter_trainer, train


@pytest.mark.skipif(gpu_trackers._num_gpus() > 0 or gpu_trackers._num_tf_gpus() > 0,
                    reason='a GPU is visible')
def test_gpu_memory_tracker_without_gpu_is_a_logged_no_op(log_records):
    trainer = counter_trainer()
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
