"""TensorFlow's distributed runtime for multi-process training: the gRPC server of a task
(built from ``TF_CONFIG`` or from explicit arguments), what a parameter-server task does while
the workers train, and the barrier at which the workers end together. A worker's session is
created by :mod:`tensorpack_lite.tfutils.distributed` (tensorpack's module), re-exported here.

Example (every process runs the same script; ``TF_CONFIG`` says which task it is)::

    server = create_server()          # or create_server({'worker': [...], 'ps': [...]}, 'worker', 0)
    trainer = DistributedTrainerReplicated(['/gpu:0'], server)   # on a ps task: serves, then exits
"""

import copy
import socket
import time

import numpy as np

from ..cluster import exposure
from ..cluster.config import ClusterConfig, LostTaskError
from ..cluster.source import find_cluster
from ..compat import tf, tfv1
from ..tfutils.common import get_default_sess_config
from ..tfutils.distributed import (  # re-exported: a worker's session, tensorpack's module
    DistributedSessionCreator, cluster_of_server, get_distributed_session_creator, server_session_config)
from ..utils import logger
from ..utils.concurrency import run_with_timeout
from ..utils.cpu import usable_cpus
from ..utils.gpu import num_tensorflow_gpus
from .stop_vote import PREEMPTED, REQUESTED

__all__ = ['create_server', 'cluster_of_server', 'DistributedSessionCreator',
           'get_distributed_session_creator', 'build_worker_done_op', 'serve_until_workers_finish',
           'FinishBarrier']

COLLECTIVE_GROUP_LEADER = '/job:worker/replica:0/task:0'
"""The task that coordinates collective ops: the chief."""


def _check_port_free(cluster):
    host, port = cluster.address(cluster.job_name, cluster.task_index).rsplit(':', 1)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # only a listening socket takes the port: connections of a process that died (in
        # TIME_WAIT, or unacknowledged behind a cut link) hold it for minutes, and the server
        # (SO_REUSEADDR too) binds it all the same
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(('', int(port)))
        except OSError as err:
            raise ValueError("Cannot start the server of {}: port {} of this machine is taken ({}). Give "
                             "every task a free port (under Slurm: srun --resv-ports, see "
                             "docs/slurm.md).".format(
                                 cluster.describe(cluster.job_name, cluster.task_index), port, err)) from None


def _has_gpu(config):
    """Whether the server of ``config`` will have a GPU (one is visible and the config does
    not set its GPU count to 0)."""
    if config.device_count.get('GPU', None) == 0:
        return False
    return num_tensorflow_gpus() > 0


def create_server(cluster=None, job_name=None, task_index=None, config=None, trusted_network=None):
    """Start the ``tf.compat.v1.train.Server`` of this process's task.

    Args:
        cluster (dict or ClusterConfig): job name -> list of ``'host:port'`` (jobs
            ``'worker'`` and ``'ps'``). None: the cluster and the task of
            :func:`~tensorpack_lite.cluster.source.find_cluster`: ``TF_CONFIG``, else Slurm's
            job step (``srun``), else an MPI launcher's ranks (``mpiexec``); the log names
            which.
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
        trusted_network (bool): declare that only the job's own hosts can reach this machine
            (default: the ``TENSORPACK_LITE_TRUSTED_NETWORK`` environment variable). Without it,
            a machine with a public address refuses to start the server.

    The server listens on every interface and runs any graph for whoever connects. Before it
    starts, the log says where it is reachable (a warning naming the addresses and which are
    public), or that it runs inside a launcher's private network; on a machine with a public
    address it is a :class:`~tensorpack_lite.cluster.exposure.PublicAddressError` unless the
    network is declared trusted (docs/security.md).

    A bad cluster (see :class:`ClusterConfig`) or a port in use is a ValueError naming it.
    """
    if cluster is None:
        if job_name is not None or task_index is not None:
            raise ValueError("create_server: give job_name and task_index with an explicit cluster; without "
                             "one, TF_CONFIG (or Slurm, or MPI) tells them")
        cluster = find_cluster()
    elif not isinstance(cluster, ClusterConfig):
        cluster = ClusterConfig(cluster, job_name, task_index)
    config = copy.deepcopy(config) if config is not None else get_default_sess_config()
    if not isinstance(config, tfv1.ConfigProto):
        raise TypeError("create_server: config must be a tf.compat.v1.ConfigProto, got {!r}".format(config))
    config.experimental.collective_group_leader = COLLECTIVE_GROUP_LEADER
    if _has_gpu(config):
        config.experimental.collective_nccl = True
    if not config.inter_op_parallelism_threads:
        config.inter_op_parallelism_threads = usable_cpus()
    _check_port_free(cluster)
    _check_exposure(cluster, trusted_network)
    try:
        server = tfv1.train.Server(tfv1.train.ClusterSpec(cluster.cluster), job_name=cluster.job_name,
                                   task_index=cluster.task_index, config=config, start=True)
    except tf.errors.OpError as err:
        raise RuntimeError("Cannot start the server of {}: {}".format(
            cluster.describe(cluster.job_name, cluster.task_index), err.message)) from err
    logger.info("Started the server of {} in the cluster {} (from {}).".format(
        cluster.describe(cluster.job_name, cluster.task_index), cluster.cluster, cluster.source))
    return server


def _check_exposure(cluster, trusted_network):
    """Say where the task's server will be reachable; refuse a public address unless trusted."""
    interfaces = exposure.interface_addresses()
    hosts = sorted({cluster.host(job, index) for job, index in cluster.tasks()})
    port = cluster.address(cluster.job_name, cluster.task_index).rsplit(':', 1)[1]
    exposure.check_server_exposure(cluster.describe(cluster.job_name, cluster.task_index), port,
                                   trusted=trusted_network,
                                   spans_hosts=hosts if exposure.remote_hosts(hosts, interfaces) else None,
                                   interfaces=interfaces)


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
    config = server_session_config(server, [cluster.task_name])
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


# ----- the workers end together -------------------------------------------------------------------

class FinishBarrier:
    """Where the workers agree on the step after which they stop early, and meet when training
    has ended, so that none leaves while another is still training: a peer that leaves early
    looks lost to one still in its last step (its server stops answering), which would fail a
    run that finished.

    The meeting point is a vector on the chief, one entry per worker: each worker marks itself
    arrived, waits until every worker has, then marks itself leaving and may exit. The chief
    exits last, once every other worker is leaving (or gone), so the others' last reads of the
    vector always find it.

    The stop step is a number on the chief, first "never": a worker that must stop early (it
    received SIGTERM, or training asked to stop: ``Trainer.request_stop``) proposes one
    (:meth:`propose_stop`) and the smallest proposal stands; why is kept beside it (a SIGTERM
    wins over a request). The
    workers of a synchronous trainer run their steps in lock-step (no worker finishes step
    ``k + 1`` before every worker has begun it), so a worker that proposes, after its step
    ``k``, to stop after step ``k + 2`` is heard by every other worker in time: each reads the
    stop step (:meth:`stop_step`) after each step and stops once it has run that many steps.

    Args:
        server (tf.compat.v1.train.Server): this worker's server.
        timeout (float): seconds to wait for the other workers to arrive: then a
            :class:`LostTaskError` names those that did not.
        lost_after (float): a worker not arrived that has not accepted connections for this
            many seconds is lost (a :class:`LostTaskError` naming it), without waiting longer.
        leave_timeout (float): seconds the chief waits for the others to mark themselves leaving
            (a warning names those that did not; training is done then).

    Example (what the distributed trainers do)::

        barrier = FinishBarrier(server)
        barrier.connect()        # on every worker, once the cluster is up
        barrier.prepare()        # on the chief (the others wait for it if they get there first)
        ...                      # training; on SIGTERM: barrier.propose_stop(global_step + 2)
        barrier.finish()         # on every worker that ran the whole schedule or stopped early together
    """

    ARRIVED, LEAVING = 1, 2
    NEVER = np.iinfo(np.int64).max
    """The stop step while no worker proposed one."""

    MIN_CALL_TIMEOUT = 10.0
    """The least seconds one call to the chief may take before the chief counts as lost
    (``lost_after`` when larger)."""
    _WHY_CODES = {REQUESTED: 1, PREEMPTED: 2}    # the largest proposed stands

    def __init__(self, server, timeout=600.0, lost_after=5.0, leave_timeout=30.0, interval=0.2):
        self.cluster = cluster_of_server(server)
        if self.cluster.job_name != 'worker':
            raise ValueError("FinishBarrier is for workers, not {}".format(self.cluster.task_name))
        self.timeout, self.lost_after = float(timeout), float(lost_after)
        self.leave_timeout, self.interval = float(leave_timeout), float(interval)
        self._chief_timeout = max(self.lost_after, self.MIN_CALL_TIMEOUT)    # for one call to the chief
        self._server = server
        self._graph = tf.Graph()
        with self._graph.as_default(), tf.device(COLLECTIVE_GROUP_LEADER + '/device:CPU:0'):
            state = tfv1.Variable(tf.zeros([self.cluster.num_worker], tf.int32), trainable=False,
                                  collections=[], use_resource=False, name='tensorpack_lite_finish_barrier')
            stop = tfv1.Variable(tf.constant([self.NEVER], tf.int64), trainable=False, collections=[],
                                 use_resource=False, name='tensorpack_lite_stop_step')
            why = tfv1.Variable(tf.constant([0], tf.int64), trainable=False, collections=[],
                                use_resource=False, name='tensorpack_lite_stop_why')
            self._index = tfv1.placeholder(tf.int32, [], name='index')
            self._mark = tfv1.placeholder(tf.int32, [], name='mark')
            self._proposal = tfv1.placeholder(tf.int64, [], name='proposal')
            self._why = tfv1.placeholder(tf.int64, [], name='why')
            self._init = tf.group(state.initializer, stop.initializer, why.initializer)
            self._set = tfv1.scatter_update(state, [self._index], [self._mark]).op
            self._propose = tf.group(tfv1.scatter_min(stop, [0], [self._proposal], use_locking=True),
                                     tfv1.scatter_max(why, [0], [self._why], use_locking=True))
            self._read = tf.identity(state)
            self._read_stop = tf.identity(stop)[0]
            self._read_agreed = [tf.identity(stop)[0], tf.identity(why)[0]]
            self._ping = tf.no_op()
        self._sess = None

    def connect(self):
        """Open the session to the chief (every worker, while the cluster is known to be up:
        TensorFlow's first run of a session waits for ever for a task that is gone, a later
        run's timeout holds). A chief that does not answer within ``lost_after`` seconds
        (at least 10) is a :class:`LostTaskError`."""
        if self._sess is not None:
            return
        filters = sorted({self.cluster.task_name, COLLECTIVE_GROUP_LEADER.replace('/replica:0', '')})
        sess = tfv1.Session(self._server.target, graph=self._graph,
                            config=server_session_config(self._server, filters))
        try:    # a run still waiting for the chief is left behind
            answered = run_with_timeout(lambda: sess.run(self._ping), self._chief_timeout,
                                        'FinishBarrier.connect')
        except tf.errors.OpError as err:
            raise self.cluster.lost_task_error([('worker', 0)], err) from err
        if not answered:
            raise self.cluster.lost_task_error([('worker', 0)])
        self._sess = sess

    def _run(self, fetch, feed_dict=None):
        """Run ``fetch`` on the chief; a failure to reach it is a LostTaskError naming it. Before
        the chief has made the meeting point (:meth:`prepare`), wait for it (``timeout``)."""
        self.connect()
        options = tfv1.RunOptions(timeout_in_ms=int(self._chief_timeout * 1000))
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                return self._sess.run(fetch, feed_dict=feed_dict, options=options)
            except tf.errors.FailedPreconditionError as err:     # not prepared yet
                if time.monotonic() >= deadline:
                    raise self.cluster.lost_task_error([('worker', 0)], err) from err
                time.sleep(self.interval)
            except tf.errors.OpError as err:
                raise self.cluster.lost_task_error([('worker', 0)], err) from err

    def prepare(self):
        """On the chief: make the meeting point (every worker not arrived)."""
        if not self.cluster.is_chief:
            raise ValueError("FinishBarrier.prepare() is the chief's, not {}'s".format(
                self._names([self.cluster.task_index])))
        self._run(self._init)

    def state(self):
        """The meeting point now: per worker, 0 (not arrived), :attr:`ARRIVED` or :attr:`LEAVING`."""
        return self._run(self._read)

    def propose_stop(self, step, why=PREEMPTED):
        """Propose that every worker stop once it has run ``step`` steps (global step), because
        of ``why`` (:data:`PREEMPTED` or :data:`REQUESTED`); the smallest proposal stands. A worker
        proposes ``k + 2`` after its step ``k``."""
        self._run(self._propose, {self._proposal: int(step), self._why: self._WHY_CODES[why]})

    def stop_step(self):
        """The global step after which every worker stops, :attr:`NEVER` while none was proposed."""
        return int(self._run(self._read_stop))

    def agreed_stop(self):
        """``(stop step, why)``: :meth:`stop_step`, and :data:`PREEMPTED` when a worker proposed
        because of SIGTERM, else :data:`REQUESTED` (None while none was proposed)."""
        step, code = self._run(self._read_agreed)
        why = {code_: why_ for why_, code_ in self._WHY_CODES.items()}.get(int(code))
        return int(step), why

    def _mark_self(self, mark):
        self._run(self._set, {self._index: self.cluster.task_index, self._mark: mark})

    def _wait(self, missing_of, timeout, waiting_to=None):
        """Poll the vector until ``missing_of(state)`` (worker indices) is empty, ``timeout``
        seconds have passed or, with ``waiting_to`` (what the missing are waited for, logged
        once), one of them is lost. Returns (missing, lost): a worker lost has accepted no
        connection for ``lost_after`` seconds; without ``waiting_to`` it counts as gone and the
        others are still waited for."""
        deadline = time.monotonic() + timeout
        unreachable_since, lost, announced = {}, [], False
        while True:
            missing = [i for i in missing_of(self.state()) if i not in lost]
            now = time.monotonic()
            if not missing or now >= deadline:
                return missing, lost
            if waiting_to is not None and not announced:
                logger.info("{} waits for {} to {}.".format(self._names([self.cluster.task_index]),
                                                            self._names(missing),
                                                            waiting_to))
                announced = True
            gone = [i for _, i in self.cluster.unreachable([('worker', i) for i in missing], timeout=1.0)]
            unreachable_since = {i: unreachable_since.get(i, now) for i in gone}
            lost += [i for i in gone if now - unreachable_since[i] >= self.lost_after]
            if lost and waiting_to is not None:
                return missing, lost
            time.sleep(self.interval)

    def _names(self, indices):
        return ', '.join(self.cluster.describe('worker', i) for i in indices)

    def finish(self):
        """Arrive, wait for every worker to arrive (bounded by ``timeout``), then leave (the chief
        after every other worker). Raises :class:`LostTaskError` naming the workers that did not
        arrive."""
        self._mark_self(self.ARRIVED)
        missing, lost = self._wait(lambda state: [i for i, s in enumerate(state) if s < self.ARRIVED],
                                   self.timeout, 'finish training')
        if lost:
            raise self.cluster.lost_task_error([('worker', i) for i in lost])
        if missing:
            raise LostTaskError("{}: training ended here, but {} did not finish within {:g} s".format(
                self._names([self.cluster.task_index]), self._names(missing), self.timeout))
        if not self.cluster.is_chief:
            self._mark_self(self.LEAVING)
            return
        late, _ = self._wait(lambda state: [i for i, s in enumerate(state) if i > 0 and s < self.LEAVING],
                             self.leave_timeout)
        if late:
            logger.warn("{}: {} finished training but did not leave within {:g} s; the chief ends "
                        "anyway.".format(self._names([0]), self._names(late), self.leave_timeout))
        logger.info("{}: every worker finished training.".format(self._names([0])))

    def close(self):
        """Close the session to the chief."""
        if self._sess is not None:
            self._sess.close()
            self._sess = None
