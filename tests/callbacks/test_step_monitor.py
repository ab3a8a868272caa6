"""StepTimeMonitor: the bound it names on pipelines made slow on purpose (input, checkpoints,
callbacks) and on the README's convnet example, and what it writes (the FLOP count and the peak
it reads the utilisation from: profiling/test_flops.py, profiling/test_peak_flops.py). The slow
parts are slower than the rest by a factor of 50 or more, so that no load on the machine can
change the verdict; nothing asserts a time."""

import json
import os
import time

import numpy as np
import pytest

from helpers.examples import load_example
from helpers.models import MLP

from tensorpack_lite import (DEFAULT_CALLBACKS, Callback, DataFlow, DataFromList, ModelSaver,
                             PeriodicTrigger, QueueInput, SimpleTrainer, StepTimeMonitor, TrainConfig,
                             launch_train_with_config)
from tensorpack_lite.callbacks.step_monitor import BOUNDS
from tensorpack_lite.dataflow import ShardedData, save_shards


def tiny_model():
    """A 16-8-2 MLP: a step of well under a millisecond."""
    return MLP((16, 8, 2), lr=0.01)


def tiny_batches(count=8, batch=4):
    rng = np.random.RandomState(0)
    return [[rng.rand(batch, 16).astype('float32'), rng.randint(0, 2, batch).astype('int32')]
            for _ in range(count)]


class SlowData(DataFlow):
    """Tiny batches, each after ``delay`` seconds of sleep."""

    def __init__(self, delay):
        self.delay = delay

    def __iter__(self):
        for dp in iter(lambda: None, 0):   # for ever
            time.sleep(self.delay)
            yield tiny_batches(1)[0]


class SleepEveryStep(Callback):
    def __init__(self, seconds):
        self.seconds = seconds

    def _trigger_step(self):
        time.sleep(self.seconds)


def train(model, data, callbacks=(), monitor=None, steps=12, epochs=1):
    """Train with the default callbacks (and ``monitor`` instead of the default one); returns the
    trainer's StepTimeMonitor and the last epoch's record of stats.json."""
    extra = DEFAULT_CALLBACKS() if monitor is None else DEFAULT_CALLBACKS(step_monitor=False) + [monitor]
    trainer = SimpleTrainer()
    source = {'dataflow' if isinstance(data, DataFlow) else 'data': data}
    launch_train_with_config(TrainConfig(model=model, callbacks=list(callbacks), extra_callbacks=extra,
                                         steps_per_epoch=steps, max_epoch=epochs, **source), trainer)
    monitor, = [cb for cb in trainer.callbacks if isinstance(cb, StepTimeMonitor)]
    return monitor


def last_stats(logdir):
    with open(os.path.join(logdir, 'stats.json')) as f:
        return json.load(f)[-1]


def check_written(monitor, logdir, log_records, bound):
    """The report names ``bound``, in the log (one line) and in stats.json, whose parts add up."""
    report = monitor.last_report
    assert report['bound'] == bound, report['line']
    lines = [m for m in log_records.messages() if m.startswith('[StepTimeMonitor]')]
    assert lines and lines[-1] == report['line']
    assert ' {}: '.format(bound) in lines[-1] and 'docs/efficiency.md#{}'.format(bound) in lines[-1]
    stats = last_stats(logdir)
    parts = [stats['StepTime/{}_ms'.format(name)] for name in BOUNDS]
    assert all(p >= 0 for p in parts)
    assert np.isclose(sum(parts), stats['StepTime/step_ms'], rtol=1e-6)
    assert np.isclose(stats['StepTime/steps_per_sec'] * stats['StepTime/step_ms'], 1e3, rtol=1e-6)
    return stats


def test_input_bound_on_a_queue_fed_by_a_sleeping_dataflow(logdir, log_records):
    # 100 ms a datapoint against a step of a fraction of a millisecond: every step waits in the dequeue
    monitor = train(tiny_model(), QueueInput(SlowData(0.1)), steps=10,
                    monitor=StepTimeMonitor(sample_every=2, trace_every_seconds=0))
    stats = check_written(monitor, logdir, log_records, 'input-bound')
    assert 'the input queue was empty at' in monitor.last_report['line']
    assert 0 < stats['StepTime/queue_empty'] <= 1 and 0 <= stats['StepTime/queue_fill'] < 1
    assert stats['StepTime/samples_per_sec'] == stats['StepTime/steps_per_sec'] * 4


class SlowStore:
    """A sharded dataset's store (``ShardedData.store``) whose every file takes ``delay`` seconds to
    open: a slow bucket."""

    def __init__(self, store, delay):
        self.store, self.delay = store, delay

    def __getattr__(self, name):
        return getattr(self.store, name)

    def open(self, name):
        time.sleep(self.delay)
        return self.store.open(name)


def test_input_bound_on_a_sharded_stream_from_a_slow_bucket(logdir, log_records, tmp_path):
    # one batch a shard, 100 ms to fetch each (issue 69 item 5): the queue waits for the bucket
    save_shards(DataFromList(tiny_batches(30), shuffle=False), str(tmp_path / 'shards'), shard_bytes=1)
    df = ShardedData(str(tmp_path / 'shards'), cache_dir=str(tmp_path / 'cache'))
    df.store = SlowStore(df.store, 0.1)
    monitor = train(tiny_model(), QueueInput(df), steps=10,
                    monitor=StepTimeMonitor(sample_every=2, trace_every_seconds=0))
    check_written(monitor, logdir, log_records, 'input-bound')
    assert 'the input queue was empty at' in monitor.last_report['line']


@pytest.mark.alone     # a verdict from the wall clock: beside other tests, the loop's Python waits for a core
def test_compute_bound_on_the_readme_convnet_with_its_default_input(logdir, log_records):
    example = load_example('examples/basics/mnist-convnet.py')
    train_data, _ = example.get_data(None, 64, 3)   # the example's defaults: Digits 28x28, batch 64, shift 3
    monitor = train(example.Model(), train_data, steps=100)   # FeedInput, as SimpleTrainer picks it
    stats = check_written(monitor, logdir, log_records, 'compute-bound')
    assert stats['StepTime/samples_per_sec'] == stats['StepTime/steps_per_sec'] * 64
    assert 'queue_empty' not in ' '.join(stats)      # no queue
    assert stats['StepTime/gflops_per_sec'] > 0


def test_checkpoint_bound_when_a_checkpoint_is_written_at_every_step(logdir, log_records):
    saver = PeriodicTrigger(ModelSaver(background=False), every_k_steps=1)
    monitor = train(tiny_model(), DataFromList(tiny_batches(), shuffle=False), [saver], steps=10)
    stats = check_written(monitor, logdir, log_records, 'checkpoint-bound')
    assert stats['StepTime/checkpoint_ms'] > 0


def test_callback_bound_when_a_callback_sleeps_every_step(logdir, log_records):
    data = DataFromList(tiny_batches(), shuffle=False)
    monitor = train(tiny_model(), data, [SleepEveryStep(0.05)], steps=8)
    check_written(monitor, logdir, log_records, 'callback-bound')


def test_default_callbacks_have_it_and_it_can_be_turned_off():
    assert [type(cb) for cb in DEFAULT_CALLBACKS() if isinstance(cb, StepTimeMonitor)] == [StepTimeMonitor]
    assert not any(isinstance(cb, StepTimeMonitor) for cb in DEFAULT_CALLBACKS(step_monitor=False))


def test_bad_arguments_are_named():
    for kwargs, name in [({'sample_every': 0}, 'sample_every'), ({'peak_flops': 0}, 'peak_flops'),
                         ({'trace_every_seconds': -1}, 'trace_every_seconds')]:
        try:
            StepTimeMonitor(**kwargs)
        except ValueError as err:
            assert name in str(err)
        else:
            raise AssertionError("{} was accepted".format(kwargs))
