"""Elastic training with real processes (distributed_scripts/train_tiny_multiworker.py on free
ports, every run bounded in time): a collective job resumed from its checkpoints with 4, then 3,
then 2 workers ends at the weights of an uninterrupted run with ``KeepGlobalBatch``, and with 4,
3, 2, then 4 workers at momentum SGD with the scaled rates with ``ScaleLearningRate``; the
parameter-server trainer reports a resize with ``NoAdjustment``; the launcher's ``--workers
MIN:MAX`` drops a worker that keeps failing. (The policies in one process: train/test_elastic.py.)"""

import io
import json
import os
import re

import numpy as np

from helpers.processes import subprocess_env
from helpers.distributed import (RUN_TIMEOUT, Run, assert_replicas_match, load_worker, script_command,
                                 train_tiny)
from tensorpack_lite.cluster.launch import launch

STEPS = 3            # per epoch
GLOBAL_BATCH = 12    # divides among 4, 3 and 2 workers
LR = 0.05


def stats(logdir):
    with open(os.path.join(str(logdir), 'stats.json')) as f:
        return [(r['epoch_num'], r['global_step'], r['world_size'], r['global_batch'], r['steps_per_epoch'])
                for r in json.load(f)]


def run_epochs(out, num_worker, epochs, logdir, elastic='keep:{}'.format(GLOBAL_BATCH), extra=(),
               trainer='collective', num_ps=0):
    """One run of ``num_worker`` workers (and ``num_ps`` ps) up to epoch ``epochs``, resuming
    ``logdir``; returns its output."""
    args = ['--trainer', trainer, '--lr', LR, '--steps-per-epoch', STEPS, '--epochs', epochs,
            '--logdir', logdir, '--elastic', elastic] + list(extra)
    out.mkdir(exist_ok=True)
    run = Run(out, num_worker, num_ps, args)
    assert run.code == 0, run.report()
    return run.output


def resize_lines(output):
    """The resize lines, once each (every worker logs its own; the chief's are kept)."""
    return re.findall(r'\[worker 0\] .*WRN (Resuming at epoch .*)', output)


def keep_line(epoch, now, before):
    return ("Resuming at epoch {} with {} model replicas (towers x processes), where epoch {} ended with {}: "
            "KeepGlobalBatch(12) keeps the global batch at 12 ({} per replica, was {} per replica); an epoch "
            "stays 3 steps and the learning rate is unchanged.".format(
                epoch, now, epoch - 1, before, 12 // now, 12 // before))


def test_4_3_2_workers_keeping_the_global_batch_end_at_the_uninterrupted_runs_weights(tmp_path):
    """Three runs (max_epoch 1, 2, 3) with 4, 3 and 2 workers, each resuming the last epoch's
    checkpoint: every step trains on the same 12 datapoints as an uninterrupted run would, so the
    weights are those of momentum SGD on batches of 12 for 3 epochs of 3 steps (1e-5; computed
    here in float64, as the uninterrupted run gives them: distributed/test_trainers.py holds that the
    workers train like one process on the combined batch). Growing again (2 -> 4) is in the
    scaling test below; 4, 3, 2, then 4 towers in one process in train/test_elastic.py."""
    logdir = tmp_path / 'elastic-logs'
    lines = []
    for epochs, num_worker in enumerate([4, 3, 2], start=1):
        out = tmp_path / 'run{}'.format(epochs)
        lines += resize_lines(run_epochs(out, num_worker, epochs, logdir))
    assert lines == [keep_line(2, 3, 4), keep_line(3, 2, 3)]
    assert stats(logdir) == [(1, 3, 4, 12, 3), (2, 6, 3, 12, 3), (3, 9, 2, 12, 3)]

    weights, accumulators, x, y = initial_state(GLOBAL_BATCH * STEPS)
    for _ in range(3):
        tiny_model_steps(weights, x, y, LR, GLOBAL_BATCH, STEPS, accumulators)
    for k in range(2):
        worker = load_worker(tmp_path / 'run3', k)
        assert worker['global_step'] == 9
        assert_replicas_match(worker['weights'], weights, atol=1e-5)
        print("worker {}: max |w - uninterrupted| = {:.3g}".format(k, max(
            float(abs(value - weights[name]).max()) for name, value in worker['weights'].items())))


def initial_state(num_samples):
    """The chief's initial weights, zero momentum and the script's ``num_samples`` datapoints
    (train_tiny.TinyModel, train_tiny.make_samples), in float64."""
    samples = train_tiny.make_samples(num_samples)
    x = np.array([a for a, _ in samples], np.float64)
    y = np.array([b for _, b in samples], np.float64)
    rng = np.random.RandomState(train_tiny.INIT_SEED)
    weights = {'fc0/W': rng.randn(6, 5), 'fc0/b': rng.randn(5) * 0.1}
    weights['fc1/W'] = rng.randn(5, 1) / np.sqrt(5)
    return weights, {name: np.zeros_like(value) for name, value in weights.items()}, x, y


def tiny_model_steps(weights, x, y, lr, batch, steps, accumulators, momentum=0.9):
    """``steps`` momentum-SGD steps of train_tiny.TinyModel (6 -> tanh -> 1, mean squared error) on
    consecutive batches, in float64; ``weights`` and ``accumulators`` are updated in place."""
    for k in range(steps):
        xb, yb = x[k * batch:(k + 1) * batch], y[k * batch:(k + 1) * batch]
        hidden = np.tanh(xb @ weights['fc0/W'] + weights['fc0/b'])
        diff = 2.0 / batch * ((hidden @ weights['fc1/W'])[:, 0] - yb)
        back = diff[:, None] * weights['fc1/W'][:, 0] * (1 - hidden ** 2)
        grads = {'fc0/W': xb.T @ back, 'fc0/b': back.sum(0), 'fc1/W': hidden.T @ diff[:, None]}
        for name, grad in grads.items():
            accumulators[name] = momentum * accumulators[name] + grad
            weights[name] = weights[name] - lr * accumulators[name]


def test_4_3_2_4_workers_scaling_the_learning_rate_keep_an_epochs_data_and_make_the_scaled_updates(tmp_path):
    """``ScaleLearningRate(4)``, 4 datapoints per worker, 48 an epoch: 3, 4, 6, then 3 steps per epoch
    at 0.05 x 4/4, 3/4, 2/4, 4/4; the weights are those of momentum SGD with those rates on
    batches of 16, 12, 8, 16 (computed here in float64)."""
    logdir = tmp_path / 'logs'
    lines = []
    for epochs, num_worker in enumerate([4, 3, 2, 4], start=1):
        out = tmp_path / 'run{}'.format(epochs)
        lines += resize_lines(run_epochs(out, num_worker, epochs, logdir, elastic='scale:4',
                                         extra=['--samples', 48]))
    scale = ("Resuming at epoch {} with {} model replicas (towers x processes), where epoch {} ended with "
             "{}: ScaleLearningRate(4) keeps each replica's batch; the learning rate is 'learning_rate' x {} "
             "(was x {}) and an epoch is {} steps (was {}), the same data.")
    assert lines == [scale.format(2, 3, 1, 4, '3/4', 1, 4, 3), scale.format(3, 2, 2, 3, '1/2', '3/4', 6, 4),
                     scale.format(4, 4, 3, 2, 1, '1/2', 3, 6)]
    assert stats(logdir) == [(1, 3, 4, 16, 3), (2, 7, 3, 12, 4), (3, 13, 2, 8, 6), (4, 16, 4, 16, 3)]

    weights, accumulators, x, y = initial_state(48)
    for num_worker in [4, 3, 2, 4]:
        tiny_model_steps(weights, x, y, LR * num_worker / 4, 4 * num_worker, 12 // num_worker, accumulators)
    for k in range(4):
        worker = load_worker(tmp_path / 'run4', k)
        assert worker['global_step'] == 16
        assert_replicas_match(worker['weights'], weights, atol=1e-5)


def test_parameter_server_workers_3_then_2_without_adjustment_are_reported_and_keep_their_steps(tmp_path):
    """``NoAdjustment()`` with the parameter-server trainer (1 ps): each worker keeps 4 datapoints
    and 3 steps per epoch; the resize is one warning saying how the global batch changed. (Its
    4 -> 3 -> 2 -> 4 runs in one process, in train/test_elastic.py's tests of the same code.)"""
    logdir = tmp_path / 'logs'
    lines = []
    for epochs, num_worker in enumerate([3, 2], start=1):
        out = tmp_path / 'run{}'.format(epochs)
        lines += resize_lines(run_epochs(out, num_worker, epochs, logdir, elastic='none', trainer='ps',
                                         num_ps=1))
    assert lines == [
        "Resuming at epoch 2 with 2 model replicas (towers x processes), where epoch 1 ended with 3: each "
        "replica keeps its batch, so a step now takes 2/3 times the data (the global batch changed from 3 "
        "x B to 2 x B), with the same learning rate and steps per epoch. Nothing is adjusted for it "
        "(TrainConfig(elastic=KeepGlobalBatch(...) or ScaleLearningRate(...)) would)."]
    assert stats(logdir) == [(1, 3, 3, 12, 3), (2, 6, 2, 8, 3)]
    workers = [load_worker(tmp_path / 'run2', k) for k in range(2)]
    assert_replicas_match(workers[1]['weights'], workers[0]['weights'], atol=0)


def test_launcher_drops_a_worker_that_keeps_failing_and_the_job_resumes_with_fewer(tmp_path):
    """``--workers 3:4 --drop-after 2``: worker 3 SIGKILLs itself at global step 5 (in epoch 2 of
    3 steps) whenever it exists. Twice with 4 workers (the second resumed from epoch 1), then the
    launcher drops it and 3 workers resume from epoch 1 and finish: the global batch kept, the
    weights are those of one process on the same batches."""
    logdir = tmp_path / 'logs'
    args = ['--trainer', 'collective', '--lr', LR, '--steps-per-epoch', STEPS, '--epochs', 3,
            '--logdir', logdir, '--elastic', 'keep:{}'.format(GLOBAL_BATCH), '--die-at-step', 5,
            '--die-task', 3]
    output = io.BytesIO()
    code = launch(script_command(tmp_path, args), 4, grace=60, timeout=3 * RUN_TIMEOUT, restart_delay=0,
                  env=subprocess_env(), output=output, min_workers=3, drop_after=2, max_restarts=None)
    text = output.getvalue().decode('utf-8', 'replace')
    assert code == 0, text[-6000:]
    launcher = re.findall(r'^\[launch\] (.*)$', text, re.M)
    starts = [line for line in launcher if line.startswith('cluster:')]
    assert len(starts) == sum(line.startswith('private network') for line in launcher) == 3   # each isolated
    assert [line for line in launcher if not line.startswith(('cluster:', 'private network'))] == [
        "worker 3 failed with exit code 137; ending the other processes within 60 s",
        "restart 1 of 4 in 0 s, after: worker 3 failed with exit code 137",
        "worker 3 failed with exit code 137; ending the other processes within 60 s",
        "worker 3 failed 2 times in a row with exit code 137: dropping it; the cluster goes on with 3 "
        "workers (at least 3)",
        "restart 2 of 4 in 0 s, after: worker 3 failed with exit code 137",
        "every worker finished; ending the other processes within 60 s"]
    assert resize_lines(text) == [keep_line(2, 3, 4)]
    assert [r[:3] for r in stats(logdir)] == [(1, 3, 4), (2, 6, 3), (3, 9, 3)]
    samples = train_tiny.make_samples(STEPS * GLOBAL_BATCH)
    reference = train_tiny.train_single(samples, GLOBAL_BATCH, LR, 5, STEPS, 3)
    for k in range(3):
        assert_replicas_match(load_worker(tmp_path, k)['weights'], reference)
