"""launch_on_ray (tensorpack_lite/cluster/ray.py) on a real local Ray cluster started by each test
(Ray's cluster utilities: a head without CPUs and two nodes of one CPU each, stopped at the end), in
a process of its own (distributed_scripts/ray_cluster.py: Ray's nodes install signal handlers and
start threads in the process that starts them, which must not be pytest's):
distributed_scripts/train_tiny_multiworker.py runs as the job's tasks, started by the driver
distributed_scripts/ray_driver.py in a process of its own (bounded in time, killed at the end).
Two workers train like one process on the combined batch; a worker whose actor is killed mid-epoch
is restarted by Ray and the run ends as the uninterrupted one; a node lost shrinks an elastic job
and a node added grows it at the next epoch, as KeepGlobalBatch says; SIGTERM to the driver stops
every worker after the same step with a checkpoint. The chief's stats.json holds one run."""

import json
import os
import re
import select
import signal
import subprocess
import sys

import numpy as np
import pytest

from helpers.paths import TESTS_DIR
from helpers.processes import kill_process_tree, subprocess_env
from helpers.timing import wait_until
from helpers.distributed import SCRIPT, assert_replicas_match, load_worker, reference_weights

ray = pytest.importorskip('ray', reason="Ray is not installed: pip install 'tensorpack_lite[ray]'")

DRIVER = os.path.join(TESTS_DIR, 'distributed_scripts', 'ray_driver.py')
CLUSTER = os.path.join(TESTS_DIR, 'distributed_scripts', 'ray_cluster.py')
WAIT = 600     # seconds: only a hang takes that long
LR = 0.05


class RayCluster:
    """distributed_scripts/ray_cluster.py: a head node (no CPU: it runs no task) and two nodes of one
    CPU each, in a process of its own that takes requests (add a node, remove one) on its stdin."""

    def __init__(self, out):
        self.log_path = out / 'ray_cluster.txt'
        self.log = open(str(self.log_path), 'wb')
        self.proc = subprocess.Popen([sys.executable, CLUSTER, '--nodes', '2'], env=subprocess_env(),
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log,
                                     text=True, start_new_session=True)
        self.address = None

    def start(self):
        self.address = self.answer('the cluster')['address']

    def answer(self, what):
        ready, _, _ = select.select([self.proc.stdout], [], [], WAIT)
        line = self.proc.stdout.readline() if ready else ''
        if not line:
            line = json.dumps({'error': 'ended (exit code {})'.format(self.proc.poll()) if ready
                               else 'no answer within {} s'.format(WAIT)})
        message = json.loads(line)
        if 'error' in message:
            pytest.fail("ray_cluster.py, {}: {}\n{}".format(what, message['error'], self.output[-6000:]))
        return message

    def request(self, op, **arguments):
        self.proc.stdin.write(json.dumps(dict(arguments, op=op)) + '\n')
        self.proc.stdin.flush()
        return self.answer(op)

    def add_node(self, num_cpus):
        return self.request('add_node', num_cpus=num_cpus)['node_id']

    def remove_node(self, node_id):
        self.request('remove_node', node_id=node_id)

    @property
    def output(self):
        with open(str(self.log_path), errors='replace') as f:
            return f.read()

    def close(self):
        """Stop the cluster (its process stops its nodes), and end whatever is left of it."""
        try:
            self.proc.stdin.close()             # the end of its requests: it shuts the cluster down
            self.proc.wait(timeout=WAIT)
        except (OSError, subprocess.TimeoutExpired):
            pass
        finally:
            kill_process_tree(self.proc)
            self.proc.wait()
            self.proc.stdout.close()
            self.log.close()


@pytest.fixture
def ray_cluster(tmp_path):
    cluster = RayCluster(tmp_path)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.close()


class Driver:
    """ray_driver.py running ``train_tiny_multiworker.py --out OUT args`` as a job on ``cluster``."""

    def __init__(self, cluster, out, args, workers=2, min_workers=None, placement='SPREAD'):
        self.out = out
        self.events_file = out / 'events.jsonl'
        self.log = open(str(out / 'driver.txt'), 'wb')
        command = [sys.executable, DRIVER, '--address', cluster.address, '--events', str(self.events_file),
                   '--workers', str(workers), '--placement', placement]
        if min_workers is not None:
            command += ['--min-workers', str(min_workers)]
        command += ['--', sys.executable, SCRIPT, '--out', str(out)] + [str(a) for a in args]
        self.proc = subprocess.Popen(command, env=subprocess_env(), stdout=self.log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True)

    def events(self, kind=None):
        if not self.events_file.exists():
            return []
        events = [json.loads(line) for line in self.events_file.read_text().splitlines() if line.strip()]
        return [e['attempt'] for e in events if kind is None or e['kind'] == kind]

    @property
    def output(self):
        # newline='': a progress bar's '\r' stays in its line
        with open(str(self.out / 'driver.txt'), newline='', errors='replace') as f:
            return f.read()

    def wait_for(self, what, condition):
        if not wait_until(lambda: condition() or self.proc.poll() is not None, timeout=WAIT, interval=0.2):
            pytest.fail("no {} within {} s:\n{}".format(what, WAIT, self.output[-6000:]))
        if not condition():
            pytest.fail("the driver ended (exit code {}) before {}:\n{}".format(
                self.proc.returncode, what, self.output[-6000:]))

    def wait_for_file(self, name):
        self.wait_for(name, lambda: (self.out / name).exists())

    def finish(self):
        try:
            self.proc.wait(timeout=WAIT)
        except subprocess.TimeoutExpired:
            pytest.fail("the driver did not end within {} s:\n{}".format(WAIT, self.output[-6000:]))
        return self.proc.returncode

    def close(self):
        kill_process_tree(self.proc)
        self.log.close()


@pytest.fixture
def drivers():
    started = []
    yield started
    for driver in started:
        driver.close()


def stats(logdir):
    with open(str(logdir / 'stats.json')) as f:
        return [(r['epoch_num'], r['global_step'], r['world_size']) for r in json.load(f)]


def max_difference(weights, reference):
    return max(float(np.abs(value - reference[re.sub(r'^tower\d+/', '', name)]).max())
               for name, value in weights.items())


def assert_workers_at_reference(out, num_worker, global_step, reference):
    for k in range(num_worker):
        worker = load_worker(out, k)
        assert worker['global_step'] == global_step
        assert_replicas_match(worker['weights'], reference, atol=1e-5)
        print("worker {}: max |w - one process| = {:.3g}".format(
            k, max_difference(worker['weights'], reference)))


def test_two_workers_on_ray_train_like_one_process_on_the_combined_batch(ray_cluster, drivers, tmp_path):
    logdir = tmp_path / 'logs'
    driver = Driver(ray_cluster, tmp_path, ['--trainer', 'collective', '--lr', LR, '--epochs', 2,
                                            '--logdir', logdir])
    drivers.append(driver)
    assert driver.finish() == 0, driver.output[-6000:]
    assert_workers_at_reference(tmp_path, 2, 6, reference_weights(2, 1, 4, 5, 3, 2, LR))
    [attempt] = driver.events('ended')
    assert attempt['outcome'] == 'finished' and attempt['num_worker'] == 2
    assert len({task['node_id'] for task in attempt['tasks']}) == 2         # SPREAD: one worker per node
    output = driver.output
    for k, task in enumerate(attempt['tasks']):   # the cluster's source, in each task's line, copied back
        line = (r'\[worker {0}\] .*\[cluster\] worker {0} \({1}\) of 2 task\(s\), from Ray job test, '
                r'attempt 1, node '.format(k, re.escape(task['address'])))
        assert re.search(line, output), output[-6000:]
    assert stats(logdir) == [(1, 3, 2), (2, 6, 2)]


def test_a_killed_worker_is_restarted_by_ray_and_the_run_ends_as_the_uninterrupted_one(
        ray_cluster, drivers, tmp_path):
    """Worker 1's actor process is SIGKILLed after global step 5 (in epoch 2 of 4): its training
    process dies with it, worker 0 fails naming it, Ray restarts the actor in its bundle and the
    job starts again, resuming from the end of epoch 1."""
    logdir = tmp_path / 'logs'
    driver = Driver(ray_cluster, tmp_path, ['--trainer', 'collective', '--lr', LR, '--epochs', 4,
                                            '--logdir', logdir, '--hold-at-step', 5])
    drivers.append(driver)
    driver.wait_for_file('held-5')
    [first] = driver.events('started')
    os.kill(first['tasks'][1]['pid'], signal.SIGKILL)
    (tmp_path / 'go-5').touch()
    assert driver.finish() == 0, driver.output[-6000:]
    ended = driver.events('ended')
    assert [a['outcome'] for a in ended] == ['failed', 'finished'], driver.output[-6000:]
    assert re.match(r'worker 1 failed with (Ray)?Actor\w*Error: ', ended[0]['cause']), ended[0]['cause']
    assert ended[0]['exit_codes']['worker 0'] == 1      # LostTaskError naming worker 1
    second = ended[1]['tasks']
    assert [t['restarted'] for t in second] == [False, True]          # Ray restarted worker 1's actor
    assert second[1]['node_id'] == first['tasks'][1]['node_id']      # in its bundle, on its node
    assert second[1]['pid'] != first['tasks'][1]['pid']
    assert stats(logdir) == [(1, 3, 2), (2, 6, 2), (3, 9, 2), (4, 12, 2)]   # one run: every epoch once
    assert_workers_at_reference(tmp_path, 2, 12, reference_weights(2, 1, 4, 5, 3, 4, LR))


def test_a_lost_node_shrinks_the_job_and_a_new_node_grows_it_at_the_next_epoch(
        ray_cluster, drivers, tmp_path):
    """Elastic, 1 to 2 workers, KeepGlobalBatch(12): worker 1's node is removed after global step 5
    (epoch 2), the job goes on with 1 worker from the end of epoch 1; a node is added after step 8
    (epoch 3): the chief stops after epoch 3 and the job ends epoch 4 with 2 workers. Every step
    trained on the same 12 datapoints: the weights of one process on batches of 12."""
    logdir = tmp_path / 'logs'
    driver = Driver(ray_cluster, tmp_path, ['--trainer', 'collective', '--lr', LR, '--epochs', 4,
                                            '--logdir', logdir, '--elastic', 'keep:12',
                                            '--hold-at-step', 5, '--hold-at-step', 8], min_workers=1)
    drivers.append(driver)
    driver.wait_for_file('held-5')
    [first] = driver.events('started')
    ray_cluster.remove_node(first['tasks'][1]['node_id'])
    (tmp_path / 'go-5').touch()
    driver.wait_for_file('held-8')
    assert [a['num_worker'] for a in driver.events('started')] == [2, 1]
    ray_cluster.add_node(num_cpus=1)
    driver.wait_for('the resize request', lambda: driver.events('resize-requested'))
    (tmp_path / 'go-8').touch()
    assert driver.finish() == 0, driver.output[-6000:]
    ended = driver.events('ended')
    assert [(a['num_worker'], a['outcome'], a['resized_after']) for a in ended] == [
        (2, 'failed', None), (1, 'resize', 3), (2, 'finished', None)], driver.output[-6000:]
    assert stats(logdir) == [(1, 3, 2), (2, 6, 1), (3, 9, 1), (4, 12, 2)]
    output = driver.output
    assert "Resuming at epoch 2 with 1 model replicas (towers x processes), where epoch 1 ended with 2: " \
           "KeepGlobalBatch(12) keeps the global batch at 12 (12 per replica, was 6 per replica)" in output
    assert "Resuming at epoch 4 with 2 model replicas (towers x processes), where epoch 3 ended with 1: " \
           "KeepGlobalBatch(12)" in output
    assert_workers_at_reference(tmp_path, 2, 12, reference_weights(2, 1, 6, 5, 3, 4, LR))


def test_sigterm_to_the_driver_stops_every_worker_after_the_same_step_with_a_checkpoint(
        ray_cluster, drivers, tmp_path):
    logdir = tmp_path / 'logs'
    driver = Driver(ray_cluster, tmp_path, ['--trainer', 'collective', '--lr', LR, '--epochs', 4,
                                            '--logdir', logdir, '--hold-at-step', 5])
    drivers.append(driver)
    driver.wait_for_file('held-5')
    driver.proc.send_signal(signal.SIGTERM)
    for k in range(2):      # the signal reached both training processes while they hold after step 5
        driver.wait_for('worker {} taking SIGTERM'.format(k), lambda: re.search(
            r'\[worker {}\] .*Received SIGTERM \(preemption\)'.format(k), driver.output))
    (tmp_path / 'go-5').touch()
    assert driver.finish() == 128 + signal.SIGTERM, driver.output[-6000:]
    [attempt] = driver.events('ended')
    assert attempt['outcome'] == 'stopped'
    assert attempt['exit_codes'] == {'worker 0': 143, 'worker 1': 143}
    assert [load_worker(tmp_path, k)['global_step'] for k in range(2)] == [6, 6]
    assert (logdir / 'model-6.index').exists()
