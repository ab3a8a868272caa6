"""WandbMonitor, checked against what W&B wrote: the offline runs' record logs
(``<logger dir>/wandb/offline-run-*/run-<id>.wandb``) read back with W&B's own protobuf
messages, and the files saved with the runs."""

import glob
import json
import logging
import os
import struct
import sys
import time

import numpy as np
import psutil
import pytest

from helpers.callbacks import RaiseAt
from helpers.logs import capture_logs
from helpers.models import LineRegression

from tensorpack_lite.callbacks.base import Callback
from tensorpack_lite.callbacks.monitor import JSONWriter
from tensorpack_lite.callbacks.saver import ModelSaver
from tensorpack_lite.compat import tfv1
from tensorpack_lite.dataflow import BatchData, DataFromList
from tensorpack_lite.train import AutoResumeTrainConfig, SimpleTrainer, TrainConfig, launch_train_with_config
from tensorpack_lite.train.base import StopTraining, Trainer
from tensorpack_lite.utils import logger, stats_json

wandb = pytest.importorskip('wandb')
wandb_internal_pb2 = pytest.importorskip('wandb.proto.wandb_internal_pb2')

from tensorpack_lite.callbacks.monitors.wandb import WandbMonitor  # noqa: E402

STEPS = 3   # per epoch: 6 points in batches of 2
"""The keys JSONWriter adds to the scalars of a stats.json record."""


# ----- reading what W&B wrote ------------------------------------------------------------------

def _chunks(path):
    """The records of a W&B record log: a 7-byte header (':W&B', magic, version), then LevelDB
    log blocks of 32 KiB whose chunks (CRC, length, type) are whole records or their parts."""
    with open(path, 'rb') as f:
        data = f.read()
    assert data[:4] == b':W&B', path
    pos, block, parts = 7, 32768, []
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:        # the rest of a block is padding
            pos += left
            continue
        _, length, kind = struct.unpack('<IHB', data[pos:pos + 7])
        if kind == 0:       # zero-filled rest of a block
            pos += left
            continue
        if pos + 7 + length > len(data):
            raise Incomplete(path)
        parts.append(data[pos + 7:pos + 7 + length])
        pos += 7 + length
        if kind in (1, 4):  # FULL, LAST
            yield b''.join(parts)
            parts = []
    if parts:
        raise Incomplete(path)


class Incomplete(Exception):
    """The record log ends inside a record: W&B is still writing it."""


class OfflineRun:
    """What one offline W&B run (one attempt) wrote: ``rows`` {step: {name: value}}, ``config``,
    ``summary``, ``exit_code``, ``files`` (the paths saved), ``run_id`` and ``directory``."""

    def __init__(self, path):
        self.directory = os.path.dirname(path)
        self.rows, self.config, self.summary, self.files = {}, {}, {}, []
        self.exit_code = self.run_id = self.start = None   # exit_code: None until the exit record
        self.preempting = False
        for data in _chunks(path):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(data)
            kind = record.WhichOneof('record_type')
            if kind == 'run':
                self.run_id, self.start = record.run.run_id, record.run.start_time.ToNanoseconds()
                self._update(self.config, record.run.config.update)
            elif kind == 'config':
                self._update(self.config, record.config.update)
            elif kind == 'summary':
                self._update(self.summary, record.summary.update)
            elif kind == 'history':
                row = {}
                self._update(row, record.history.item)
                step = row.pop('_step')
                assert step == record.history.step.num
                assert step not in self.rows, "step {} written twice".format(step)
                self.rows[step] = {k: v for k, v in row.items() if not k.startswith('_')}
            elif kind == 'files':
                self.files += [item.path for item in record.files.files]
            elif kind == 'exit':
                self.exit_code = record.exit.exit_code
            elif kind == 'preempting':
                self.preempting = True

    @staticmethod
    def _update(into, items):
        for item in items:
            into[item.key or '.'.join(item.nested_key)] = json.loads(item.value_json)


def offline_runs(logdir):
    """The offline runs written in ``logdir``, oldest first, once W&B wrote each to its end.

    ``run.finish()`` returns when W&B's service process handled the exit; the service writes
    the end of the record log a moment later (its exit record is the last one)."""
    paths = glob.glob(os.path.join(logdir, 'wandb', 'offline-run-*', 'run-*.wandb'))
    return sorted((_read_when_complete(p) for p in paths), key=lambda run: (run.start, run.directory))


def _read_when_complete(path, timeout=30):
    deadline = time.monotonic() + timeout
    while True:
        try:
            run = OfflineRun(path)
        except Incomplete:
            run = None
        if run is not None and run.exit_code is not None:
            return run
        assert time.monotonic() < deadline, "W&B did not finish writing {} within {} s".format(path, timeout)
        time.sleep(0.02)


def stats_by_step(logdir):
    """The scalars of stats.json by global step: {step: {name: value}}."""
    steps = {}
    for record in stats_json.load_records(logdir):
        scalars = stats_json.scalars_of(record)
        if scalars:
            steps.setdefault(record['global_step'], {}).update(scalars)
    return steps


def read_bytes(*path):
    with open(os.path.join(*path), 'rb') as f:
        return f.read()


def assert_rows_equal(got, expected):
    assert sorted(got) == sorted(expected)
    for step in expected:
        assert got[step] == pytest.approx(expected[step]), 'step {}'.format(step)


# ----- a tiny training ---------------------------------------------------------------------------

def model():
    """y = x . w; its cost is put at each epoch's end (moving average summary)."""
    return LineRegression(dim=2, lr=0.1, lr_variable=False, summary=True)


def dataflow():
    rng = np.random.RandomState(0)
    return BatchData(DataFromList([[rng.rand(2).astype('float32'), np.float32(i)] for i in range(6)],
                                  shuffle=False), 2)


class PutScalars(Callback):
    """Puts 'start' before training, and at every step 'half-step' and 'twice' (twice: the last
    value, step + 0.25, is the one kept)."""

    def _before_train(self):
        self.trainer.monitors.put_scalar('start', self.global_step)

    def _trigger_step(self):
        monitors, step = self.trainer.monitors, self.global_step
        monitors.put_scalar('half-step', step * 0.5)
        monitors.put_scalar('twice', -1.0)
        monitors.put_scalar('twice', step + 0.25)


def train(logdir, max_epoch, callbacks=(), config_class=TrainConfig, **kwargs):
    """Train the model in ``logdir`` (kept: a run in it resumes) with a WandbMonitor (offline) and
    JSONWriter; returns the monitor and what the library logged."""
    monitor = WandbMonitor(project='tpl-tests', params={'lr': 0.1, 'note': 'tiny'}, mode='offline')
    with tfv1.Graph().as_default(), capture_logs() as records:
        logger.set_logger_dir(logdir, action='k')
        try:
            config = config_class(model=model(), dataflow=dataflow(), steps_per_epoch=STEPS,
                                  max_epoch=max_epoch, monitors=[JSONWriter(), monitor],
                                  callbacks=[ModelSaver(background=False), PutScalars()] + list(callbacks),
                                  **kwargs)
            launch_train_with_config(config, SimpleTrainer())
        finally:
            logger.unset_logger_dir()
    return monitor, records


# ----- fixtures ------------------------------------------------------------------------------------

def _wandb_processes():
    return [p for p in psutil.Process().children(recursive=True) if 'wandb' in ' '.join(p.cmdline())]


@pytest.fixture(scope='module')
def wandb_env(tmp_path_factory):
    """W&B offline and quiet, its user-wide directories in a temporary one; W&B's service process
    is started first and ended after the module, and none may be left."""
    home = tmp_path_factory.mktemp('wandb-home')
    with pytest.MonkeyPatch.context() as mp:
        for name in ('WANDB_API_KEY', 'WANDB_PROJECT', 'WANDB_ENTITY', 'WANDB_RUN_ID', 'WANDB_RESUME'):
            mp.delenv(name, raising=False)
        mp.setenv('WANDB_MODE', 'offline')
        mp.setenv('WANDB_SILENT', 'true')
        for name, sub in (('WANDB_DIR', 'dir'), ('WANDB_CONFIG_DIR', 'config'), ('WANDB_CACHE_DIR', 'cache'),
                          ('WANDB_DATA_DIR', 'data'), ('WANDB_ARTIFACT_DIR', 'artifacts')):
            mp.setenv(name, str(home / sub))
        # W&B's service (a process, its threads and sockets, WANDB_SERVICE) starts with the first
        # run and serves the process after it: started here, so it belongs to the module, not to
        # whichever test comes first (tests/README.md, 'What a test leaves behind')
        wandb.setup()
        yield home
        wandb.teardown()
    assert not _wandb_processes()


@pytest.fixture(scope='module')
def finished(wandb_env, tmp_path_factory):
    """One run of 2 epochs: its logger directory, monitor and the W&B runs it wrote."""
    logdir = str(tmp_path_factory.mktemp('finished') / 'log')
    monitor, _ = train(logdir, max_epoch=2)
    return logdir, monitor, offline_runs(logdir)


# ----- a finished run ----------------------------------------------------------------------------

def test_every_scalar_is_logged_once_at_its_step(finished):
    logdir, monitor, runs = finished
    assert len(runs) == 1
    run = runs[0]
    expected = stats_by_step(logdir)
    assert sorted(expected) == list(range(0, 2 * STEPS + 1))
    assert expected[0] == {'start': 0}
    assert expected[STEPS]['twice'] == STEPS + 0.25
    assert {'cost', 'half-step', 'twice'} <= set(expected[2 * STEPS])
    assert_rows_equal(run.rows, expected)    # and OfflineRun checked that no step came twice


def test_config_environment_status_and_saved_files(finished):
    logdir, monitor, runs = finished
    run = runs[0]
    assert run.run_id == monitor.run.id
    with open(os.path.join(logdir, 'wandb-run.json')) as f:
        assert json.load(f) == {'run_id': run.run_id, 'project': 'tpl-tests', 'last_step': 2 * STEPS}
    expected = {'model': 'LineRegression', 'trainer': 'SimpleTrainer', 'world_size': 1,
                'steps_per_epoch': STEPS, 'max_epoch': 2, 'lr': 0.1, 'note': 'tiny'}
    assert {k: run.config.get(k) for k in expected} == expected
    assert run.summary['status'] == 'FINISHED' and 'error' not in run.summary
    assert run.exit_code == 0 and not run.preempting

    # the files are in the run directory, as they were when training ended
    prefix = 'model-{}'.format(2 * STEPS)
    data_files = [os.path.basename(p) for p in glob.glob(os.path.join(logdir, prefix + '.data-*'))]
    assert data_files
    saved = {'environment.txt', 'stats.json', prefix + '.index'} | set(data_files)
    assert saved <= set(run.files)
    for name in saved - {'environment.txt'}:
        assert read_bytes(logdir, name) == read_bytes(run.directory, 'files', name), name
    with open(os.path.join(run.directory, 'files', 'environment.txt')) as f:
        assert 'TensorFlow' in f.read()


# ----- a resumed run -------------------------------------------------------------------------------

def test_resumed_run_continues_the_same_wandb_run(wandb_env, tmp_path):
    logdir = str(tmp_path / 'log')
    stop = RaiseAt(STEPS + 2, StopTraining('enough for now'))    # in epoch 2
    first, _ = train(logdir, max_epoch=2, callbacks=[stop])
    second, records = train(logdir, max_epoch=3, config_class=AutoResumeTrainConfig, always_resume=True)

    runs = offline_runs(logdir)
    assert [r.run_id for r in runs] == [first.run.id] * 2
    assert second.run.id == first.run.id
    before, after = runs
    assert sorted(before.rows) == list(range(0, STEPS + 3))
    assert sorted(after.rows) == list(range(STEPS + 3, 3 * STEPS + 1))   # nothing twice across both
    assert before.summary['status'] == after.summary['status'] == 'FINISHED'
    assert before.exit_code == after.exit_code == 0
    assert (before.config['max_epoch'], after.config['max_epoch']) == (2, 3)

    # the resumed run put 'start' at step 5, which the first attempt had logged: left out, and said
    expected = stats_by_step(logdir)
    assert expected[STEPS + 2]['start'] == STEPS + 2
    del expected[STEPS + 2]['start']
    assert_rows_equal({**before.rows, **after.rows}, expected)
    skipped = [m for m in records.messages(logging.INFO) if 'were not sent' in m]
    assert len(skipped) == 1 and skipped[0].startswith('WandbMonitor: 1 value(s)'), skipped
    with open(os.path.join(logdir, 'wandb-run.json')) as f:
        assert json.load(f)['last_step'] == 3 * STEPS


# ----- a failed run ---------------------------------------------------------------------------------

@pytest.mark.parametrize('error, status, exit_code', [
    (RuntimeError('callback broke'), 'FAILED', 1),
    (KeyboardInterrupt('stopped by hand'), 'KILLED', 130),
])
def test_failed_or_killed_run_says_so_and_still_raises(wandb_env, tmp_path, error, status, exit_code):
    logdir = str(tmp_path / 'log')
    with pytest.raises(type(error), match=str(error)):
        train(logdir, max_epoch=2, callbacks=[RaiseAt(STEPS + 1, error)])
    run, = offline_runs(logdir)
    assert run.summary['status'] == status
    assert run.summary['error'] == '{}: {}'.format(type(error).__name__, error)
    assert run.exit_code == exit_code
    assert run.preempting == (status == 'KILLED')    # W&B's mark for a run that goes on later
    assert sorted(run.rows) == list(range(0, STEPS + 2))
    assert 'model-{}.index'.format(STEPS + 1) in run.files


def test_wandb_errors_do_not_stop_training(wandb_env, tmp_path, monkeypatch):
    """Once the run started, a failing W&B call is logged once; training finishes."""
    calls = []

    def broken_log(self, *args, **kwargs):
        calls.append(args)
        raise ConnectionError('W&B is away')
    monkeypatch.setattr(wandb.sdk.wandb_run.Run, 'log', broken_log)
    logdir = str(tmp_path / 'log')
    monitor, records = train(logdir, max_epoch=1)
    warnings = [m for m in records.messages(logging.WARNING) if m.startswith('WandbMonitor')]
    assert len(calls) == 1 and len(warnings) == 1
    assert 'ConnectionError: W&B is away' in warnings[0] and 'training goes on' in warnings[0]
    run, = offline_runs(logdir)
    assert run.rows == {} and 'status' not in run.summary   # nothing sent after the failure...
    assert run.exit_code == 0                                # ...but the run was finished
    with open(os.path.join(logdir, 'stats.json')) as f:
        assert json.load(f)[-1]['global_step'] == STEPS


# ----- chief only, and the arguments -------------------------------------------------------------

def test_chief_only(wandb_env):
    monitor = WandbMonitor(mode='offline')
    assert monitor.chief_only
    trainer = Trainer()
    trainer.is_chief = False
    assert trainer.register_callback(monitor) is False


@pytest.mark.parametrize('kwargs, error, words', [
    (dict(params={1: 'x'}), TypeError, 'params'),
    (dict(params=[('lr', 0.1)]), TypeError, 'params'),
    (dict(project=''), TypeError, 'project'),
    (dict(name=3), TypeError, 'name'),
    (dict(mode='offlne'), ValueError, 'mode'),
    (dict(dir=3), TypeError, 'dir'),
    (dict(id='abc'), ValueError, "'id'"),
    (dict(config={'lr': 0.1}), ValueError, 'params='),
])
def test_argument_errors(wandb_env, kwargs, error, words):
    with pytest.raises(error, match='WandbMonitor') as info:
        WandbMonitor(**kwargs)
    assert words in str(info.value)


def test_needs_the_logger_directory_and_wandb(wandb_env, monkeypatch):
    monitor = WandbMonitor(mode='offline')
    with pytest.raises(ValueError, match='logger.set_logger_dir'):
        monitor.setup_graph(Trainer())
    assert monitor.run is None
    monkeypatch.setitem(sys.modules, 'wandb', None)
    with pytest.raises(ImportError, match=r"WandbMonitor.*tensorpack_lite\[wandb\]"):
        WandbMonitor()
