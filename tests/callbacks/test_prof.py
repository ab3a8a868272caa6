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
from helpers.trainers import counter_trainer, scalars, train


GB = 1024 ** 3


def test_graph_profiler_writes_chrome_traces(logdir):
    trainer = counter_trainer()
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
    trainer = counter_trainer()
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
        train(counter_trainer(), [profiler], steps_per_epoch=1, max_epoch=1)


def test_graph_profiler_made_before_its_runs_logger_dir_writes_there(tmp_path):
    from tensorpack_lite.utils import logger
    logger.set_logger_dir(str(tmp_path / 'earlier'), action='d')
    profiler = GraphProfiler()
    logger.set_logger_dir(str(tmp_path / 'run'), action='d')
    train(counter_trainer(), [profiler], steps_per_epoch=1, max_epoch=1)
    assert os.listdir(str(tmp_path / 'run')).count('chrome-trace-1.json') == 1
    assert not glob.glob(str(tmp_path / 'earlier' / 'chrome-trace-*'))


Memory = collections.namedtuple('Memory', ['available', 'total'])


def test_host_memory_tracker_puts_free_memory_and_warns_when_low(monkeypatch, log_records):
    trainer = counter_trainer()
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
    trainer = counter_trainer()
    train(trainer, [HostMemoryTracker()], steps_per_epoch=1, max_epoch=2)
    values = scalars(trainer, 'HostFreeMemory (GB)')
    assert len(values) == 2
    assert all(0 < v <= psutil.virtual_memory().total / GB for v in values)
