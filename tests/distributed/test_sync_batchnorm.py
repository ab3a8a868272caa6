"""BatchNorm(sync_statistics='horovod') under CollectiveAllReduceTrainer: the statistics are
averaged over every tower of every worker (2 worker processes of 2 towers), so the run
equals one process on the step's batches of all towers concatenated, moving averages included."""

from helpers.distributed import Run, assert_workers_end_with, train_tiny


def test_two_workers_of_two_towers_synchronise_batchnorm_over_all_towers(tmp_path):
    workers, towers, batch, steps = 2, 2, 3, 4
    run = Run(tmp_path, workers, 0, ['--trainer', 'collective', '--exchange', 'collective',
                                     '--towers', towers, '--batch', batch, '--steps-per-epoch', steps,
                                     '--lr', 0.05, '--batch-norm', 'horovod'])
    assert run.code == 0, run.report()
    samples = train_tiny.make_samples(steps * towers * batch * workers)
    reference = train_tiny.train_single(samples, workers * towers * batch, 0.05, 5, steps, 1, batch_norm='')
    assert {'bn/gamma', 'bn/beta', 'bn/mean/EMA', 'bn/variance/EMA'} <= set(reference)
    assert abs(reference['bn/mean/EMA']).max() > 1e-3
    assert_workers_end_with(tmp_path, workers, steps, reference)


def test_accumulating_workers_synchronise_batchnorm_in_every_step_and_reduce_gradients_per_update(tmp_path):
    """Issue 60: with accumulate=4 the statistics are still averaged over every worker in every
    step (the accumulate runs hold that collective and run together, with the collective graph
    key), the gradients once per update: one process with accumulate=4 on both workers'
    micro-batches together."""
    workers, batch, steps = 2, 3, 8
    run = Run(tmp_path, workers, 0, ['--trainer', 'collective', '--batch', batch, '--steps-per-epoch', steps,
                                     '--lr', 0.05, '--batch-norm', 'horovod', '--accumulate', 4])
    assert run.code == 0, run.report()
    samples = train_tiny.make_samples(steps * batch * workers)
    reference = train_tiny.train_single(samples, workers * batch, 0.05, 5, steps, 1, batch_norm="",
                                        accumulate=4)
    assert abs(reference['bn/mean/EMA']).max() > 1e-3
    assert_workers_end_with(tmp_path, workers, steps, reference)
