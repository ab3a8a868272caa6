"""Graph builders of data-parallel training: build one training tower per device, then
combine their gradients into a training op.

Every builder is used the same way by a trainer::

    builder = SyncMultiGPUParameterServerBuilder(['/cpu:0', '/cpu:1'], ps_device='cpu')
    grad_list = builder.call_for_each_tower(tower_fn)   # tower_fn() -> [(grad, var), ...]
    train_op = builder.build(grad_list, get_opt_fn)

Towers are named ``tower0``, ``tower1``...; tower 0 is the main training tower: it creates the
variables (without any ``tower`` prefix) and owns the summaries.
"""

import re

from ..compat import tf, tfv1
from ..tfutils.gradproc import ScaleGradient
from ..tfutils.tower_context import TrainTowerContext
from ..utils import logger
from .devices import (LeastLoadedDeviceSetter, interpret_towers, is_gpu_tower, override_to_local_variable,
                      tower_device)
from .replica_optimizer import apply_on_replicas
from .utils import (GradientPacker, aggregate_grads, allreduce_grads, allreduce_grads_collective,
                    allreduce_grads_hierarchical, merge_grad_list, split_grad_list)

__all__ = ['DataParallelBuilder', 'SyncMultiGPUParameterServerBuilder', 'SyncMultiGPUReplicatedBuilder',
           'AsyncMultiGPUBuilder']


class DataParallelBuilder:
    """Base class of the data-parallel builders.

    Args:
        towers (int or list): GPU ids or device strings, one per tower (see
            :func:`~tensorpack_lite.graph_builder.devices.interpret_towers`).

    Attributes:
        towers (list): the towers.
        raw_devices (list[str]): the device of each tower.
    """

    def __init__(self, towers):
        self.towers = interpret_towers(towers, type(self).__name__)
        self.raw_devices = [tower_device(t) for t in self.towers]
        if len(self.towers) > 1:
            logger.info("[DataParallel] Training a model of {} towers on {}.".format(
                len(self.towers), ', '.join(self.raw_devices)))

    @staticmethod
    def _check_grad_list(grad_list):
        """Every tower must have gradients for as many variables as tower 0."""
        counts = [len(grads) for grads in grad_list]
        if len(set(counts)) > 1:
            raise ValueError("The towers have gradients for different numbers of variables: {}. Every "
                             "tower must build the same model.".format(
                                 ', '.join('tower{}: {}'.format(k, n) for k, n in enumerate(counts))))
        if counts and counts[0] == 0:
            raise ValueError("The towers have no gradient: no trainable variable reaches the cost.")

    @staticmethod
    def call_for_each_tower(towers, func, devices=None, use_vs=None):
        """Call ``func()`` once per tower, in a ``TrainTowerContext('tower{k}', index=k)`` on the
        tower's device, and return the results.

        Args:
            towers (list): GPU ids or device strings.
            func: builds one tower (e.g. returns its gradients).
            devices (list): the device (string or device function) of each tower; by
                default the towers' own devices.
            use_vs (list[bool]): for each tower, whether it gets variables of its own under
                the variable scope ``tower{k}`` (as local variables); by default none does.
        """
        num_tower = len(towers)
        for arg, value in (('devices', devices), ('use_vs', use_vs)):
            if value is not None and len(value) != num_tower:
                raise ValueError("call_for_each_tower: {} has {} entries for {} towers".format(
                    arg, len(value), num_tower))
        results = []
        for index, tower in enumerate(towers):
            device = devices[index] if devices is not None else tower_device(tower)
            own_variables = bool(use_vs[index]) if use_vs is not None else False
            name = 'tower{}'.format(index)
            context = TrainTowerContext(name, vs_name=name if own_variables else '', index=index,
                                        total=num_tower)
            with tfv1.device(device), context:
                logger.info("Building graph for training tower {} on device {} ...".format(index, device))
                with override_to_local_variable(enable=own_variables):
                    results.append(func())
        return results

    build_on_towers = call_for_each_tower


def _ps_device_functions(raw_devices, ps_device):
    """Device functions putting the variables on '/cpu:0' or spread over the towers' devices."""
    ps_devices = ['/cpu:0'] if ps_device == 'cpu' else raw_devices
    return [LeastLoadedDeviceSetter(device, ps_devices) for device in raw_devices]


def _check_shared_variables(grad_list):
    """In a builder whose towers share variables, every tower differentiates the same ones."""
    main = [v for _, v in grad_list[0]]
    for index, grads in enumerate(grad_list[1:], 1):
        for var, (_, other) in zip(main, grads):
            if other is not var:
                raise ValueError("tower{} has a gradient for variable {} where tower0 has one for {}; the "
                                 "towers must build the same model.".format(index, other.name, var.name))


class SyncMultiGPUParameterServerBuilder(DataParallelBuilder):
    """Towers share one copy of the variables (on '/cpu:0' or spread over the towers'
    devices); each step averages the towers' gradients and applies them once.

    Args:
        towers (int or list): GPU ids or device strings.
        ps_device (str): ``'cpu'`` (variables on '/cpu:0') or ``'gpu'`` (spread over the
            towers' devices, whatever their type).
    """

    def __init__(self, towers, ps_device):
        super().__init__(towers)
        if ps_device not in ('cpu', 'gpu'):
            raise ValueError("SyncMultiGPUParameterServerBuilder: ps_device must be 'cpu' or 'gpu', got "
                             "{!r}".format(ps_device))
        self.ps_device = ps_device

    def call_for_each_tower(self, tower_fn):
        """Build the towers; returns what ``tower_fn`` returns for each."""
        devices = _ps_device_functions(self.raw_devices, self.ps_device)
        return DataParallelBuilder.call_for_each_tower(self.towers, tower_fn, devices)

    def build(self, grad_list, get_opt_fn):
        """The training op: average the K lists of (gradient, variable), apply once."""
        self._check_grad_list(grad_list)
        _check_shared_variables(grad_list)
        self.grads = aggregate_grads(grad_list, colocation=True)
        opt = get_opt_fn()
        with tfv1.device("/cpu:0" if self.ps_device == "cpu" else None):
            return opt.apply_gradients(self.grads, name='train_op')


_REPLICA_PREFIX = re.compile(r'^tower[1-9][0-9]*/')


class SyncMultiGPUReplicatedBuilder(DataParallelBuilder):
    """Every tower has its own copy of the variables (tower 0's are the main ones, named
    without prefix; tower k's are local variables under ``tower{k}/``). Each step all-reduces
    the gradients so that every tower applies the same average to its copy, with optimizer
    state of its own (tower k's also under ``tower{k}/``, see
    :func:`~tensorpack_lite.graph_builder.replica_optimizer.apply_on_replicas`).

    Args:
        towers (int or list): GPU ids or device strings.
        average (bool): average the gradients (else sum them).
        mode (str): how the gradients are all-reduced:

            * ``'nccl'``: NCCL (collective ops on the GPUs), GPU towers only;
            * ``'cpu'``: summed on '/cpu:0';
            * ``'gpu'``: summed on the towers' devices, variables round-robin;
            * ``'hierarchical'``: two groups of 4 (8 towers exactly);
            * ``'collective'``: TensorFlow's collective all-reduce (any device type: NCCL on
              GPUs, TensorFlow's ring on CPUs).
    """

    MODES = ('nccl', 'cpu', 'gpu', 'hierarchical', 'collective')

    def __init__(self, towers, average, mode):
        super().__init__(towers)
        if mode not in self.MODES:
            raise ValueError("SyncMultiGPUReplicatedBuilder: unknown mode {!r}; use one of {}".format(
                mode, ', '.join(repr(m) for m in self.MODES)))
        if mode == 'nccl':
            not_gpu = [d for d in self.raw_devices if not is_gpu_tower(d)]
            if not_gpu:
                raise ValueError("SyncMultiGPUReplicatedBuilder: mode 'nccl' needs GPU towers, but {} is "
                                 "not a GPU; use mode 'collective' or 'gpu' instead.".format(not_gpu[0]))
        if mode == 'hierarchical' and len(self.towers) != 8:
            raise ValueError("SyncMultiGPUReplicatedBuilder: mode 'hierarchical' needs 8 towers, got "
                             "{}".format(len(self.towers)))
        self._average = bool(average)
        self._mode = mode

    @property
    def mode(self):
        """The all-reduce mode in use."""
        return self._mode

    def call_for_each_tower(self, tower_fn):
        """Build the towers, tower k > 0 with variables of its own; returns what ``tower_fn``
        returns for each."""
        use_vs = [False] + [True] * (len(self.towers) - 1)
        return DataParallelBuilder.call_for_each_tower(self.towers, tower_fn, self.raw_devices, use_vs)

    def build(self, grad_list, get_opt_fn):
        """Returns ``(train_op, post_init_op)``: the training op, and the op copying tower 0's
        variables into the other towers (None for one tower), to run once before training."""
        self._check_grad_list(grad_list)
        self._check_replica_variables(grad_list)
        self.grads = merge_grad_list(self._allreduce(grad_list), split_grad_list(grad_list)[1])
        train_op = self._apply(get_opt_fn())
        post_init_op = None
        if len(self.towers) > 1:
            with tf.name_scope('sync_variables'):
                post_init_op = SyncMultiGPUReplicatedBuilder.get_post_init_ops()
        return train_op, post_init_op

    @staticmethod
    def _check_replica_variables(grad_list):
        main = [v.op.name for _, v in grad_list[0]]
        for index, grads in enumerate(grad_list[1:], 1):
            prefix = 'tower{}/'.format(index)
            for name, (_, var) in zip(main, grads):
                if var.op.name != prefix + name:
                    raise ValueError("tower{} has a gradient for variable {} where tower0 has one for {}; "
                                     "expected {}".format(index, var.op.name, name, prefix + name))

    def _allreduce(self, grad_list):
        """K lists of N reduced gradients, the k-th list for tower k."""
        all_grads, _ = split_grad_list(grad_list)
        devices = self.raw_devices
        mode = self._mode
        if mode == 'nccl':
            dtypes = {g.dtype.base_dtype for g in all_grads[0]}
            if not dtypes <= {tf.float16, tf.float32, tf.float64}:
                logger.warn("mode='nccl' cannot all-reduce gradients of dtype {}; using mode='cpu'.".format(
                    ', '.join(sorted(d.name for d in dtypes))))
                mode = 'cpu'
        if mode in ('cpu', 'gpu'):
            summed = aggregate_grads(grad_list, devices=['/cpu:0'] if mode == 'cpu' else devices,
                                     average=self._average)
            return [[g for g, _ in summed] for _ in grad_list]
        allreduce = {'nccl': lambda grads, devices, average: allreduce_grads(grads, average, devices),
                     'hierarchical': allreduce_grads_hierarchical,
                     'collective': allreduce_grads_collective}[mode]
        packer = GradientPacker(len(devices))
        if packer.compute_strategy(all_grads[0]):
            packed = allreduce(packer.pack_all(all_grads, devices), devices, average=self._average)
            return packer.unpack_all(packed, devices)
        return allreduce(all_grads, devices, average=self._average)

    def _apply(self, opt):
        """Apply each tower's gradients to its own variables, on its device, each tower with
        optimizer state of its own (see :func:`apply_on_replicas`)."""
        with tf.name_scope('apply_gradients'):
            train_ops = apply_on_replicas(opt, self.grads, self.raw_devices)
        return tf.group(*train_ops, name='train_op')

    @staticmethod
    def get_post_init_ops():
        """An op that copies every variable of the main tower (and the optimizer's state of it)
        into its replicas ``tower{k}/...``, k > 0. Replicas of trainable variables must have
        their main variable; others without one are left out with a warning."""
        variables = tfv1.global_variables() + tfv1.local_variables()
        by_name = {v.op.name: v for v in variables}
        trainable = {v.op.name for v in tfv1.trainable_variables()}
        assigns = []
        for var in variables:
            match = _REPLICA_PREFIX.match(var.op.name)
            if not match:
                continue
            source = by_name.get(var.op.name[match.end():])
            if source is None:
                if var.op.name in trainable:
                    raise ValueError("[ReplicatedTrainer] Cannot sync the replica {}: the main tower has no "
                                     "variable {}.".format(var.op.name, var.op.name[match.end():]))
                logger.warn("[ReplicatedTrainer] {} has no main variable to copy from; it is left out of "
                            "the sync (it is not trainable).".format(var.op.name))
                continue
            assigns.append(var.assign(source.read_value()))
        logger.info("'sync_variables_from_main_tower' copies {} variables.".format(len(assigns)))
        return tf.group(*assigns, name='sync_variables_from_main_tower')


class AsyncMultiGPUBuilder(DataParallelBuilder):
    """Towers share one copy of the variables; each step every tower applies its own
    gradients, without waiting for the others (K updates per step).

    Args:
        towers (int or list): GPU ids or device strings.
        scale_gradient (bool): divide every gradient by K, so that the K updates together
            move as far as one synchronous update with the averaged gradient.
    """

    def __init__(self, towers, scale_gradient=True):
        super().__init__(towers)
        self._scale_gradient = bool(scale_gradient)

    def call_for_each_tower(self, tower_fn):
        """Build the towers (variables on '/cpu:0' from 4 towers on, else on the towers'
        devices); returns what ``tower_fn`` returns for each."""
        ps_device = 'cpu' if len(self.towers) >= 4 else 'gpu'
        devices = _ps_device_functions(self.raw_devices, ps_device)
        return DataParallelBuilder.call_for_each_tower(self.towers, tower_fn, devices)

    def build(self, grad_list, get_opt_fn):
        """The training op: one ``apply_gradients`` per tower, grouped."""
        self._check_grad_list(grad_list)
        _check_shared_variables(grad_list)
        num_tower = len(grad_list)
        if self._scale_gradient and num_tower > 1:
            scale = ScaleGradient(('.*', 1.0 / num_tower), verbose=False)
            grad_list = [scale.process(grads) for grads in grad_list]
        opt = get_opt_fn()
        train_ops = []
        with tf.name_scope('async_apply_gradients'):
            for index, grads in enumerate(grad_list):
                with tf.device(self.raw_devices[index]):
                    train_ops.append(opt.apply_gradients(grads, name='apply_grad_{}'.format(index)))
        return tf.group(*train_ops, name='train_op')
