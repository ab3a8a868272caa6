"""Tests of the time, throughput, GPU and background-process callbacks, and of the
adapters between callbacks and TensorFlow's SessionRunHooks."""

import logging

import pytest

from helpers.timing import VirtualClock

from tensorpack_lite.callbacks import misc
from tensorpack_lite.callbacks.base import Callback
from tensorpack_lite.callbacks.misc import EstimatedTimeLeft
from tensorpack_lite.train.base import StopTraining
from helpers.trainers import make_trainer, train


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
