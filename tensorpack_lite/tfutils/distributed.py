"""The session of a worker of a distributed job, on its ``tf.compat.v1.train.Server``
(tensorpack's module): the cluster a server belongs to, and a session creator that waits for the
cluster and initializes what this worker must. The rest of the multi-process runtime (the
server itself, :func:`~tensorpack_lite.multiprocess.server.create_server`, the parameter servers'
serving, the workers' finish barrier) is in :mod:`tensorpack_lite.multiprocess.server`.

Example::

    creator = get_distributed_session_creator(server)   # server: create_server()
    sess = creator.create_session()
"""

import copy
import time

from ..cluster.config import ClusterConfig, LostTaskError
from ..compat import tf, tfv1
from ..utils import logger

__all__ = ['cluster_of_server', 'server_session_config', 'DistributedSessionCreator',
           'get_distributed_session_creator']


def cluster_of_server(server):
    """The :class:`ClusterConfig` (cluster and task) of a ``tf.compat.v1.train.Server``."""
    if not isinstance(server, tfv1.train.Server):
        raise TypeError("Expected a tf.compat.v1.train.Server (see create_server()), got {!r}".format(server))
    server_def = server.server_def
    cluster = {job.name: [job.tasks[i] for i in sorted(job.tasks)] for job in server_def.cluster.job}
    return ClusterConfig(cluster, server_def.job_name, server_def.task_index)


def server_session_config(server, device_filters, config=None):
    """A copy of ``config`` (default: the server's session config) that uses the devices of the
    tasks ``device_filters`` only."""
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
        self.config = server_session_config(server, filters, config)
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
