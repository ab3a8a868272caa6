"""Where this process's cluster comes from: :func:`find_cluster` asks every source in a fixed
order and says which one it used.

1. ``hosts=`` given by the program: those addresses, workers first, then ``num_ps`` ps tasks;
   this process is ``rank`` (default: the rank its launcher gives, Slurm's or MPI's).
2. a task of a Ray job (``$TENSORPACK_LITE_RAY_TASK``, set by
   :func:`~tensorpack_lite.cluster.ray.launch_on_ray`): before the others, which a Ray node's
   environment may hold for another purpose (a Ray cluster inside a Slurm allocation).
3. ``TF_CONFIG`` (cluster managers and :mod:`~tensorpack_lite.cluster.launch` set it).
4. a Slurm job step (``srun``; :mod:`~tensorpack_lite.cluster.slurm`).
5. an MPI launcher's environment (``mpiexec``): the rank and size from its variables
   (:data:`~tensorpack_lite.utils.mpi_launcher.MPI_LAUNCHERS`); every rank picks a free port on
   its host and the ranks exchange ``host:port`` once through mpi4py (extra ``[mpi]``).

The first that applies wins; none is a ValueError saying what to set. The returned
:class:`~tensorpack_lite.cluster.config.ClusterConfig` names its source (``.source``) and one
log line says it::

    cluster = find_cluster()     # e.g. "[cluster] worker 1 of 4, from Slurm job step 41.0"
    server = create_server(cluster)
"""

import os
import socket

from ..utils import logger
from ..utils.argtools import is_int
from ..utils.mpi_launcher import MPI_LAUNCHERS, mpi_rank_and_size
from .config import ClusterConfig, cluster_of_rank, held_free_port
from .ray import RAY_TASK_VARIABLE, ray_task_cluster
from .slurm import NUM_PS_VARIABLE, in_slurm_step, slurm_cluster

__all__ = ['find_cluster', 'mpi_rank_and_size', 'DEFAULT_PORT']

DEFAULT_PORT = 2222
"""The port of a ``hosts=`` entry given without one (TensorFlow's customary port)."""

_ADDRESS_BYTES = 272   # a host name (at most 255 bytes), ':' and a port, zero-padded


def find_cluster(hosts=None, rank=None, num_ps=None, environ=None):
    """This process's cluster and task, from the first source that applies (see the module's doc).

    Args:
        hosts (list[str]): ``'host:port'`` (or ``'host'``, port :data:`DEFAULT_PORT`) of every
            task, workers first; None to read the environment.
        rank (int): this process's index in ``hosts``; default the launcher's rank.
        num_ps (int): how many of the last tasks are parameter servers (``hosts=``, Slurm, MPI);
            default ``$TENSORPACK_SLURM_NUM_PS`` or 0.
        environ (dict): default ``os.environ``.

    Returns:
        ClusterConfig: with :attr:`~tensorpack_lite.cluster.config.ClusterConfig.source` set.
    """
    environ = os.environ if environ is None else environ
    if num_ps is None:
        num_ps = int(environ.get(NUM_PS_VARIABLE) or 0)
    if hosts is not None:
        cluster = _from_hosts(hosts, rank, num_ps, environ)
    elif environ.get(RAY_TASK_VARIABLE):
        cluster = ray_task_cluster(environ)
    elif environ.get('TF_CONFIG'):
        cluster = ClusterConfig.from_tf_config(environ['TF_CONFIG'])
    elif in_slurm_step(environ):
        cluster = slurm_cluster(environ, num_ps=num_ps)
    elif mpi_rank_and_size(environ) is not None:
        cluster = _from_mpi(num_ps, environ)
    else:
        raise ValueError(
            "No cluster: none of its sources applies. Give hosts= (every task's 'host:port'), set "
            "TF_CONFIG for every task (python -m tensorpack_lite.cluster.launch does), start the tasks "
            "with launch_on_ray (tensorpack_lite.cluster.ray), with srun (Slurm) or with mpiexec (MPI: "
            "{})".format(
                ', '.join(rank for rank, _, _ in MPI_LAUNCHERS)))
    logger.info("[cluster] {} of {} task(s), from {}.".format(
        cluster.describe(cluster.job_name, cluster.task_index), len(cluster.tasks()), cluster.source))
    return cluster


def _check_num_ps(num_ps, num_tasks):
    if not 0 <= num_ps < num_tasks:
        raise ValueError("find_cluster: {} parameter-server task(s) leave no worker among {} task(s)".format(
            num_ps, num_tasks))


def _from_hosts(hosts, rank, num_ps, environ):
    if isinstance(hosts, str) or not hosts:
        raise ValueError("find_cluster: hosts= must be a non-empty list of 'host:port', got {!r}".format(
            hosts))
    addresses = [h if ':' in str(h).lstrip('[').split(']')[-1] else '{}:{}'.format(h, DEFAULT_PORT)
                 for h in hosts]
    if rank is None:
        rank = _launcher_rank(environ, len(addresses))
    if not is_int(rank) or not 0 <= rank < len(addresses):
        raise ValueError("find_cluster: rank {!r} is not an index of the {} hosts".format(
            rank, len(addresses)))
    _check_num_ps(num_ps, len(addresses))
    return cluster_of_rank(addresses, num_ps, rank, source='hosts=')


def _launcher_rank(environ, num_hosts):
    if in_slurm_step(environ):
        return int(environ['SLURM_PROCID'])
    found = mpi_rank_and_size(environ)
    if found is None:
        raise ValueError("find_cluster: hosts= given without rank=, and no launcher (srun, mpiexec) says "
                         "which of the {} hosts this process is".format(num_hosts))
    rank, size, name = found
    if size != num_hosts:
        raise ValueError("find_cluster: {} hosts given, but the MPI launcher started {} processes "
                         "({})".format(num_hosts, size, name.replace('RANK', 'SIZE')))
    return rank


def _from_mpi(num_ps, environ):
    """Every rank's ``host:port``, exchanged once through MPI (fixed-size bytes, no pickling)."""
    rank, size, name = mpi_rank_and_size(environ)
    try:
        import numpy as np
        from mpi4py import MPI
    except ImportError as err:
        raise ImportError("find_cluster: {} says an MPI launcher started this process; reading the other "
                          "ranks' addresses needs mpi4py: pip install \"tensorpack_lite[mpi]\", or give "
                          "hosts= ({})".format(name, err)) from err
    world = MPI.COMM_WORLD
    if (world.Get_rank(), world.Get_size()) != (rank, size):
        raise RuntimeError("find_cluster: {}={} of {}, but mpi4py sees rank {} of {}: this mpi4py is built "
                           "against another MPI; use that MPI's mpiexec".format(
                               name, rank, size, world.Get_rank(), world.Get_size()))
    # the port stays bound until every rank has its own, so two ranks on one host never pick the same
    with held_free_port() as port:
        mine = '{}:{}'.format(socket.gethostname(), port).encode()
        if len(mine) > _ADDRESS_BYTES:
            raise ValueError("find_cluster: the host name of rank {} is too long: {!r}".format(rank, mine))
        send = np.zeros(_ADDRESS_BYTES, np.uint8)
        send[:len(mine)] = np.frombuffer(mine, np.uint8)
        gathered = np.zeros((size, _ADDRESS_BYTES), np.uint8)
        world.Allgather(send, gathered)
    addresses = [bytes(row).rstrip(b'\0').decode() for row in gathered]
    _check_num_ps(num_ps, size)
    return cluster_of_rank(addresses, num_ps, rank, source='MPI ({} {} of {})'.format(name, rank, size))
