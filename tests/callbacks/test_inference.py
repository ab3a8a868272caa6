"""BinaryClassificationStats, CheckNumerics, GraphProfiler, HostMemoryTracker, GPUMemoryTracker,
TFLocalCLIDebugHook, CometMLMonitor, the DumpTensor name and ScheduledHyperParamSetter's
set_at_beginning, each in a real training of a tiny model."""

import collections
import glob
import json
import logging
import os
import sys
import types

import numpy as np
import pytest

from tensorpack_lite.callbacks import gpu_trackers, prof
from tensorpack_lite.callbacks.base import Callback
from tensorpack_lite.callbacks.debug import DumpTensor, DumpTensors
from tensorpack_lite.callbacks.graph import CheckNumerics
from tensorpack_lite.callbacks.hooks import HookToCallback, TFLocalCLIDebugHook
from tensorpack_lite.callbacks.inference import BinaryClassificationStats
from tensorpack_lite.callbacks.inference_runner import InferenceRunner
from tensorpack_lite.callbacks.monitor import CometMLMonitor, TFEventWriter
from tensorpack_lite.callbacks.param import ScheduledHyperParamSetter
from tensorpack_lite.callbacks.prof import GPUMemoryTracker, GraphProfiler, HostMemoryTracker
from tensorpack_lite.compat import tf, tfv1
from tensorpack_lite.dataflow import BatchData, DataFromList
from tensorpack_lite.libinfo import __version__
from tensorpack_lite.train import ModelDesc, SimpleTrainer, TrainConfig, launch_train_with_config
from tensorpack_lite.train.base import Trainer

GB = 1024 ** 3


# ----------------------------------------------------------------------------------------
# helpers

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


# ----------------------------------------------------------------------------------------
# BinaryClassificationStats

class Thresholder(ModelDesc):
    """Predicts ``x[:, 0] > 0.5`` (whatever the weights), so the statistics are known in
    advance; the cost trains an unrelated weight."""

    def inputs(self):
        return [tf.TensorSpec([None, 2], tf.float32, 'x'), tf.TensorSpec([None], tf.int32, 'label')]

    def build_graph(self, x, label):
        w = tfv1.get_variable('w', initializer=0.0)
        tf.cast(x[:, 0] > 0.5, tf.int32, name='pred')
        return tf.reduce_mean(tf.square(w * x[:, 1] - tf.cast(label, tf.float32)), name='cost')

    def optimizer(self):
        return tfv1.train.GradientDescentOptimizer(0.1)


def test_binary_classification_stats_over_the_whole_pass():
    rng = np.random.RandomState(0)
    x = rng.rand(30, 2).astype('float32')
    label = (rng.rand(30) > 0.4).astype('int32')
    pred = (x[:, 0] > 0.5).astype('int32')
    true_pos = np.sum((pred == 1) & (label == 1))
    precision, recall = true_pos / np.sum(pred == 1), true_pos / np.sum(label == 1)
    # batches of 7 (the last one of 2): a mean of per-batch rates would differ
    batch_precisions = [np.sum(pred[i:i + 7] & label[i:i + 7]) / np.sum(pred[i:i + 7])
                        for i in range(0, 30, 7)]
    assert not np.isclose(np.mean(batch_precisions), precision)

    points = [[xi, yi] for xi, yi in zip(x, label)]
    test_df = BatchData(DataFromList(points, shuffle=False), 7, remainder=True)
    runner = InferenceRunner(test_df, [BinaryClassificationStats('pred', 'label'),
                                       BinaryClassificationStats('pred', 'label', prefix='test')])
    trainer = SimpleTrainer()
    launch_train_with_config(TrainConfig(
        model=Thresholder(), dataflow=BatchData(DataFromList(points, shuffle=False), 10),
        callbacks=[runner], extra_callbacks=[], monitors=[], max_epoch=2), trainer)
    for prefix in ('val', 'test'):
        np.testing.assert_allclose(scalars(trainer, prefix + '_precision'), [precision] * 2)
        np.testing.assert_allclose(scalars(trainer, prefix + '_recall'), [recall] * 2)


def test_binary_classification_stats_bad_input():
    with pytest.raises(TypeError, match='label_tensor_name'):
        BinaryClassificationStats('pred', ['label'])
    inf = BinaryClassificationStats('p', 'l')
    inf.before_inference()
    with pytest.raises(ValueError, match=r"'p' has shape \(3,\) but label 'l' has shape \(2,\)"):
        inf.on_fetches([np.array([1, 0, 1]), np.array([1, 0])])
    # nothing predicted positive, no positive label: 0, as BinaryStatistics defines it
    inf.on_fetches([np.array([0, 0]), np.array([0, 0])])
    assert inf.after_inference() == {'val_precision': 0.0, 'val_recall': 0.0}


# ----------------------------------------------------------------------------------------
# CheckNumerics

def _poisonable_model(initial=1.0):
    """Trainable 'good/w' and 'bad/w', a step that halves both, and an op writing ``value``
    into 'bad/w'."""
    good = tfv1.get_variable('good/w', initializer=1.0)
    bad = tfv1.get_variable('bad/w', initializer=initial)
    step = tf.group(good.assign(good * 0.5), bad.assign(bad * 0.5))
    value = tfv1.placeholder(tf.float32, [], name='poison_value')
    return step, bad.assign(value).op, value


def _poison_at(poison, value_ph, value, global_step):
    def after_step(trainer):
        if trainer.global_step == global_step:
            trainer.sess.run(poison, {value_ph: value})
    return after_step


@pytest.mark.parametrize('value, word', [(np.nan, 'NaN'), (np.inf, 'Inf')])
def test_check_numerics_at_the_end_of_the_epoch(value, word):
    step, poison, value_ph = _poisonable_model()
    trainer = CountingTrainer(step, _poison_at(poison, value_ph, value, global_step=4))
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"CheckNumerics\['bad/w'\].*" + word):
        train(trainer, [CheckNumerics()], steps_per_epoch=3, max_epoch=3)
    # epoch 1 passed its check; epoch 2 (steps 4 to 6) ran to its end and failed there
    assert trainer.steps == 6 and trainer.epoch_num == 2


def test_check_numerics_with_every_step():
    step, poison, value_ph = _poisonable_model()
    trainer = CountingTrainer(step, _poison_at(poison, value_ph, np.nan, global_step=2))
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"CheckNumerics\['bad/w'\]"):
        train(trainer, [CheckNumerics(run_as_trigger=False, run_step=True)], steps_per_epoch=5, max_epoch=1)
    assert trainer.steps == 3   # the step after the poisoning


def test_check_numerics_before_training_and_when_all_is_well():
    step, _, _ = _poisonable_model(initial=float('nan'))
    trainer = CountingTrainer(step)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"CheckNumerics\['bad/w'\]"):
        train(trainer, [CheckNumerics()], steps_per_epoch=2, max_epoch=1)
    assert trainer.steps == 0

    with tfv1.Graph().as_default():
        step, _, _ = _poisonable_model()
        trainer = CountingTrainer(step)
        train(trainer, [CheckNumerics(run_step=True)], steps_per_epoch=2, max_epoch=2)
        assert trainer.steps == 4


# ----------------------------------------------------------------------------------------
# GraphProfiler

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


# ----------------------------------------------------------------------------------------
# Host and GPU memory

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


@pytest.mark.skipif(gpu_trackers._num_gpus() > 0 or gpu_trackers._num_tf_gpus() > 0,
                    reason='a GPU is visible')
def test_gpu_memory_tracker_without_gpu_is_a_logged_no_op(log_records):
    trainer = _counter_trainer()
    tracker = GPUMemoryTracker()
    assert tracker._indices == [0]
    train(trainer, [tracker], steps_per_epoch=2, max_epoch=2)
    assert trainer.steps == 4
    assert log_records.messages_at(logging.WARNING) == ["GPUMemoryTracker is disabled: no GPU is available."]
    assert not any(name.startswith('PeakMemory') for name in trainer.monitors._scalar_history._history)


def test_gpu_memory_tracker_devices():
    assert GPUMemoryTracker(devices=[1, '/gpu:3'])._indices == [1, 3]
    with pytest.raises(ValueError, match="GPUMemoryTracker: device '/cpu:0' is not a GPU"):
        GPUMemoryTracker(devices=['/cpu:0'])


# ----------------------------------------------------------------------------------------
# TFLocalCLIDebugHook, DumpTensor

def test_tf_local_cli_debug_hook_wraps_tfdbg(monkeypatch):
    from tensorflow.python import debug as tfdbg
    cb = TFLocalCLIDebugHook(ui_type='readline')
    assert isinstance(cb, HookToCallback) and cb.chief_only
    assert isinstance(cb._hook, tfdbg.LocalCLIDebugHook)

    class StandIn:
        def __init__(self, *args, **kwargs):
            self.args, self.kwargs, self.filters = args, kwargs, []

        def add_tensor_filter(self, name, fn):
            self.filters.append((name, fn))

    monkeypatch.setattr(tfdbg, 'LocalCLIDebugHook', StandIn)
    cb = TFLocalCLIDebugHook('readline', dump_root='/tmp/dbg')
    cb.add_tensor_filter('has_inf_or_nan', tfdbg.has_inf_or_nan)
    assert cb._hook.args == ('readline',) and cb._hook.kwargs == {'dump_root': '/tmp/dbg'}
    assert cb._hook.filters == [('has_inf_or_nan', tfdbg.has_inf_or_nan)]


def test_dump_tensor_is_dump_tensors(logdir):
    assert DumpTensor is DumpTensors
    trainer = _counter_trainer()
    train(trainer, [DumpTensor(['counter'])], steps_per_epoch=3, max_epoch=1)
    assert float(np.load(os.path.join(logdir, 'DumpTensor-3.npz'))['counter']) == 3.0


# ----------------------------------------------------------------------------------------
# CometMLMonitor

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
    trainer = _counter_trainer()
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


# ----------------------------------------------------------------------------------------
# ScheduledHyperParamSetter(set_at_beginning=...)

INITIAL_LR = 0.3


class TinyRegression(ModelDesc):
    def inputs(self):
        return [tf.TensorSpec([None], tf.float32, 'x')]

    def build_graph(self, x):
        w = tfv1.get_variable('w', initializer=0.0)
        return tf.reduce_mean(tf.square(w * x - 1.0), name='cost')

    def optimizer(self):
        lr = tfv1.get_variable('learning_rate', initializer=INITIAL_LR, trainable=False)
        return tfv1.train.GradientDescentOptimizer(lr)


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
    launch_train_with_config(TrainConfig(
        model=TinyRegression(), dataflow=BatchData(DataFromList([[np.float32(1)]] * 4, shuffle=False), 2),
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
