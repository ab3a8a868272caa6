"""TensorFlow's distributed runtime for multi-process training: the gRPC server of a task
(built from ``TF_CONFIG`` or from explicit arguments), the session creator of a worker, and
what a parameter-server task does while the workers train.

Example (every process runs the same script; ``TF_CONFIG`` says which task it is)::

    server = create_server()          # or create_server({'worker': [...], 'ps': [...]}, 'worker', 0)
    trainer = DistributedTrainerReplicated(['/gpu:0'], server)   # on a ps task: serves, then exits
"""

import copy
import os
import socket
import time

from ..compat import tf, tfv1
from ..utils import logger
from ..utils.cluster import ClusterConfig, LostTaskError
from ..utils.gpu import num_tensorflow_gpus
from .common import get_default_sess_config

__all__ = ['create_server', 'cluster_of_server', 'DistributedSessionCreator',
           'get_distributed_session_creator', 'build_worker_done_op', 'serve_until_workers_finish']

COLLECTIVE_GROUP_LEADER = '/job:worker/replica:0/task:0'
"""The task that coordinates collective ops: the chief."""


def _check_port_free(cluster):
    host, port = cluster.address(cluster.job_name, cluster.task_index).rsplit(':', 1)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(('', int(port)))
        except OSError as err:
            raise ValueError("Cannot start the server of {}: port {} of this machine is taken ({}). Give "
                             "every task a free port.".format(
                                 cluster.describe(cluster.job_name, cluster.task_index), port, err)) from None


def _usable_cpus():
    return len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else (os.cpu_count() or 1)


def _has_gpu(config):
    """Whether the server of ``config`` will have a GPU (one is visible and the config does
    not set its GPU count to 0)."""
    if config.device_count.get('GPU', None) == 0:
        return False
    return num_tensorflow_gpus() > 0


def create_server(cluster=None, job_name=None, task_index=None, config=None):
    """Start the ``tf.compat.v1.train.Server`` of this process's task.

    Args:
        cluster (dict or ClusterConfig): job name -> list of ``'host:port'`` (jobs
            ``'worker'`` and ``'ps'``). None: read the cluster and the task from the
            ``TF_CONFIG`` environment variable.
        job_name (str): this task's job, with an explicit ``cluster`` dict.
        task_index (int): this task's index, with an explicit ``cluster`` dict.
        config (tf.compat.v1.ConfigProto): the server's session config, which also sets its
            devices (e.g. ``device_count={'CPU': 2}`` for two virtual CPU devices). Default:
            :func:`get_default_sess_config`. The chief is made the collective group leader.
            When the process has a GPU, ``experimental.collective_nccl`` is set (collective
            ops on GPUs then go through NCCL even without a communication hint). Unless the
            config sets ``inter_op_parallelism_threads``, the server gets one inter-op thread
            per CPU this process may use (TensorFlow sizes that pool once per process, at the
            first server).

    A bad cluster (see :class:`ClusterConfig`) or a port in use is a ValueError naming it.
    """
    if cluster is None:
        if job_name is not None or task_index is not None:
            raise ValueError("create_server: give job_name and task_index with an explicit cluster; without "
                             "one, TF_CONFIG tells them")
        cluster = ClusterConfig.from_tf_config()
    elif not isinstance(cluster, ClusterConfig):
        cluster = ClusterConfig(cluster, job_name, task_index)
    config = copy.deepcopy(config) if config is not None else get_default_sess_config()
    if not isinstance(config, tfv1.ConfigProto):
        raise TypeError("create_server: config must be a tf.compat.v1.ConfigProto, got {!r}".format(config))
    config.experimental.collective_group_leader = COLLECTIVE_GROUP_LEADER
    if _has_gpu(config):
        config.experimental.collective_nccl = True
    if not config.inter_op_parallelism_threads:
        config.inter_op_parallelism_threads = _usable_cpus()
    _check_port_free(cluster)
    try:
        server = tfv1.train.Server(tfv1.train.ClusterSpec(cluster.cluster), job_name=cluster.job_name,
                                   task_index=cluster.task_index, config=config, start=True)
    except tf.errors.OpError as err:
        raise RuntimeError("Cannot start the server of {}: {}".format(
            cluster.describe(cluster.job_name, cluster.task_index), err.message)) from err
    logger.info("Started the server of {} in the cluster {}.".format(
        cluster.describe(cluster.job_name, cluster.task_index), cluster.cluster))
    return server


def cluster_of_server(server):
    """The :class:`ClusterConfig` (cluster and task) of a ``tf.compat.v1.train.Server``."""
    if not isinstance(server, tfv1.train.Server):
        raise TypeError("Expected a tf.compat.v1.train.Server (see create_server()), got {!r}".format(server))
    server_def = server.server_def
    cluster = {job.name: [job.tasks[i] for i in sorted(job.tasks)] for job in server_def.cluster.job}
    return ClusterConfig(cluster, server_def.job_name, server_def.task_index)


def _session_config(server, device_filters, config=None):
    config = copy.deepcopy(config if config is not None else server.server_def.default_session_config)
    del config.device_filters[:]
    config.device_filters.extend(device_filters)
    return config


def _on_task(variable, task_name):
    spec = tf.DeviceSpec.from_string(variable.op.device or '')
    if not spec.job:
        return True
    return '/job:{}/task:{}'.format(spec.job, spec.task or 0) == task_name


class DistributedSessionCreator(tfv1.train.SessionCreator):
    """Creates the session of a worker on its server, once every task of the cluster is up.

    The chief initializes every variable. Another worker initializes its local variables
    and the global ones on its own devices, then waits until the chief has initialized the
    shared ones (on the parameter servers).

    Args:
        server (tf.compat.v1.train.Server): this worker's server.
        config (tf.compat.v1.ConfigProto): default: the server's session config.
        startup_timeout (float): seconds to wait for every task of the cluster to start.
        ready_timeout (float): seconds a worker waits for the chief to initialize the shared
            variables.
        device_filters (list[str]): the tasks whose devices the session uses (default: the
            parameter servers and this worker).

    A task that does not start, or a chief that is lost before initializing, is a
    :class:`LostTaskError` naming it.
    """

    def __init__(self, server, config=None, startup_timeout=300.0, ready_timeout=300.0, device_filters=None):
        self.server = server
        self.cluster = cluster_of_server(server)
        if self.cluster.job_name != 'worker':
            raise ValueError("DistributedSessionCreator is for workers; {} is a parameter server".format(
                self.cluster.describe(self.cluster.job_name, self.cluster.task_index)))
        # By default a worker talks to the parameter servers and to no other worker (collective
        # ops find their peers through the group leader), so a missing peer cannot block its
        # session.
        filters = list(device_filters) if device_filters is not None else \
            (['/job:ps'] if self.cluster.num_ps else []) + [self.cluster.task_name]
        self.config = _session_config(server, filters, config)
        self.startup_timeout = float(startup_timeout)
        self.ready_timeout = float(ready_timeout)

    def create_session(self):
        logger.info("Waiting for every task of the cluster to start ...")
        self.cluster.wait_until_reachable(timeout=self.startup_timeout)
        sess = tfv1.Session(target=self.server.target, config=self.config)
        variables = tfv1.global_variables()
        with sess.graph.as_default():
            local_init = tfv1.group(tfv1.local_variables_initializer(), tfv1.tables_initializer())
            if self.cluster.is_chief:
                sess.run(tfv1.group(tfv1.global_variables_initializer(), local_init))
            else:
                own = [v for v in variables if _on_task(v, self.cluster.task_name)]
                sess.run(tfv1.group(tfv1.variables_initializer(own), local_init))
                shared = [v for v in variables if not _on_task(v, self.cluster.task_name)]
                self._wait_for_chief(sess, shared)
        logger.info("Session created and variables initialized on {}.".format(self.cluster.task_name))
        return sess

    def _wait_for_chief(self, sess, shared):
        if not shared:
            return
        uninitialized = tfv1.report_uninitialized_variables(shared)
        deadline = time.monotonic() + self.ready_timeout
        while True:
            names = sess.run(uninitialized)
            if not len(names):
                return
            if not self.cluster.is_reachable('worker', 0):
                raise self.cluster.lost_task_error([('worker', 0)])
            if time.monotonic() > deadline:
                raise LostTaskError("{}: the chief did not initialize the shared variables within {:g} s "
                                    "(still uninitialized: {})".format(
                                        self.cluster.task_name, self.ready_timeout,
                                        ', '.join(n.decode() for n in names[:5])))
            time.sleep(0.2)


def get_distributed_session_creator(server):
    """tensorpack's name: a :class:`DistributedSessionCreator` for ``server``."""
    return DistributedSessionCreator(server)


# ----- parameter servers wait for the workers -------------------------------------------------------

def _done_queue(ps_index, num_worker):
    """The queue on ps task ``ps_index`` where every worker leaves a token when it finishes."""
    with tf.device('/job:ps/task:{}/device:CPU:0'.format(ps_index)):
        return tfv1.FIFOQueue(num_worker, [tf.int32], shapes=[[]], name='workers_done_{}'.format(ps_index),
                              shared_name='tensorpack_lite/workers_done_{}'.format(ps_index))


def build_worker_done_op(cluster):
    """The op a worker runs when it finishes, telling every parameter server (None without ps)."""
    if not cluster.num_ps:
        return None
    with tf.name_scope('worker_done'):
        return tf.group(*[_done_queue(i, cluster.num_worker).enqueue([cluster.task_index])
                          for i in range(cluster.num_ps)])


def serve_until_workers_finish(server, startup_timeout=300.0, lost_after=5.0, interval=0.5):
    """What a parameter server does: serve the variables until every worker has finished
    (each runs the op of :func:`build_worker_done_op` at its end).

    Raises:
        LostTaskError: when no worker started within ``startup_timeout`` seconds, or when
            no worker has answered for ``lost_after`` seconds before all finished.
    """
    cluster = cluster_of_server(server)
    if cluster.job_name != 'ps':
        raise ValueError("serve_until_workers_finish() is for parameter servers, not {}".format(
            cluster.task_name))
    graph = tf.Graph()
    with graph.as_default():
        size = _done_queue(cluster.task_index, cluster.num_worker).size()
    config = _session_config(server, [cluster.task_name])
    logger.info("{} serves until the {} workers finish.".format(cluster.task_name, cluster.num_worker))
    workers = cluster.tasks('worker')
    start = last_seen = time.monotonic()
    seen = False
    with tfv1.Session(server.target, graph=graph, config=config) as sess:
        while True:
            finished = sess.run(size)
            if finished >= cluster.num_worker:
                logger.info("{}: every worker finished.".format(cluster.task_name))
                return
            now = time.monotonic()
            if len(cluster.unreachable(workers, timeout=interval)) < len(workers):
                seen, last_seen = True, now
            elif seen and now - last_seen > lost_after:
                raise cluster.lost_task_error(workers)
            elif not seen and now - start > startup_timeout:
                raise LostTaskError("{}: no worker started within {:g} s".format(cluster.task_name,
                                                                                 startup_timeout))
            time.sleep(interval)
