"""Collective workers training from a ShardedData in the S3 server (distributed_scripts/
train_tiny_multiworker.py ``--data shards:URL``: the trainer gives each worker its share; every
worker appends the ids of each step to ``ids-worker<k>.jsonl``), stopped, killed and resized
in the middle of an epoch; and checked against the global order and one process's updates."""

import io
import re

import numpy as np
import pytest

from helpers.distributed import RUN_TIMEOUT, assert_replicas_match, load_worker, script_command, train_tiny
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
