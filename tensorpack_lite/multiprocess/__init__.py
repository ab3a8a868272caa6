"""The multi-process runtime: what the processes of one training job build and run together,
on TensorFlow's distributed runtime, below the layers, builders and trainers that use it.

- :mod:`~tensorpack_lite.multiprocess.server`: the gRPC server of this process's task
  (:func:`create_server`, its cluster from ``TF_CONFIG``, Slurm or an MPI launcher), what a
  parameter server does until the workers finish, and the barrier at which the workers end
  together (:class:`FinishBarrier`); it re-exports the worker's session creator of
  :mod:`tensorpack_lite.tfutils.distributed`.
- :mod:`~tensorpack_lite.multiprocess.collective`: TensorFlow's collective ops, built in one
  place: the groups, their keys, the reductions and a differentiable mean.
- :mod:`~tensorpack_lite.multiprocess.stop_vote`: the vote to stop (SIGTERM, a requested stop)
  that a step's all-reduce carries, so that every process stops after the same step.
- :mod:`~tensorpack_lite.multiprocess.sync_statistics`: the mean over the ranks that a trainer
  hands the layers while it builds its towers (``BatchNorm(sync_statistics=...)``).

Example (every process runs the same script; ``TF_CONFIG`` says which task it is)::

    from tensorpack_lite.multiprocess import create_server
    trainer = CollectiveAllReduceTrainer(['/cpu:0'], create_server())
"""

from . import collective, server, stop_vote, sync_statistics
from .server import (DistributedSessionCreator, FinishBarrier, build_worker_done_op, cluster_of_server,
                     create_server, get_distributed_session_creator, serve_until_workers_finish)

__all__ = ['create_server', 'cluster_of_server', 'DistributedSessionCreator',
           'get_distributed_session_creator', 'build_worker_done_op', 'serve_until_workers_finish',
           'FinishBarrier',
           'collective', 'server', 'stop_vote', 'sync_statistics']
