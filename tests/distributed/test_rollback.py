"""RollbackOnAnomaly on every process of a job (issue 70): NaN inputs in step 37 of ONE process's
data, on 2 collective workers, on 2 parameter-server workers and on 2 MPI ranks (HorovodTrainer on
the MPI engine). The step's mean cost travels with the gradients' all-reduce (the stop vote's
buffer; through the chief with the parameter servers), so every process reads the same NaN and
rolls back after the same step to its own snapshot of step 30 (the chief's of the ps-held
variables): all end with the weights of one process trained on the data without steps 31-37.
Without the callback the weights end NaN."""

import json

import numpy as np
import pytest

from helpers.anomalies import load_rollbacks
from helpers.distributed import Run, assert_replicas_match, load_worker, train_tiny
from helpers.mpi import BATCH as MPI_BATCH, LR as MPI_LR, load_rank, needs_mpiexec, run_ranks, starts_mpi_here
from helpers.mpi import train_tiny as train_tiny_mpi

BATCH, HIDDEN, LR, STEPS, SNAPSHOT_EVERY, BAD = MPI_BATCH, 5, MPI_LR, 40, 10, 37
WINDOW = {'snapshot': 30, 'first': 31, 'last': BAD}


def collective(tmp_path, *args, poison=True, towers=1, trainer='collective', **kwargs):
    """A run of 2 collective workers (or of 2 workers and a ps, ``trainer`` 'ps' or 'replicated');
    with ``poison``, worker 1's inputs of step BAD are NaN."""
    run = Run(tmp_path, 2, int(trainer != 'collective'),
              ['--trainer', trainer, '--batch', BATCH, '--hidden', HIDDEN, '--lr', LR,
               '--towers', towers, '--samples', 2 * towers * BATCH * STEPS, '--steps-per-epoch', STEPS]
              + (['--poison', 1, BAD] if poison else []) + list(args), **kwargs)
    if kwargs:
        return run
    assert run.code == 0, run.report()
    return [load_worker(tmp_path, k) for k in range(2)]


def mpi_ranks(tmp_path, *args):
    """helpers.mpi's batch and rate are BATCH and LR."""
    code, output = run_ranks(2, tmp_path, *[str(a) for a in ('--steps-per-epoch', STEPS, '--epochs', 1,
                                                             '--poison', 1, BAD) + args])
    assert code == 0, output[-6000:]
    return [load_rank(tmp_path, r) for r in range(2)]


def without_window(make_samples, train_single, *args, towers=1, window=WINDOW, accumulate=1):
    """One process on both processes' batches of every step but those of the window (with
    ``accumulate``, an update a step: the batches of its steps together)."""
    size = 2 * towers * BATCH
    samples = make_samples(STEPS * size)
    del samples[(window['first'] - 1) * size:window['last'] * size]
    kept = STEPS - (window['last'] - window['first'] + 1)
    return train_single(samples, size * accumulate, LR, *args, kept // accumulate, 1)


def assert_rolled_back_together(tmp_path, processes, reference, reason='loss nan', window=WINDOW):
    for k, process in enumerate(processes):
        assert process['global_step'] == STEPS
        windows = load_rollbacks(tmp_path, k)
        assert [{key: w[key] for key in window} for w in windows] == [window], windows
        assert all(np.all(np.isfinite(value)) for value in process['weights'].values())
        assert_replicas_match(process['weights'], reference, atol=1e-5)
    assert load_rollbacks(tmp_path, 0)[0]['reason'] == reason     # (the mean of a NaN and a number)


@pytest.mark.parametrize('towers', [1, 2])
def test_collective_workers_roll_back_together_when_one_workers_batch_is_nan(tmp_path, towers):
    """(With 2 towers a worker, its towers' replicas ``tower1/...`` too. The gradient norm is
    watched too: it travels with the cost.)"""
    workers = collective(tmp_path, '--rollback', SNAPSHOT_EVERY, '--watch-gradient-norm', towers=towers)
    reference = without_window(train_tiny.make_samples, train_tiny.train_single, HIDDEN, towers=towers)
    assert_rolled_back_together(tmp_path, workers, reference)


def test_collective_workers_with_accumulation_undo_whole_updates_together(tmp_path):
    """accumulate=2: only an update's last step reduces, carrying each worker's mean cost over the
    update: both read the NaN of step 37 at the end of its update (38) and undo 31-38, 4 updates."""
    workers = collective(tmp_path, '--rollback', SNAPSHOT_EVERY, '--accumulate', 2)
    window = dict(WINDOW, last=BAD + 1)
    reference = without_window(train_tiny.make_samples, train_tiny.train_single, HIDDEN, window=window,
                               accumulate=2)
    assert_rolled_back_together(tmp_path, workers, reference, window=window)


@pytest.mark.parametrize('trainer, accumulate', [('ps', 2), ('replicated', 1)])
def test_parameter_server_workers_roll_back_together_when_one_workers_batch_is_nan(
        tmp_path, trainer, accumulate):
    """Each worker's cost travels to the chief with its gradients, the chief's token brings every
    worker the step's mean; the chief alone restores the variables on the ps (its snapshot), the
    other worker its own (its replicas) and waits for the chief before its next step. (With
    accumulate=2, the update of steps 37-38 is undone at its end.)"""
    workers = collective(tmp_path, '--rollback', SNAPSHOT_EVERY, '--accumulate', accumulate,
                         '--watch-gradient-norm', trainer=trainer)
    window = dict(WINDOW, last=BAD + accumulate - 1)
    reference = without_window(train_tiny.make_samples, train_tiny.train_single, HIDDEN, window=window,
                               accumulate=accumulate)
    assert_rolled_back_together(tmp_path, workers, reference, window=window)


def test_a_job_killed_after_a_rollback_replays_it_on_every_worker_when_resumed(tmp_path):
    """Epochs of 10 steps, a checkpoint at each end; worker 1 is SIGKILLed at step 39, after the
    rollback of 31-37. The rerun resumes both workers at step 30, on data without the NaN: the
    chief finds the window in rollbacks.json and marks its last step in the vote, so every worker
    undoes 31-37 again and ends as the uninterrupted run did."""
    logdir = tmp_path / 'logs'
    common = ['--steps-per-epoch', 10, '--epochs', STEPS // 10, '--rollback', SNAPSHOT_EVERY,
              '--logdir', logdir, '--per-worker-logdir']
    killed = collective(tmp_path, *common, '--die-at-step', 39, grace=60, until_workers_end=True)
    assert killed.returncode('worker', 1) == -9, killed.output[-6000:]
    assert (logdir / 'worker1' / 'model-30.resume.worker-1').exists()
    with open(str(logdir / 'worker0' / 'rollbacks.json')) as f:
        assert [{key: w[key] for key in WINDOW} for w in json.load(f)] == [WINDOW]
    workers = collective(tmp_path, *common, poison=False)
    reference = without_window(train_tiny.make_samples, train_tiny.train_single, HIDDEN)
    assert_rolled_back_together(tmp_path, workers, reference, reason='replayed: loss nan')
    assert load_rollbacks(tmp_path, 1)[0]['reason'] == 'replayed (marked by the chief)'


def test_collective_workers_without_the_callback_end_nan(tmp_path):
    workers = collective(tmp_path, '--no-cost-check')
    for worker in workers:
        assert all(np.all(np.isnan(value)) for value in worker['weights'].values())


@needs_mpiexec
@starts_mpi_here
@pytest.mark.parametrize('rollback, towers', [(True, 1), (True, 2), (False, 1)])
def test_mpi_ranks_roll_back_together_when_one_ranks_batch_is_nan(tmp_path, rollback, towers):
    """(With 2 towers a rank, the rank's mean cost travels; the gradient norm too.)"""
    ranks = mpi_ranks(tmp_path, '--towers', towers,
                      *(['--rollback', SNAPSHOT_EVERY, '--watch-gradient-norm'] if rollback
                        else ['--no-cost-check']))
    if not rollback:
        for rank in ranks:
            assert all(np.all(np.isnan(value)) for value in rank['weights'].values())
        return
    reference = without_window(train_tiny_mpi.make_samples, train_tiny_mpi.train_single, towers=towers)
    assert_rolled_back_together(tmp_path, ranks, reference)
