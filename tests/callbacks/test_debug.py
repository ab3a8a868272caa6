"""BinaryClassificationStats, CheckNumerics, GraphProfiler, HostMemoryTracker, GPUMemoryTracker,
TFLocalCLIDebugHook, CometMLMonitor, the DumpTensor name and ScheduledHyperParamSetter's
set_at_beginning, each in a real training of a tiny model."""

import os

import numpy as np

from tensorpack_lite.callbacks.debug import DumpTensor, DumpTensors
from helpers.trainers import counter_trainer, train


def test_dump_tensor_is_dump_tensors(logdir):
    assert DumpTensor is DumpTensors
    trainer = counter_trainer()
    train(trainer, [DumpTensor(['counter'])], steps_per_epoch=3, max_epoch=1)
    assert float(np.load(os.path.join(logdir, 'DumpTensor-3.npz'))['counter']) == 3.0
