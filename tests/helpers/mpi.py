"""MPI jobs of horovod_scripts/train_tiny.py (HorovodTrainer on the MPI engine): the mpiexec of
the ``mpi`` extra, the ranks' command and environment, their results and one process's weights
on the ranks' batches together.

Example::

    @needs_mpiexec
    def test_two_ranks(tmp_path):
        code, output = run_ranks(2, tmp_path)
        assert code == 0, output[-6000:]
        assert_bit_identical([load_rank(tmp_path, r) for r in range(2)])
"""

import importlib.util
import json
import os
import re
import sys

import numpy as np
import pytest

from helpers.paths import TESTS_DIR, import_file
from helpers.processes import run_bounded, subprocess_env, users_env

__all__ = ['SCRIPT', 'MPIEXEC', 'RUN_TIMEOUT', 'BATCH', 'STEPS', 'EPOCHS', 'LR', 'train_tiny',
           'needs_mpiexec', 'SUPERVISED', 'run_ranks', 'rank_env', 'horovod_rank_env',
           'load_rank', 'reference_weights',
           'assert_close', 'assert_bit_identical', 'pid_of_rank', 'rank_logs', 'starts_mpi_here']

SCRIPT = os.path.join(TESTS_DIR, 'horovod_scripts', 'train_tiny.py')
MPIEXEC = os.path.join(os.path.dirname(sys.executable), 'mpiexec')
RUN_TIMEOUT = 180
BATCH, STEPS, EPOCHS, LR = 4, 3, 2, 0.05
"""train_tiny.py's arguments in :func:`run_ranks`: a rank's batch, steps per epoch, epochs, rate."""

train_tiny = import_file(SCRIPT, 'train_tiny')

starts_mpi_here = pytest.mark.may_leave(
    sockets=True, reason="the MPI engine in this process (mpi_ops.init, HorovodTrainer): MPI_Init, at its "
                         "first use, opens MPICH's sockets, kept until MPI_Finalize when the process exits")
"""The mark of a test that may be the first to start MPI in the pytest process (the process guard,
tests/README.md: "What a test leaves behind")."""


def _missing():
    """Why MPI jobs cannot run here, or None."""
    if importlib.util.find_spec('mpi4py') is None:
        return 'the MPI engine needs mpi4py: pip install "tensorpack_lite[mpi]"'
    if not os.path.exists(MPIEXEC):
        return 'no mpiexec next to {} (pip install "tensorpack_lite[mpi]" installs MPICH with it)'.format(
            sys.executable)
    return None


_MISSING = _missing()
needs_mpiexec = pytest.mark.skipif(_MISSING is not None, reason=str(_MISSING))
"""Skips a test, saying why, without mpi4py or MPICH's mpiexec next to this Python."""

SUPERVISED = (['-disable-auto-cleanup'],
              [sys.executable, '-m', 'tensorpack_lite.cluster.mpi_rank', '--grace', str(RUN_TIMEOUT)])
"""``launch`` of :func:`run_ranks`: the documented invocation that makes the survivors name a
killed rank; with a grace as long as the run's timeout, a run that they do not end fails the
test instead of ending another way."""


def run_ranks(num, out_dir, *args, script=None, launch=([], [])):
    """``mpiexec -n num`` on train_tiny.py (or ``script`` with ``args``); returns (exit code,
    output). ``launch``: (more mpiexec options, a command that runs each rank's command)."""
    if script is None:
        script = SCRIPT
        args = ['--out', str(out_dir), '--batch', str(BATCH), '--steps-per-epoch', str(STEPS),
                '--epochs', str(EPOCHS), '--lr', str(LR)] + list(args)
    options, wrapper = launch
    command = [MPIEXEC, '-launcher', 'fork'] + options + ['-n', str(num)] + wrapper + \
        [sys.executable, script] + list(args)
    return run_bounded(command, RUN_TIMEOUT, env=rank_env(), cwd=out_dir)


def rank_env():
    """The ranks' environment: a child Python's, the logger keeping an existing directory."""
    return subprocess_env(TENSORPACK_LOGGER_ACTION='k')


def horovod_rank_env():
    """The environment of Horovod's ranks: :func:`rank_env` without TF_USE_LEGACY_KERAS, which
    would point the ``tf.keras`` that ``import horovod.tensorflow`` needs at tf_keras, not
    installed in the Horovod environment (horovodrun then takes Horovod for built without Gloo)."""
    return users_env(TENSORPACK_LOGGER_ACTION='k')


def load_rank(out_dir, rank):
    with open(os.path.join(str(out_dir), 'rank{}.json'.format(rank))) as f:
        result = json.load(f)
    result['weights'] = {k: np.asarray(v, np.float32) for k, v in result['weights'].items()}
    return result


def reference_weights(num, lr, steps_per_epoch=STEPS, max_epoch=EPOCHS, batch_norm=None):
    """One process, the batches of all ``num`` ranks concatenated, from rank 0's weights."""
    samples = train_tiny.make_samples(STEPS * BATCH * num)
    return train_tiny.train_single(samples, num * BATCH, lr, steps_per_epoch, max_epoch, batch_norm)


def assert_close(a, b, rtol, atol):
    assert sorted(a) == sorted(b)
    for name in a:
        np.testing.assert_allclose(a[name], b[name], rtol=rtol, atol=atol, err_msg=name)


def assert_bit_identical(ranks):
    for other in ranks[1:]:
        assert other['step_hashes'] == ranks[0]['step_hashes']
        for name in ranks[0]['weights']:
            assert ranks[0]['weights'][name].tobytes() == other['weights'][name].tobytes(), name


def pid_of_rank(output, rank, num):
    found = re.findall(r'MPI rank {} of {} \(local rank \d+ of \d+\) is pid (\d+)'.format(rank, num), output)
    assert len(found) == 1, output[-6000:]
    return int(found[0])


def rank_logs(out_dir, num):
    """The ranks' own log files (train_tiny.py writes them): what a rank logged right before
    it aborted the job is there even when mpiexec's output lost it."""
    paths = [os.path.join(str(out_dir), 'rank{}.log'.format(r)) for r in range(num)]
    return ''.join(open(path).read() for path in paths if os.path.exists(path))
