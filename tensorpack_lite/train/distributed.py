"""Synchronous training across processes and machines through TensorFlow's distributed
runtime (``tf.compat.v1.train.Server``, gRPC). Every process runs the same script; the
cluster and each process's task come from ``TF_CONFIG`` (see :func:`create_server` and the
launcher ``python -m tensorpack_lite.cluster.launch``).

* :class:`DistributedTrainerParameterServer` and :class:`DistributedTrainerReplicated`
  (tensorpack's): ``ps`` tasks hold the variables, ``worker`` tasks train, one tower per
  device; a ps task only serves.
* :class:`CollectiveAllReduceTrainer`: workers only; the gradients are all-reduced across
  them by TensorFlow's collective ops (a ring on CPUs, NCCL on GPUs): the TF-native
  counterpart of :class:`HorovodTrainer`.

Example (``python -m tensorpack_lite.cluster.launch --workers 2 -- python train.py``)::

    server = create_server()                 # from TF_CONFIG
    trainer = CollectiveAllReduceTrainer(['/cpu:0'], server)
    if trainer.is_chief:
        logger.set_logger_dir('train_log/run1', action='k')
    df = BatchData(RankShardData(my_dataflow, trainer.task_index, trainer.num_worker), 32)
    launch_train_with_config(AutoResumeTrainConfig(model=Model(), dataflow=df, ...), trainer)

Worker 0 is the chief: it alone runs chief-only callbacks, ``session_init`` and writes files
(logs, event files, ``stats.json``, checkpoints). The chief also decides the schedule: the
other workers take its global step, epochs and steps per epoch when training starts. A task
that never starts, or is lost during training, makes the others fail within seconds with a
:class:`LostTaskError` naming it; no step waits longer than :attr:`STEP_TIMEOUT`.
"""

import functools

from ..callbacks.graph import RunOp
from ..cluster.config import LostTaskError
from ..compat import tf, tfv1
from ..coordination.protocol import BroadcastEveryEpoch
from ..coordination.tf_runtime import TFRuntimeProtocol
from ..graph_builder.compression import check_compression
from ..graph_builder.distributed import (CollectiveAllReduceBuilder, DistributedParameterServerBuilder,
                                         DistributedReplicatedBuilder, check_exchange)
from ..loop.state import Schedule
from ..multiprocess.collective import cluster_group, collective_mean
from ..multiprocess.sync_statistics import cross_rank_mean_scope
from ..profiling.step_timeline import is_communication_op
from ..tfutils.common import get_global_step_var
from ..tfutils.dependency import ops_run_by
from ..utils import logger
from .multiprocess_trainer import MultiProcessTrainer
from .trainers import DataParallelTrainer

__all__ = ['DistributedTrainerBase', 'DistributedTrainerParameterServer', 'DistributedTrainerReplicated',
           'CollectiveAllReduceTrainer', 'LostTaskError']


class DistributedTrainerBase(MultiProcessTrainer, DataParallelTrainer):
    """What the distributed trainers share: the server, its cluster and the protocol of this
    task (:class:`~tensorpack_lite.coordination.tf_runtime.TFRuntimeProtocol`: waiting for the
    cluster, one schedule for all workers, failures that name the lost task, one stop, files
    written by the chief only); the subclasses build the graph.

    Args:
        gpus (int or list): this worker's towers: GPU ids or device strings such as
            ``['/cpu:0']``.
        server (tf.compat.v1.train.Server): this process's server (:func:`create_server`).
            On a ps task the trainer serves until the workers finish, then exits the process.

    Attributes:
        task_index (int), num_worker (int): this worker and the number of workers.
    """

    STARTUP_TIMEOUT = 300.0
    """Seconds to wait for every task of the cluster to start (and, on other workers, for
    the chief to initialize the shared variables)."""

    STEP_TIMEOUT = 600.0
    """Seconds a training step (or a start-up exchange) may take before it is an error."""

    PROBE_INTERVAL = 1.0
    """Seconds between two checks that the other tasks still accept connections (each check
    waits as long for the connection)."""

    PROBE_MISSES = 5
    """Checks in a row that a task may leave unanswered before it is lost (a task whose machine
    refuses the connection, its process gone, is lost at the first): a full link or a loaded
    machine can hold one connection for longer than ``PROBE_INTERVAL``."""

    CLOSE_TIMEOUT = 2.0
    """Seconds closing the session may take after training failed: closing a distributed
    session talks to every task, and one that is gone can hold it for ever."""

    FINISH_TIMEOUT = 600.0
    """Seconds a worker that ran its last step waits for the others to finish theirs (and their
    ``after_train``): then a :class:`LostTaskError` names those that did not (see
    :class:`~tensorpack_lite.multiprocess.server.FinishBarrier`). A worker that stops accepting
    connections meanwhile is named within seconds."""

    ABORT_TIMEOUT = 5.0
    """Seconds the parameter-server trainers' abort op may take when a task is lost; then the
    session is closed instead."""

    EXIT_AFTER_LOSS_TIMEOUT = 30.0
    """Seconds after a task is found lost within which training must have stopped: then the
    process exits with code 1."""

    LOSS_CONFIRM_TIMEOUT = 30.0
    """After a step fails with a connection error (a peer reset or unavailable), seconds to
    keep probing for the task that went away: a process being killed may still hold its
    listening port for a moment after its connections were reset."""

    def __init__(self, gpus, server):
        self.server = server
        self.protocol = TFRuntimeProtocol(self, server, self._start_together)
        self.job_name = self.cluster.job_name
        self.task_index = self.cluster.task_index
        self.num_worker = self.cluster.num_worker
        logger.info("Distributed training on cluster {}; this is {}.".format(
            self.cluster.cluster, self.cluster.describe(self.job_name, self.task_index)))
        if self.job_name == 'ps':
            self.join()
        super().__init__(gpus)
        self.is_chief = self.cluster.is_chief
        self._builder = self._make_builder(self.devices, server)

    @property
    def cluster(self):
        """The cluster and this task (the protocol's)."""
        return self.protocol.cluster

    @cluster.setter
    def cluster(self, cluster):
        self.protocol.cluster = cluster

    def _make_builder(self, towers, server):
        raise NotImplementedError("{} must implement _make_builder()".format(type(self).__name__))

    def join(self):
        """What a ps task does: serve the variables until every worker has finished, then
        exit the process (code 0; an error when the workers were lost; 143 after SIGTERM,
        which does not stop the serving: the workers still need the variables to stop
        together and save)."""
        self.protocol.serve()

    # ----- graph -------------------------------------------------------------------------------

    def setup_graph(self, input_signature, input, get_cost_fn, get_opt_fn):
        """As :meth:`SingleCostTrainer.setup_graph`; the global step and the input live on
        this worker's CPU (every worker counts its own steps)."""
        with tf.device(self._builder.cpu_device):
            get_global_step_var()
            super().setup_graph(input_signature, input, get_cost_fn, get_opt_fn)

    def _build_train_op(self, grad_list, get_opt_fn):
        self.protocol.build_done_op()
        return self._build_sync_ops(grad_list, get_opt_fn)

    def _build_sync_ops(self, grad_list, get_opt_fn):
        """Set ``self.train_op`` and build what the start needs; return extra callbacks."""
        raise NotImplementedError("{} must implement _build_sync_ops()".format(type(self).__name__))

    def _start_together(self, schedule):
        """Run the start-up exchange; returns the chief's schedule on another worker."""
        raise NotImplementedError("{} must implement _start_together()".format(type(self).__name__))

    # ----- steps -------------------------------------------------------------------------------

    _accumulate_runs_communicate = False

    def _accumulation_built(self, accumulate_op):
        # Whether the accumulate op of an update's first K - 1 runs holds a collective (BatchNorm's
        # synchronized statistics): then every worker runs it together, with the collective graph
        # key. Otherwise it runs without the key: it must take no step id of the key's sequence,
        # which only runs that reduce together may advance (a worker advancing it alone stalls the
        # next update's all-reduce).
        super()._accumulation_built(accumulate_op)     # the protocol's vote skips those runs
        self._accumulate_runs_communicate = any(is_communication_op(op) for op in ops_run_by([accumulate_op]))

    @property
    def _step_options(self):
        return self.protocol.run_options()

    def run_step(self):
        fetch = self._step_fetch()
        together = fetch is self.train_op or self._accumulate_runs_communicate
        self.hooked_sess.run(fetch, options=self._step_options if together else self.protocol.run_options())


class _ParameterServerTrainer(DistributedTrainerBase):
    """The start of the parameter-server trainers: the chief sends its global step and
    schedule; the other workers wait for them (which also tells them the chief has
    initialized and restored the variables).

    With ``mixed_precision='fp16'`` the loss-scale state is one, on the first parameter
    server: every worker scales its step's loss by it, and the chief, applying the averaged
    gradients once, decides on them (all finite: applied, else skipped whole) and updates the
    scale before it lets the other workers go on, so every worker of a step uses the same
    scale.

    With ``CHECK_COST = False``, each worker's cost travels to the chief with its gradients and
    the chief's token brings every worker the step's mean cost (the protocol's ``cost_vote``,
    for ``RollbackOnAnomaly``; their stop vote is at the finish barrier)."""

    _meeting_op = None

    def _loss_scale_device(self):
        return self._builder.ps_devices[0]

    def _with_loss_scale_update(self, train_op):
        return train_op   # updated in the chief's apply: see _after_apply

    def _after_apply(self):
        """What follows the chief's apply of the averaged gradients (passed to the builder)."""
        return self._loss_scale.update_after if self._loss_scale is not None else None

    def _build_sync_ops(self, grad_list, get_opt_fn):
        costs = self._shared_costs()
        carried = None
        if costs:
            vote = self.protocol.cost_vote_in_graph()
            with tf.device(self._builder.cpu_device):
                carried = vote.tensor(cost=costs, gradient_norm=self._shared_gradient_norms())
        callbacks = self._build_ps_train_op(grad_list, get_opt_fn, carried)
        sync = self._builder.sync
        if costs:
            vote.set_total(sync.carried_total)
            self._meeting_op = sync.build_meeting('rollback')
        self._schedule = tfv1.placeholder(tf.int64, [Schedule.VECTOR_LENGTH], name='schedule')
        self._start_op = sync.build_start(get_global_step_var(), self._schedule)
        self.protocol.abort_op = sync.build_abort()
        return callbacks

    def _build_ps_train_op(self, grad_list, get_opt_fn, carried):
        raise NotImplementedError("{} must implement _build_ps_train_op()".format(type(self).__name__))

    def shared_variables(self, variables):
        """Those of ``variables`` the parameter servers hold: one copy for every worker, which
        only the chief changes."""
        return [v for v in variables if tf.DeviceSpec.from_string(v.device).job == 'ps']

    def meet_chief(self):
        """Between two steps, every worker at the same point (built with ``CHECK_COST = False``):
        the others wait until the chief calls it, so that their next step reads what the chief
        did to the shared variables before (e.g. ``RollbackOnAnomaly`` restoring them)."""
        if self._meeting_op is None:
            raise RuntimeError("{}: meet_chief() needs CHECK_COST = False before the graph is built".format(
                type(self).__name__))
        self.sess.run(self._meeting_op, options=self.protocol.run_options())

    def _start_together(self, schedule):
        options = self.protocol.run_options()
        if self.is_chief:
            self.sess.run(self._start_op, feed_dict={self._schedule: schedule}, options=options)
            return None
        return self.sess.run(self._start_op, options=options)


class DistributedTrainerParameterServer(_ParameterServerTrainer):
    """Synchronous training with the variables on the parameter servers (tensorpack's
    ``DistributedTrainerParameterServer``): each worker builds one tower per device, reading
    the variables through a cache on the worker; each step the gradients are averaged over
    the towers and the workers and applied once by the chief (see
    :class:`~tensorpack_lite.graph_builder.distributed.DistributedParameterServerBuilder`).

    Args:
        gpus (int or list): this worker's towers (GPU ids or device strings).
        server (tf.compat.v1.train.Server): this process's server.
        caching_device (str): ``'cpu'`` or ``'gpu'``: where the worker caches the variables.
    """

    def __init__(self, gpus, server, caching_device='cpu'):
        self._caching_device = caching_device
        super().__init__(gpus, server)

    def _make_builder(self, towers, server):
        return DistributedParameterServerBuilder(towers, server, self._caching_device)

    def _build_ps_train_op(self, grad_list, get_opt_fn, carried):
        self.train_op = self._builder.build(grad_list, get_opt_fn, self._after_apply(), carried)
        return []


class DistributedTrainerReplicated(_ParameterServerTrainer):
    """Synchronous training where each tower keeps a local replica and the parameter
    servers the global variables (tensorpack's ``DistributedTrainerReplicated``): each step
    the gradients are averaged over the towers and the workers, applied once to the global
    variables by the chief, and every worker copies the result into its replicas (see
    :class:`~tensorpack_lite.graph_builder.distributed.DistributedReplicatedBuilder`).
    The global variables (named without prefix) are what checkpoints hold.

    Args:
        gpus (int or list): this worker's towers (GPU ids or device strings).
        server (tf.compat.v1.train.Server): this process's server.
    """

    def _make_builder(self, towers, server):
        return DistributedReplicatedBuilder(towers, server)

    def _setup_graph(self, input, get_cost_fn, get_opt_fn):
        with tfv1.device(self._builder.param_server_device()):
            get_opt_fn()   # its variables (e.g. the learning rate) are global, on the parameter servers
        return super()._setup_graph(input, get_cost_fn, get_opt_fn)

    def _build_ps_train_op(self, grad_list, get_opt_fn, carried):
        self.train_op, self._initial_sync_op, model_sync_op = self._builder.build(
            grad_list, get_opt_fn, self._after_apply(), carried)
        if model_sync_op is None:
            return []
        logger.warn("The chief copies its model variables (e.g. batch-norm statistics) to the parameter "
                    "servers once per epoch: save checkpoints at epoch ends.")
        sync = RunOp(model_sync_op, run_before=False, run_as_trigger=True, verbose=True)
        sync.chief_only = True
        return [sync]

    def _start_together(self, schedule):
        received = super()._start_together(schedule)
        self.sess.run(self._initial_sync_op, options=self.protocol.run_options())
        return received

    def vs_name_for_predictor(self, device):
        return 'tower0'


class CollectiveAllReduceTrainer(DistributedTrainerBase):
    """Synchronous data-parallel training on several worker processes without parameter
    server: every tower of every worker keeps a replica of the model, and each step the
    gradients of all towers of all workers are averaged (or summed) by an all-reduce across
    the workers, so every replica makes the same update: one step of N workers
    of K towers, batch B each, makes the update of one process on the N*K*B datapoints.

    When training starts, the workers check that they built the same variables, then the
    chief's variables (initialized or restored by ``session_init``) are copied to every
    worker, and again at each epoch's end with :attr:`BROADCAST_EVERY_EPOCH`.

    Args:
        gpus (int or list): this worker's towers (GPU ids or device strings such as
            ``['/cpu:0', '/cpu:1']``); the same number on every worker.
        server (tf.compat.v1.train.Server): this worker's server, in a cluster of workers only.
        average (bool): average the gradients (else sum them).
        compression (str): None (the default: exact float32 all-reduce), ``'fp16'`` or
            ``'bf16'``: floating gradients of 32 bits or more (divided by the number of towers
            first, when averaging) travel and are summed in 16 bits, half the bytes of the exact
            all-reduce; every worker gets the same bits (see docs/distributed.md). For
            :class:`HorovodTrainer`, ``compression`` takes Horovod's compressors instead.
        exchange (str): ``'collective'`` (the default and only choice: TensorFlow's collective
            ops, see :class:`~tensorpack_lite.graph_builder.distributed.CollectiveAllReduceBuilder`
            and docs/distributed.md). The removed ``'sockets'`` and ``'queues'`` are an error
            saying what to use.
    """

    BROADCAST_EVERY_EPOCH = True
    """Copy the chief's variables to every worker at the end of every epoch too (they should
    be equal; this also brings statistics that are not trained, e.g. batch-norm's, in line)."""

    _STEP_KEY, _CHECK_KEY, _START_KEY, _BROADCAST_KEY = 101, 102, 103, 104

    def __init__(self, gpus, server, average=True, compression=None, exchange='collective'):
        self._average = bool(average)
        self._compression = check_compression(compression, type(self).__name__)
        self._exchange = check_exchange(exchange, type(self).__name__)
        super().__init__(gpus, server)
        self.protocol.device_filters = self._builder.session_device_filters()
        self.protocol.broadcast_key = self._BROADCAST_KEY

    def _setup_graph(self, input, get_cost_fn, get_opt_fn):
        # the mean over every tower of every worker, e.g. for BatchNorm(sync_statistics='horovod')
        group = cluster_group(self.num_worker * len(self.devices))
        with cross_rank_mean_scope(functools.partial(collective_mean, group=group)):
            return super()._setup_graph(input, get_cost_fn, get_opt_fn)

    def _make_builder(self, towers, server):
        return CollectiveAllReduceBuilder(towers, server, self._average, self._compression, self._exchange)

    def _build_sync_ops(self, grad_list, get_opt_fn):
        # SIGTERM on any worker (or a requested stop) stops every worker after the same step: the
        # protocol's vote travels with the step's gradients, so every worker sees it in the same step
        vote = self.protocol.stop_vote_in_graph()
        dtype = grad_list[0][0][0].dtype if grad_list[0] else tf.float32
        votes = []
        costs, norms = self._shared_costs(), self._shared_gradient_norms()
        costs = costs if len(costs) == len(self._builder.raw_devices) else None
        for k, device in enumerate(self._builder.raw_devices):
            with tf.device(device):     # with each tower's cost: every worker reads the step's mean cost
                votes.append(vote.tensor(dtype, cost=None if costs is None else costs[k],
                                         gradient_norm=None if costs is None else norms[k]))
        self.train_op, self.protocol.post_init_op = self._builder.build(
            grad_list, get_opt_fn, reduce_along=votes)
        vote.set_total(self._builder.reduced_along)
        return [BroadcastEveryEpoch()] if self.BROADCAST_EVERY_EPOCH else []

    def initialize(self, session_creator, session_init):
        # built last, once every variable (also those of callbacks) exists
        self._check = self._builder.build_variable_check()
        self.protocol.broadcast_op = self._builder.build_broadcast()
        self._schedule = tfv1.placeholder(tf.int64, [Schedule.VECTOR_LENGTH], name='schedule')
        self._schedule_received = self._builder.broadcast_tensor(self._schedule)
        super().initialize(session_creator, session_init)

    @property
    def _step_options(self):
        return self.protocol.run_options(self._STEP_KEY)

    def _start_together(self, schedule):
        digest, smallest, largest = self.sess.run(self._check,
                                                  options=self.protocol.run_options(self._CHECK_KEY))
        if smallest != largest:
            raise RuntimeError("{}: the workers built different global variables (digests {} .. {}, this "
                               "worker's {}). Every worker must build the same graph: callbacks that "
                               "create variables must not be chief-only.".format(
                                   self.cluster.task_name, smallest, largest, digest))
        received = self.sess.run(self._schedule_received, feed_dict={self._schedule: schedule},
                                 options=self.protocol.run_options(self._START_KEY))
        self.broadcast_variables()
        return None if self.is_chief else received
