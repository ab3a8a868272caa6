"""Jobs training from a ShardedData in the S3 server, each process given its share by its
trainer and appending the ids of each step's samples to a file (helpers.shards.RecordIds):
collective workers (distributed_scripts/train_tiny_multiworker.py ``--data shards:URL``)
stopped, resized, killed and resized again in the middle of an epoch, and MPI ranks
(horovod_scripts/train_tiny.py) accumulating steps, stopped by SIGTERM and run again; each
checked against the global order and one process's updates."""

import io
import re

import numpy as np
import pytest

from helpers.distributed import RUN_TIMEOUT, assert_replicas_match, load_worker, script_command, train_tiny
from helpers.mpi import LR as MPI_LR, assert_bit_identical, assert_close, load_rank, needs_mpiexec, run_ranks
from helpers.mpi import train_tiny as mpi_tiny
from helpers.processes import subprocess_env
from helpers.s3 import serve_module
from helpers.shards import step_places, trained_ids, with_ids
from tensorpack_lite.cluster.launch import launch
from tensorpack_lite.dataflow import DataFromList, save_shards

STEPS, GLOBAL_BATCH, EPOCHS, LR = 12, 12, 2, 0.05
TOTAL = STEPS * GLOBAL_BATCH     # one epoch: 144 samples, 12 a step
URL = 's3://bucket/tiny-shards'


@pytest.fixture(scope='module')
def s3_server(tmp_path_factory):
    yield from serve_module(tmp_path_factory)


def run(s3, out, num_worker, args, **elastic):
    """One job of ``num_worker`` workers on this machine's network (the S3 server is on its
    loopback; ``elastic``: the launcher's ``min_workers``, ``drop_after``); its output."""
    out.mkdir()
    output = io.BytesIO()
    code = launch(script_command(out, args), num_worker, grace=60, timeout=RUN_TIMEOUT, restart_delay=0,
                  env=subprocess_env(**s3.env), output=output, isolate=False, **elastic)
    text = output.getvalue().decode('utf-8', 'replace')
    (out / 'launch.log').write_text(text)
    assert code == 0, text[-8000:]
    return text


def job_ids(out, num_worker):
    """:func:`~helpers.shards.trained_ids` of a job's workers."""
    return trained_ids([out / 'ids-worker{}.jsonl'.format(k) for k in range(num_worker)])


def test_killed_and_resized_2_3_2_workers_train_each_epochs_samples_once_in_the_global_order(
        s3_server, monkeypatch, tmp_path):
    """2 workers stop after step 5 or 6 (the chief asks at step 4; mid-epoch 1 of 12 steps); 3
    workers resume there (worker 2, new, takes the chief's data position from the shared
    logger directory), and worker 2 SIGKILLs itself at step 8 whenever it runs: the launcher
    drops it, and 2 workers resume from the last checkpoint (every 2 steps) to the end of epoch
    2. KeepGlobalBatch(12): 6, then 4, then 6 datapoints per worker. Each step trains on the 12
    places of the global order it is at, worker k of n on places k, k + n... of them; each
    epoch on its 144 samples once; the weights are those of one process on those batches."""
    s3 = s3_server
    s3.serve_this_process(monkeypatch)
    samples = with_ids(train_tiny.make_samples(TOTAL))
    index = save_shards(DataFromList(samples, shuffle=False), URL, shard_bytes=400)
    assert len(index['shards']) > 12
    logdir = tmp_path / 'logs'
    args = ['--trainer', 'collective', '--lr', LR, '--steps-per-epoch', STEPS, '--epochs', EPOCHS,
            '--logdir', logdir, '--shared-logdir', '--elastic', 'keep:{}'.format(GLOBAL_BATCH),
            '--data', 'shards:' + URL, '--save-every-steps', 2]
    first = run(s3, tmp_path / 'run1', 2, args + ['--stop-at-step', 4])
    stop = load_worker(tmp_path / 'run1', 0)['global_step']
    assert stop in (5, 6), first[-3000:]
    second = run(s3, tmp_path / 'run2', 3, args + ['--die-at-step', 8, '--die-task', 2], min_workers=2,
                 drop_after=1)
    launcher = re.findall(r'^\[launch\] (.*)$', second, re.M)
    assert "worker 2 failed 1 times in a row with exit code 137: dropping it; the cluster goes on with 2 " \
           "workers (at least 2)" in launcher, launcher
    assert ("The resume state of the run is restored although it was saved by 2 model replicas (towers x "
            "processes) and this run has 3") in second
    taken = r"worker-2 takes the chief's data position at global step {} \(step {} of 12 of epoch 1\), saved"
    assert re.search(taken.format(stop, stop), second), second[-5000:]
    resumed = re.findall(r'\[worker 0\] .*Resuming from checkpoint \S+ \(step (\d+) of 12 of epoch', second)
    assert len(resumed) == 2 and int(resumed[0]) == stop and stop < int(resumed[1]) <= 8, resumed

    places = step_places(index, STEPS, GLOBAL_BATCH)
    steps = job_ids(tmp_path / 'run1', 2)
    steps.update(job_ids(tmp_path / 'run2', 3))   # run 2's restart rewrote worker 0 and 1's steps
    assert sorted(steps) == list(range(1, 2 * STEPS + 1))
    trained = []
    for step in range(1, 2 * STEPS + 1):
        world = 3 if stop < step <= int(resumed[1]) else 2
        assert steps[step] == {k: places(step)[k::world].tolist() for k in range(world)}, step
        trained += places(step).tolist()
    for epoch in range(2):
        assert sorted(trained[epoch * TOTAL:(epoch + 1) * TOTAL]) == list(range(TOTAL))
    print("samples per epoch: {}".format([len(set(trained[e * TOTAL:(e + 1) * TOTAL])) for e in range(2)]))

    reference = train_tiny.train_single([samples[i][:2] for i in trained], GLOBAL_BATCH, LR, 5, 2 * STEPS, 1)
    for k in range(2):
        worker = load_worker(tmp_path / 'run2', k)
        assert worker['global_step'] == 2 * STEPS
        assert_replicas_match(worker['weights'], reference)
    print("max |w - one process| = {:.3g}".format(max(
        float(np.abs(value - reference[name]).max()) for name, value in worker['weights'].items())))


@needs_mpiexec
def test_two_mpi_ranks_accumulating_2_steps_resume_after_sigterm_at_the_sample(
        s3_server, monkeypatch, tmp_path):
    """HorovodTrainer on the MPI engine (horovod_scripts/train_tiny.py ``--data shards:URL``), 2
    ranks of 4 datapoints, accumulate=2, 2 epochs of 6 steps: rank 1 gets SIGTERM after step 3,
    the first half of an update; every rank stops after step 4, and the same command again
    resumes there from each rank's own state in the shared logger directory. Each step's
    samples are those of the global order, each epoch's once; the weights are one process's
    updates on 16 datapoints (the 2 steps of 2 ranks) each."""
    s3_server.serve_this_process(monkeypatch)
    samples = with_ids(mpi_tiny.make_samples(48))
    index = save_shards(DataFromList(samples, shuffle=False), 's3://bucket/mpi-shards', shard_bytes=400)
    logdir = tmp_path / 'logs'
    args = ['--accumulate', '2', '--steps-per-epoch', '6', '--epochs', '2', '--logdir', str(logdir),
            '--resume', '--data', 'shards:s3://bucket/mpi-shards']
    code, output = run_ranks(2, tmp_path, '--sigterm', '1', '3', *args)
    assert code == 143, output[-6000:]
    assert [load_rank(tmp_path, r)['global_step'] for r in range(2)] == [4, 4]
    code, output = run_ranks(2, tmp_path, *args)
    assert code == 0, output[-6000:]
    assert 'Resuming from checkpoint {} (step 4 of 6 of epoch 1, global step 4).'.format(
        logdir / 'model-4') in output
    assert 'rank-1 takes back its own state at global step 4' in output

    steps = trained_ids([tmp_path / 'ids-rank{}.jsonl'.format(r) for r in range(2)])
    places = step_places(index, 6, 8)
    assert sorted(steps) == list(range(1, 13))
    trained = []
    for step in range(1, 13):
        assert steps[step] == {r: places(step)[r::2].tolist() for r in range(2)}, step
        trained += places(step).tolist()
    assert sorted(trained[:48]) == sorted(trained[48:]) == list(range(48))
    reference = mpi_tiny.train_single([samples[i][:2] for i in trained], 16, MPI_LR, 6, 1)
    resumed = [load_rank(tmp_path, r) for r in range(2)]
    assert_bit_identical(resumed)
    assert_close(resumed[0]['weights'], reference, rtol=0, atol=1e-6)
