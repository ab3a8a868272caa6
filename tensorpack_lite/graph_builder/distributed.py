"""Graph builders of synchronous training across processes (between-graph replication):
every worker process builds its own graph, with one tower per device of its own, and the
workers agree on every update.

* :class:`DistributedParameterServerBuilder`: the variables live on the parameter servers
  (``ps`` tasks); the towers read them there (cached once per step).
* :class:`DistributedReplicatedBuilder`: every tower keeps a local replica; the parameter
  servers hold the global copy, which is copied back into the replicas after each update.
* :class:`CollectiveAllReduceBuilder`: no parameter server: every tower of every worker keeps
  a replica, and the gradients are all-reduced across the workers by TensorFlow's collective
  ops (a ring on CPUs, NCCL on GPUs).

With parameter servers, each step every worker averages the gradients of its towers and
hands them to the parameter servers (:class:`ParameterServerSync`); the chief averages the
workers' gradients and applies them once, then lets the other workers go on. So a step of N
workers makes the update one process makes on the N batches together, whatever the optimizer.
"""

import hashlib

from ..compat import tf, tfv1
from ..multiprocess.collective import (all_reduce, broadcast, cluster_group, instance_key, instance_keys,
                                       worker_group)
from ..tfutils.distributed import cluster_of_server
from ..tfutils.varreplace import custom_getter_scope
from ..utils import logger
from .backprop_order import backprop_order
from .compression import GradientCompression, check_compression
from .devices import LeastLoadedDeviceSetter, communication_hint, interpret_towers, task_cpu, tower_device
from .training import DataParallelBuilder, SyncMultiGPUReplicatedBuilder
from .pieces import PiecePlan
from .utils import aggregate_grads, dense_gradient, split_grad_list

__all__ = ['EXCHANGES', 'REMOVED_EXCHANGES', 'check_exchange',
           'ParameterServerSync', 'DistributedParameterServerBuilder',
           'DistributedReplicatedBuilder', 'CollectiveAllReduceBuilder']


def _worker_towers(towers, cluster, owner):
    """The towers of this worker as full device names, e.g. '/job:worker/task:1/device:CPU:0'."""
    if cluster.job_name != 'worker':
        raise ValueError("{} builds the graph of a worker; this process is {}".format(
            owner, cluster.describe(cluster.job_name, cluster.task_index)))
    worker = tf.DeviceSpec(job='worker', task=cluster.task_index)
    qualified = []
    for tower in interpret_towers(towers, owner):
        spec = worker.make_merged_spec(tf.DeviceSpec.from_string(tower_device(tower)))
        if (spec.job, spec.task) != ('worker', cluster.task_index):
            raise ValueError("{}: tower {!r} is not on this worker ({})".format(
                owner, tower, cluster.task_name))
        qualified.append(spec.to_string())
    return qualified


def _ps_task(var):
    spec = tf.DeviceSpec.from_string(var.device)
    if spec.job != 'ps':
        raise ValueError("Variable {} is on '{}', not on a parameter server: with parameter servers every "
                         "trained variable must be created in the tower function".format(
                             var.op.name, var.device))
    return spec.task or 0


class ParameterServerSync:
    """Makes the workers' updates synchronous through queues on the parameter servers.

    Each step, worker k > 0 puts its gradients of the variables of ps task j into its own
    queue on ps j. The chief takes one entry from the queue of every worker (in worker
    order), averages them with its own on ps j and applies the result once; then it puts a
    token in the queue of every other worker, which waits for it before its step ends (so
    its next step reads the updated variables). Before training, the chief sends every
    other worker a value (its global step) through a start queue, which also tells it that
    the chief has initialized and restored the variables.

    With ``carried`` (:meth:`build`), each worker's vector travels with its gradients, the
    chief sums them and the token brings the sum back: every worker reads the same total after
    the step (:attr:`carried_total`, e.g. a
    :class:`~tensorpack_lite.multiprocess.stop_vote.PreemptionVote` carrying the step's costs).

    Args:
        cluster (ClusterConfig): the cluster and this worker.
    """

    def __init__(self, cluster):
        self.cluster = cluster
        self._queues = []
        self.carried_total = None
        """The sum over every worker of the vectors :meth:`build` carried (None without)."""

    def _queue(self, name, ps_task, dtypes, shapes):
        with tf.device(task_cpu('ps', ps_task)):
            queue = tfv1.FIFOQueue(2, dtypes, shapes=shapes, name=name,
                                   shared_name='tensorpack_lite/ps_sync/{}'.format(name))
        self._queues.append(queue)
        return queue

    @property
    def num_worker(self):
        return self.cluster.num_worker

    @property
    def _worker(self):
        return self.cluster.task_index

    def build(self, grads_and_vars, apply_fn, carried=None):
        """The op that ends this worker's step.

        Args:
            grads_and_vars: this worker's (gradient, variable) pairs, the variables on the
                parameter servers.
            apply_fn: ``apply_fn(pairs) -> op`` applies (averaged gradient, variable) pairs;
                built on every worker (so that all build the same variables), run by the
                chief only.
            carried: a float32 vector of this worker's to sum over the workers in the step
                (:attr:`carried_total`), or None.

        Returns:
            on the chief, the update applied (and the other workers told); on another
            worker, the chief's token saying it has been.
        """
        pairs = [(dense_gradient(g), v) for g, v in grads_and_vars]
        by_ps = {}
        for index, (_, var) in enumerate(pairs):
            by_ps.setdefault(_ps_task(var), []).append(index)
        averaged = list(pairs)
        sends = []
        with tf.name_scope('ps_sync'):
            for ps_task, indices in sorted(by_ps.items()):
                grads = [pairs[i][0] for i in indices]
                queues = [self._queue('grads_ps{}_from_worker{}'.format(ps_task, k), ps_task,
                                      [g.dtype.base_dtype for g in grads], [g.shape for g in grads])
                          for k in range(1, self.num_worker)]
                if not self.cluster.is_chief:
                    sends.append(queues[self._worker - 1].enqueue(grads))
                elif queues:
                    with tf.device(task_cpu('ps', ps_task)):
                        received = [self._as_list(q.dequeue()) for q in queues]
                        for position, index in enumerate(indices):
                            total = tf.add_n([grads[position]] + [r[position] for r in received])
                            averaged[index] = (tf.multiply(total, 1.0 / self.num_worker), pairs[index][1])
            apply_op = apply_fn(averaged)
            if carried is not None:
                return self._build_carrying(carried, sends, apply_op)
            tokens = [self._queue('step_done_{}'.format(k), 0, [tf.bool], [[]])
                      for k in range(1, self.num_worker)]
            if not self.cluster.is_chief:
                with tf.control_dependencies(sends):
                    return tf.group(tokens[self._worker - 1].dequeue(), name='step_done')
            with tf.control_dependencies([apply_op]):
                sent = [q.enqueue([True]) for q in tokens]
            return tf.group(apply_op, *sent, name='step_done')

    def _build_carrying(self, carried, sends, apply_op):
        """:meth:`build` 's end with ``carried``: the tokens are the sums."""
        carried = tf.cast(carried, tf.float32)
        shape = [carried.shape]
        ups = [self._queue('carried_from_worker{}'.format(k), 0, [tf.float32], shape)
               for k in range(1, self.num_worker)]
        tokens = [self._queue('step_done_with_total_{}'.format(k), 0, [tf.float32], shape)
                  for k in range(1, self.num_worker)]
        if not self.cluster.is_chief:
            with tf.control_dependencies(sends + [ups[self._worker - 1].enqueue([carried])]):
                self.carried_total = tokens[self._worker - 1].dequeue()
            return tf.group(self.carried_total, name='step_done')
        with tf.device(task_cpu('ps', 0)):
            self.carried_total = tf.add_n([carried] + [q.dequeue() for q in ups])
        with tf.control_dependencies([apply_op]):
            sent = [q.enqueue([self.carried_total]) for q in tokens]
        return tf.group(apply_op, *sent, name='step_done')

    @staticmethod
    def _as_list(dequeued):
        return list(dequeued) if isinstance(dequeued, (list, tuple)) else [dequeued]

    def build_start(self, global_step, schedule):
        """The start-up exchange. On the chief: the op sending ``global_step`` 's value and
        ``schedule`` (an int64 vector) to every other worker. On another worker: the
        tensor of the chief's schedule, evaluated once the chief's global step is assigned
        to ``global_step``."""
        with tf.name_scope('ps_sync_start'):
            queues = [self._queue('start_{}'.format(k), 0, [tf.int64], [[1 + int(schedule.shape[0])]])
                      for k in range(1, self.num_worker)]
            if self.cluster.is_chief:
                step = tf.cast(tf.reshape(global_step.read_value(), [1]), tf.int64)
                message = tf.concat([step, schedule], 0)
                return tf.group(*[q.enqueue([message]) for q in queues], name='send')
            message = queues[self._worker - 1].dequeue()
            assign = global_step.assign(tf.cast(message[0], global_step.dtype.base_dtype))
            with tf.control_dependencies([assign]):
                return tf.identity(message[1:], name='chief_schedule')

    def build_meeting(self, name):
        """The op of a point every worker reaches between two steps (e.g. after a rollback):
        the chief's run lets the others past; theirs waits for it. What the chief did to the
        variables on the parameter servers before it, the others' next steps read."""
        with tf.name_scope('ps_sync_' + name):
            queues = [self._queue('{}_{}'.format(name, k), 0, [tf.bool], [[]])
                      for k in range(1, self.num_worker)]
            if self.cluster.is_chief:
                return tf.group(*[q.enqueue([True]) for q in queues], name='release')
            return tf.group(queues[self._worker - 1].dequeue(), name='wait')

    def build_abort(self):
        """An op closing every queue, so that every worker blocked on one fails at once
        (run when a task is lost)."""
        with tf.name_scope('ps_sync_abort'):
            return tf.group(*[q.close(cancel_pending_enqueues=True) for q in self._queues])


class _ParameterServerBuilder(DataParallelBuilder):
    """What the parameter-server builders share: this worker's towers on full device names,
    the parameter-server devices, and a :class:`ParameterServerSync`."""

    def __init__(self, towers, server):
        self.cluster = cluster_of_server(server)
        if not self.cluster.num_ps:
            raise ValueError("{} needs parameter servers, but the cluster {} has no 'ps' job".format(
                type(self).__name__, self.cluster.cluster))
        super().__init__(_worker_towers(towers, self.cluster, type(self).__name__))
        self.is_chief = self.cluster.is_chief
        self.cpu_device = self.cluster.task_name + '/device:CPU:0'
        self.ps_devices = [task_cpu('ps', i) for i in range(self.cluster.num_ps)]
        self.sync = ParameterServerSync(self.cluster)

    def param_server_device(self, worker_device=None):
        """A device function: variables on the least-loaded parameter server, other ops on
        ``worker_device`` (default: this worker's CPU)."""
        return LeastLoadedDeviceSetter(worker_device or self.cpu_device, self.ps_devices)

    @staticmethod
    def _apply_fn(opt, after_apply):
        """The ``apply_fn`` of :meth:`ParameterServerSync.build`: ``opt`` applies the pairs,
        then ``after_apply(op)`` (when given) builds what follows within the chief's apply,
        before the other workers go on (e.g. the update of a loss scale)."""
        def apply(pairs):
            op = opt.apply_gradients(pairs, name='apply_gradients')
            return after_apply(op) if after_apply is not None else op
        return apply

    def _average_towers(self, grad_list):
        """This worker's gradients averaged over its towers, on its CPU."""
        self._check_grad_list(grad_list)
        return aggregate_grads(grad_list, devices=[self.cpu_device])


class DistributedParameterServerBuilder(_ParameterServerBuilder):
    """Synchronous training with the variables on the parameter servers (spread by size).
    Each tower reads them through a cache on this worker, refreshed every step. Each step
    the gradients are averaged over the towers, then over the workers, and applied once.

    Args:
        towers (int or list): this worker's towers (GPU ids or device strings).
        server (tf.compat.v1.train.Server): this worker's server.
        caching_device (str): where a worker caches the variables it reads: ``'cpu'`` (its
            CPU) or ``'gpu'`` (the first tower's device).
    """

    def __init__(self, towers, server, caching_device='cpu'):
        super().__init__(towers, server)
        if caching_device not in ('cpu', 'gpu'):
            raise ValueError("DistributedParameterServerBuilder: caching_device must be 'cpu' or 'gpu', got "
                             "{!r}".format(caching_device))
        self.caching_device = self.cpu_device if caching_device == 'cpu' else self.raw_devices[0]

    def _cache_variables(self, getter, *args, **kwargs):
        if kwargs.get('caching_device') is None:
            kwargs['caching_device'] = self.caching_device
        return getter(*args, **kwargs)

    def call_for_each_tower(self, tower_fn):
        """Build the towers (sharing the variables on the parameter servers)."""
        devices = [self.param_server_device(d) for d in self.raw_devices]
        with custom_getter_scope(self._cache_variables):
            return DataParallelBuilder.call_for_each_tower(self.towers, tower_fn, devices)

    def build(self, grad_list, get_opt_fn, after_apply=None, carried=None):
        """The op of one synchronous step (see :meth:`ParameterServerSync.build`, also for
        ``carried``); ``after_apply(apply_op) -> op``: what follows the chief's apply, within
        the step."""
        grads = self._average_towers(grad_list)
        return self.sync.build(grads, self._apply_fn(get_opt_fn(), after_apply), carried)


class DistributedReplicatedBuilder(_ParameterServerBuilder):
    """Synchronous training where every tower keeps a local replica of the variables
    (``tower{k}/...``); the parameter servers hold the global variables (named without
    prefix: they are what checkpoints hold). Each step the gradients are averaged over the
    towers, then over the workers, applied once to the global variables, which every worker
    copies back into its replicas.

    Non-trainable model variables (e.g. batch-norm statistics) get a global copy too,
    which the chief updates from its first tower when :meth:`build` 's ``model_sync_op`` runs.

    Args:
        towers (int or list): this worker's towers (GPU ids or device strings).
        server (tf.compat.v1.train.Server): this worker's server.
    """

    def call_for_each_tower(self, tower_fn):
        """Build the towers, each with its own (local) variables under ``tower{k}/``."""
        return DataParallelBuilder.call_for_each_tower(self.towers, tower_fn, self.raw_devices,
                                                       use_vs=[True] * len(self.towers))

    def build(self, grad_list, get_opt_fn, after_apply=None, carried=None):
        """Returns ``(train_op, initial_sync_op, model_sync_op)``: the op of one step, the op
        copying the global variables into the replicas (run by every worker before
        training), and the op copying the chief's model variables to the global ones (None
        when there are none, or on other workers). ``after_apply(apply_op) -> op``: what
        follows the chief's apply, within the step; ``carried``: see
        :meth:`ParameterServerSync.build`."""
        grads = self._average_towers(grad_list)
        _, replicas = split_grad_list(grad_list)
        with tfv1.device(self.param_server_device()), tfv1.variable_scope(tfv1.VariableScope(False, name='')):
            shadows = [self._shadow(var, trainable=True) for _, var in grads]
            model_pairs = self._shadow_model_variables({v.op.name for v in shadows})
        step_done = self.sync.build([(g, s) for (g, _), s in zip(grads, shadows)],
                                    self._apply_fn(get_opt_fn(), after_apply), carried)
        with tf.name_scope('copy_from_ps'), tf.control_dependencies([step_done]):
            train_op = self._copy_into_replicas(shadows, replicas, name='train_op')
        with tf.name_scope('initial_sync_variables'):
            initial_sync_op = tf.group(self._copy_into_replicas(shadows, replicas),
                                       *[local.assign(shadow.read_value()) for shadow, local in model_pairs],
                                       name='sync_variables_from_ps')
        model_sync_op = None
        if model_pairs and self.is_chief:
            with tf.name_scope('sync_model_variables'):
                copies = [shadow.assign(local.read_value()) for shadow, local in model_pairs]
                model_sync_op = tf.group(*copies, name='sync_model_variables_to_ps')
        return train_op, initial_sync_op, model_sync_op

    @staticmethod
    def _main_name(var):
        name = var.op.name
        if not name.startswith('tower0/'):
            raise ValueError("DistributedReplicatedBuilder: variable {} of the first tower is not under "
                             "'tower0/'".format(name))
        return name[len('tower0/'):]

    def _shadow(self, var, trainable):
        return tfv1.get_variable(self._main_name(var), dtype=var.dtype.base_dtype,
                                 initializer=var.initial_value, trainable=trainable)

    def _shadow_model_variables(self, taken):
        """(global copy, tower-0 variable) of the non-trainable model variables of tower 0."""
        pairs = []
        for var in tfv1.model_variables():
            if not var.op.name.startswith('tower0/') or self._main_name(var) in taken:
                continue
            taken.add(self._main_name(var))
            pairs.append((self._shadow(var, trainable=False), var))
        return pairs

    def _copy_into_replicas(self, shadows, replicas, name=None):
        copies = []
        with tf.device(self.cpu_device):
            for index, shadow in enumerate(shadows):
                value = shadow.read_value()
                copies.extend(tower[index].assign(value) for tower in replicas)
        return tf.group(*copies, name=name)


def _variables_digest(variables):
    """An int64 digest of the names, dtypes and shapes of ``variables`` (order ignored)."""
    text = '\n'.join(sorted('{} {} {}'.format(v.op.name, v.dtype.base_dtype.name, v.shape)
                            for v in variables))
    return int.from_bytes(hashlib.sha256(text.encode('utf-8')).digest()[:7], 'big')


EXCHANGES = ('collective',)
"""How :class:`CollectiveAllReduceBuilder` moves gradients between workers: TensorFlow's
collective ops (the only engine left in that builder; see :data:`REMOVED_EXCHANGES`)."""

REMOVED_EXCHANGES = ('sockets', 'queues')
"""Exchanges of earlier versions, which sent every worker's sum to every other worker
((N - 1) times the gradients per worker and step, against a ring's 2 (N - 1) / N)."""


def check_exchange(exchange, owner):
    """``exchange`` if it is one of :data:`EXCHANGES`, else a ValueError saying what to use."""
    if exchange in REMOVED_EXCHANGES:
        raise ValueError("{}: exchange={!r} was removed (it sent every worker's gradients to every other "
                         "worker); use exchange='collective' (the default: TensorFlow's collective ops, a "
                         "ring on CPUs and NCCL on GPUs), or HorovodTrainer for jobs started by "
                         "mpirun.".format(owner, exchange))
    if exchange not in EXCHANGES:
        raise ValueError("{}: exchange must be one of {}, got {!r}".format(
            owner, ', '.join(repr(e) for e in EXCHANGES), exchange))
    return exchange


class CollectiveAllReduceBuilder(SyncMultiGPUReplicatedBuilder):
    """Synchronous training without parameter server: every tower of every worker keeps a
    replica of the variables, and each step the gradients of all towers of all workers are
    summed (or averaged) by TensorFlow's collective ops (packed into a few large tensors when
    that pays), so every replica applies the same update.

    Every tower of every worker is a member of one ``CollectiveReduceV2`` per piece of
    gradient: on CPU towers TensorFlow's ring over gRPC (each worker sends about
    2 (N - 1) / N times the gradients per step), on GPU towers NCCL (communication hint
    ``'nccl'``, on the GPUs, with no host copy). Every member gets the same bits.

    On each worker, as in :class:`SyncMultiGPUReplicatedBuilder`, tower 0 owns the global
    variables and tower k > 0 local replicas ``tower{k}/...``. :meth:`build_broadcast` builds
    the op copying the chief's global variables to every worker (with collective ops, as the
    start-up checks).

    Every worker must build the same model with the same number of towers. The collective ops
    and their keys come from :mod:`~tensorpack_lite.multiprocess.collective`: the gradients are
    reduced in the :func:`~tensorpack_lite.multiprocess.collective.cluster_group` of every tower of
    every worker, the checks and broadcasts in the
    :func:`~tensorpack_lite.multiprocess.collective.worker_group` of their CPUs.

    Args:
        towers (int or list): this worker's towers (GPU ids or device strings).
        server (tf.compat.v1.train.Server): this worker's server (a cluster of workers only).
        average (bool): average the gradients over all towers of all workers (else sum).
        compression (str): None (exact float32 all-reduce), ``'fp16'`` or ``'bf16'``: floating
            gradients of 32 bits or more (times 1 / group size first, when averaging) travel
            and are summed in 16 bits, by the same collective op as the exact path (see
            :mod:`~tensorpack_lite.graph_builder.compression`).
        exchange (str): ``'collective'``, the only one left (the removed ``'sockets'`` and
            ``'queues'`` are an error saying so).
    """

    NUM_PACKS = 4
    """Gradients smaller than 1 / NUM_PACKS of all of them are packed together into pieces of
    about that size; larger ones travel whole, each in a piece of its own (see
    :class:`PiecePlan`): about NUM_PACKS concurrent all-reduces, without copying large tensors."""

    MIN_PACK_ELEMENTS = 1024
    """No pack is planned smaller than this (a few small gradients share one piece)."""

    CHUNK_BYTES = 8 << 20
    """On CPU towers, a tensor larger than this is cut into pieces of about this size (they
    travel concurrently; NCCL takes every tensor whole). 8 MB rather than 2 MB: fewer, larger
    pieces moved 1.2-1.3x more between 4 processes on 2 cores at 16 and 64 MB, and about as
    much between 2 (issue 28, docs/distributed.md)."""

    MAX_SUBDIVS_PER_DEVICE = -1
    """``max_subdivs_per_device`` of each ``CollectiveReduceV2``: how many pieces TensorFlow's
    ring cuts each tensor into per device (-1: the op's default; 1, 2 and 4 were tried, no gain)."""

    def __init__(self, towers, server, average=True, compression=None, exchange='collective'):
        check_compression(compression, type(self).__name__)
        check_exchange(exchange, type(self).__name__)
        self.cluster = cluster_of_server(server)
        if self.cluster.num_ps:
            raise ValueError("{} uses no parameter server, but the cluster has 'ps' tasks: {}. Remove them, "
                             "or use DistributedTrainerReplicated.".format(type(self).__name__,
                                                                           self.cluster.cluster['ps']))
        super().__init__(_worker_towers(towers, self.cluster, type(self).__name__), average, 'collective')
        self.is_chief = self.cluster.is_chief
        self.group_size = self.cluster.num_worker * len(self.towers)
        self._group = cluster_group(self.group_size)
        self._workers = worker_group(self.cluster.num_worker)
        self.cpu_device = self.cluster.task_name + '/device:CPU:0'
        self.compression = compression
        self.exchange = exchange
        self._reduce_along = None
        self.reduced_along = None
        self._compressor = GradientCompression(compression) if compression else None
        if compression:
            logger.info("{}: gradients travel as {} and are summed in {} (a ring-level all-reduce).".format(
                type(self).__name__, compression, compression))

    def session_device_filters(self):
        """The tasks the session of this worker uses: this worker only (collective ops find
        their peers through the group leader)."""
        return [self.cluster.task_name]

    def build(self, grad_list, get_opt_fn, reduce_along=None):
        """As :meth:`SyncMultiGPUReplicatedBuilder.build`. ``reduce_along``: one scalar per
        tower, reduced in the same all-reduce as the gradients (no collective of its own,
        e.g. a :class:`~tensorpack_lite.multiprocess.stop_vote.PreemptionVote`); the reduction
        is then :attr:`reduced_along` (tower 0's)."""
        self._reduce_along = reduce_along
        return super().build(grad_list, get_opt_fn)

    def _allreduce(self, grad_list):
        all_grads, _ = split_grad_list(grad_list)
        along = self._reduce_along
        if along is not None:
            all_grads = [grads + [extra] for grads, extra in zip(all_grads, along)]
        reduced = all_grads if self.group_size == 1 else self.all_reduce(all_grads)
        if along is None:
            return reduced
        self.reduced_along = reduced[0][-1]
        return [tensors[:-1] for tensors in reduced]

    def all_reduce(self, all_tensors):
        """K lists of N tensors (one list per tower of this worker) -> their sums (or means)
        over every tower of every worker, in the same structure. The tensors travel in the
        pieces of one :class:`PiecePlan` (:attr:`CHUNK_BYTES` on CPUs, compressed tensors
        counting 2 bytes an element; :attr:`NUM_PACKS` on GPUs), each piece one collective
        all-reduce of every tower of every worker. Every worker must make the same calls in
        the same order."""
        all_tensors = [[dense_gradient(t) for t in tensors] for tensors in all_tensors]
        hints = [communication_hint(device) for device in self.raw_devices]
        plan = PiecePlan(all_tensors[0], *self._piece_limits(all_tensors[0], set(hints) == {'nccl'}),
                         order=backprop_order(all_tensors[0]))
        keys = instance_keys(self._group, 'gradients', len(plan.pieces))
        result = []
        with tf.name_scope('collective_allreduce'):
            for tensors, device in zip(all_tensors, self.raw_devices):
                with tf.device(device):
                    pieces = plan.pack(tensors)
                    reduced = [self._reduce_piece(piece, key, device, pieces[k - 1].op if k else None)
                               for k, (piece, key) in enumerate(zip(pieces, keys))]
                    result.append(plan.unpack(reduced))
        return result

    def _reduce_piece(self, piece, key, device, earlier):
        if self._compresses(piece.dtype):
            return self._compressed_reduce(piece, key, device, earlier)
        return self._reduce(piece, key, device, earlier)

    def _piece_limits(self, tensors, nccl):
        """``(cut_elements, pack_elements)`` of :class:`PiecePlan` (see :attr:`NUM_PACKS`,
        :attr:`CHUNK_BYTES`): NCCL takes every tensor whole."""
        total = sum(tensor.shape.num_elements() or 0 for tensor in tensors)
        per_pack = max(-(-total // self.NUM_PACKS), self.MIN_PACK_ELEMENTS)
        cut_elements = None if nccl else \
            (lambda dtype: self.CHUNK_BYTES // (2 if self._compresses(dtype) else dtype.size))
        return cut_elements, (lambda dtype: per_pack)

    def _compresses(self, dtype):
        return self._compressor is not None and self._compressor.applies_to(dtype)

    def _reduce(self, piece, key, device, earlier, final_op=None):
        """The all-reduce of ``piece``, started once ``earlier`` (an op or None) has run: the
        op packing the piece before it, so that no piece starts before those ahead of it in
        backprop's order can (their transfers then overlap: waiting for the previous piece's
        all-reduce to finish made the communication-only step 6-8 % slower, docs/distributed.md)."""
        if final_op is None:
            final_op = 'Div' if self._average else 'Id'
        with tf.control_dependencies([earlier] if earlier is not None else []):
            return all_reduce(piece, self._group, key, device, final_op=final_op,
                              max_subdivs_per_device=self.MAX_SUBDIVS_PER_DEVICE)

    def _compressed_reduce(self, piece, key, device, earlier):
        """The compressed all-reduce of ``piece``: to average, multiplied by 1 / group size
        first; rounded to 16 bits; summed in 16 bits by the same collective op as the exact path;
        back in ``piece`` 's dtype (see :mod:`~tensorpack_lite.graph_builder.compression`)."""
        scale = 1.0 / self.group_size if self._average else None
        total = self._reduce(self._compressor.encode(piece, scale), key, device, earlier, final_op='Id')
        return self._compressor.decode(total, piece.dtype.base_dtype)

    def build_variable_check(self):
        """``(digest, minimum, maximum)`` tensors: this worker's digest of its global
        variables, and the smallest and largest digest over all workers (equal when every
        worker built the same variables)."""
        digest = tf.constant(_variables_digest(tfv1.global_variables()), tf.int64)
        if self.cluster.num_worker == 1:
            return digest, digest, digest
        with tf.name_scope('check_variables'):
            extremes = [all_reduce(digest, self._workers, instance_key(self._workers, 'check_variables', op),
                                   self.cpu_device, merge_op=op) for op in ('Min', 'Max')]
        return digest, extremes[0], extremes[1]

    def broadcast_tensor(self, tensor):
        """The chief's value of ``tensor`` (an int64 vector of known shape), on every worker."""
        if self.cluster.num_worker == 1:
            return tf.identity(tensor)
        key = instance_key(self._workers, 'broadcast_from_chief/' + tensor.op.name, 'broadcast')
        with tf.name_scope('broadcast_from_chief'):
            return broadcast(tensor, self._workers, key, self.is_chief, self.cpu_device)

    def build_broadcast(self):
        """The op copying every global variable of the chief to every worker (None for one
        worker). All workers must run it together."""
        if self.cluster.num_worker == 1:
            return None
        ops = []
        with tf.name_scope('broadcast_from_chief'), tf.device(self.cpu_device):
            variables = sorted(tfv1.global_variables(), key=lambda v: v.op.name)
            for var, key in zip(variables, instance_keys(self._workers, 'broadcast', len(variables))):
                value = broadcast(var, self._workers, key, self.is_chief)
                ops.append(value.op if self.is_chief else var.assign(value).op)
        logger.info("'broadcast_from_chief' copies {} variables.".format(len(variables)))
        return tf.group(*ops, name='broadcast_from_chief')
