"""Every library callback declares (``Callback.stat_names``) exactly the scalars it puts into
``trainer.monitors``: each declaration is compared with what a tiny training really puts."""

import numpy as np
import pytest

from tensorpack_lite.callbacks import gpu_trackers
from tensorpack_lite.callbacks.base import Callback
from tensorpack_lite.callbacks.graph import ProcessTensors
from tensorpack_lite.callbacks.inference import ScalarStats
from tensorpack_lite.callbacks.inference_runner import InferenceRunner
from tensorpack_lite.callbacks.monitors.group import MonitorBase, summary_scalar_name
from tensorpack_lite.callbacks.param_setter import ScheduledHyperParamSetter
from tensorpack_lite.callbacks.prof import (GPUUtilizationTracker, HostMemoryTracker,
                                            PeakMemoryTracker, ThroughputTracker)
from tensorpack_lite.callbacks.saver import MinSaver
from tensorpack_lite.callbacks.steps import MaintainStepCounter
from tensorpack_lite.callbacks.summary import SimpleMovingAverage
from tensorpack_lite.compat import tfv1
from tensorpack_lite.dataflow import BatchData, DataFromList
from tensorpack_lite.input_source.queue import ZMQInput, _PutDroppedMessages
from tensorpack_lite.loop.dispatch import Callbacks
from tensorpack_lite.train import SimpleTrainer, TrainConfig, launch_train_with_config

from helpers.models import LineRegression


def model():
    """A linear regression with a learning rate variable and a moving summary of its cost."""
    return LineRegression(dim=4, init=0.5, lr=0.1, summary=True)


class NameRecorder(MonitorBase):
    """Records the name of every scalar put into ``trainer.monitors``."""

    def __init__(self):
        self.names = set()

    def process_scalar(self, name, value):
        self.names.add(name)

    def _stat_names(self):
        return []


def dataflow():
    rng = np.random.RandomState(1)
    points = [[rng.randn(4).astype('float32'), np.float32(rng.randn())] for _ in range(8)]
    return BatchData(DataFromList(points, shuffle=False), 4)


def train(callbacks, max_epoch=2):
    """Train 2 steps per epoch; the trainer and the names of the scalars put."""
    recorder, trainer = NameRecorder(), SimpleTrainer()
    with tfv1.Graph().as_default():
        config = TrainConfig(model=model(), dataflow=dataflow(), max_epoch=max_epoch,
                             callbacks=callbacks, monitors=[recorder])
        launch_train_with_config(config, trainer)
    return trainer, recorder.names


@pytest.fixture(scope='module')
def baseline():
    """The names the default callbacks put (the moving summary of the cost)."""
    return train([])[1]


def fake_gpus(monkeypatch):
    """Two GPUs, visible to the process as physical ids 1 and 3, with made-up measurements."""
    monkeypatch.setenv('CUDA_VISIBLE_DEVICES', '1,3')
    monkeypatch.setattr(gpu_trackers, '_num_gpus', lambda: 2)
    monkeypatch.setattr(gpu_trackers, '_num_tf_gpus', lambda: 2)
    monkeypatch.setattr(gpu_trackers, '_read_peak_memory', lambda index: 1e6 * (index + 1))
    monkeypatch.setattr(gpu_trackers, '_reset_peak_memory', lambda index: None)
    monkeypatch.setattr(gpu_trackers, '_query_gpu_utilization', lambda ids: [50.0 for _ in ids])


CASES = {
    'hyper-param': (lambda: ScheduledHyperParamSetter('learning_rate', [(1, 0.1), (2, 0.05)]),
                    {'learning_rate'}),
    'throughput-samples': (lambda: ThroughputTracker(samples_per_step=4),
                           {'Throughput (steps/sec)', 'Throughput (samples/sec)'}),
    'throughput-steps': (lambda: ThroughputTracker(), {'Throughput (steps/sec)'}),
    'host-memory': (lambda: HostMemoryTracker(), {'HostFreeMemory (GB)'}),
    'peak-memory': (lambda: PeakMemoryTracker(devices=['/gpu:1', 0]),
                    {'PeakMemory(MB)/gpu:1', 'PeakMemory(MB)/gpu:0'}),
    'gpu-util': (lambda: GPUUtilizationTracker(), {'GPUUtil/1', 'GPUUtil/3'}),
    'zmq-dropped': (lambda: _PutDroppedMessages(ZMQInput('tcp://127.0.0.1:5999', 10)),
                    {'ZMQInput/dropped_messages'}),
    'inference': (lambda: InferenceRunner(dataflow(), [ScalarStats('cost')]), {'validation_cost'}),
    'sma': (lambda: SimpleMovingAverage(['cost'], 2), {'cost/SMA'}),
}


@pytest.mark.parametrize('case', sorted(CASES))
def test_declared_names_are_the_names_put(case, baseline, monkeypatch):
    fake_gpus(monkeypatch)
    make, expected = CASES[case]
    cb = make()
    trainer, put = train([cb])
    assert set(cb.stat_names()) == expected
    assert expected.isdisjoint(baseline)
    assert put == baseline | expected
    # The group of all the trainer's callbacks declares exactly what was put.
    assert set(Callbacks(list(trainer.callbacks)).stat_names()) == put


@pytest.mark.parametrize('make', [PeakMemoryTracker, GPUUtilizationTracker])
def test_gpu_trackers_without_gpu_declare_and_put_nothing(make, baseline, monkeypatch):
    monkeypatch.setattr(gpu_trackers, '_num_gpus', lambda: 0)
    monkeypatch.setattr(gpu_trackers, '_num_tf_gpus', lambda: 0)
    cb = make()
    _, put = train([cb])    # two epochs as the baseline: the default StepTimeMonitor reports from run 3
    assert cb.stat_names() == [] and put == baseline


def test_process_tensors_cannot_tell_and_neither_can_its_group():
    cb = ProcessTensors(['cost'], lambda cost: None)
    assert cb.stat_names() is None
    assert Callbacks([cb, ThroughputTracker()]).stat_names() is None


def test_group_declares_the_union_of_its_members_in_order():
    group = Callbacks([ThroughputTracker(samples_per_step=2), HostMemoryTracker(), ThroughputTracker()])
    assert group.stat_names() == ['Throughput (steps/sec)', 'Throughput (samples/sec)',
                                  'HostFreeMemory (GB)']


class CountSteps(Callback):
    """Counts the steps run."""

    def __init__(self):
        self.steps = 0

    def _trigger_step(self):
        self.steps += 1

    def _stat_names(self):
        return []


def test_misspelled_learning_rate_raises_before_the_first_step(logdir):
    counter = CountSteps()
    trainer = SimpleTrainer()
    config = TrainConfig(model=model(), dataflow=dataflow(), max_epoch=2, monitors=[NameRecorder()],
                         callbacks=[ScheduledHyperParamSetter('learning_rate', [(1, 0.1), (2, 0.05)]),
                                    MinSaver('learning_rat'), counter])
    with tfv1.Graph().as_default(), pytest.raises(KeyError) as info:
        launch_train_with_config(config, trainer)
    message = str(info.value)
    assert "MinSaver('learning_rat'): the statistic 'learning_rat'" in message
    assert "Did you mean 'learning_rate'?" in message
    assert counter.steps == 0 and trainer.global_step == 0


def test_trainer_callbacks_lists_them_in_order_and_is_read_only():
    host, throughput = HostMemoryTracker(), ThroughputTracker()
    trainer, _ = train([host, throughput], max_epoch=1)
    callbacks = trainer.callbacks
    assert isinstance(callbacks, tuple)
    counters = [i for i, cb in enumerate(callbacks) if isinstance(cb, MaintainStepCounter)]
    assert len(counters) == 1 and counters[0] < callbacks.index(host)
    assert callbacks.index(host) + 1 == callbacks.index(throughput)
    assert callbacks[-1] is trainer.monitors
    with pytest.raises(AttributeError):
        trainer.callbacks = []


@pytest.mark.parametrize('tag, name', [
    ('tower0/cost-summary', 'cost'),
    ('tower12/loss/tower3/x', 'loss/x'),
    ('accuracy', 'accuracy'),
    ('a-summary/b', 'a-summary/b'),
])
def test_summary_scalar_name(tag, name):
    assert summary_scalar_name(tag) == name
