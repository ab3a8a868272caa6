"""Multi-worker training through TensorFlow's distributed runtime, with real processes on this
machine (distributed_scripts/train_tiny_multiworker.py, started by the launcher on free ports, each
run bounded in time and every process killed at the end): the trainers make the update of one
process on all the batches together, the replicas end equal, only the chief writes files, a
lost worker makes the others fail naming it, and a killed run resumes."""

import io
import json
import os
import re
import signal
import subprocess
import threading
import time

import numpy as np
import pytest

from helpers.precision import UNIT_ROUNDOFF
from helpers.processes import kill_process_tree, subprocess_env
from helpers.timing import HANG_TIMEOUT, wait_until
from helpers.distributed import (RUN_TIMEOUT, Run, assert_replicas_match, assert_workers_end_with,
                                 load_worker, reference_weights, script_command, stats_epochs,
                                 train_tiny)
from tensorpack_lite.compat import tf
from tensorpack_lite.cluster import netns
from tensorpack_lite.cluster.config import local_cluster
from tensorpack_lite.cluster.launch import LocalCluster, launch


class HandRun:
    """train_tiny_multiworker.py started by this test for every task of ``tf_cluster`` with the
    TF_CONFIG a cluster manager writes for it, until every process has ended on its own (each
    is killed after RUN_TIMEOUT): ``codes`` {(job, index): exit code} and ``output``."""

    def __init__(self, out_dir, tf_cluster, args):
        procs = {}
        log = open(str(out_dir / 'output.txt'), 'wb+')
        try:
            for job, addresses in tf_cluster.items():
                for index in range(len(addresses)):
                    tf_config = json.dumps({'cluster': tf_cluster, 'task': {'type': job, 'index': index}})
                    env = dict(subprocess_env(), TF_CONFIG=tf_config)
                    procs[(job, index)] = subprocess.Popen(
                        script_command(out_dir, args), env=env, stdout=log, stderr=subprocess.STDOUT,
                        stdin=subprocess.DEVNULL, start_new_session=True)
            deadline = time.monotonic() + RUN_TIMEOUT
            self.codes = {task: proc.wait(max(1.0, deadline - time.monotonic()))
                          for task, proc in procs.items()}
        finally:
            for proc in procs.values():
                kill_process_tree(proc)
            log.seek(0)
            self.output = log.read().decode('utf-8', 'replace')
            log.close()


def assert_as_an_uninterrupted_run(out_dir, logdir, reference):
    """After 4 epochs of 3 steps by 2 workers, interrupted and resumed: the chief recorded every
    epoch once and both workers end at step 12 with the reference weights."""
    assert stats_epochs(logdir / 'worker0') == [1, 2, 3, 4]
    assert_workers_end_with(out_dir, 2, 12, reference)


def files_in(directory):
    return sorted(os.listdir(str(directory))) if os.path.isdir(str(directory)) else []


def test_collective_two_workers_summing_and_only_the_chief_writes(tmp_path):
    logdir = tmp_path / 'logs'
    run = Run(tmp_path, 2, 0, ['--trainer', 'collective', '--sum', '--lr', 0.05, '--epochs', 2,
                               '--logdir', logdir, '--per-worker-logdir'])
    assert run.code == 0, run.report()
    workers = [load_worker(tmp_path, k) for k in range(2)]
    assert [w['global_step'] for w in workers] == [6, 6]
    # worker 1 started from other weights: equal results need the chief's broadcast and the all-reduce;
    # summing the two workers' mean gradients is one process's mean gradient with twice the rate
    reference = reference_weights(2, 1, 4, 5, 3, 2, lr=0.1)
    for worker in workers:
        assert_replicas_match(worker['weights'], reference)

    chief_files, other_files = files_in(logdir / 'worker0'), files_in(logdir / 'worker1')
    assert 'checkpoint' in chief_files and 'model-6.index' in chief_files
    assert any(f.startswith('events.out.tfevents') for f in chief_files)
    assert stats_epochs(logdir / 'worker0') == [1, 2]
    with open(str(logdir / 'worker0' / 'stats.json')) as f:
        assert [record['world_size'] for record in json.load(f)] == [2, 2]     # replicas: 2 workers
    # and its own resume states (its data position) beside the chief's checkpoints
    assert other_files == ['log.log', 'model-3.resume.worker-1', 'model-6.resume.worker-1'], other_files
    other_log = (logdir / 'worker1' / 'log.log').read_text()
    assert 'only the chief writes into the logger directory' in other_log and 'Start Epoch' not in other_log


@pytest.mark.parametrize('compression', [None, 'fp16'])
def test_collective_two_workers_fp16_decide_each_step_together(tmp_path, compression):
    """mixed_precision='fp16' (float16 emulated on the CPU, dynamic loss scaling), also with
    fp16 gradient compression: both workers skip or apply the same steps (decided on the
    all-reduced gradients), end with the same weights and loss scale, near the float32 run."""
    extra = ['--compression', compression] if compression else []
    run = Run(tmp_path, 2, 0, ['--trainer', 'collective', '--epochs', 2, '--mixed-precision', 'fp16',
                               '--no-epoch-broadcast'] + extra)
    assert run.code == 0, run.report()
    workers = [load_worker(tmp_path, k) for k in range(2)]
    assert workers[0]['loss_scale'] == workers[1]['loss_scale'] == [2.0 ** 15, 0]
    for name, value in workers[0]['weights'].items():
        np.testing.assert_array_equal(workers[1]['weights'][name], value, err_msg=name)
    assert_replicas_match(workers[0]['weights'], reference_weights(2, 1, 4, 5, 3, 2, lr=0.05), atol=2e-3)


def reference_without_step(num_worker, towers, batch, hidden, steps, skipped, lr):
    """:func:`reference_weights` of one epoch of ``steps`` steps without the update of step
    ``skipped`` (1-based): its batches left out."""
    size = num_worker * towers * batch
    samples = train_tiny.make_samples(steps * size)
    del samples[(skipped - 1) * size:skipped * size]
    return train_tiny.train_single(samples, size, lr, hidden, steps - 1, 1)


@pytest.mark.parametrize('trainer', ['replicated'])
def test_parameter_server_trainers_fp16_skip_an_overflowing_step_together(tmp_path, trainer):
    """mixed_precision='fp16' with a parameter server: in step 2 worker 1's batch overflows
    float16 once scaled; the chief, applying the averaged gradients, skips that update whole
    and halves the one shared scale; both workers end with the weights of a run without that
    step, equal, finite, and read the same loss scale (2**14, 1 skipped step). (With 2 towers
    per worker this data overflows at 2**15 once by itself, so one tower each here.)"""
    run = Run(tmp_path, 2, 1, ['--trainer', trainer, '--mixed-precision', 'fp16', '--steps-per-epoch', 4,
                               '--overflow-step', 2])
    assert run.code == 0, run.report()
    workers = [load_worker(tmp_path, k) for k in range(2)]
    for worker in workers:
        assert worker['global_step'] == 4
        assert worker['loss_scale'] == [2.0 ** 14, 1]
        assert all(np.all(np.isfinite(value)) for value in worker['weights'].values())
    for name, value in workers[0]['weights'].items():
        np.testing.assert_array_equal(workers[1]['weights'][name], value, err_msg=name)
    assert_replicas_match(workers[0]['weights'], reference_without_step(2, 1, 4, 5, 4, 2, lr=0.05),
                          atol=2e-3)


@pytest.mark.parametrize('trainer', ['ps'])
def test_parameter_server_trainers_bf16_end_with_float32_checkpoints(tmp_path, trainer):
    """mixed_precision='bf16' with a parameter server: every worker's session gets the
    rewrite (its master optimizes the whole step, the servers' parts included); the chief's
    checkpoint holds float32 variables, the workers' final weights."""
    logdir = tmp_path / 'logs'
    run = Run(tmp_path, 2, 1, ['--trainer', trainer, '--mixed-precision', 'bf16', '--logdir', logdir])
    assert run.code == 0, run.report()
    for k in range(2):
        assert "[worker {}]".format(k) in run.output
    assert run.output.count("Mixed precision: MixedPrecision('bf16'") == 2
    workers = [load_worker(tmp_path, k) for k in range(2)]
    with open(str(logdir / 'stats.json')) as f:
        assert [record['world_size'] for record in json.load(f)] == [2]     # 2 workers (and a ps)
    reader = tf.train.load_checkpoint(str(logdir / 'model-3'))
    dtypes = reader.get_variable_to_dtype_map()
    for name in ('fc0/W', 'fc0/b', 'fc1/W', 'fc0/W/Momentum'):
        assert dtypes[name] == tf.float32, name
    for worker in workers:
        assert worker['global_step'] == 3 and worker['loss_scale'] is None
        for name, value in worker['weights'].items():
            np.testing.assert_array_equal(reader.get_tensor(re.sub(r'^tower\d+/', '', name)), value,
                                          err_msg=name)
    reference = reference_weights(2, 1, 4, 5, 3, 1, lr=0.05)
    assert_replicas_match(workers[0]['weights'], reference, atol=1.6e-2)
    # computed in bfloat16 (measured 1.1e-3 off float32; float32 runs agree within 1e-5)
    assert max(np.abs(value - reference[re.sub(r'^tower\d+/', '', name)]).max()
               for name, value in workers[0]['weights'].items()) > 1e-4


def test_without_epoch_broadcasts_a_worker_may_end_while_its_peer_is_still_at_its_last_step(tmp_path):
    """No collective broadcast ends the epochs, and worker 1 holds 2 s after its last step
    (then creates a file): worker 0's last step ends without it (a collective step ends on a
    member once its peers have taken its data), and it waits for worker 1 at the finish
    barrier: its training ends after the hold. Neither takes the other's end for a loss."""
    run = Run(tmp_path, 2, 0, ['--trainer', 'collective', '--no-epoch-broadcast', '--epochs', 2,
                               '--worker1-holds', 2])
    assert run.code == 0, run.report()
    assert run.returncode('worker', 0) == run.returncode('worker', 1) == 0
    for k in range(2):
        assert (tmp_path / 'worker{}.ended'.format(k)).read_text() == 'True'
    assert 'lost worker' not in run.output and 'LostTaskError' not in run.output
    assert re.search(r'\[worker 0\] .*worker 0 \(localhost:\d+\): every worker finished training', run.output)
    assert_workers_end_with(tmp_path, 2, 6, reference_weights(2, 1, 4, 5, 3, 2, lr=0.05))


def test_a_worker_that_does_not_finish_in_time_is_named_by_the_chief(tmp_path):
    """Worker 1 holds after its last step (until the chief's process has ended); the chief waits
    1 s at the finish barrier (FINISH_TIMEOUT), then fails naming it. Worker 1, arriving later,
    finds the chief gone and names it. Both exit 1."""
    def release_once_the_chief_ended(run):
        if run.process('worker', 0).poll() is not None:
            (tmp_path / 'release-worker1').touch()
    run = Run(tmp_path, 2, 0, ['--trainer', 'collective', '--no-epoch-broadcast', '--epochs', 1,
                               '--worker1-holds', HANG_TIMEOUT, '--finish-timeout', 1],
              while_running=release_once_the_chief_ended)
    assert [run.returncode('worker', k) for k in range(2)] == [1, 1], run.report()
    assert re.search(r'\[worker 0\] .*LostTaskError: worker 0 \(localhost:\d+\): training ended here, but '
                     r'worker 1 \(localhost:\d+\) did not finish within 1 s', run.output), run.report()
    assert re.search(r'\[worker 1\] .*LostTaskError: worker 1 \(localhost:\d+\): lost worker 0', run.output)


@pytest.mark.parametrize('optimizer', ['adam'])
def test_collective_two_workers_of_two_towers_match_one_process(tmp_path, optimizer):
    """Each of the 4 replicas has optimizer state of its own (Adam's slots and power
    accumulators), advanced once per step; the gradients cross workers through TensorFlow's
    collective ring."""
    run = Run(tmp_path, 2, 0, ['--trainer', 'collective', '--towers', 2, '--batch', 3, '--steps-per-epoch', 4,
                               '--optimizer', optimizer, '--lr', 0.05])
    assert run.code == 0, run.report()
    reference = reference_weights(2, 2, 3, 5, 4, 1, lr=0.05, optimizer=optimizer)
    for worker in assert_workers_end_with(tmp_path, 2, 4, reference):
        assert {name.split('/')[0] for name in worker['weights']} == {'fc0', 'fc1', 'tower1'}


@pytest.mark.parametrize('trainer, num_ps, optimizer', [
    ('collective', 0, 'sgd'), ('collective', 0, 'momentum'), ('collective', 0, 'adam'),
    ('ps', 1, 'momentum'), ('replicated', 1, 'adam')])
def test_two_workers_accumulating_4_micro_batches_match_one_process_on_the_combined_batch(
        tmp_path, trainer, num_ps, optimizer):
    """Issue 60: accumulate=4, 8 steps of 4 datapoints on each of 2 workers: every 4th step reduces
    the accumulated gradients across the workers once and applies them, so the run is 2 updates of
    one process on 32 datapoints each (the optimizer's state advanced twice)."""
    run = Run(tmp_path, 2, num_ps, ['--trainer', trainer, '--accumulate', 4, '--steps-per-epoch', 8,
                                    '--optimizer', optimizer, '--lr', 0.05])
    assert run.code == 0, run.report()
    reference = reference_weights(2, 1, 4 * 4, 5, 2, 1, lr=0.05, optimizer=optimizer)
    assert_workers_end_with(tmp_path, 2, 8, reference)


def test_parameter_server_two_workers_match_one_process_and_the_ps_ends(tmp_path):
    run = Run(tmp_path, 2, 1, ['--trainer', 'ps', '--lr', 0.05, '--epochs', 2])
    assert run.code == 0, run.report()
    assert '[ps 0]' in run.output and '/job:ps/task:0: every worker finished.' in run.output
    assert run.returncode('ps', 0) == 0        # it ended by itself, before the launcher's grace
    assert_workers_end_with(tmp_path, 2, 6, reference_weights(2, 1, 4, 5, 3, 2, lr=0.05))


@pytest.mark.parametrize('trainer, chief, started_by', [
    ('collective', 'chief', 'hand'), ('collective', 'master', 'launcher'), ('ps', 'chief', 'launcher'),
    ('replicated', 'chief', 'hand')])
def test_a_chief_and_two_workers_match_one_process_and_only_the_chief_writes(
        tmp_path, trainer, chief, started_by):
    """TF_CONFIG as cluster managers write it: a separate chief task (or 'master'), which is worker 0
    of the trainers; 'worker' i of TF_CONFIG is worker i + 1."""
    num_ps = 0 if trainer == 'collective' else 1
    logdir = tmp_path / 'logs'
    args = ['--trainer', trainer, '--lr', 0.05, '--epochs', 2, '--logdir', logdir, '--per-worker-logdir']
    if started_by == 'launcher':
        run = Run(tmp_path, 2, num_ps, args, chief=chief)
        assert run.code == 0, run.report()
        assert '[{} 0] '.format(chief) in run.output and '[worker 1] ' in run.output
    else:
        addresses = local_cluster(3, num_ps)
        tf_cluster = {chief: addresses['worker'][:1], 'worker': addresses['worker'][1:]}
        if num_ps:
            tf_cluster['ps'] = addresses['ps']
        run = HandRun(tmp_path, tf_cluster, args)
        assert set(run.codes.values()) == {0}, (run.codes, run.report())
    assert_workers_end_with(tmp_path, 3, 6, reference_weights(3, 1, 4, 5, 3, 2, lr=0.05))
    chief_files = files_in(logdir / 'worker0')
    assert 'checkpoint' in chief_files and 'model-6.index' in chief_files
    assert stats_epochs(logdir / 'worker0') == [1, 2]
    for k in (1, 2):   # the log and their own resume states (their data position)
        assert files_in(logdir / 'worker{}'.format(k)) == [
            'log.log', 'model-3.resume.worker-{}'.format(k), 'model-6.resume.worker-{}'.format(k)]


@pytest.mark.parametrize('trainer, num_ps', [('collective', 0), ('replicated', 1)])
def test_a_killed_worker_is_named_and_the_epochs_before_are_kept(tmp_path, trainer, num_ps):
    """2 workers x 2 CPU towers (4 replicas); worker 1 SIGKILLs itself at step 7 of 4 epochs of 3
    (with the parameter server, worker 0 waits in a dequeue that only the abort on the loss ends;
    collectively, in a collective op that fails when its peer's connection goes). (A restart
    resumes: test_max_restarts_..., the preemption and the cut-link tests.) The run is over once
    both workers have ended: the parameter server, which would end 5 s after it lost them both
    (serve_until_workers_finish), is killed then (a killed parameter server: the test below)."""
    logdir = tmp_path / 'logs'
    args = ['--trainer', trainer, '--towers', 2, '--hidden', 700, '--lr', 0.01, '--epochs', 4,
            '--logdir', logdir, '--per-worker-logdir']
    killed = Run(tmp_path, 2, num_ps, args + ['--die-at-step', 7], grace=60, until_workers_end=True)
    assert killed.returncode('worker', 1) == -9, killed.output[-6000:]
    # worker 0 stopped on its own with an error (the launcher would have ended it with a signal)
    assert killed.returncode('worker', 0) > 0, killed.output[-6000:]
    address = killed.cluster.config.address('worker', 1)
    assert re.search(r'\[worker 0\] .*LostTaskError: worker 0 \(localhost:\d+\): lost worker 1 \({}\)'.format(
        address), killed.output), killed.output[-6000:]
    assert stats_epochs(logdir / 'worker0') == [1, 2]
    assert 'model-6.index' in files_in(logdir / 'worker0')


@pytest.mark.parametrize('trainer, num_ps, preempted_tasks, held_at, stop_at, shuffle',
                         [('collective', 0, 'worker 1', 4, 5, True), ('ps', 1, 'every task', 5, 7, False),
                          ('ps', 1, 'worker 1', 5, 7, False)])
def test_sigterm_stops_every_worker_after_the_same_step_and_the_rerun_resumes(
        tmp_path, trainer, num_ps, preempted_tasks, held_at, stop_at, shuffle):
    """SIGTERM to worker 1 alone (its machine is preempted: the chief learns the stop step from
    it, by the collective vote or the parameter-server hand-off), or to every task (the job is, as
    the launcher and Slurm pass it on), while the workers are held after global step
    ``held_at`` of 4 epochs of 3. Every worker stops after the same step, mid-epoch: the
    collective trainer's vote travels with the next step's gradients (step 5), a parameter-server
    trainer's worker proposes step + 2 at the chief (step 7). The chief writes that step's
    checkpoint and its resume state, worker 1 its own (its data position), both workers end there
    with the same weights and exit with 143; a parameter server serves until they are done, then
    ends (143 when it got the signal too). The same command again resumes at that step, each worker
    with its data where it was, and ends as an uninterrupted run."""
    logdir = tmp_path / 'logs'
    common = ['--trainer', trainer, '--hidden', 50, '--lr', 0.01, '--epochs', 4, '--per-worker-logdir'] + (
        ['--shuffle'] if shuffle else [])
    args = common + ['--logdir', logdir]
    signalled = []

    def preempt(run):
        if not signalled and (tmp_path / 'paused').exists():
            for job, index, proc in run.cluster.tasks:
                if preempted_tasks == 'every task' or (job, index) == ('worker', 1):
                    os.kill(proc.pid, signal.SIGTERM)
                    signalled.append((job, index))
        if signalled and not (tmp_path / 'go').exists() and \
                run.output_so_far.count('Received SIGTERM (preemption)') == len(signalled):
            (tmp_path / 'go').touch()

    preempted = Run(tmp_path, 2, num_ps, args + ['--pause-at-step', held_at], while_running=preempt)
    output = preempted.output
    assert signalled, output[-6000:]
    assert [preempted.returncode('worker', k) for k in range(2)] == [143, 143], output[-6000:]
    if num_ps:
        assert preempted.returncode('ps', 0) == (143 if ('ps', 0) in signalled else 0), output[-6000:]
    if num_ps:
        agreed = r'\[worker 1\] .*proposed that every worker stop after global step {}\.'.format(stop_at)
    else:
        agreed = r'\[worker 1\] .*/job:worker/task:1 voted to stop: every process stops after the next step\.'
    assert re.search(agreed, output), output[-6000:]
    chief_heard = 'this worker' if ('worker', 0) in signalled else 'another worker'
    stopped_at = (r'\[worker 0\] .*Training was preempted \(SIGTERM\) after global step {0} \(preempted: '
                  r'{1} received SIGTERM; every worker stops after global step {0}\)')
    stopped_at = stopped_at.format(stop_at, chief_heard)
    assert re.search(stopped_at, output), output[-6000:]
    assert re.search(r'\[worker 0\] .*Model saved to .*model-{}\.'.format(stop_at), output), output[-6000:]
    stopped = [load_worker(tmp_path, k) for k in range(2)]
    assert [w['global_step'] for w in stopped] == [stop_at, stop_at]
    assert_replicas_match(stopped[1]['weights'], stopped[0]['weights'], atol=0)
    last_epoch = stop_at // 3
    assert stats_epochs(logdir / 'worker0') == list(range(1, last_epoch + 1))

    assert (logdir / 'worker1' / 'model-{}.resume.worker-1'.format(stop_at)).exists()
    resumed = Run(tmp_path, 2, num_ps, args)
    assert resumed.code == 0, resumed.output[-6000:]
    where = 'step {} of 3 of epoch {}'.format(stop_at - 3 * last_epoch, last_epoch + 1)
    resumed_from = 'Resuming from checkpoint {} ({}, global step {}).'.format(
        logdir / 'worker0' / 'model-{}'.format(stop_at), where, stop_at)
    assert resumed_from in resumed.output, resumed.output[-6000:]
    took_back = 'worker-1 takes back its own state at global step {} ({}).'.format(stop_at, where)
    assert took_back in resumed.output
    if not shuffle:
        assert_as_an_uninterrupted_run(tmp_path, logdir, reference_weights(2, 1, 4, 50, 3, 4, lr=0.01))
        return
    # shuffled (the same seed on both workers): the weights of an uninterrupted run of the same data
    resumed_weights = [load_worker(tmp_path, k)['weights'] for k in range(2)]
    whole = tmp_path / 'whole'
    whole.mkdir()
    assert Run(whole, 2, num_ps, common + ['--logdir', whole / 'logs']).code == 0
    assert stats_epochs(logdir / 'worker0') == stats_epochs(whole / 'logs' / 'worker0') == [1, 2, 3, 4]
    for k in range(2):
        assert_replicas_match(resumed_weights[k], load_worker(whole, k)['weights'], atol=1e-6)


@pytest.mark.parametrize('trainer, num_ps, stop_at', [('collective', 0, 8), ('ps', 1, 12)])
def test_sigterm_in_the_middle_of_an_update_stops_at_an_update_and_resumes_as_an_uninterrupted_run(
        tmp_path, trainer, num_ps, stop_at):
    """Issue 60: accumulate=4, SIGTERM to worker 1 after global step 5 (1 micro-batch into the 2nd
    update). The collective trainers' vote travels with the next reduction, the update of step 8:
    every worker stops there. A parameter-server worker proposes the end of the update after the
    next (step 12; without accumulation, step 7): the workers synchronize only at the updates, and
    the proposal must reach the chief in time. Either way the rerun ends as an uninterrupted run."""
    logdir = tmp_path / 'logs'
    common = ['--trainer', trainer, '--hidden', 50, '--lr', 0.01, '--epochs', 4, '--steps-per-epoch', 4,
              '--accumulate', 4, '--per-worker-logdir']
    signalled = []

    def preempt(run):
        if not signalled and (tmp_path / 'paused').exists():
            os.kill(run.process('worker', 1).pid, signal.SIGTERM)
            signalled.append(1)
        if signalled and not (tmp_path / 'go').exists() and \
                'Received SIGTERM (preemption)' in run.output_so_far:
            (tmp_path / 'go').touch()

    preempted = Run(tmp_path, 2, num_ps, common + ['--logdir', logdir, '--pause-at-step', 5],
                    while_running=preempt)
    assert [preempted.returncode('worker', k) for k in range(2)] == [143, 143], preempted.output[-6000:]
    assert [load_worker(tmp_path, k)['global_step'] for k in range(2)] == [stop_at, stop_at]
    assert (logdir / 'worker1' / 'model-{}.resume.worker-1'.format(stop_at)).exists()
    resumed = Run(tmp_path, 2, num_ps, common + ['--logdir', logdir])
    assert resumed.code == 0, resumed.output[-6000:]
    resumed_from = 'Resuming from checkpoint {}'.format(logdir / 'worker0' / 'model-{}'.format(stop_at))
    assert resumed_from in resumed.output
    for k in range(2):
        assert load_worker(tmp_path, k)['global_step'] == 16
    # one process on the batches of each update together (4 updates of 32 datapoints)
    assert_workers_end_with(tmp_path, 2, 16, reference_weights(2, 1, 16, 50, 1, 4, lr=0.01))


def test_a_worker_killed_after_a_checkpoint_inside_an_update_resumes_every_worker_with_its_gradients(
        tmp_path):
    """Issue 60: accumulate=4 over epochs of 3 steps: the checkpoint at the end of epoch 2 (step 6)
    lies 2 micro-batches into an update, and every worker keeps its own accumulated gradients in
    its resume state (the chief in model-6.resume, worker 1 in model-6.resume.worker-1). Worker 1
    is killed at step 7; the rerun resumes both workers at step 6 with their micro-batches and ends
    as the uninterrupted run."""
    logdir = tmp_path / 'logs'
    common = ['--trainer', 'collective', '--hidden', 50, '--lr', 0.01, '--epochs', 4, '--accumulate', 4,
              '--per-worker-logdir']
    killed = Run(tmp_path, 2, 0, common + ['--logdir', logdir, '--die-at-step', 7], grace=60,
                 until_workers_end=True)
    assert killed.returncode('worker', 1) == -9, killed.output[-6000:]
    assert (logdir / 'worker1' / 'model-6.resume.worker-1').exists()
    resumed = Run(tmp_path, 2, 0, common + ['--logdir', logdir])
    assert resumed.code == 0, resumed.output[-6000:]
    took_back = 'Resuming an update of 4 micro-batches after 2 of them, with their gradients.'
    assert resumed.output.count(took_back) == 2, resumed.output[-6000:]
    whole = tmp_path / 'whole'
    whole.mkdir()
    assert Run(whole, 2, 0, common + ['--logdir', whole / 'logs']).code == 0
    for k in range(2):
        assert load_worker(tmp_path, k)['global_step'] == 12
        assert_replicas_match(load_worker(tmp_path, k)["weights"], load_worker(whole, k)["weights"],
                              atol=1e-6)


@pytest.mark.parametrize('trainer, num_ps, stop_at', [('collective', 0, 16), ('ps', 1, 17)])
def test_early_stopping_on_the_chief_ends_every_worker_after_the_same_step_as_finished(
        tmp_path, trainer, num_ps, stop_at):
    """The chief's EarlyStopping('score', patience=3) on a scripted score (3, 2, 2.5, 2.6, 2.7, 1, ...
    by epoch, 3 steps each): epochs 3, 4 and 5 do not beat epoch 2, so the chief asks to stop after
    epoch 5 (global step 15). The request travels as a preemption does, in the collective vote of
    the next step: both workers stop after step 16, with the same weights, and exit 0 (finished,
    not preempted); the chief's last checkpoint is that step's, its stats.json ends with epoch 5.
    The parameter-server trainer (1 ps) carries it as a proposal of step + 2 at the chief's
    barrier, the path of its SIGTERM test above: both workers stop after step 17 (the barrier
    keeps the reason: multiprocess/test_server.py)."""
    logdir = tmp_path / 'logs'
    args = ['--trainer', trainer, '--hidden', 50, '--lr', 0.01, '--epochs', 8, '--per-worker-logdir',
            '--logdir', logdir, '--early-stop', '3:3,2,2.5,2.6,2.7,1,1,1']
    run = Run(tmp_path, 2, num_ps, args)
    output = run.output
    assert [run.returncode('worker', k) for k in range(2)] == [0, 0], output[-6000:]
    asked = (r"\[worker 0\] .*EarlyStopping\('score'\): 'score' is 2\.7 at global_step=15, the 3 value\(s\) "
             r"in a row not better than its best 2 at global_step=6")
    assert re.search(asked, output), output[-6000:]
    for k in range(2):
        assert re.search(r'\[worker {}\] .*Training was stopped by StopTraining: every worker stops after '
                         r'global step {}'.format(k, stop_at), output), output[-6000:]
    assert 'preempted' not in output.lower()
    stopped = [load_worker(tmp_path, k) for k in range(2)]
    assert [w['global_step'] for w in stopped] == [stop_at, stop_at]
    assert_replicas_match(stopped[1]['weights'], stopped[0]['weights'], atol=0)
    assert stats_epochs(logdir / 'worker0') == [1, 2, 3, 4, 5]
    assert (logdir / 'worker0' / 'model-{}.index'.format(stop_at)).exists()


@pytest.mark.parametrize('trainer, damage', [('collective', 'dies-saving'), ('collective', 'loses-data')])
def test_a_chief_killed_with_a_damaged_checkpoint_resumes_every_worker_from_the_same_step(
        tmp_path, trainer, damage):
    """--max-restarts 1, 2 workers (only the chief has a log directory), 4 epochs of 3 steps:
    the chief is SIGKILLed while it writes model-9 (its data file written, not its index), or
    after epoch 3 was recorded with model-9's data file cut to half. The restarted chief
    resumes from model-6, the other worker follows its schedule, and stats.json holds every
    epoch once. (Collective workers: what the damage changes is the chief's resume point; a
    parameter-server job restarted by the launcher is the link-cut-while-saving test's.)"""
    logdir = tmp_path / 'logs'
    args = ['--trainer', trainer, '--lr', 0.05, '--epochs', 4, '--logdir', logdir,
            '--chief-{}'.format(damage), 9]
    if trainer == 'collective':
        args += ['--exchange', 'collective']
    output = io.BytesIO()
    code = launch(script_command(tmp_path, args), 2, 1 if trainer == 'ps' else 0, grace=60,
                  timeout=2 * RUN_TIMEOUT, max_restarts=1, restart_delay=0, env=subprocess_env(),
                  output=output)
    text = output.getvalue().decode('utf-8', 'replace')
    assert code == 0, text[-6000:]
    assert "[launch] restart 1 of 1 in 0 s, after: worker 0 failed with exit code 137" in text, text[-6000:]
    assert 'Resuming from checkpoint {} (end of epoch 2).'.format(logdir / 'model-6') in text
    assert "/job:worker/task:1 follows the chief's schedule: 3 steps per epoch, epochs 3..4." in text
    if damage == 'loses-data':   # one warning naming it; its files kept under another name
        assert re.search(r"AutoResumeTrainConfig: in {}, skipped model-9: Checkpoint '.*model-9' is "
                         r"truncated.*moved model-9 aside to model-9.damaged; resuming from model-6 "
                         r"\(end of epoch 2\)".format(re.escape(str(logdir))), text), text[-6000:]
        assert {'model-9.damaged.index', 'model-9.damaged.data-00000-of-00001'} <= set(files_in(logdir))
    assert stats_epochs(logdir) == [1, 2, 3, 4]
    assert_workers_end_with(tmp_path, 2, 12, reference_weights(2, 1, 4, 5, 3, 4, lr=0.05))


@pytest.mark.parametrize('trainer', ['replicated', 'ps'])
def test_a_killed_parameter_server_ends_both_workers_promptly(tmp_path, trainer):
    """1 ps + 2 workers; the ps is SIGKILLed in epoch 2 of 200. Both workers name it and end on
    their own (exit code 1, not the launcher's signal): their session's close, which waits for
    every task, is given up after CLOSE_TIMEOUT. It used to wait for ever (30 s and more)."""
    output = io.BytesIO()
    command = script_command(tmp_path, ['--trainer', trainer, '--epochs', 200, '--steps-per-epoch', 20])
    cluster = LocalCluster(command, 2, 1, grace=HANG_TIMEOUT, env=subprocess_env(), output=output)
    cluster.start()
    try:
        procs = {(job, index): proc for job, index, proc in cluster.tasks}
        assert wait_until(lambda: b'Start Epoch 2 ' in output.getvalue(), timeout=RUN_TIMEOUT), \
            output.getvalue()[-6000:]
        procs[('ps', 0)].kill()
        codes = [procs[('worker', k)].wait(60) for k in range(2)]   # raises TimeoutExpired: a hang
    finally:
        cluster.wait(timeout=1)   # ends whatever is left
    text = output.getvalue().decode('utf-8', 'replace')
    assert codes == [1, 1], text[-6000:]
    for k in range(2):
        assert re.search(r'\[worker {0}\] .*LostTaskError: worker {0} \(localhost:\d+\): lost ps 0'.format(k),
                         text), text[-6000:]


def test_a_worker_whose_session_breaks_ends_and_the_other_names_it(tmp_path):
    """2 collective workers; in step 2 worker 1's session fails as TensorFlow's do when a C++
    exception gets out (helpers.BreakingSession: an IndexError, then every run waits for ever).
    Worker 1 ends with that error: nothing more runs in its session except its test callback
    DumpWeights, which is abandoned after AFTER_FAILURE_TIMEOUT (3 s here); worker 0, waiting
    in the step's all-reduce, names the lost worker 1. Both exit 1 on their own."""
    run = Run(tmp_path, 2, 0, ['--trainer', 'collective', '--epochs', 3, '--break-session-at-step', 2,
                               '--after-failure-timeout', 3])
    assert [run.returncode('worker', k) for k in range(2)] == [1, 1], run.report()
    assert re.search(r'\[worker 1\] .*Training failed: IndexError: absl::container_internal', run.output)
    assert re.search(r'\[worker 1\] .*The session is in an unknown state', run.output)
    assert re.search(r'\[worker 1\] .*DumpWeights.* did not finish within 3 s \(AFTER_FAILURE_TIMEOUT\): '
                     r'abandoned', run.output), run.report()
    assert not os.path.exists(str(tmp_path / 'worker1.json'))     # nothing was read from it
    lost = r'\[worker 0\] .*LostTaskError: worker 0 \(localhost:\d+\): lost worker 1'
    assert re.search(lost, run.output), run.report()


@pytest.mark.skipif(netns.unavailable() is not None, reason=str(netns.unavailable()))
@pytest.mark.parametrize('trainer, num_worker, num_ps, rate_mbit', [
    ('collective', 4, 0, 20), ('collective', 3, 0, 20), ('replicated', 2, 2, 20), ('ps', 3, 1, 200)])
def test_workers_on_hosts_of_their_own_behind_shaped_links_end_cleanly(
        tmp_path, trainer, num_worker, num_ps, rate_mbit):
    """Every task in a network namespace of its own (cluster/netns.py), its link limited to
    ``rate_mbit`` Mbit/s each way, talking over the bridge, for an epoch of 3 steps (each moves
    the 160,000 weights' gradients, and the collective trainer's end of epoch its variables,
    across the links): the run ends with every process's exit code 0 (the workers leave
    together: the finish barrier), no lost task, and the weights of one process on the
    combined batch. (Several epochs on hosts of their own, collective and replicated with a
    parameter server: the cut-link tests below.)"""
    with netns.NetnsCluster(num_worker + num_ps, rate_mbit=rate_mbit) as net:
        run = Run(tmp_path, num_worker, num_ps, ['--trainer', trainer, '--epochs', 1, '--hidden', 20000,
                                                 '--lr', 0.001], hosts=net)
    codes = [p.returncode for _, _, p in run.cluster.tasks]
    assert codes == [0] * (num_worker + num_ps), run.report()
    assert not re.search(r'LostTaskError|lost (worker|ps|chief)', run.output)
    assert '10.213.0.1:2222' in run.output      # the cluster's addresses are the hosts'
    reference = reference_weights(num_worker, 1, 4, 20000, 3, 1, lr=0.001)
    assert_workers_end_with(tmp_path, num_worker, 3, reference)


@pytest.mark.parametrize('trainer, num_ps', [('collective', 0), ('ps', 1)])
def test_workers_behind_links_with_delay_and_loss_end_cleanly(tmp_path, trainer, num_ps):
    """3 workers (and a ps), every host's packets delayed 50 ms and 1 % of them dropped at 20
    Mbit/s (a far, lossy network; TCP resends what is lost): every process exits 0, no task is
    taken for lost, and the weights are those of one process on the combined batch."""
    reason = netns.unavailable() or netns.netem_unavailable()     # probed here, not at import
    if reason is not None:
        pytest.skip(reason)
    with netns.NetnsCluster(3 + num_ps, rate_mbit=20, delay_ms=50, loss_percent=1) as net:
        run = Run(tmp_path, 3, num_ps, ['--trainer', trainer, '--epochs', 2, '--hidden', 2000, '--lr', 0.01],
                  hosts=net)
    codes = [p.returncode for _, _, p in run.cluster.tasks]
    assert codes == [0] * (3 + num_ps), run.report()
    assert not re.search(r'LostTaskError|lost (worker|ps|chief)', run.output)
    assert_workers_end_with(tmp_path, 3, 6, reference_weights(3, 1, 4, 2000, 3, 2, lr=0.01))


@pytest.mark.skipif(netns.unavailable() is not None, reason=str(netns.unavailable()))
def test_a_worker_whose_link_is_cut_mid_run_is_named_by_the_other(tmp_path):
    """2 collective workers on hosts of their own; in epoch 2 worker 1's link is cut (its
    process lives on). Worker 0 stops on its own with LostTaskError naming worker 1 and its
    address; worker 1, cut off, names worker 0. Both exit 1."""
    output = io.BytesIO()
    command = script_command(tmp_path, ['--trainer', 'collective', '--epochs', 200, '--steps-per-epoch', 20])
    with netns.NetnsCluster(2) as net:
        cluster = LocalCluster(command, 2, 0, grace=HANG_TIMEOUT, env=subprocess_env(), output=output,
                               hosts=net)
        cluster.start()
        try:
            procs = {(job, index): proc for job, index, proc in cluster.tasks}
            assert wait_until(lambda: b'Start Epoch 2 ' in output.getvalue(), timeout=RUN_TIMEOUT), \
                output.getvalue()[-6000:]
            net.cut(1)
            codes = [procs[('worker', k)].wait(HANG_TIMEOUT) for k in range(2)]   # TimeoutExpired: a hang
        finally:
            cluster.wait(timeout=1)
    text = output.getvalue().decode('utf-8', 'replace')
    assert codes == [1, 1], text[-6000:]
    assert re.search(r'\[worker 0\] .*LostTaskError: worker 0 \(10\.213\.0\.1:2222\): lost worker 1 '
                     r'\(10\.213\.0\.2:2222\)', text), text[-6000:]
    assert re.search(r'\[worker 1\] .*LostTaskError: worker 1 \(10\.213\.0\.2:2222\): lost worker 0', text)


@pytest.mark.skipif(netns.unavailable() is not None, reason=str(netns.unavailable()))
@pytest.mark.parametrize('trainer, num_ps', [('replicated', 1)])
def test_a_link_cut_while_the_chief_saves_loses_no_checkpoint(tmp_path, trainer, num_ps):
    """Every task on a host of its own, 4 epochs of 3 steps, --max-restarts 1. When the chief
    is about to save epoch 3's checkpoint (model-9), its link is cut, then the save runs (the
    replicated trainer reads the variables from the ps across the cut link, a call TensorFlow
    cannot cancel: its abort op given up after 1 s (ABORT_TIMEOUT), the chief exits 1 s
    (EXIT_AFTER_LOSS_TIMEOUT) after it found the others lost; neither bound decides the path).
    The chief fails naming the lost tasks instead of hanging, the link is restored once the
    launcher restarts the cluster, and the run resumes from a checkpoint on record and ends as
    an uninterrupted run, every epoch recorded once."""
    logdir = tmp_path / 'logs'
    args = ['--trainer', trainer, '--lr', 0.05, '--epochs', 4, '--logdir', logdir, '--chief-cut-saving', 9,
            '--exit-after-loss-timeout', 1, '--abort-timeout', 1]
    output = io.BytesIO()
    with netns.NetnsCluster(2 + num_ps) as net:
        def partition():
            if wait_until(lambda: (tmp_path / 'saving').exists(), timeout=RUN_TIMEOUT):
                net.cut(0)
                (tmp_path / 'cut').touch()
                if wait_until(lambda: b'[launch] restart 1 of 1' in output.getvalue(), timeout=RUN_TIMEOUT):
                    net.restore(0)

        partitioner = threading.Thread(target=partition, daemon=True)
        partitioner.start()
        code = launch(script_command(tmp_path, args), 2, num_ps, grace=60, timeout=2 * RUN_TIMEOUT,
                      max_restarts=1, restart_delay=0, env=subprocess_env(), output=output, hosts=net)
        partitioner.join(5)
    text = output.getvalue().decode('utf-8', 'replace')
    assert code == 0, text[-6000:]
    lost = r'\[worker 0\] .*LostTaskError: worker 0 \(10\.213\.0\.1:2222\): lost '
    assert re.search(lost, text), text[-6000:]
    if trainer == 'replicated':
        assert re.search(r"\[worker 0\] .*ERR Training failed: LostTaskError: worker 0 .*did not end within "
                         r"1 s of the loss .*it exits now with code 1", text), text[-6000:]
    resumed = re.search(r'Resuming from checkpoint .*model-(\d+) \(end of epoch (\d)\)', text)
    assert resumed and resumed.groups() in {('6', '2'), ('9', '3')}, text[-6000:]
    assert stats_epochs(logdir) == [1, 2, 3, 4]
    assert_workers_end_with(tmp_path, 2, 12, reference_weights(2, 1, 4, 5, 3, 4, lr=0.05))


@pytest.mark.skipif(netns.unavailable() is not None, reason=str(netns.unavailable()))
def test_a_cut_link_restored_resumes_with_max_restarts_as_an_uninterrupted_run(tmp_path):
    """2 collective workers on hosts of their own, 40 epochs of 20 steps; in epoch 2 worker 1's
    link is cut. Both stop naming the other, the launcher (--max-restarts 1) starts the cluster
    again, and the link is restored once it has said so (the new tasks wait for each other in
    the meantime). The run resumes from the chief's last end-of-epoch checkpoint and ends with
    every epoch recorded once and the weights of an uninterrupted run."""
    logdir = tmp_path / 'logs'
    args = ['--trainer', 'collective', '--lr', 0.05, '--epochs', 40, '--steps-per-epoch', 20,
            '--logdir', logdir]
    output = io.BytesIO()
    with netns.NetnsCluster(2) as net:
        def partition():
            if wait_until(lambda: b'Start Epoch 2 ' in output.getvalue(), timeout=RUN_TIMEOUT):
                net.cut(1)
                if wait_until(lambda: b'[launch] restart 1 of 1' in output.getvalue(), timeout=RUN_TIMEOUT):
                    net.restore(1)

        partitioner = threading.Thread(target=partition, daemon=True)
        partitioner.start()
        code = launch(script_command(tmp_path, args), 2, grace=60, timeout=2 * RUN_TIMEOUT, max_restarts=1,
                      restart_delay=0, env=subprocess_env(), output=output, hosts=net)
        partitioner.join(5)
    text = output.getvalue().decode('utf-8', 'replace')
    assert code == 0, text[-6000:]
    assert '[launch] restart 1 of 1 in 0 s, after: worker' in text, text[-6000:]
    assert re.search(r'\[worker 0\] .*LostTaskError: worker 0 \(10\.213\.0\.1:2222\): lost worker 1 '
                     r'\(10\.213\.0\.2:2222\)', text), text[-6000:]
    assert 'Resuming from checkpoint' in text
    assert stats_epochs(logdir) == list(range(1, 41))
    assert_workers_end_with(tmp_path, 2, 800, reference_weights(2, 1, 4, 5, 20, 40, lr=0.05))


@pytest.mark.parametrize('compression, towers', [('fp16', 1), ('bf16', 2)])
def test_compressed_collective_workers_end_equal_and_close_to_the_exact_run(tmp_path, compression, towers):
    """2 workers, gradients sent and summed in 16 bits: every replica of every worker ends with
    the same weights, near the exact run's but not equal to them.

    Bound: with M members (towers of all workers: 2 for fp16, 4 for bf16) each averaged gradient
    element is the 16-bit sum of the M rounded g_i / M: one rounding of each part and M - 1 of
    partial sums, each off by at most u (the unit roundoff: 2^-11 for fp16, 2^-8 for bf16) times
    at most G, the largest gradient element of a tower (2.0 on these batches): M u G in all.
    With momentum 0.9, the gradient of step s moves a weight by lr times at most
    1 + 0.9 + ... over the T = 6 steps left (<= 6 each), so the weights drift by at most about
    lr * 6 * T * M u G (plus second-order effects of the drift, tiny here) = 3.6 M u; the
    tolerance is 4 M u (4e-3 for fp16, 6.3e-2 for bf16). Measured: 4.9e-5 and 4.4e-4."""
    unit_roundoff = UNIT_ROUNDOFF[compression]
    run = Run(tmp_path, 2, 0, ['--trainer', 'collective', '--compression', compression, '--towers', towers,
                               '--lr', 0.05, '--epochs', 2])
    assert run.code == 0, run.report()
    assert 'gradients travel as {0} and are summed in {0}'.format(compression) in run.output
    workers = [load_worker(tmp_path, k) for k in range(2)]
    assert [w['global_step'] for w in workers] == [6, 6]
    chief = workers[0]['weights']
    for worker in workers:
        for name, value in worker['weights'].items():     # replicas tower<k>/... too: bit for bit
            np.testing.assert_array_equal(value, chief[re.sub(r'^tower\d+/', '', name)], err_msg=name)
    reference = reference_weights(2, towers, 4, 5, 3, 2, lr=0.05)
    assert_replicas_match(chief, reference, atol=4 * 2 * towers * unit_roundoff)
    drift = max(np.abs(chief[name] - reference[name]).max() for name in reference)
    assert drift > 1e-6, drift       # the exact run stays within 1e-5 of the reference (tests above)
