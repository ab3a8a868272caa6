"""Tests of the time, throughput, GPU and background-process callbacks, and of the
adapters between callbacks and TensorFlow's SessionRunHooks."""

import logging
import multiprocessing as mp
import signal
import threading
import time

import numpy as np
import pytest

from helpers import VirtualClock
from tensorpack_lite.callbacks import gpu_trackers, misc, prof
from tensorpack_lite.callbacks.base import Callback
from tensorpack_lite.callbacks.concurrency import StartProcOrThread
from tensorpack_lite.callbacks.hooks import CallbackToHook, HookToCallback
from tensorpack_lite.callbacks.misc import EstimatedTimeLeft
from tensorpack_lite.callbacks.monitor import MonitorBase
from tensorpack_lite.callbacks.prof import GPUUtilizationTracker, PeakMemoryTracker, ThroughputTracker
from tensorpack_lite.compat import tf, tfv1
from tensorpack_lite.tfutils.hooked_session import HookedSession
from tensorpack_lite.train.base import StopTraining, Trainer
from tensorpack_lite.utils.concurrency import StoppableThread


# ----------------------------------------------------------------------------------------
# helpers

class SleepTrainer(Trainer):
    """Each step sleeps ``step_time(trainer)`` seconds (through ``sleep``, e.g. a VirtualClock's),
    then runs the train op in the hooked session (so that hooks and the step counter see it)."""

    def __init__(self, step_time, sleep=time.sleep):
        super().__init__()
        self._step_time = step_time if callable(step_time) else (lambda _: step_time)
        self._sleep = sleep

    def run_step(self):
        self._sleep(self._step_time(self))
        self.hooked_sess.run(self.train_op)


def make_trainer(step_time=0.0, sleep=time.sleep):
    counter = tfv1.get_variable('counter', shape=[], initializer=tfv1.zeros_initializer())
    trainer = SleepTrainer(step_time, sleep)
    trainer.train_op = tfv1.assign_add(counter, 1.0).op
    return trainer


def train(trainer, callbacks, steps_per_epoch, max_epoch, monitors=()):
    trainer.train_with_defaults(callbacks=list(callbacks), monitors=list(monitors),
                                extra_callbacks=[], steps_per_epoch=steps_per_epoch,
                                max_epoch=max_epoch)


class ScalarRecorder(MonitorBase):
    """Remembers every scalar put, with the epoch it was put in."""

    def __init__(self):
        self.scalars = []

    def process_scalar(self, name, value):
        self.scalars.append((self.epoch_num, name, value))

    def names(self):
        return {name for _, name, _ in self.scalars}


# ----------------------------------------------------------------------------------------
# EstimatedTimeLeft

class _RecordEstimates(Callback):
    """Reads the estimates of some EstimatedTimeLeft after every epoch (registered after them)."""

    def __init__(self, estimators):
        self.estimators = estimators
        self.history = []

    def _trigger_epoch(self):
        self.history.append((self.epoch_num, [e.estimated_time_left for e in self.estimators]))


def test_estimated_time_left_scales_with_remaining_epochs(log_records, monkeypatch):
    clock = VirtualClock()
    monkeypatch.setattr(misc, 'time', clock)   # EstimatedTimeLeft reads misc.time.perf_counter()
    step_time, steps, max_epoch = 30.0, 2, 4
    epoch_time = step_time * steps
    etl = EstimatedTimeLeft()
    recorder = _RecordEstimates([etl])
    train(make_trainer(step_time, clock.sleep), [etl, recorder], steps, max_epoch)

    assert [epoch for epoch, _ in recorder.history] == [1, 2, 3, 4]
    for epoch, (estimate,) in recorder.history[:-1]:
        assert estimate == pytest.approx((max_epoch - epoch) * epoch_time, rel=1e-12), epoch
    assert recorder.history[-1][1] == [0.0]
    logged = [m for m in log_records.messages(logging.INFO) if m.startswith('Estimated Time Left: ')]
    assert len(logged) == max_epoch - 1  # nothing when no epoch is left


def test_estimated_time_left_median_mean_and_window(monkeypatch):
    clock = VirtualClock()
    monkeypatch.setattr(misc, 'time', clock)

    # epoch 1 is slow (30 s), epochs 2-5 are fast (2 s)
    def step_time(trainer):
        return 30.0 if trainer.epoch_num == 1 else 2.0

    median = EstimatedTimeLeft(last_k_epochs=5, median=True)
    mean = EstimatedTimeLeft(last_k_epochs=5, median=False)
    last_only = EstimatedTimeLeft(last_k_epochs=1, median=False)
    recorder = _RecordEstimates([median, mean, last_only])
    train(make_trainer(step_time, clock.sleep), [median, mean, last_only, recorder], 1, 5)

    epoch, (est_median, est_mean, est_last) = recorder.history[2]  # after epoch 3: 2 left
    assert epoch == 3
    assert est_median == pytest.approx(2 * 2.0)               # median of [30, 2, 2]
    assert est_mean == pytest.approx(2 * 34.0 / 3)            # mean of the same
    assert est_last == pytest.approx(2 * 2.0)                 # only the last epoch
    # right after the slow epoch, every estimate is driven by it
    _, first = recorder.history[0]
    assert first == pytest.approx([4 * 30.0] * 3)


def test_estimated_time_left_silent_when_max_epoch_unknown(log_records):
    etl = EstimatedTimeLeft()
    stopper = _StopAfter(2)
    train(make_trainer(0.0), [etl, stopper], 2, 9999999)
    assert stopper.epochs_seen == 2
    assert etl.estimated_time_left is None
    assert not [m for m in log_records.messages() if 'Estimated Time Left' in m]


class _StopAfter(Callback):
    def __init__(self, epochs):
        self.epochs = epochs
        self.epochs_seen = 0

    def _trigger_epoch(self):
        self.epochs_seen += 1
        if self.epochs_seen >= self.epochs:
            raise StopTraining("enough")


@pytest.mark.parametrize('k', [0, -1, 2.5, True, '3'])
def test_estimated_time_left_rejects_bad_window(k):
    with pytest.raises(ValueError, match='last_k_epochs'):
        EstimatedTimeLeft(last_k_epochs=k)


# ----------------------------------------------------------------------------------------
# ThroughputTracker

class _SlowEpochEnd(Callback):
    def __init__(self, clock, seconds):
        self.clock, self.seconds = clock, seconds

    def _trigger_epoch(self):
        self.clock.advance(self.seconds)


def test_throughput_tracker_measures_step_rate_without_epoch_end_work(monkeypatch):
    clock = VirtualClock()
    monkeypatch.setattr(prof, 'time', clock)   # ThroughputTracker reads prof.time.perf_counter()
    step_time, steps, max_epoch = 0.02, 5, 2
    trainer = make_trainer(0.0)
    trainer.run_step = lambda: (clock.advance(step_time), trainer.hooked_sess.run(trainer.train_op))
    recorder = ScalarRecorder()
    # a slow end of epoch would cut the rate to a quarter if it were counted
    train(trainer, [ThroughputTracker(samples_per_step=8), _SlowEpochEnd(clock, 0.3)], steps, max_epoch,
          monitors=[recorder])

    rates = [(e, v) for e, n, v in recorder.scalars if n == ThroughputTracker.STEPS_NAME]
    samples = [(e, v) for e, n, v in recorder.scalars if n == ThroughputTracker.SAMPLES_NAME]
    assert [e for e, _ in rates] == [1, 2]
    assert [e for e, _ in samples] == [1, 2]
    for (_, rate), (_, sample_rate) in zip(rates, samples):
        assert rate == pytest.approx(1.0 / step_time, rel=1e-9)
        assert sample_rate == pytest.approx(8 * rate, rel=1e-9)


def test_throughput_tracker_without_samples_per_step_puts_steps_only():
    recorder = ScalarRecorder()
    train(make_trainer(0.0), [ThroughputTracker()], 3, 1, monitors=[recorder])
    assert recorder.names() == {ThroughputTracker.STEPS_NAME}
    assert recorder.scalars[0][2] > 0


@pytest.mark.parametrize('bad', [0, -4, 'many', True])
def test_throughput_tracker_rejects_bad_samples_per_step(bad):
    with pytest.raises(ValueError, match='samples_per_step'):
        ThroughputTracker(samples_per_step=bad)


# ----------------------------------------------------------------------------------------
# GPU trackers: the no-GPU path (this machine) ...

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


# ... and the GPU path, with the measuring functions replaced by fakes

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


# ----------------------------------------------------------------------------------------
# StartProcOrThread

class _Spinner(StoppableThread):
    def __init__(self):
        super().__init__(daemon=True, name='spinner')

    def run(self):
        while not self.stopped():
            time.sleep(0.01)


class _AliveDuringTraining(Callback):
    def __init__(self, things):
        self.things = things
        self.alive = []

    def _trigger_epoch(self):
        self.alive.append([t.is_alive() for t in self.things])


def test_start_proc_or_thread_starts_and_stops_them():
    proc = mp.Process(target=time.sleep, args=(60,), daemon=True)
    thread = _Spinner()
    assert not proc.is_alive() and not thread.is_alive()
    watcher = _AliveDuringTraining([proc, thread])
    try:
        train(make_trainer(0.0), [StartProcOrThread([proc, thread]), watcher], 1, 2)
        assert watcher.alive == [[True, True], [True, True]]
        assert not proc.is_alive()
        assert proc.exitcode == -signal.SIGTERM
        assert not thread.is_alive() and thread.stopped()
    finally:
        if proc.is_alive():
            proc.kill()
            proc.join()


def test_start_proc_or_thread_stops_them_after_a_failure():
    thread = _Spinner()

    class Boom(Callback):
        def _trigger_epoch(self):
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match='boom'):
        train(make_trainer(0.0), [StartProcOrThread(thread), Boom()], 1, 3)
    assert thread.stopped() and not thread.is_alive()


def test_start_proc_or_thread_keeps_them_without_stop_at_last():
    thread = _Spinner()
    try:
        train(make_trainer(0.0), [StartProcOrThread(thread, stop_at_last=False)], 1, 1)
        assert thread.is_alive() and not thread.stopped()
    finally:
        thread.stop()
        thread.join(5)


def test_start_proc_or_thread_rejects_unstartable():
    with pytest.raises(TypeError, match='item 1'):
        StartProcOrThread([_Spinner(), object()])


# ----------------------------------------------------------------------------------------
# HookToCallback

class _RecordingHook(tfv1.train.SessionRunHook):
    """Feeds the number of its before_run calls into a placeholder and fetches twice that."""

    def __init__(self):
        self.calls = []
        self.results = []

    def begin(self):
        self.calls.append('begin')
        self.graph_finalized_at_begin = tfv1.get_default_graph().finalized
        self.x = tfv1.placeholder(tf.float32, shape=[], name='hook_x')
        self.doubled = tf.multiply(self.x, 2.0, name='hook_doubled')
        self.n = 0

    def after_create_session(self, session, coord):
        self.calls.append('after_create_session')
        self.session = session

    def before_run(self, run_context):
        self.calls.append('before_run')
        self.n += 1
        return tfv1.train.SessionRunArgs(self.doubled, feed_dict={self.x: float(self.n)})

    def after_run(self, run_context, run_values):
        self.calls.append('after_run')
        self.results.append(run_values.results)

    def end(self, session):
        self.calls.append('end')
        self.end_session = session


def test_hook_to_callback_runs_every_hook_method():
    hook = _RecordingHook()
    trainer = make_trainer(0.0)

    class KeepSession(Callback):
        def _before_train(self):
            self.sess = self.trainer.sess

    keeper = KeepSession()
    train(trainer, [HookToCallback(hook), keeper], 2, 2)

    assert hook.calls == (['begin', 'after_create_session'] + ['before_run', 'after_run'] * 4
                          + ['end'])
    assert hook.graph_finalized_at_begin is False
    assert hook.doubled.name == 'hook_doubled:0'  # begin() ran outside the callback's scope
    assert hook.session is keeper.sess and hook.end_session is keeper.sess
    assert hook.results == [2.0, 4.0, 6.0, 8.0]
    assert str(HookToCallback(hook)) == 'HookToCallback(_RecordingHook)'


# ----------------------------------------------------------------------------------------
# CallbackToHook

class _FetchSquare(Callback):
    def __init__(self, tensor, fail_at=None):
        self.tensor = tensor
        self.fail_at = fail_at
        self.seen = []

    def _before_run(self, ctx):
        return [self.tensor]

    def _after_run(self, ctx, values):
        self.seen.append(values.results[0])
        if len(self.seen) == self.fail_at:
            raise ValueError("bad value {}".format(values.results[0]))


def _counting_graph():
    step = tfv1.get_variable('step', shape=[], initializer=tfv1.zeros_initializer())
    inc = tfv1.assign_add(step, 1.0)
    with tf.control_dependencies([inc]):
        square = tf.square(step.read_value(), name='square')
    return inc, square


def test_callback_to_hook_in_monitored_session():
    inc, square = _counting_graph()
    cb = _FetchSquare(square)
    ran = []
    with tfv1.train.MonitoredSession(session_creator=tfv1.train.ChiefSessionCreator(),
                                     hooks=[CallbackToHook(cb)]) as sess:
        for _ in range(3):
            ran.append(sess.run(inc))
    assert ran == [1.0, 2.0, 3.0]
    assert cb.seen == [1.0, 4.0, 9.0]


def test_callback_to_hook_error_names_the_callback_in_monitored_session():
    inc, square = _counting_graph()
    cb = _FetchSquare(square, fail_at=2)
    with pytest.raises(ValueError, match='bad value 4.0') as info:
        with tfv1.train.MonitoredSession(session_creator=tfv1.train.ChiefSessionCreator(),
                                         hooks=[CallbackToHook(cb)]) as sess:
            for _ in range(5):
                sess.run(inc)
    assert info.value.callback is cb
    assert info.value.__notes__ == ['raised by callback _FetchSquare in after_run()']


def test_callback_to_hook_in_hooked_session():
    inc, square = _counting_graph()
    ok, failing = _FetchSquare(square), _FetchSquare('square:0', fail_at=3)  # by name too
    with tfv1.Session() as raw:
        raw.run(tfv1.global_variables_initializer())
        hooked = HookedSession(raw, [CallbackToHook(ok), CallbackToHook(failing)])
        assert hooked.run(inc) == 1.0
        assert hooked.run([inc]) == [2.0]
        with pytest.raises(ValueError, match='bad value 9.0') as info:
            hooked.run(inc)
    assert ok.seen == [1.0, 4.0, 9.0]
    assert failing.seen == [1.0, 4.0, 9.0]
    assert info.value.callback is failing
    assert any('_FetchSquare' in n and 'after_run' in n for n in info.value.__notes__)
