"""Run one MPI rank's command as a child process, so that a rank that a signal ends (SIGKILL,
the OOM killer, a segfault) is named by the ranks that survive it instead of vanishing with
them. Put it between ``mpiexec -disable-auto-cleanup`` and the command::

    mpiexec -disable-auto-cleanup -n 4 python -m tensorpack_lite.cluster.mpi_rank python train.py

Why: when MPICH's ``mpiexec`` (hydra) reaps a rank that a signal ended, it SIGKILLs every rank
on that machine within milliseconds, with or without ``-disable-auto-cleanup``, so no rank
can say which one died. Here the process hydra started is this one. When its command dies
of signal n, it logs ``mpi_rank: MPI rank 1 (pid 12345) was ended by signal 9 (SIGKILL)``
and exits with code 128 + n; with ``-disable-auto-cleanup`` hydra then leaves the other ranks
running, and the MPI engine (:mod:`tensorpack_lite.graph_builder.mpi_ops`) of a rank that
waits for the dead one names it and aborts the job (MPI_Abort ends every rank). Should
nobody end the job within ``--grace`` seconds (the rank died before the others started
waiting for it, e.g. in MPI_Init), this process dies of the same signal, and hydra ends the
job as it would have. Hydra's notice that a rank's connection closed (SIGUSR1 to the process
group of every rank) is ignored while the command runs; after its death it means the job is
ending (the ranks that named it aborted), and this process exits at once. A rank that
names a dead one writes to the pipe in ``$TENSORPACK_MPI_RANK_FD`` before MPI_Abort: if it
then dies of a signal (MPI_Abort may crash while its threads run), this process exits at once
too. SIGINT (Ctrl-C, which hydra sends to every process group) is left to the command.

No TensorFlow is imported here.
"""

import argparse
import os
import signal
import sys
import time

from ..utils.mpi_launcher import mpi_rank

__all__ = ['run_rank', 'main', 'ABORT_FD_VARIABLE']

DEFAULT_GRACE = 10.0
ABORT_FD_VARIABLE = 'TENSORPACK_MPI_RANK_FD'


def _wait(pid):
    while True:
        try:
            return os.waitpid(pid, 0)[1]
        except InterruptedError:
            continue


def _die_of(number):
    """End this process with signal ``number`` (SIGKILL if that does not end it)."""
    if number != signal.SIGKILL:
        signal.signal(number, signal.SIG_DFL)
    os.kill(os.getpid(), number)
    time.sleep(1)
    os.kill(os.getpid(), signal.SIGKILL)


def run_rank(command, grace=DEFAULT_GRACE):
    """Run ``command`` (a list) as a child and return its exit code. When signal n ended it,
    log that (with the rank its launcher gave, :func:`~tensorpack_lite.utils.mpi_launcher.mpi_rank`,
    and the pid) and, unless the rank was aborting the job (it says so on the pipe in
    ``$TENSORPACK_MPI_RANK_FD`` first), wait: when another rank ends within ``grace`` seconds,
    return 128 + n, else die of signal n (no return then)."""
    passed_on = (signal.SIGUSR1, signal.SIGINT)   # hydra signals the process group: the command gets them
    for number in passed_on:
        signal.signal(number, signal.SIG_IGN)
    said, says = os.pipe()
    pid = os.fork()
    if pid == 0:   # the rank: default signals, then the command
        try:
            os.close(said)
            for number in passed_on:
                signal.signal(number, signal.SIG_DFL)
            os.set_inheritable(says, True)
            os.environ[ABORT_FD_VARIABLE] = str(says)
            os.execvp(command[0], command)
        except OSError as err:
            os.write(2, "mpi_rank: cannot run {}: {}\n".format(command[0], err).encode())
        os._exit(127)
    os.close(says)
    status = _wait(pid)
    if not os.WIFSIGNALED(status):
        return os.WEXITSTATUS(status)
    number = os.WTERMSIG(status)
    signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGUSR1])   # from now on kept pending, not lost
    signal.signal(signal.SIGUSR1, signal.SIG_DFL)
    os.set_blocking(said, False)
    try:
        aborting = bool(os.read(said, 64))
    except BlockingIOError:
        aborting = False
    sys.stderr.write("mpi_rank: MPI rank {} (pid {}) was ended by signal {} ({}){}\n".format(
        mpi_rank() or '?', pid, number, signal.Signals(number).name,
        ' while aborting the job' if aborting else ''))
    sys.stderr.flush()
    if aborting or _another_rank_ends(grace):
        return 128 + number
    _die_of(number)


def _another_rank_ends(grace):
    """Wait up to ``grace`` seconds for hydra's SIGUSR1 (blocked by the caller), which it sends
    when another rank's connection closes (the rank that named this one aborted the job);
    True if it came."""
    return signal.sigtimedwait([signal.SIGUSR1], max(grace, 0)) is not None


def main(argv=None):
    """``python -m tensorpack_lite.cluster.mpi_rank -- command ...``: :func:`run_rank` from the
    command line; returns the exit code."""
    parser = argparse.ArgumentParser(
        prog='python -m tensorpack_lite.cluster.mpi_rank',
        description="Run one MPI rank's command; see the module's documentation.")
    parser.add_argument('--grace', type=float, default=DEFAULT_GRACE,
                        help='seconds the other ranks get to name a rank that a signal ended and '
                             'abort the job, before this process dies of that signal (default: '
                             '%(default)s)')
    parser.add_argument('command', nargs=argparse.REMAINDER, help='the rank: COMMAND [ARGS...]')
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ['--'] else args.command
    if not command:
        parser.error('no command given')
    return run_rank(command, args.grace)


if __name__ == '__main__':
    sys.exit(main())
