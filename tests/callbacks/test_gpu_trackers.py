"""Tests of the time, throughput, GPU and background-process callbacks, and of the
adapters between callbacks and TensorFlow's SessionRunHooks."""

import logging
import threading

import numpy as np
import pytest

from tensorpack_lite.callbacks import gpu_trackers
from tensorpack_lite.callbacks.base import Callback
from tensorpack_lite.callbacks.prof import GPUUtilizationTracker, PeakMemoryTracker, ThroughputTracker
from tensorpack_lite.compat import tfv1
from helpers.trainers import ScalarRecorder, make_trainer, train


def _sampler_threads():
    return [t for t in threading.enumerate() if t.name == 'GPUUtilizationSampler']


def test_gpu_trackers_without_gpu_warn_once_and_do_nothing(log_records):
    if gpu_trackers._num_gpus() > 0 or gpu_trackers._num_tf_gpus() > 0:
        pytest.skip("this test needs a machine without a GPU")
    recorder = ScalarRecorder()
    peak, util = PeakMemoryTracker(), GPUUtilizationTracker()
    threads_seen = []
    watcher = Callback()
    watcher._trigger_step = lambda: threads_seen.append(len(_sampler_threads()))
    train(make_trainer(0.0), [peak, util, watcher, ThroughputTracker()], 2, 3,
          monitors=[recorder])

    warnings = log_records.messages(logging.WARNING)
    assert len([m for m in warnings if 'PeakMemoryTracker' in m]) == 1
    assert len([m for m in warnings if 'GPUUtilizationTracker' in m]) == 1
    assert all('no GPU' in m for m in warnings if 'Tracker' in m)
    assert not [m for m in log_records.messages(logging.ERROR)]
    # only the throughput tracker put anything, and no sampler ever ran
    assert recorder.names() == {ThroughputTracker.STEPS_NAME}
    assert threads_seen == [0] * 6


def test_peak_memory_tracker_puts_peak_per_device(monkeypatch):
    monkeypatch.setattr(gpu_trackers, '_num_tf_gpus', lambda: 2)
    resets, reads = [], []
    monkeypatch.setattr(gpu_trackers, '_reset_peak_memory', resets.append)

    def fake_read(index):
        reads.append(index)
        return (index + 1) * 1e6 * len(resets)  # grows with the epochs

    monkeypatch.setattr(gpu_trackers, '_read_peak_memory', fake_read)
    recorder = ScalarRecorder()
    train(make_trainer(0.0), [PeakMemoryTracker(devices=['/gpu:1', 0])], 2, 2, monitors=[recorder])
    assert resets == [1, 0, 1, 0]
    assert reads == [1, 0, 1, 0]
    assert recorder.scalars == [(1, 'PeakMemory(MB)/gpu:1', 4.0), (1, 'PeakMemory(MB)/gpu:0', 2.0),
                                (2, 'PeakMemory(MB)/gpu:1', 8.0), (2, 'PeakMemory(MB)/gpu:0', 4.0)]


def test_peak_memory_tracker_bad_devices(monkeypatch):
    with pytest.raises(ValueError, match="'/cpu:0'"):
        PeakMemoryTracker(devices=['/cpu:0'])
    monkeypatch.setattr(gpu_trackers, '_num_tf_gpus', lambda: 1)
    with pytest.raises(ValueError, match=r'PeakMemoryTracker: GPU\(s\) \[3\]') as info:
        train(make_trainer(0.0), [PeakMemoryTracker(devices=['/device:GPU:3'])], 1, 1)
    assert isinstance(info.value.callback, PeakMemoryTracker)


def test_gpu_utilization_tracker_puts_mean_per_device(monkeypatch):
    monkeypatch.setattr(gpu_trackers, '_num_gpus', lambda: 4)
    queried = []
    values = iter(np.arange(1000.0))

    def fake_query(ids):
        queried.append(list(ids))
        v = next(values)
        return [v, 100.0 - v]

    monkeypatch.setattr(gpu_trackers, '_query_gpu_utilization', fake_query)
    monkeypatch.setattr(GPUUtilizationTracker, 'sample_interval', 0.01)
    recorder = ScalarRecorder()
    train(make_trainer(0.02), [GPUUtilizationTracker(devices=[2, '3'])], 3, 2, monitors=[recorder])

    assert queried and all(ids == [2, 3] for ids in queried)
    per_epoch = {}
    for epoch, name, value in recorder.scalars:
        per_epoch.setdefault(epoch, {})[name] = value
    assert sorted(per_epoch) == [1, 2]
    for got in per_epoch.values():
        assert set(got) == {'GPUUtil/2', 'GPUUtil/3'}
        assert got['GPUUtil/2'] + got['GPUUtil/3'] == pytest.approx(100.0)
    # samples keep increasing, so the second epoch's mean is higher than the first's
    assert per_epoch[2]['GPUUtil/2'] > per_epoch[1]['GPUUtil/2']
    assert not _sampler_threads()


def test_gpu_utilization_tracker_tracks_the_gpus_cuda_exposes(monkeypatch, log_records):
    """'0,-1,1' exposes GPU 0 only (CUDA stops at -1), which get_num_gpu counts and the tracker
    tracks; GPUs named by UUID disable it, saying why."""
    monkeypatch.setenv('CUDA_VISIBLE_DEVICES', '0,-1,1')
    queried = []
    monkeypatch.setattr(gpu_trackers, '_query_gpu_utilization',
                        lambda ids: queried.append(list(ids)) or [40.0])
    monkeypatch.setattr(GPUUtilizationTracker, 'sample_interval', 0.01)
    recorder = ScalarRecorder()
    train(make_trainer(0.0), [GPUUtilizationTracker()], 2, 1, monitors=[recorder])
    assert queried and all(ids == [0] for ids in queried)
    assert recorder.scalars == [(1, 'GPUUtil/0', 40.0)]

    monkeypatch.setenv('CUDA_VISIBLE_DEVICES', 'GPU-8932f937-d72c-4106,1')
    with tfv1.Graph().as_default():
        train(make_trainer(0.0), [GPUUtilizationTracker()], 2, 1)
    warned = [m for m in log_records.messages(logging.WARNING) if 'GPUUtilizationTracker' in m]
    assert warned == ["GPUUtilizationTracker is disabled: CUDA_VISIBLE_DEVICES='GPU-8932f937-d72c-4106,1' "
                      "names GPUs by UUID, and utilization is read by index; pass devices=."]


def test_gpu_utilization_tracker_disables_itself_when_query_fails(monkeypatch, log_records):
    monkeypatch.setattr(gpu_trackers, '_num_gpus', lambda: 1)
    monkeypatch.delenv('CUDA_VISIBLE_DEVICES', raising=False)
    calls = []

    def broken_query(ids):
        calls.append(ids)
        raise RuntimeError("nvidia-smi exploded")

    monkeypatch.setattr(gpu_trackers, '_query_gpu_utilization', broken_query)
    recorder = ScalarRecorder()
    train(make_trainer(0.0), [GPUUtilizationTracker()], 2, 3, monitors=[recorder])
    assert len(calls) == 1  # the first epoch's sampler failed; later epochs did not sample
    warned = [m for m in log_records.messages(logging.WARNING) if 'GPUUtilizationTracker' in m]
    assert len(warned) == 1 and 'nvidia-smi exploded' in warned[0]
    assert recorder.scalars == []


def test_gpu_utilization_tracker_rejects_bad_device():
    with pytest.raises(ValueError, match="'gpu0'"):
        GPUUtilizationTracker(devices=['gpu0'])
