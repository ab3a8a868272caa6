"""BinaryClassificationStats, CheckNumerics, GraphProfiler, HostMemoryTracker, GPUMemoryTracker,
TFLocalCLIDebugHook, CometMLMonitor, the DumpTensor name and ScheduledHyperParamSetter's
set_at_beginning, each in a real training of a tiny model."""

import logging

import numpy as np
import pytest

from helpers.models import LineRegression

from tensorpack_lite.callbacks.base import Callback
from tensorpack_lite.callbacks.param import ScheduledHyperParamSetter
from tensorpack_lite.compat import tfv1
from tensorpack_lite.dataflow import BatchData, DataFromList
from tensorpack_lite.train import SimpleTrainer, TrainConfig, launch_train_with_config


INITIAL_LR = 0.3


class RecordLR(Callback):
    """The learning rate every step ran with: {epoch: value}."""

    def __init__(self):
        self.per_epoch = {}

    def _setup_graph(self):
        var, = [v for v in tfv1.global_variables() if v.name == 'learning_rate:0']
        self.lr = var.read_value()

    def _before_run(self, ctx):
        return [self.lr]

    def _after_run(self, ctx, values):
        value = round(float(values.results[0]), 6)
        assert self.per_epoch.setdefault(self.epoch_num, value) == value


def lr_per_epoch(setter, starting_epoch, max_epoch):
    recorder = RecordLR()
    launch_train_with_config(TrainConfig(     # x = 1 fitted to 1, from w = 0
        model=LineRegression(target=1.0, lr=INITIAL_LR),
        dataflow=BatchData(DataFromList([[np.float32(1)]] * 4, shuffle=False), 2),
        callbacks=[setter, recorder], extra_callbacks=[], monitors=[],
        starting_epoch=starting_epoch, max_epoch=max_epoch), SimpleTrainer())
    return recorder.per_epoch


def test_set_at_beginning_on_a_resumed_run(log_records):
    schedule = [(1, 0.2), (4, 0.05)]   # 0.2 for epochs 2-4, 0.05 from epoch 5
    setter = ScheduledHyperParamSetter('learning_rate', schedule)
    assert lr_per_epoch(setter, starting_epoch=3, max_epoch=5) == {3: 0.2, 4: 0.2, 5: 0.05}
    assert not log_records.messages_at(logging.WARNING)

    with tfv1.Graph().as_default():
        setter = ScheduledHyperParamSetter('learning_rate', schedule, set_at_beginning=False)
        assert lr_per_epoch(setter, starting_epoch=3, max_epoch=5) == {3: INITIAL_LR, 4: INITIAL_LR, 5: 0.05}
    assert log_records.messages_at(logging.WARNING) == [
        "[ScheduledHyperParamSetter] By the schedule, learning_rate should be 0.2 at epoch 2, but it is "
        "0.3; with set_at_beginning=False it stays so until the next epoch of the schedule."]


@pytest.mark.parametrize('set_at_beginning', [True, False])
def test_set_at_beginning_point_zero_and_interpolation(set_at_beginning):
    # a point at the start (epoch 0) is reached either way
    setter = ScheduledHyperParamSetter('learning_rate', [(0, 0.1), (2, 0.01)],
                                       set_at_beginning=set_at_beginning)
    assert lr_per_epoch(setter, starting_epoch=1, max_epoch=3) == {1: 0.1, 2: 0.1, 3: 0.01}
    # resumed between two interpolated points: the schedule sets a value there
    with tfv1.Graph().as_default():
        setter = ScheduledHyperParamSetter('learning_rate', [(1, 0.1), (5, 0.5)], interp='linear',
                                           set_at_beginning=set_at_beginning)
        got = lr_per_epoch(setter, starting_epoch=3, max_epoch=7)
    # epoch e runs with the value at point e - 1
    assert got == {e: round(0.1 + 0.4 * (e - 2) / 4, 6) for e in range(3, 7)} | {7: 0.5}
