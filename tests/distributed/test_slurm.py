"""Training started by a real Slurm (a one-node cluster of Debian's slurm-wlm on this machine,
tests/helpers/slurm_node.py): ``srun -n N python train.py`` with no TF_CONFIG builds the cluster from
Slurm's environment (cluster/slurm.py), and the collective trainer (2 and 3 tasks) and a
parameter-server trainer train like one process on the combined batch; HorovodTrainer's MPI
engine under ``srun --mpi=pmi2`` does too, and without Slurm's MPI support it is refused
instead of training each task alone. Skipped, saying why, where Slurm cannot start (not root,
not installed). A preempted job resubmitted with fewer tasks resumes with the global batch kept
(train/elastic.py). Every daemon and job is stopped at the end."""

import json
import os
import re
import shlex
import subprocess
import sys
import time

import numpy as np
import pytest

from helpers.paths import REPO_DIR
from helpers.processes import kill_process_tree
from helpers.timing import wait_until
from helpers import distributed, mpi, slurm_node
from tensorpack_lite.cluster.slurm import reserved_ports

REASON = slurm_node.unavailable()
pytestmark = pytest.mark.skipif(REASON is not None, reason=str(REASON))

RUN_TIMEOUT = 300


@pytest.fixture(scope='module')
def node():
    with slurm_node.SlurmNode() as started:
        yield started


ENV = dict(PYTHONPATH=REPO_DIR, TF_CPP_MIN_LOG_LEVEL='2', CUDA_VISIBLE_DEVICES='')


def srun(node, tasks, argv, options=(), **env):
    command = ['srun', '--kill-on-bad-exit=1', '-n', str(tasks)] + list(options) + argv
    code, output = node.run(command, RUN_TIMEOUT, **dict(ENV, **env))
    assert 'TF_CONFIG' not in output
    return code, output


def sbatch(node, tasks, argv, out_dir):
    """``sbatch`` of a batch script that runs ``srun argv`` (the job's tasks), waited for until
    the job has ended (slurm_node.SlurmNode.wait_for_job: ``sbatch --wait`` looks late); returns
    (exit code, the job's output)."""
    script = out_dir / 'job.sh'
    script.write_text('#!/bin/sh\nexec srun --kill-on-bad-exit=1 {}\n'.format(
        ' '.join(map(shlex.quote, argv))))
    command = ['sbatch', '--parsable', '-n', str(tasks), '-o', str(out_dir / 'job.out'), str(script)]
    code, output = node.run(command, RUN_TIMEOUT, **ENV)
    assert code == 0, output + node.logs()
    code = node.wait_for_job(output.strip().split(';')[0], RUN_TIMEOUT)
    return code, output + (out_dir / 'job.out').read_text()


@pytest.mark.parametrize('tasks, launcher', [(2, 'srun'), (3, 'sbatch')])
def test_slurm_starts_collective_workers_without_tf_config(node, tmp_path, tasks, launcher):
    """``srun -n 2 python train.py``, or a batch script of ``srun python train.py`` given
    to ``sbatch -n 3``: the tasks make the cluster from Slurm's environment."""
    argv = distributed.script_command(tmp_path, ['--trainer', 'collective', '--epochs', 2])
    code, output = srun(node, tasks, argv) if launcher == 'srun' else sbatch(node, tasks, argv, tmp_path)
    assert code == 0, output[-6000:] + node.logs()
    # the cluster of the step: worker k is Slurm task k, on this node, ports of the job's block
    cluster = r"Distributed training on cluster \{'worker': \['\w+:\d+'(, '\w+:\d+'){%d}\]\}" % (tasks - 1)
    assert re.search(cluster, output), output[-6000:]
    reference = distributed.reference_weights(tasks, 1, 4, 5, 3, 2, lr=0.05)
    workers = distributed.assert_workers_end_with(tmp_path, tasks, 6, reference)
    for other in workers[1:]:
        for name, value in workers[0]['weights'].items():
            np.testing.assert_array_equal(other['weights'][name], value, err_msg=name)   # bit-identical


def test_srun_starts_a_parameter_server_trainer_with_the_last_task_as_ps(node, tmp_path):
    argv = distributed.script_command(tmp_path, ['--trainer', 'ps', '--epochs', 2])
    code, output = srun(node, 3, argv, TENSORPACK_SLURM_NUM_PS='1')
    assert code == 0, output[-6000:] + node.logs()
    assert re.search(r"this is ps 0 \(\w+:\d+\)", output), output[-6000:]
    reference = distributed.reference_weights(2, 1, 4, 5, 3, 2, lr=0.05)
    distributed.assert_workers_end_with(tmp_path, 2, 6, reference)


@mpi.needs_mpiexec
def test_horovod_trainer_under_srun_mpi_pmi2_trains_as_one_process(node, tmp_path):
    argv = [sys.executable, mpi.SCRIPT] + mpi_args(tmp_path)
    code, output = srun(node, 2, argv, options=['--mpi=pmi2'])
    assert code == 0, output[-6000:] + node.logs()
    ranks = [mpi.load_rank(tmp_path, r) for r in range(2)]
    mpi.assert_bit_identical(ranks)
    reference = mpi.reference_weights(2, mpi.LR)
    mpi.assert_close(ranks[0]['weights'], reference, rtol=1e-4, atol=1e-5)


@mpi.needs_mpiexec
def test_horovod_trainer_under_srun_without_mpi_support_is_refused(node, tmp_path):
    """Slurm's default MpiDefault=none: each task would be an MPI singleton training alone."""
    code, output = srun(node, 2, [sys.executable, mpi.SCRIPT] + mpi_args(tmp_path))
    assert code != 0
    refused = (r"MPI sees 1 rank, but SLURM_STEP_NUM_TASKS=2: Slurm started 2 tasks in this step, but its "
               r"MPI support is off .*'srun --mpi=pmi2'")
    assert re.search(refused, output), output[-6000:]
    assert not list(tmp_path.glob('rank*.json'))


def mpi_args(out_dir):
    return ['--out', str(out_dir), '--batch', str(mpi.BATCH), '--steps-per-epoch', str(mpi.STEPS),
            '--epochs', str(mpi.EPOCHS), '--lr', str(mpi.LR)]


def test_scancel_signal_term_preempts_a_job_which_a_rerun_finishes_as_uninterrupted(node, tmp_path):
    """``scancel --signal=TERM`` to a job of 2 tasks (the collective trainer), held after
    global step 250 of 800 until the signal has come: each votes to stop in step 251's
    all-reduce (multiprocess/stop_vote.py), so both stop after it, the chief writes
    model-251 (and each task its resume state), every task exits with 143 within Slurm's
    KillWait (30 s); the same command again resumes at step 251, each task with its data where
    it was, and ends with every epoch recorded once and the weights of an uninterrupted run."""
    logs = tmp_path / 'logs'
    logdir = logs / 'worker0'      # each task a logger directory of its own, for its resume states
    argv = distributed.script_command(tmp_path, ['--trainer', 'collective', '--lr', 0.05, '--epochs', 4,
                                                 '--steps-per-epoch', 200, '--logdir', logs,
                                                 '--per-worker-logdir', '--pause-at-step', 250])
    proc, ended_after = preempt_when_paused(node, tmp_path, 2, argv)
    first = log_of(tmp_path)
    print("SIGTERM to the job's 2 tasks: srun ended {:.2f} s later, exit {}".format(
        ended_after, proc.returncode))
    stops = re.findall(r'Training was preempted \(SIGTERM\) after global step (\d+) \(preempted: this '
                       r'worker received SIGTERM; every worker stops after global step 251\).*exiting with '
                       r'status 143', first)
    assert stops == ['251', '251'], first[-6000:]
    assert re.search(r'Model saved to .*model-251\.', first), first[-6000:]
    assert proc.returncode == 143, first[-6000:]
    stopped = [distributed.load_worker(tmp_path, k) for k in range(2)]
    assert [w['global_step'] for w in stopped] == [251, 251]
    distributed.assert_replicas_match(stopped[1]['weights'], stopped[0]['weights'], atol=0)
    code, output = srun(node, 2, argv)
    assert code == 0, output[-6000:]
    resumed = 'Resuming from checkpoint {} (step 51 of 200 of epoch 2, global step 251).'.format(
        logdir / 'model-251')
    assert resumed in output, output[-6000:]
    assert 'worker-1 takes back its own state at global step 251 (step 51 of 200 of epoch 2).' in output
    assert distributed.stats_epochs(logdir) == [1, 2, 3, 4]
    reference = distributed.reference_weights(2, 1, 4, 5, 200, 4, lr=0.05)
    distributed.assert_workers_end_with(tmp_path, 2, 800, reference)


def preempt_when_paused(node, tmp_path, tasks, argv):
    """``srun -n tasks argv`` (with ``--pause-at-step``), sent ``scancel --signal=TERM`` once
    paused and let go once every task received it; returns the srun process, ended, and the
    seconds from the signal to its end (output in ``first.out``)."""
    log = open(str(tmp_path / 'first.out'), 'w+')
    proc = subprocess.Popen(['srun', '-n', str(tasks), '-J', 'preempted'] + argv, stdout=log,
                            stderr=subprocess.STDOUT, env=node.env(**ENV), start_new_session=True)
    try:
        assert wait_until(lambda: (tmp_path / 'paused').exists(), timeout=RUN_TIMEOUT), log_of(tmp_path)
        subprocess.run(['scancel', '--signal=TERM', '--name', 'preempted'], env=node.env(), check=True,
                       timeout=30)
        signalled = time.monotonic()
        assert wait_until(lambda: log_of(tmp_path).count('Received SIGTERM (preemption)') == tasks,
                          timeout=RUN_TIMEOUT), log_of(tmp_path)
        (tmp_path / 'go').touch()
        proc.wait(slurm_node.KILL_WAIT)     # TimeoutExpired: not within Slurm's grace
        return proc, time.monotonic() - signalled
    finally:
        kill_process_tree(proc)
        log.close()


def test_a_preempted_job_resubmitted_with_fewer_tasks_keeps_the_global_batch(node, tmp_path):
    """Elastic training under Slurm: ``srun -n 3`` (collective, ``KeepGlobalBatch(12)``: 4 per
    task), preempted by ``scancel --signal=TERM`` in epoch 3, then the job again as ``sbatch -n
    2`` (what the cluster had free): it resumes from epoch 2's end saying that the world size
    went from 3 to 2 and each task now takes 6, and ends with the weights of one process on
    batches of 12."""
    logdir = tmp_path / 'logs'
    argv = distributed.script_command(tmp_path, ['--trainer', 'collective', '--lr', 0.05, '--epochs', 4,
                                                 '--steps-per-epoch', 3, '--logdir', logdir,
                                                 '--elastic', 'keep:12', '--pause-at-step', 7])
    proc, _ = preempt_when_paused(node, tmp_path, 3, argv)
    assert proc.returncode == 143, log_of(tmp_path)[-6000:]
    code, output = sbatch(node, 2, argv, tmp_path)
    assert code == 0, output[-6000:]
    assert 'Resuming from checkpoint {} (end of epoch 2).'.format(logdir / 'model-6') in output
    line = ("Resuming at epoch 3 with 2 model replicas (towers x processes), where epoch 2 ended with 3: "
            "KeepGlobalBatch(12) keeps the global batch at 12 (6 per replica, was 4 per replica); an epoch "
            "stays 3 steps and the learning rate is unchanged.")
    assert output.count(line) == 1, output[-6000:]     # the chief, which resumes the logger directory
    assert distributed.stats_epochs(logdir) == [1, 2, 3, 4]
    samples = distributed.train_tiny.make_samples(3 * 12)
    reference = distributed.train_tiny.train_single(samples, 12, 0.05, 5, 3, 4)
    distributed.assert_workers_end_with(tmp_path, 2, 12, reference)


def log_of(out_dir):
    return (out_dir / 'first.out').read_text()


PORTS_OF_A_TASK = r'''
import json, os, sys, time
from tensorpack_lite.cluster.slurm import slurm_cluster
out_dir, expected = sys.argv[1], int(sys.argv[2])
me = 'job{}-task{}'.format(os.environ['SLURM_JOB_ID'], os.environ['SLURM_PROCID'])
with open(os.path.join(out_dir, me), 'w') as f:
    json.dump({'reserved': os.environ.get('SLURM_STEP_RESV_PORTS'), 'cluster': slurm_cluster().cluster}, f)
deadline = time.monotonic() + 120
while len(os.listdir(out_dir)) < expected and time.monotonic() < deadline:   # every step alive at once
    time.sleep(0.05)
print('ALL', len(os.listdir(out_dir)), flush=True)
'''


def test_steps_started_at_once_on_the_node_get_the_ports_slurm_reserved_and_never_collide(node, tmp_path):
    """4 steps of 2 tasks each, started at once with srun --resv-ports and all alive together (a
    barrier on files): each step's cluster uses exactly the ports Slurm reserved for it
    (SLURM_STEP_RESV_PORTS, from MpiParams=ports=), and no two steps share one (6 pairs)."""
    steps, tasks = 4, 2
    command = ['srun', '--resv-ports={}'.format(tasks), '-n', str(tasks), sys.executable, '-c',
               PORTS_OF_A_TASK, str(tmp_path), str(steps * tasks)]
    procs = [subprocess.Popen(command, env=node.env(**ENV), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, start_new_session=True) for _ in range(steps)]
    try:
        outputs = [proc.communicate(timeout=RUN_TIMEOUT)[0] for proc in procs]
    finally:
        for proc in procs:
            kill_process_tree(proc)
    assert all(proc.returncode == 0 for proc in procs), outputs
    assert all(out.count('ALL {}'.format(steps * tasks)) == tasks for out in outputs), outputs
    seen = {}
    for name in sorted(os.listdir(str(tmp_path))):
        with open(str(tmp_path / name)) as f:
            seen[name] = json.load(f)
    by_job = {}
    for name, task in seen.items():
        by_job.setdefault(name.split('-')[0], []).append(task)
    assert len(by_job) == steps
    used = []
    for job, members in by_job.items():
        assert len(members) == tasks and members[0] == members[1], members   # one cluster per step
        ports = [int(a.rsplit(':', 1)[1]) for a in members[0]['cluster']['worker']]
        assert ports == reserved_ports(members[0]['reserved']), members[0]
        used += ports
    assert len(used) == len(set(used)) == steps * tasks, by_job
    assert all(slurm_node.RESERVED_PORTS[0] <= p <= slurm_node.RESERVED_PORTS[1] for p in used)
