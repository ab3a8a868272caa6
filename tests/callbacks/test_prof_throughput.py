"""Tests of the time, throughput, GPU and background-process callbacks, and of the
adapters between callbacks and TensorFlow's SessionRunHooks."""


import pytest

from helpers.timing import VirtualClock

from tensorpack_lite.callbacks import prof
from tensorpack_lite.callbacks.base import Callback
from tensorpack_lite.callbacks.prof import ThroughputTracker
from helpers.trainers import ScalarRecorder, make_trainer, train


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
