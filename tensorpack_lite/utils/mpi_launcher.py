"""What an MPI launcher (``mpiexec``, ``mpirun``, ``mpirun_rsh``) tells each process it starts:
its rank and the number of processes, in environment variables that differ between MPI
implementations. The one table of them (:data:`MPI_LAUNCHERS`), for the cluster's sources, the
MPI engine, the MPI rank wrapper and the progress bars."""

import os

__all__ = ['MPI_LAUNCHERS', 'mpi_rank_and_size', 'mpi_rank']

MPI_LAUNCHERS = (
    ('PMI_RANK', 'PMI_SIZE', "a PMI launcher (mpiexec)"),                      # MPICH's, Intel MPI's (Hydra)
    ('OMPI_COMM_WORLD_RANK', 'OMPI_COMM_WORLD_SIZE', "Open MPI's launcher"),    # mpirun
    ('MV2_COMM_WORLD_RANK', 'MV2_COMM_WORLD_SIZE', "MVAPICH's launcher"),       # mpirun_rsh
)
"""``(rank variable, size variable, launcher)`` of every MPI launcher known, in the order they
are asked."""


def mpi_rank_and_size(environ=None):
    """``(rank, size, 'VARIABLE_RANK')`` from an MPI launcher's environment, or None when no
    launcher started this process."""
    environ = os.environ if environ is None else environ
    for rank_name, size_name, _ in MPI_LAUNCHERS:
        rank, size = environ.get(rank_name, ''), environ.get(size_name, '')
        if rank.isdigit() and size.isdigit():
            return int(rank), int(size), rank_name
    return None


def mpi_rank(environ=None):
    """The rank an MPI launcher gave this process, as its variable says it (a str), or None."""
    environ = os.environ if environ is None else environ
    for rank_name, _, _ in MPI_LAUNCHERS:
        if environ.get(rank_name):
            return environ[rank_name]
    return None
