"""MLflowMonitor against a real tracking server (``mlflow server`` with a SQLite backend, started
here on a free port) and against ``sqlite:///`` with no server, read back through MLflow's own
client: one run across resumes, every step's metrics once, the run's status, its artifacts, and
a server that goes away mid-run."""

import json
import logging
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request

import numpy as np
import pytest

from helpers.logs import capture_logs
from helpers.paths import REPO_DIR
from helpers.processes import kill_process_tree, listening_ports
from helpers.timing import HANG_TIMEOUT, wait_until
from helpers.scripted_stats import dataflow, model
from tensorpack_lite.callbacks import Callback, MLflowMonitor, ModelSaver
from tensorpack_lite.cluster.config import held_free_port
from tensorpack_lite.compat import tfv1
from tensorpack_lite.train import (DEFAULT_MONITORS, AutoResumeTrainConfig, SimpleTrainer, TrainConfig,
                                   launch_train_with_config)
from tensorpack_lite.utils import logger, stats_json

mlflow = pytest.importorskip('mlflow')
from mlflow.tracking import MlflowClient  # noqa: E402

REPO = REPO_DIR


class MlflowServer:
    """``mlflow server`` on 127.0.0.1 with a SQLite store and proxied artifacts in ``directory``;
    :meth:`stop` and :meth:`start` again keep its port and its data."""

    def __init__(self, directory):
        self.directory = directory
        with held_free_port() as port:
            self.port = port
        self.uri = 'http://127.0.0.1:{}'.format(self.port)
        self.proc = None

    def start(self):
        command = [os.path.join(os.path.dirname(sys.executable), 'mlflow'), 'server',
                   '--backend-store-uri', 'sqlite:///{}/mlflow.db'.format(self.directory),
                   '--artifacts-destination', os.path.join(self.directory, 'artifacts'),
                   '--host', '127.0.0.1', '--port', str(self.port), '--workers', '1']
        self.log = open(os.path.join(self.directory, 'server.log'), 'ab')
        # without MLflow's job runner: 8 more processes, none of which a tracking server needs
        env = dict(os.environ, MLFLOW_SERVER_ENABLE_JOB_EXECUTION='false')
        self.proc = subprocess.Popen(command, stdout=self.log, stderr=subprocess.STDOUT, env=env,
                                     start_new_session=True)
        print('[test] starting an MLflow tracking server on port {} (a few seconds)'.format(self.port),
              flush=True)
        assert wait_until(self._answers, interval=0.2), "the MLflow server did not answer: see {}".format(
            self.log.name)

    def _answers(self):
        assert self.proc.poll() is None, open(self.log.name).read()[-3000:]
        if self.port not in listening_ports(self.proc):   # not another process that took the port
            return False
        try:
            with urllib.request.urlopen(self.uri + '/health', timeout=2) as response:
                return response.status == 200
        except OSError:
            return False

    def stop(self):
        """Gone at once, as a machine that fails (SQLite keeps what it committed)."""
        if self.proc is not None:
            kill_process_tree(self.proc)
            self.proc.wait(HANG_TIMEOUT)
            self.proc = None
            self.log.close()


@pytest.fixture(scope='module')
def server(tmp_path_factory):
    server = MlflowServer(str(tmp_path_factory.mktemp('mlflow-server')))
    server.start()
    yield server
    server.stop()


@pytest.fixture
def own_server(tmp_path_factory):
    """A server of the test's own, for a test that stops and starts it: its process is the test's,
    and ended by it (the module's server keeps serving the others)."""
    server = MlflowServer(str(tmp_path_factory.mktemp('mlflow-own-server')))
    server.start()
    yield server
    server.stop()


@pytest.fixture(autouse=True)
def mlflow_connections_closed():
    """MLflow keeps its HTTP sessions, with their open connections to a server, in a process-wide
    cache; a test's connections end with it (the process guard counts an open socket)."""
    yield
    from mlflow.utils import request_utils
    request_utils._cached_get_request_session.cache_clear()     # the sessions go, closing their sockets


@pytest.fixture(autouse=True)
def fail_fast(monkeypatch):
    """MLflow's own client retries a refused connection for minutes; the monitor retries by
    itself, so here MLflow's retries are off (a user may set the same)."""
    monkeypatch.setenv('MLFLOW_HTTP_REQUEST_MAX_RETRIES', '0')
    monkeypatch.setenv('MLFLOW_HTTP_REQUEST_TIMEOUT', '10')


class PutEveryStep(Callback):
    """Puts 'step_value' = global_step / 8 after every step; ``at`` maps a global step to a
    function called after it (e.g. to stop the server)."""

    def __init__(self, at=None):
        self.at = at or {}

    def _trigger_step(self):
        self.trainer.monitors.put_scalar('step_value', self.global_step / 8)
        if self.global_step in self.at:
            self.at[self.global_step]()

    def _stat_names(self):
        return ['step_value']


def train(max_epoch, monitor, at=None, more=()):
    """Train the linear model of test_minsaver_resume (2 steps an epoch), resuming what the logger
    directory holds; returns the weights of the last checkpoint."""
    with tfv1.Graph().as_default():
        config = AutoResumeTrainConfig(model=model(), dataflow=dataflow(), max_epoch=max_epoch,
                                       callbacks=[ModelSaver(), PutEveryStep(at), *more],
                                       monitors=DEFAULT_MONITORS() + ([monitor] if monitor else []))
        launch_train_with_config(config, SimpleTrainer())
    return tfv1.train.load_variable(logger.get_logger_dir(), 'w')


def history(client, run_id, directory):
    """``{metric: [(step, value)]}`` as MLflow has it, and as stats.json in ``directory`` has it."""
    expected = {key: [(step, pytest.approx(value)) for step, value in points]
                for key, points in stats_json.scalar_history(stats_json.load_records(directory)).items()}
    got = {key: sorted((m.step, m.value) for m in client.get_metric_history(run_id, key)) for key in expected}
    return got, expected


def run_record(directory):
    with open(os.path.join(directory, MLflowMonitor.RECORD)) as f:
        return json.load(f)


def artifacts(client, run_id, path=None):
    return sorted(a.path for a in client.list_artifacts(run_id, path))


def test_a_run_logs_its_parameters_every_scalar_once_its_artifacts_and_ends_finished(server, tmp_path):
    logger.set_logger_dir(str(tmp_path), action='k')
    monitor = MLflowMonitor(server.uri, experiment_name='monitor-test', run_name='first',
                            params={'lr': 0.1, 'note': 'linear'}, tags={'team': 'tp'})
    train(3, monitor)
    client = MlflowClient(server.uri)
    run = client.get_run(monitor.run_id)
    assert run.info.status == 'FINISHED' and run.info.run_name == 'first'
    assert client.get_experiment(run.info.experiment_id).name == 'monitor-test'
    params = run.data.params
    assert (params['lr'], params['note'], params['trainer'], params['world_size']) == ('0.1', 'linear',
                                                                                       'SimpleTrainer', '1')
    assert (params['steps_per_epoch'], params['max_epoch'], params['model']) == ('2', '3', 'LineRegression')
    assert params['callbacks'] == 'ModelSaver, PutEveryStep'
    assert run.data.tags['team'] == 'tp' and 'tensorpack_lite.version' in run.data.tags
    got, expected = history(client, monitor.run_id, str(tmp_path))
    assert got == expected and [s for s, _ in got['step_value']] == [1, 2, 3, 4, 5, 6]
    assert artifacts(client, monitor.run_id) == ['checkpoint', 'environment.txt', 'stats.json']
    assert artifacts(client, monitor.run_id, 'checkpoint') == [
        'checkpoint/model-6.data-00000-of-00001', 'checkpoint/model-6.index', 'checkpoint/model-6.resume']
    with open(client.download_artifacts(monitor.run_id, 'environment.txt', str(tmp_path / 'env'))) as f:
        assert 'tensorpack_lite' in f.read()
    assert run_record(str(tmp_path)) == {'last_step': 6, 'run_id': monitor.run_id, 'tracking_uri': server.uri}
    assert not (tmp_path / MLflowMonitor.UNSENT).exists()


def test_an_error_ends_the_run_failed_with_the_error_and_a_rerun_goes_on_in_it(server, tmp_path):
    """A callback raises at step 3: FAILED with the error as a tag. Without the checkpoint written
    at the end (as if killed), the run started again in the directory resumes from the one of
    epoch 1 (step 2), redoes step 3 (logged already, so not again: one info line says so), and
    ends FINISHED in the same MLflow run."""
    logger.set_logger_dir(str(tmp_path), action='k')
    monitor = MLflowMonitor(server.uri, experiment_name='monitor-test')

    def fail():
        raise RuntimeError("the data went away")
    with pytest.raises(RuntimeError, match="the data went away"):
        train(3, monitor, at={3: fail})
    client = MlflowClient(server.uri)
    run = client.get_run(monitor.run_id)
    assert run.info.status == 'FAILED'
    assert run.data.tags['tensorpack_lite.error'] == 'RuntimeError: the data went away'
    for path in tmp_path.glob('model-3.*'):     # as if killed before the checkpoint of step 3
        path.unlink()
    rerun = MLflowMonitor(server.uri, experiment_name='monitor-test')
    with capture_logs() as logs:
        train(3, rerun)
    assert rerun.run_id == monitor.run_id
    assert any(re.match(r"MLflowMonitor\(http://127\.0\.0\.1:\d+\): 1 value\(s\) at steps up to 3, which the "
                        r"run had logged before it was resumed, were not logged again\.", m)
               for m in logs.messages())
    assert client.get_run(monitor.run_id).info.status == 'FINISHED'
    steps = [m.step for m in client.get_metric_history(monitor.run_id, 'step_value')]
    assert steps == [1, 2, 3, 4, 5, 6]


def test_a_server_gone_mid_run_costs_nothing_and_a_resumed_run_sends_what_it_kept(own_server, tmp_path):
    """The server stops at step 3 of 6 (once it has steps 1 and 2): training goes on and ends with
    the weights of a run without the monitor, one warning says the server did not take the
    values, and the end does not wait for it: what was not sent is written to mlflow-unsent.json.
    With the server back, the run resumed in the directory (2 epochs more) sends them first, then
    its own: every step once, FINISHED."""
    logger.set_logger_dir(str(tmp_path / 'plain'), action='k')
    reference = train(3, None)
    logger.set_logger_dir(str(tmp_path / 'tracked'), action='k')
    monitor = MLflowMonitor(own_server.uri, experiment_name='monitor-test')
    client = MlflowClient(own_server.uri)

    def stop_server():    # once MLflow has the values of steps 1 and 2
        assert wait_until(lambda: monitor.run_id and [
            m.step for m in client.get_metric_history(monitor.run_id, 'step_value')] == [1, 2])
        own_server.stop()
    with capture_logs() as logs:
        weights = train(3, monitor, at={3: stop_server})
    np.testing.assert_array_equal(weights, reference)
    warned = [m for m in logs.messages_at(logging.WARNING) if m.startswith(str(monitor))]
    assert len(warned) == 2, warned
    assert re.match(r"MLflowMonitor\(.*\) did not take the values \(MlflowException: .*\)\. "
                    r"Training goes on; the values are kept \(at most 100000\) and sent when it answers\.",
                    warned[0])
    assert re.match(r"MLflowMonitor\(.*\): \d+ item\(s\) were not sent \(the server does not answer\); "
                    r"kept in .*mlflow-unsent.json, sent by the next run in this directory\.", warned[1])
    with open(tmp_path / 'tracked' / MLflowMonitor.UNSENT) as f:
        unsent = json.load(f)
    assert unsent['tracking_uri'] == own_server.uri
    kept_steps = [i['step'] for i in unsent['items'] if i['op'] == 'metric' and i['key'] == 'step_value']
    assert kept_steps == [3, 4, 5, 6]

    own_server.start()
    resumed = MLflowMonitor(own_server.uri, experiment_name='monitor-test')
    train(5, resumed)
    assert resumed.run_id == monitor.run_id
    assert client.get_run(monitor.run_id).info.status == 'FINISHED'
    got, expected = history(client, monitor.run_id, str(tmp_path / 'tracked'))
    assert got == expected and [s for s, _ in got['step_value']] == list(range(1, 11))
    assert not (tmp_path / 'tracked' / MLflowMonitor.UNSENT).exists()


class PutRefusedName(Callback):
    """Puts 'tower0//cost' after every step: MLflow refuses a name that is not a normalized path,
    whichever the batch it travels in."""

    def _trigger_step(self):
        self.trainer.monitors.put_scalar('tower0//cost', 1.0)


def test_a_metric_the_server_refuses_drops_only_itself(server, tmp_path):
    logger.set_logger_dir(str(tmp_path), action='k')
    monitor = MLflowMonitor(server.uri, experiment_name='monitor-test')
    with capture_logs() as logs:
        train(3, monitor, more=[PutRefusedName()])
    client = MlflowClient(server.uri)
    assert client.get_run(monitor.run_id).info.status == 'FINISHED'
    got, expected = history(client, monitor.run_id, str(tmp_path))
    assert expected.pop('tower0//cost') and got.pop('tower0//cost') == []
    assert got == expected and [s for s, _ in got['step_value']] == [1, 2, 3, 4, 5, 6]
    errors = logs.messages_at(logging.ERROR)
    assert len(errors) == 1, errors
    assert errors[0].startswith("{}: the server refused the metric 'tower0//cost', whose values are dropped "
                                "(the other metrics are sent): ".format(monitor))
    assert not (tmp_path / MLflowMonitor.UNSENT).exists()


class PutOddName(Callback):
    def _trigger_epoch(self):
        self.trainer.monitors.put_scalar('top-1 (%)', 50.0)


def test_with_no_argument_it_follows_mlflows_environment_variables_and_a_sqlite_store(tmp_path, monkeypatch):
    monkeypatch.setenv('MLFLOW_TRACKING_URI', 'sqlite:///{}/store.db'.format(tmp_path))
    monkeypatch.setenv('MLFLOW_EXPERIMENT_NAME', 'from-the-environment')
    monkeypatch.chdir(tmp_path)     # MLflow puts the artifacts of a sqlite:/// store in ./mlruns
    logger.set_logger_dir(str(tmp_path / 'log'), action='k')
    monitor = MLflowMonitor()
    assert monitor.chief_only
    with capture_logs() as logs:
        train(1, monitor, more=[PutOddName()])
    assert "MLflowMonitor(sqlite:///{}/store.db): MLflow does not take the name 'top-1 (%)': logged as " \
           "'top-1 ___'.".format(tmp_path) in logs.messages(logging.WARNING)
    client = MlflowClient('sqlite:///{}/store.db'.format(tmp_path))
    assert [(m.step, m.value) for m in client.get_metric_history(monitor.run_id, 'top-1 ___')] == [(2, 50.0)]
    run = client.get_run(monitor.run_id)
    assert client.get_experiment(run.info.experiment_id).name == 'from-the-environment'
    assert run.info.status == 'FINISHED'
    assert [m.step for m in client.get_metric_history(monitor.run_id, 'step_value')] == [1, 2]
    assert 'stats.json' in artifacts(client, monitor.run_id)
    assert list(tmp_path.glob('mlruns/*/{}/artifacts/stats.json'.format(monitor.run_id)))


@pytest.mark.parametrize('kwargs, error', [
    (dict(params=['lr']), r"MLflowMonitor: params must be a dict of names \(str\) to values, got \['lr'\]"),
    (dict(flush_timeout=0), r"MLflowMonitor: flush_timeout must be a positive number of seconds, got 0"),
])
def test_bad_arguments_are_named(kwargs, error):
    with pytest.raises((TypeError, ValueError), match=error):
        MLflowMonitor('sqlite:///unused.db', **kwargs)


def test_without_a_logger_directory_it_says_so_before_the_session_exists(monkeypatch):
    monkeypatch.setattr(logger, 'get_logger_dir', lambda: None)
    with pytest.raises(ValueError, match=r"MLflowMonitor keeps its run's id in the logger directory.*"
                                         r"call logger.set_logger_dir\(\) first"):
        with tfv1.Graph().as_default():
            launch_train_with_config(TrainConfig(model=model(), dataflow=dataflow(), max_epoch=1,
                                                 monitors=[MLflowMonitor('sqlite:///unused.db')]),
                                     SimpleTrainer())


def test_the_main_example_sigtermed_and_resumed_is_one_finished_run_with_every_step_once(server, tmp_path):
    """The README's example with --mlflow and --resume, SIGTERMed once its first epoch has ended,
    then run again: it exits 143 (the run KILLED, with why), then 0; MLflow has one run, FINISHED,
    each metric at each step of stats.json once, the checkpoint and stats.json as artifacts."""
    logdir = tmp_path / 'log'
    command = [sys.executable, os.path.join(REPO, 'examples', 'basics', 'mnist-convnet.py'),
               '--max-epoch', '2', '--steps-per-epoch', '6', '--logdir', str(logdir), '--resume',
               '--mlflow', server.uri]
    env = dict(os.environ, PYTHONUNBUFFERED='1')
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                            cwd=str(tmp_path))
    output = []
    try:
        deadline = time.monotonic() + HANG_TIMEOUT
        for line in proc.stdout:
            output.append(line.decode(errors='replace'))
            if 'Epoch 1 (global_step 6) finished' in output[-1]:
                proc.send_signal(signal.SIGTERM)
            assert time.monotonic() < deadline, ''.join(output)[-5000:]
        assert proc.wait(HANG_TIMEOUT) == 143, ''.join(output)[-5000:]
    finally:
        kill_process_tree(proc)
    client = MlflowClient(server.uri)
    stopped = client.get_run(run_record(str(logdir))['run_id'])
    assert stopped.info.status == 'KILLED'
    assert stopped.data.tags['tensorpack_lite.error'].startswith('Preempted: ')
    resumed = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                             cwd=str(tmp_path), timeout=HANG_TIMEOUT)
    text = resumed.stdout.decode(errors='replace')
    assert resumed.returncode == 0, text[-5000:]
    run_id = run_record(str(logdir))['run_id']
    assert run_id == stopped.info.run_id and 'goes on in the run {}'.format(run_id) in text
    experiment = client.get_experiment_by_name('mnist-convnet')
    runs = client.search_runs([experiment.experiment_id])
    assert [r.info.run_id for r in runs] == [run_id]
    run = runs[0]
    assert run.info.status == 'FINISHED'
    params = run.data.params
    assert (params['batch'], params['shift'], params['max_epoch']) == ('64', '3', '2')
    got, expected = history(client, run_id, str(logdir))
    assert got == expected
    assert [s for s, _ in got['validation_accuracy']] == [6, 12]
    assert 'stats.json' in artifacts(client, run_id)
    assert 'checkpoint/model-12.index' in artifacts(client, run_id, 'checkpoint')
    print('[test] MLflow run {}: status {}, {} metrics, steps of validation_accuracy {}'.format(
        run_id, run.info.status, len(got), [s for s, _ in got['validation_accuracy']]))
