"""The cluster description (cluster.config) and the local launcher (cluster.launch), without
TensorFlow: the launcher's processes are small scripts (tests/distributed_scripts/launch_child.py)."""

import io
import json
import os
import signal
import socket
import subprocess
import sys
import threading

import psutil
import pytest

from helpers.paths import TESTS_DIR
from helpers.processes import kill_process_tree, subprocess_env
from helpers.timing import HANG_TIMEOUT, run_or_hang, wait_until
from tensorpack_lite.cluster.config import (ClusterConfig, LostTaskError, TaskWatchdog, free_ports,
                                            held_free_port, local_cluster)
from tensorpack_lite.cluster.launch import LocalCluster, launch
from tensorpack_lite.cluster.launch import main as launch_main
from tensorpack_lite.cluster.private_network import PrivateNetwork, PrivateNetworkUnavailable
from tensorpack_lite.utils import death_signal

HERE = TESTS_DIR
REPO = os.path.dirname(HERE)
CHILD = os.path.join(HERE, 'distributed_scripts', 'launch_child.py')


@pytest.fixture
def listening():
    """A free port of this machine where a socket listens."""
    with held_free_port('localhost', listen=True) as port:
        yield port


def closed_port():
    return free_ports(1, 'localhost')[0]


# ----- ClusterConfig ------------------------------------------------------------------------------

@pytest.mark.quick
def test_tf_config_round_trip_and_task_properties():
    cluster = {'worker': ['localhost:2001', 'localhost:2002'], 'ps': ['localhost:2003']}
    config = ClusterConfig(cluster, 'worker', 1)
    assert (config.num_worker, config.num_ps, config.is_chief) == (2, 1, False)
    assert config.task_name == '/job:worker/task:1'
    assert config.tasks() == [('worker', 0), ('worker', 1), ('ps', 0)]
    assert config.other_tasks() == [('worker', 0), ('ps', 0)]
    assert config.describe('ps', 0) == 'ps 0 (localhost:2003)'
    text = config.to_tf_config()
    assert json.loads(text) == {'cluster': cluster, 'task': {'type': 'worker', 'index': 1}}
    again = ClusterConfig.from_tf_config(text)
    assert (again.cluster, again.job_name, again.task_index) == (cluster, 'worker', 1)
    assert ClusterConfig(cluster, 'worker', 0).is_chief and not ClusterConfig(cluster, 'ps', 0).is_chief


def test_tf_config_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv('TF_CONFIG', json.dumps({'cluster': {'worker': ['localhost:2001']},
                                                'task': {'type': 'worker', 'index': 0}}))
    assert ClusterConfig.from_tf_config().is_chief
    monkeypatch.delenv('TF_CONFIG')
    with pytest.raises(ValueError, match='TF_CONFIG is not set'):
        ClusterConfig.from_tf_config()
    with pytest.raises(ValueError, match='not valid JSON'):
        ClusterConfig.from_tf_config('{cluster')
    with pytest.raises(ValueError, match="must hold 'cluster' and 'task'"):
        ClusterConfig.from_tf_config('{"cluster": {"worker": ["localhost:2001"]}}')


@pytest.mark.quick
@pytest.mark.parametrize('cluster, job, index, message', [
    ({'worker': ['localhost:2001', 'localhost:2001']}, 'worker', 0,
     r'worker 0 \(localhost:2001\) and worker 1 \(localhost:2001\) use the same port 2001'),
    ({'worker': ['localhost:2001'], 'ps': ['127.0.0.1:2001']}, 'worker', 0,
     r'worker 0 \(localhost:2001\) and ps 0 \(127.0.0.1:2001\) use the same port'),
    ({'worker': ['localhost:2001', 'localhost:2002']}, 'worker', 2,
     r"task_index 2 is out of range: job 'worker' has 2 task\(s\), indices 0..1"),
    ({'worker': ['localhost:2001']}, 'ps', 0, r"job_name must be one of the cluster's jobs \['worker'\]"),
    ({'worker': ['no-such-host.invalid:2001']}, 'worker', 0,
     r"worker 0 \(no-such-host.invalid:2001\): the host 'no-such-host.invalid' cannot be resolved "
     r".*unreachable"),
    ({'worker': ['localhost']}, 'worker', 0,
     r"worker 0: 'localhost' is not an address of the form 'host:port'"),
    ({'worker': ['localhost:99999']}, 'worker', 0,
     r"worker 0: address 'localhost:99999' has no valid port"),
    ({'worker': ['localhost:2001'], 'boss': ['localhost:2002']}, 'worker', 0,
     r"unknown job\(s\) \['boss'\] in the cluster; the jobs are 'worker', 'ps' and one 'chief' "
     r"\(or 'master'\)"),
    ({'worker': ['localhost:2001'], 'chief': ['localhost:2002'], 'master': ['localhost:2003']}, 'chief', 0,
     r"both 'chief' and 'master' jobs"),
    ({'worker': ['localhost:2001'], 'chief': ['localhost:2002', 'localhost:2003']}, 'chief', 0,
     r"job 'chief' must list exactly one 'host:port'"),
    ({'worker': ['localhost:2001'], 'chief': ['localhost:2002']}, 'worker', 1,
     r"task_index 1 is out of range: job 'worker' has 1 task\(s\) besides the chief"),
    ({'worker': ['localhost:2001'], 'master': ['localhost:2002']}, 'master', 1,
     r"task_index 1 is out of range: job 'master' has 1 task"),
    ({'worker': ['localhost:2001'], 'chief': ['localhost:2001']}, 'chief', 0,
     r'chief 0 \(localhost:2001\) and worker 0 \(localhost:2001\) use the same port'),
    ({'worker': ['localhost:2001'], 'chief': ['localhost:2002']}, 'evaluator', 0,
     r"task type 'evaluator' is not supported.*InferenceRunner.*get_model_loader"),
    ({'ps': ['localhost:2001']}, 'ps', 0, r"has no 'worker' \(or 'chief'\) job"),
    ({'worker': []}, 'worker', 0, r"job 'worker' must be a non-empty list"),
])
def test_a_bad_cluster_is_an_error_naming_it(cluster, job, index, message):
    with pytest.raises(ValueError, match=message):
        ClusterConfig(cluster, job, index)


@pytest.mark.parametrize('chief', ['chief', 'master'])
def test_a_chief_task_is_worker_0_and_keeps_its_name(chief):
    given = {chief: ['localhost:2001'], 'worker': ['localhost:2002', 'localhost:2003'],
             'ps': ['localhost:2004'], 'evaluator': ['localhost:2005']}
    seen = {}
    for job, index in ((chief, 0), ('worker', 0), ('worker', 1), ('ps', 0)):
        config = ClusterConfig(given, job, index)
        seen[(job, index)] = (config.job_name, config.task_index, config.is_chief, config.task_name)
        assert config.cluster == {'worker': ['localhost:2001', 'localhost:2002', 'localhost:2003'],
                                  'ps': ['localhost:2004']}   # what the servers are built from
        assert (config.num_worker, config.num_ps) == (3, 1)
        text = config.to_tf_config()   # as given, evaluator included
        assert json.loads(text) == {'cluster': given, 'task': {'type': job, 'index': index}}
        again = ClusterConfig.from_tf_config(text)
        assert (again.job_name, again.task_index, again.cluster) == (config.job_name, config.task_index,
                                                                     config.cluster)
    assert seen == {(chief, 0): ('worker', 0, True, '/job:worker/task:0'),
                    ('worker', 0): ('worker', 1, False, '/job:worker/task:1'),
                    ('worker', 1): ('worker', 2, False, '/job:worker/task:2'),
                    ('ps', 0): ('ps', 0, False, '/job:ps/task:0')}
    config = ClusterConfig(given, 'worker', 1)
    assert [config.describe(*t) for t in config.tasks()] == [
        '{} 0 (localhost:2001)'.format(chief), 'worker 0 (localhost:2002)', 'worker 1 (localhost:2003)',
        'ps 0 (localhost:2004)']
    assert config.given_task('worker', 0) == (chief, 0) and config.given_task('worker', 2) == ('worker', 1)
    assert json.loads(config.for_task('worker', 0).to_tf_config())['task'] == {'type': chief, 'index': 0}
    assert 'lost {} 0 (localhost:2001)'.format(chief) in str(config.lost_task_error([('worker', 0)]))
    alone = ClusterConfig({chief: ['localhost:2001']}, chief, 0)   # a chief and no other worker
    assert (alone.num_worker, alone.is_chief, alone.cluster) == (1, True, {'worker': ['localhost:2001']})


def test_an_evaluator_is_refused_before_any_server_starts(monkeypatch):
    monkeypatch.setenv('TF_CONFIG', json.dumps({
        'cluster': {'chief': ['localhost:2001'], 'worker': ['localhost:2002']},
        'task': {'type': 'evaluator', 'index': 0}}))
    with pytest.raises(ValueError, match="task type 'evaluator' is not supported"):
        ClusterConfig.from_tf_config()


def test_local_cluster_picks_distinct_free_ports():
    cluster = local_cluster(3, 2)
    addresses = cluster['worker'] + cluster['ps']
    assert len(cluster['worker']) == 3 and len(cluster['ps']) == 2
    assert len(set(addresses)) == 5 and all(a.startswith('localhost:') for a in addresses)
    for address in addresses:   # free now: each can be bound
        with socket.socket() as sock:
            sock.bind(('', int(address.split(':')[1])))
    assert 'ps' not in local_cluster(1)
    with pytest.raises(ValueError, match='num_worker must be an integer >= 1'):
        local_cluster(0)


def test_probing_names_the_tasks_that_do_not_answer(listening):
    down = closed_port()
    config = ClusterConfig({'worker': ['localhost:{}'.format(closed_port()), 'localhost:{}'.format(listening),
                                       'localhost:{}'.format(down)]}, 'worker', 0)
    assert config.unreachable() == [('worker', 2)]
    config.wait_until_reachable([('worker', 1)], timeout=HANG_TIMEOUT)
    with pytest.raises(LostTaskError) as info:  # it gives up after its timeout, rather than waiting on
        run_or_hang(config.wait_until_reachable, timeout=0.5)
    assert 'worker 2 (localhost:{}) did not start within 0.5 s'.format(down) in str(info.value)
    error = config.lost_task_error([('worker', 2)], RuntimeError('Socket closed\nmore'))
    assert str(error).startswith('worker 0 (localhost:')
    assert 'lost worker 2 (localhost:{})'.format(down) in str(error)
    assert str(error).endswith('The error seen: RuntimeError: Socket closed')


def test_watchdog_reports_a_task_that_stops_answering():
    reported = []
    lost = threading.Event()
    with held_free_port('localhost', listen=True) as port:
        config = ClusterConfig({'worker': ['localhost:{}'.format(closed_port()),
                                           'localhost:{}'.format(port)]}, 'worker', 0)
        watchdog = TaskWatchdog(config, config.other_tasks(),
                                lambda tasks: (reported.append(tasks), lost.set()), interval=0.05)
        watchdog.start()
        answered = not lost.wait(0.5)     # it answers: nothing reported
    try:                                  # its socket is closed now
        assert answered
        assert lost.wait(HANG_TIMEOUT)
    finally:
        watchdog.stop()
    assert reported == [[('worker', 1)]] and watchdog.lost == [('worker', 1)]


class ScriptedProbes:
    """A cluster whose probes of each task find, in turn, what its script says (then: answers)."""

    def __init__(self, scripts):
        self._scripts = {task: list(found) for task, found in scripts.items()}
        self.probed = {task: 0 for task in scripts}
        self.done = threading.Event()

    def describe(self, job_name, task_index):
        return '{} {}'.format(job_name, task_index)

    def probe(self, job_name, task_index, timeout):
        task = (job_name, task_index)
        self.probed[task] += 1
        script = self._scripts[task]
        if not any(self._scripts.values()):
            self.done.set()
        return script.pop(0) if script else ClusterConfig.ANSWERS


def test_watchdog_loses_a_silent_task_only_after_misses_in_a_row_and_a_refusing_one_at_once():
    """A task that leaves 2 probes in a row unanswered, then answers, then 2 more, is not lost
    with ``misses=3`` (a full link can hold a connection); 3 in a row are a loss, reported after
    the third. A task whose machine refuses the connection is lost at its first refusal."""
    silent, answers, refuses = ClusterConfig.SILENT, ClusterConfig.ANSWERS, ClusterConfig.REFUSES
    for script, lost_at in (([silent, silent, answers, silent, silent], None),
                            ([silent, silent, answers, silent, silent, silent], 6),
                            ([answers, refuses], 2)):
        cluster = ScriptedProbes({('worker', 1): script})
        reported = []
        watchdog = TaskWatchdog(cluster, [('worker', 1)], interval=0.001, misses=3,
                                on_lost=lambda tasks: (reported.append(tasks), cluster.done.set()))
        watchdog.start()
        try:
            assert cluster.done.wait(HANG_TIMEOUT)     # the script ran out, or a loss was reported
        finally:
            watchdog.stop()
            assert watchdog.join(HANG_TIMEOUT)
        if lost_at is None:
            assert reported == [] and watchdog.lost == [], script
        else:
            assert reported == [[('worker', 1)]] and cluster.probed[('worker', 1)] == lost_at, script
    with pytest.raises(ValueError, match='misses must be 1 or more'):
        TaskWatchdog(cluster, [('worker', 1)], reported.append, misses=0)


# ----- the launcher -------------------------------------------------------------------------------

def test_every_task_gets_its_tf_config_and_prefixed_output(tmp_path):
    output = io.BytesIO()
    cluster = LocalCluster([sys.executable, CHILD, str(tmp_path)], num_worker=2, num_ps=1, grace=5,
                           output=output)
    cluster.start()
    assert cluster.wait(timeout=HANG_TIMEOUT) == 0, output.getvalue()
    configs = {name: json.loads((tmp_path / (name + '.json')).read_text())['tf_config']
               for name in ('worker0', 'worker1', 'ps0')}
    assert all(c['cluster'] == cluster.config.cluster for c in configs.values())
    assert len(cluster.config.cluster['worker']) == 2 and len(cluster.config.cluster['ps']) == 1
    assert [configs[n]['task'] for n in ('worker0', 'worker1', 'ps0')] == [
        {'type': 'worker', 'index': 0}, {'type': 'worker', 'index': 1}, {'type': 'ps', 'index': 0}]
    text = output.getvalue().decode()
    for job, index in (('worker', 0), ('worker', 1), ('ps', 0)):
        assert '[{0} {1}] task {0} {1} of 2 workers\n'.format(job, index) in text


@pytest.mark.parametrize('chief', ['chief', 'master'])
def test_a_separate_chief_task_gets_its_tf_config_and_name(tmp_path, chief):
    output = io.BytesIO()
    cluster = LocalCluster([sys.executable, CHILD, str(tmp_path)], num_worker=2, grace=5, output=output,
                           chief=chief)
    cluster.start()
    assert cluster.wait(timeout=HANG_TIMEOUT) == 0, output.getvalue()
    given = {chief: cluster.config.cluster['worker'][:1], 'worker': cluster.config.cluster['worker'][1:]}
    tasks = {chief + '0': {'type': chief, 'index': 0}, 'worker0': {'type': 'worker', 'index': 0},
             'worker1': {'type': 'worker', 'index': 1}}
    for name, task in tasks.items():
        assert json.loads((tmp_path / (name + '.json')).read_text())['tf_config'] == {
            'cluster': given, 'task': task}
    assert [(job, index) for job, index, _ in cluster.tasks] == [('worker', 0), ('worker', 1), ('worker', 2)]
    text = output.getvalue().decode()
    for job, index in ((chief, 0), ('worker', 0), ('worker', 1)):
        assert '[{0} {1}] task {0} {1} of 2 workers\n'.format(job, index) in text


@pytest.mark.parametrize('once', [True, False])
def test_max_restarts_starts_every_task_again_after_a_failure(tmp_path, once):
    output = io.BytesIO()
    command = [sys.executable, CHILD, str(tmp_path), '--fail', 'worker:1:3'] + (['--once'] if once else [])
    code = launch(command, 2, 1, grace=HANG_TIMEOUT, max_restarts=2, restart_delay=0, output=output,
                  timeout=HANG_TIMEOUT)
    text = output.getvalue().decode()
    starts = (tmp_path / 'starts.txt').read_text().split()
    restart = "[launch] restart {} of 2 in 0 s, after: worker 1 failed with exit code 3\n"
    if once:
        assert code == 0, text
        assert sorted(starts) == ['ps0', 'ps0', 'worker0', 'worker0', 'worker1', 'worker1']
        assert restart.format(1) in text and 'restart 2' not in text and 'giving up' not in text
    else:
        assert code == 3, text
        assert sorted(starts) == ['ps0'] * 3 + ['worker0'] * 3 + ['worker1'] * 3
        assert restart.format(1) in text and restart.format(2) in text
        assert text.endswith("[launch] giving up after 3 attempts; the last failure: worker 1 failed with "
                             "exit code 3\n")


@pytest.mark.parametrize('failing, minimum', [('worker:2:3', 2), ('worker:2:3', 3), ('ps:0:4', 2)])
def test_workers_min_max_drops_a_worker_that_fails_in_a_row_down_to_the_minimum(tmp_path, failing, minimum):
    """``--workers MIN:3 --drop-after 2``: worker 2 failing with the same code twice is dropped
    (then 2 workers finish), unless the cluster is at its minimum; a failing ps is never dropped.
    Without --max-restarts there are drop_after x (MAX - MIN + 1) restarts."""
    output = io.BytesIO()
    command = [sys.executable, CHILD, str(tmp_path), '--fail', failing]
    code = launch(command, 3, 1, grace=HANG_TIMEOUT, restart_delay=0, output=output, timeout=HANG_TIMEOUT,
                  min_workers=minimum, drop_after=2, max_restarts=None)
    text = output.getvalue().decode()
    starts = sorted((tmp_path / 'starts.txt').read_text().split())
    dropping = ("[launch] worker 2 failed 2 times in a row with exit code 3: dropping it; the cluster goes "
                "on with 2 workers (at least 2)\n")
    if failing == 'worker:2:3' and minimum == 2:
        assert code == 0, text
        assert starts == ['ps0'] * 3 + ['worker0'] * 3 + ['worker1'] * 3 + ['worker2'] * 2
        assert text.count(dropping) == 1 and "restart 2 of 4 in 0 s" in text and 'restart 3' not in text
    elif failing == 'worker:2:3':
        assert code == 3, text
        assert starts == ['ps0'] * 3 + ['worker0'] * 3 + ['worker1'] * 3 + ['worker2'] * 3
        assert ("[launch] worker 2 failed 2 times in a row with exit code 3; the cluster is at its minimum "
                "of 3 workers, so it is not dropped\n") in text
        assert text.endswith("giving up after 3 attempts; the last failure: worker 2 failed with exit code "
                             "3\n")
    else:
        assert code == 4, text
        assert starts == ['ps0'] * 5 + ['worker0'] * 5 + ['worker1'] * 5 + ['worker2'] * 5
        assert 'dropping' not in text and 'giving up after 5 attempts' in text


class FakeHosts:
    """Hosts 10.0.0.1, .2, ...; the task on host ``bad`` gets ``--fail-here 3``."""

    def __init__(self, bad):
        self.bad = bad

    def address(self, k):
        return '10.0.0.{}'.format(k + 1)

    def command(self, k, argv):
        return list(argv) + (['--fail-here', '3'] if k == self.bad else [])


def test_a_dropped_worker_takes_its_host_out_of_the_cluster(tmp_path):
    """With hosts, the worker on host 1 fails twice: host 1 is dropped and the two workers left
    run on hosts 0 and 2."""
    output = io.BytesIO()
    code = launch([sys.executable, CHILD, str(tmp_path)], 3, grace=HANG_TIMEOUT, restart_delay=0,
                  output=output, timeout=HANG_TIMEOUT, hosts=FakeHosts(bad=1), min_workers=2, drop_after=2)
    assert code == 0, output.getvalue()
    assert b'[launch] worker 1 failed 2 times in a row with exit code 3: dropping it' in output.getvalue()
    cluster = json.loads((tmp_path / 'worker1.json').read_text())['tf_config']['cluster']
    assert cluster == {'worker': ['10.0.0.1:2222', '10.0.0.3:2222']}


def test_a_signal_while_waiting_to_restart_ends_the_launcher_without_a_new_start(tmp_path):
    output = io.BytesIO()

    def interrupt_once_the_restart_is_announced():
        if wait_until(lambda: b'[launch] restart 1 of 5' in output.getvalue()):
            os.kill(os.getpid(), signal.SIGINT)   # to this (the main) thread, where launch() waits
    threading.Thread(target=interrupt_once_the_restart_is_announced, daemon=True).start()
    code = launch([sys.executable, CHILD, str(tmp_path), '--fail', 'worker:1:3'], 2, grace=HANG_TIMEOUT,
                  max_restarts=5, restart_delay=10 * HANG_TIMEOUT, output=output, timeout=HANG_TIMEOUT)
    assert code == 3, output.getvalue()   # the failure's code: the signal came between two attempts
    assert sorted((tmp_path / 'starts.txt').read_text().split()) == ['worker0', 'worker1']
    assert b'restart 2' not in output.getvalue()


def test_a_failing_worker_ends_the_others_and_its_code_is_the_exit_code(tmp_path, monkeypatch):
    monkeypatch.setattr(LocalCluster, 'KILL_AFTER', HANG_TIMEOUT)  # SIGTERM ends them: no SIGKILL needed
    output = io.BytesIO()
    cluster = LocalCluster([sys.executable, CHILD, str(tmp_path), '--fail', 'worker:1:3', '--wait'],
                           num_worker=3, grace=1, output=output)
    cluster.start()
    assert cluster.wait(timeout=HANG_TIMEOUT) == 3, output.getvalue()
    expected = b'[launch] worker 1 failed with exit code 3; ending the other processes within 1 s'
    assert expected in output.getvalue()
    assert sorted(p.name for p in tmp_path.glob('*.sigterm')) == ['worker0.sigterm', 'worker2.sigterm']


def test_the_command_line_passes_signals_on_to_every_task(tmp_path):
    command = [sys.executable, '-m', 'tensorpack_lite.cluster.launch', '-n', '2', '--ps', '1', '--grace',
               '10', '--', sys.executable, CHILD, str(tmp_path), '--wait']
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=subprocess_env(), start_new_session=True)
    try:
        assert wait_until(lambda: len(list(tmp_path.glob('*.json'))) == 3), "the tasks did not start"
        proc.send_signal(signal.SIGTERM)
        output, _ = proc.communicate(timeout=HANG_TIMEOUT)
    finally:
        kill_process_tree(proc)
    assert proc.returncode == 128 + signal.SIGTERM, output
    assert '[launch] received signal SIGTERM' in output
    assert sorted(p.name for p in tmp_path.glob('*.sigterm')) == ['ps0.sigterm', 'worker0.sigterm',
                                                                  'worker1.sigterm']


def test_the_timeout_ends_everything(tmp_path):
    output = io.BytesIO()
    cluster = LocalCluster([sys.executable, CHILD, str(tmp_path), '--wait'], num_worker=2, grace=5,
                           output=output)
    cluster.start()
    assert cluster.wait(timeout=2) == 124
    assert all(proc.poll() is not None for _, _, proc in cluster.tasks)
    assert b'[launch] the cluster did not finish within 2 s' in output.getvalue()


def test_a_bad_command_line_is_refused(capsys):
    with pytest.raises(SystemExit) as info:
        launch_main(['-n', '0', '--', 'python', 'train.py'])
    assert info.value.code == 2 and "--workers: expected N >= 1, or MIN:MAX" in capsys.readouterr().err
    for bad in ['3:2', '0:2', 'two', '2:', '2:x']:
        with pytest.raises(SystemExit) as info:
            launch_main(['--workers', bad, '--', 'true'])
        assert info.value.code == 2 and "--workers: expected N" in capsys.readouterr().err, bad
    with pytest.raises(SystemExit) as info:
        launch_main(['--workers', '2:3', '--drop-after', '0', '--', 'true'])
    assert info.value.code == 2 and "--drop-after >= 1" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        launch_main(['-n', '2'])
    assert 'give the command to run after --' in capsys.readouterr().err
    with pytest.raises(ValueError, match='non-empty list of arguments'):
        LocalCluster('python train.py', num_worker=1)


# ----- tasks end with their launcher ---------------------------------------------------------------

ORPHAN_BOUND = 30
"""Seconds after the launcher's death by which its tasks must be gone (they go at once: a hang)."""

needs_linux = pytest.mark.skipif(not sys.platform.startswith('linux'),
                                 reason='the parent-death signal is Linux-only')


def running(process):
    """Whether a psutil.Process still runs (a zombie waiting for its new parent does not)."""
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def private_network_missing():
    """None where a private network (without outbound link) can be made here, else why not."""
    try:
        with PrivateNetwork(outbound=False):
            return None
    except PrivateNetworkUnavailable as err:
        return str(err)


@needs_linux
@pytest.mark.parametrize('isolate', [False, True], ids=['host-network', 'private-network'])
def test_tasks_end_with_a_launcher_killed_with_sigkill(tmp_path, isolate):
    """The launcher of 2 waiting tasks is SIGKILLed (no cleanup runs): the tasks, and in the
    private network the namespace's holder (and slirp4netns), end with it."""
    if isolate and private_network_missing():
        pytest.skip(private_network_missing())
    command = [sys.executable, '-m', 'tensorpack_lite.cluster.launch', '-n', '2', '--grace', '10']
    command += ['--no-isolation'] if not isolate else []
    command += ['--', sys.executable, CHILD, str(tmp_path), '--wait']
    with open(str(tmp_path / 'launch.txt'), 'wb') as output:
        proc = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT, start_new_session=True,
                                env=subprocess_env())
    started = []
    try:
        assert wait_until(lambda: len(list(tmp_path.glob('worker*.json'))) == 2 or proc.poll() is not None), \
            "the tasks did not start"
        text = (tmp_path / 'launch.txt').read_text()
        assert proc.poll() is None, text
        tasks = [json.loads((tmp_path / 'worker{}.json'.format(k)).read_text())['pid'] for k in range(2)]
        started = psutil.Process(proc.pid).children(recursive=True)
        assert set(tasks) <= {p.pid for p in started}, text
        holders = [p for p in started if any('netns_holder' in part for part in p.cmdline())]
        if isolate:
            assert 'private network net:[' in text and len(holders) == 1, text
            if 'through slirp4netns' in text:          # its outbound link ends too
                assert [p.name() for p in started].count('slirp4netns') == 1, text
            ours = os.readlink('/proc/self/ns/net')
            assert all(os.readlink('/proc/{}/ns/net'.format(pid)) != ours for pid in tasks)
        else:
            assert 'isolation is turned off' in text and not holders, text
        proc.kill()
        proc.wait()
        assert wait_until(lambda: not any(running(p) for p in started), timeout=ORPHAN_BOUND), \
            "left running after the launcher was killed: {}".format(
                [(p.pid, p.cmdline()) for p in started if running(p)])
    finally:      # pid-reuse safe: the launcher is signalled only unreaped, the others through psutil
        if proc.poll() is None:
            kill_process_tree(proc)
        for process in started:
            if running(process):
                process.kill()


@needs_linux
def test_tasks_started_from_a_thread_that_ended_live_on(tmp_path):
    """The kernel sends the death signal when the *thread* that forked a task ends:
    LocalCluster.start() in a thread that ends once the tasks run (they asked for the signal
    before they wrote their files) must not end them: they wait for SIGTERM, which they
    record, and exit with 0."""
    output = io.BytesIO()
    cluster = LocalCluster([sys.executable, CHILD, str(tmp_path), '--wait'], num_worker=2, grace=5,
                           output=output, isolate=False)

    def start():
        cluster.start()
        wait_until(lambda: len(list(tmp_path.glob('worker*.json'))) == 2)
    starter = threading.Thread(target=start)
    starter.start()
    starter.join()
    try:
        assert len(list(tmp_path.glob('worker*.json'))) == 2, output.getvalue()
        # once the thread is gone from the kernel, a death signal tied to it would have been sent
        assert wait_until(lambda: not os.path.exists('/proc/self/task/{}'.format(starter.native_id)))
        cluster.send_signal(signal.SIGTERM)
        assert wait_until(lambda: all(p.poll() is not None for _, _, p in cluster.tasks)), output.getvalue()
        assert [p.returncode for _, _, p in cluster.tasks] == [0, 0], output.getvalue()
        assert sorted(p.name for p in tmp_path.glob('*.sigterm')) == ['worker0.sigterm', 'worker1.sigterm']
    finally:
        cluster.wait(timeout=HANG_TIMEOUT)


@needs_linux
def test_the_death_signal_script_runs_the_command_in_its_place_unless_the_parent_is_gone(tmp_path):
    marker = tmp_path / 'ran'
    command = [sys.executable, '-c', 'import os, sys; open(sys.argv[1], "w").write(str(os.getpid())); '
                                     'sys.exit(7)', str(marker)]
    proc = subprocess.Popen(death_signal.command_with_death_signal(command))
    assert proc.wait(HANG_TIMEOUT) == 7 and marker.read_text() == str(proc.pid)   # exec: the same process
    marker.unlink()
    gone = (1 << 22) + 1      # above Linux's largest pid: a parent that ended (and no reused pid)
    result = subprocess.run(death_signal.command_with_death_signal(command, gone), stderr=subprocess.PIPE,
                            text=True, timeout=HANG_TIMEOUT)
    assert result.returncode == 1 and not marker.exists()
    assert 'the parent (pid {}) ended before'.format(gone) in result.stderr
    result = subprocess.run(death_signal.command_with_death_signal(['no-such-program-here']),
                            stderr=subprocess.PIPE, text=True, timeout=HANG_TIMEOUT)
    assert result.returncode == 127 and 'cannot run no-such-program-here' in result.stderr
