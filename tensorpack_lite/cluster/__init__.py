"""Processes and clusters: where a task's cluster comes from and how a job's processes are
started, isolated and stopped. No TensorFlow is imported here.

- :mod:`~tensorpack_lite.cluster.config`: :class:`ClusterConfig` (TF_CONFIG, tasks, who answers).
- :mod:`~tensorpack_lite.cluster.source`: ``find_cluster()``, this process's cluster from
  ``hosts=``, a Ray task, TF_CONFIG, a Slurm job step or an MPI launcher, naming which.
- :mod:`~tensorpack_lite.cluster.slurm`: the cluster of a Slurm job step.
- :mod:`~tensorpack_lite.cluster.supervisor`: the one job supervisor (attempts, restarts, signals,
  the timeout, exit codes) that the launchers below drive.
- :mod:`~tensorpack_lite.cluster.ray`: ``launch_on_ray()``, a job's tasks as Ray actors (restarts
  through Ray, elastic resizes), each given its cluster; Ray is imported only when a job starts.
- :mod:`~tensorpack_lite.cluster.resize`: an engine's request that the chief stop after the
  current epoch, so that the job starts again with more workers.
- :mod:`~tensorpack_lite.cluster.launch`: ``python -m tensorpack_lite.cluster.launch``, a local
  cluster of processes (restarts, elastic workers), in a private network
  (:mod:`~tensorpack_lite.cluster.private_network`, held by ``netns_holder.py``).
- :mod:`~tensorpack_lite.cluster.exposure`: what a process's servers expose; the public-address rule.
- :mod:`~tensorpack_lite.cluster.netns`: machines on one box (network namespaces on a bridge).
- :mod:`~tensorpack_lite.cluster.mpi_rank`: ``python -m tensorpack_lite.cluster.mpi_rank``, one MPI rank
  under ``mpiexec`` whose death the others can name.
- :mod:`~tensorpack_lite.cluster.preemption`: SIGTERM as a stop after the current step.

The modules are imported by their full names (``from tensorpack_lite.cluster.launch import
LocalCluster``); importing this package imports none of them.
"""

__all__ = []
