"""BinaryClassificationStats, CheckNumerics, GraphProfiler, HostMemoryTracker, GPUMemoryTracker,
TFLocalCLIDebugHook, CometMLMonitor, the DumpTensor name and ScheduledHyperParamSetter's
set_at_beginning, each in a real training of a tiny model."""

import sys
import types

import numpy as np
import pytest

from tensorpack_lite.callbacks.base import Callback
from tensorpack_lite.callbacks.monitor import CometMLMonitor
from tensorpack_lite.libinfo import __version__
from helpers.trainers import counter_trainer, train


class StandInExperiment:
    """Records the calls CometMLMonitor makes to a comet_ml.Experiment."""

    def __init__(self, **kwargs):
        self.kwargs = kwargs
        self.calls = []

    def __getattr__(self, method):
        if method not in ('add_tags', 'log_dependency', 'set_model_graph', 'log_metric', 'set_step',
                          'log_image', 'log_epoch_end', 'end'):
            raise AttributeError(method)
        return lambda *args, **kwargs: self.calls.append((method, args, kwargs))

    def called(self, method):
        return [(args, kwargs) for name, args, kwargs in self.calls if name == method]


class PutData(Callback):
    """Puts a scalar after every epoch and two 2x3 images after the first one."""

    def _trigger_epoch(self):
        self.trainer.monitors.put_scalar('acc', self.epoch_num / 10)
        if self.epoch_num == 1:
            self.trainer.monitors.put_image('sample', np.zeros((2, 2, 3, 1), np.uint8))


def test_comet_ml_monitor_sends_to_the_experiment():
    exp = StandInExperiment()
    monitor = CometMLMonitor(experiment=exp)
    assert monitor.experiment is exp
    trainer = counter_trainer()
    train(trainer, [PutData()], steps_per_epoch=2, max_epoch=2, monitors=[monitor])
    assert exp.called('log_dependency') == [(('tensorpack_lite', __version__), {})]
    assert exp.called('set_model_graph') == [((trainer.sess.graph,), {})]
    assert exp.called('log_metric') == [(('acc', 0.1), {'step': 2}), (('acc', 0.2), {'step': 4})]
    images = exp.called('log_image')
    assert [kw['name'] for _, kw in images] == ['sample_step2_0', 'sample_step2_1']
    assert all(a[0].shape == (2, 3, 1) and kw['image_minmax'] == (0, 255) for a, kw in images)
    assert exp.called('log_epoch_end') == [((1,), {}), ((2,), {})]
    assert exp.called('end') == [((), {})]
    assert exp.calls[-1][0] == 'end'


def test_comet_ml_monitor_creates_the_experiment(monkeypatch):
    monkeypatch.setitem(sys.modules, 'comet_ml', types.SimpleNamespace(Experiment=StandInExperiment))
    monitor = CometMLMonitor(tags=['a', 'b'], project_name='p')
    exp = monitor.experiment
    assert exp.kwargs == {'project_name': 'p', 'log_code': True, 'auto_output_logging': None}
    assert exp.called('add_tags') == [((['a', 'b'],), {})]


def test_comet_ml_monitor_errors(monkeypatch):
    with pytest.raises(ValueError, match=r"tags=\['x'\] and \['project_name'\]"):
        CometMLMonitor(experiment=StandInExperiment(), tags=['x'], project_name='p')
    monkeypatch.setitem(sys.modules, 'comet_ml', None)   # not importable
    with pytest.raises(ImportError, match="CometMLMonitor.*'comet_ml'.*pip install comet_ml"):
        CometMLMonitor(project_name='p')
