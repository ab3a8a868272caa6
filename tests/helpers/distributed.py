"""Multi-worker jobs of distributed_scripts/train_tiny_multiworker.py on this machine: its
command, a run as a local cluster on free ports (:class:`Run`, bounded by RUN_TIMEOUT, every
process ended at the end), the workers' results and one process's weights on the combined batch.

Example::

    run = Run(tmp_path, 2, 0, ['--trainer', 'collective', '--epochs', 2])
    assert run.code == 0, run.report()
    assert_workers_end_with(tmp_path, 2, 6, reference_weights(2, 1, 4, 5, 3, 2, lr=0.05))
"""

import io
import json
import os
import re
import signal
import sys
import time

import numpy as np

from helpers.paths import TESTS_DIR, import_file
from helpers.processes import subprocess_env
from tensorpack_lite.cluster.launch import LocalCluster

__all__ = ['SCRIPT', 'RUN_TIMEOUT', 'train_tiny', 'script_command', 'Run', 'load_worker',
           'reference_weights', 'assert_replicas_match', 'assert_workers_end_with', 'stats_epochs']

SCRIPT = os.path.join(TESTS_DIR, 'distributed_scripts', 'train_tiny_multiworker.py')
# A hang: a run takes well under a minute, under load too (the slowest test, several runs, 35 s).
# Three of it fit in the test's own 10 minutes (tox.ini), so a hung run fails its test with
# the processes' output instead of being ended by pytest-timeout with its worker.
RUN_TIMEOUT = 180

train_tiny = import_file(SCRIPT, 'train_tiny_multiworker')


def script_command(out_dir, args):
    """The command of one task of train_tiny_multiworker.py writing its results in ``out_dir``."""
    return [sys.executable, SCRIPT, '--out', str(out_dir)] + [str(a) for a in args]


class Run:
    """One run of train_tiny_multiworker.py as a local cluster, until every process has ended on its
    own: ``code`` and ``output``. ``chief``: the launcher also starts a separate chief task.
    ``while_running(run)`` is called every 50 ms until then. ``until_workers_end``: only until
    every worker has ended; the parameter servers left are then killed (``code`` may be theirs)."""

    def __init__(self, out_dir, num_worker, num_ps, args, grace=20.0, chief=None, hosts=None,
                 while_running=None, until_workers_end=False):
        self._output = io.BytesIO()
        self.cluster = LocalCluster(script_command(out_dir, args), num_worker, num_ps, grace=grace,
                                    env=subprocess_env(), output=self._output, chief=chief, hosts=hosts)
        start = time.monotonic()
        self.cluster.start()
        waited = [proc for job, _, proc in self.cluster.tasks if job == 'worker' or not until_workers_end]
        try:
            while (any(proc.poll() is None for proc in waited)
                   and time.monotonic() - start <= RUN_TIMEOUT):
                if while_running is not None:
                    while_running(self)
                time.sleep(0.05)
        finally:
            if until_workers_end:
                self.cluster.send_signal(signal.SIGKILL)
            self.code = self.cluster.wait(timeout=1)   # ends what is left
        self.output = self._output.getvalue().decode('utf-8', 'replace')
        with open(os.path.join(str(out_dir), 'run-output.txt'), 'a') as f:   # all of it, for a post-mortem
            f.write(self.output)
        assert time.monotonic() - start <= RUN_TIMEOUT, "the run took too long:\n" + self.output[-6000:]

    def returncode(self, job, index):
        return self.process(job, index).returncode

    def process(self, job, index):
        return {(j, i): p for j, i, p in self.cluster.tasks}[(job, index)]

    def report(self, lines_per_task=40):
        """For a failed assertion: the launcher's lines, then the last ``lines_per_task`` lines of
        every task that exited non-zero (the first to fail is often not the last to print); the
        output's end when none did."""
        if all(proc.returncode == 0 for _, _, proc in self.cluster.tasks):
            return self.output[-6000:]
        lines = self.output.splitlines()
        parts = ['\n'.join(line for line in lines if line.startswith('[launch]'))]
        for job, index, proc in self.cluster.tasks:
            if proc.returncode != 0:
                prefix = '[{} {}] '.format(job, index)
                own = [line for line in lines if line.startswith(prefix)]
                parts.append('--- {}{} (exit code {}):\n{}'.format(
                    prefix, len(own), proc.returncode, '\n'.join(own[-lines_per_task:])))
        return '\n'.join(parts)

    @property
    def output_so_far(self):
        return self._output.getvalue().decode('utf-8', 'replace')


def load_worker(out_dir, index):
    with open(os.path.join(str(out_dir), 'worker{}.json'.format(index))) as f:
        result = json.load(f)
    result['weights'] = {k: np.asarray(v, np.float32) for k, v in result['weights'].items()}
    return result


def reference_weights(num_worker, towers, batch, hidden, steps_per_epoch, epochs, lr, optimizer='momentum'):
    """One process, the batches of every tower of every worker of a step concatenated, from
    the chief's initial weights (see train_tiny_multiworker.py for why the data lines up)."""
    samples = train_tiny.make_samples(steps_per_epoch * towers * batch * num_worker)
    return train_tiny.train_single(samples, num_worker * towers * batch, lr, hidden, steps_per_epoch, epochs,
                                   optimizer)


def assert_replicas_match(weights, reference, atol=1e-5):
    """Every variable, replicas ``tower<k>/...`` included, equals its reference."""
    assert {re.sub(r'^tower\d+/', '', name) for name in weights} == set(reference)
    for name, value in weights.items():
        np.testing.assert_allclose(value, reference[re.sub(r'^tower\d+/', '', name)], rtol=0, atol=atol,
                                   err_msg=name)


def assert_workers_end_with(out_dir, num_worker, global_step, reference):
    """Every worker ended at ``global_step`` with the reference weights; returns the workers'
    results."""
    workers = [load_worker(out_dir, k) for k in range(num_worker)]
    for worker in workers:
        assert worker['global_step'] == global_step
        assert_replicas_match(worker['weights'], reference)
    return workers


def stats_epochs(logdir):
    """The epochs stats.json of ``logdir`` recorded, in order."""
    with open(os.path.join(str(logdir), 'stats.json')) as f:
        return [entry['epoch_num'] for entry in json.load(f)]
