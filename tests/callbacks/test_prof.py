"""BinaryClassificationStats, CheckNumerics, GraphProfiler, HostMemoryTracker, GPUMemoryTracker,
TFLocalCLIDebugHook, CometMLMonitor, the DumpTensor name and ScheduledHyperParamSetter's
set_at_beginning, each in a real training of a tiny model."""

import collections
import glob
import json
import logging
import os

import pytest

from tensorpack_lite.callbacks import prof
from tensorpack_lite.callbacks.monitor import TFEventWriter
from tensorpack_lite.callbacks.prof import GraphProfiler, HostMemoryTracker
from tensorpack_lite.compat import tfv1
from tensorpack_lite.train.base import Trainer


GB = 1024 ** 3


class CountingTrainer(Trainer):
    """Runs ``train_op`` in the hooked session; ``after_step(trainer)`` runs after each step
    (through the plain session, unseen by callbacks). ``steps`` counts the steps started."""

    def __init__(self, train_op, after_step=None):
        super().__init__()
        self.train_op = train_op
        self._after_step = after_step
        self.steps = 0

    def run_step(self):
        self.steps += 1
        self.hooked_sess.run(self.train_op)
        if self._after_step is not None:
            self._after_step(self)


def train(trainer, callbacks, steps_per_epoch, max_epoch, monitors=()):
    trainer.train_with_defaults(callbacks=list(callbacks), monitors=list(monitors), extra_callbacks=[],
                                steps_per_epoch=steps_per_epoch, max_epoch=max_epoch)


def scalars(trainer, name):
    return [value for _, value in trainer.monitors.get_history(name)]


def _counter_trainer():
    counter = tfv1.get_variable('counter', shape=[], initializer=tfv1.zeros_initializer())
    return CountingTrainer(tfv1.assign_add(counter, 1.0).op)


def test_graph_profiler_writes_chrome_traces(logdir):
    trainer = _counter_trainer()
    train(trainer, [GraphProfiler()], steps_per_epoch=2, max_epoch=1)
    traces = sorted(os.path.basename(p) for p in glob.glob(os.path.join(logdir, 'chrome-trace-*')))
    assert traces == ['chrome-trace-1.json', 'chrome-trace-2.json']   # named after the global step
    assert not glob.glob(os.path.join(logdir, 'runmetadata-*'))
    for name in traces:
        with open(os.path.join(logdir, name)) as f:
            events = json.load(f)['traceEvents']
        ops = {e['args'].get('name') for e in events if e.get('ph') == 'X'}
        assert trainer.train_op.name in ops


def test_graph_profiler_metadata_and_events(logdir):
    trainer = _counter_trainer()
    train(trainer, [GraphProfiler(dump_metadata=True, dump_tracing=False, dump_event=True)],
          steps_per_epoch=3, max_epoch=1, monitors=[TFEventWriter()])
    assert not glob.glob(os.path.join(logdir, 'chrome-trace-*'))
    for step in (1, 2, 3):
        with open(os.path.join(logdir, 'runmetadata-{}.pb'.format(step)), 'rb') as f:
            metadata = tfv1.RunMetadata.FromString(f.read())
        nodes = {n.node_name for dev in metadata.step_stats.dev_stats for n in dev.node_stats}
        assert trainer.train_op.name in nodes
    tagged = {}
    for path in glob.glob(os.path.join(logdir, 'events.out.tfevents.*')):
        for event in tfv1.train.summary_iterator(path):
            if event.HasField('tagged_run_metadata'):
                tagged[event.tagged_run_metadata.tag] = event.step
    assert tagged == {'trace-1': 1, 'trace-2': 2, 'trace-3': 3}


def test_graph_profiler_needs_the_logger_dir_when_training_starts():
    profiler = GraphProfiler()            # made before any logger directory: fine until training
    with pytest.raises(RuntimeError, match='GraphProfiler.*set_logger_dir'):
        train(_counter_trainer(), [profiler], steps_per_epoch=1, max_epoch=1)


def test_graph_profiler_made_before_its_runs_logger_dir_writes_there(tmp_path):
    from tensorpack_lite.utils import logger
    logger.set_logger_dir(str(tmp_path / 'earlier'), action='d')
    profiler = GraphProfiler()
    logger.set_logger_dir(str(tmp_path / 'run'), action='d')
    train(_counter_trainer(), [profiler], steps_per_epoch=1, max_epoch=1)
    assert os.listdir(str(tmp_path / 'run')).count('chrome-trace-1.json') == 1
    assert not glob.glob(str(tmp_path / 'earlier' / 'chrome-trace-*'))


Memory = collections.namedtuple('Memory', ['available', 'total'])


def test_host_memory_tracker_puts_free_memory_and_warns_when_low(monkeypatch, log_records):
    trainer = _counter_trainer()
    available = {0: 50, 1: 40, 2: 3, 3: 30}   # GB, by epoch: 3 of 100 is low
    monkeypatch.setattr(prof.psutil, 'virtual_memory',
                        lambda: Memory(available[trainer.epoch_num] * GB, 100 * GB))
    train(trainer, [HostMemoryTracker()], steps_per_epoch=1, max_epoch=3)
    assert scalars(trainer, 'HostFreeMemory (GB)') == [40, 3, 30]
    assert "[HostMemoryTracker] Free RAM in before_train() is 50.00 GB." in log_records.messages()
    warnings = log_records.messages_at(logging.WARNING)
    assert warnings == ["[HostMemoryTracker] The host is low on memory: 3.00 GB of 100.00 GB available."]


def test_host_memory_tracker_real_numbers():
    import psutil
    trainer = _counter_trainer()
    train(trainer, [HostMemoryTracker()], steps_per_epoch=1, max_epoch=2)
    values = scalars(trainer, 'HostFreeMemory (GB)')
    assert len(values) == 2
    assert all(0 < v <= psutil.virtual_memory().total / GB for v in values)
