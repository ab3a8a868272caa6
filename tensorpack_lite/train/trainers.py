"""Trainers of a single cost: on one device (SimpleTrainer...) and data-parallel on several
(SyncMultiGPUTrainer*, AsyncMultiGPUTrainer)."""

from ..callbacks.graph import RunOp
from ..graph_builder.devices import check_session_devices, interpret_towers, is_gpu_tower
from ..graph_builder.training import (AsyncMultiGPUBuilder, SyncMultiGPUParameterServerBuilder,
                                      SyncMultiGPUReplicatedBuilder)
from ..input_source.input_source import QueueInput
from ..input_source.input_source_base import FeedfreeInput
from ..loop.callback import Callback
from ..tfutils.tower_context import TrainTowerContext
from ..utils import logger
from .horovod_trainer import HorovodTrainer  # tensorpack's path: train.trainers.HorovodTrainer
from .tower import SingleCostTrainer

__all__ = ['SimpleTrainer', 'NoOpTrainer', 'QueueInputTrainer', 'DataParallelTrainer',
           'SyncMultiGPUTrainerParameterServer', 'SyncMultiGPUTrainer', 'SyncMultiGPUTrainerReplicated',
           'AsyncMultiGPUTrainer', 'HorovodTrainer']


class SimpleTrainer(SingleCostTrainer):
    """One training tower on the default device; each step applies its gradients.

    Example::

        launch_train_with_config(TrainConfig(model=Model(), dataflow=df, max_epoch=10),
                                 SimpleTrainer())
    """

    def _setup_graph(self, input, get_cost_fn, get_opt_fn):
        logger.info("Building graph for a single training tower ...")
        with TrainTowerContext(''):
            grads = self._make_get_grad_fn(input, get_cost_fn, get_opt_fn)()
            self.train_op = get_opt_fn().apply_gradients(grads, name='train_op')
        return []


class NoOpTrainer(SimpleTrainer):
    """Builds the graph like :class:`SimpleTrainer` but trains nothing: each step is an empty
    hooked run, so only the callbacks work (e.g. to run inference with callbacks)."""

    def run_step(self):
        self.hooked_sess.run([])


class QueueInputTrainer(SimpleTrainer):
    """A :class:`SimpleTrainer` that insists on a :class:`QueueInput`."""

    def _setup_graph(self, input, get_cost_fn, get_opt_fn):
        if not isinstance(input, QueueInput):
            raise TypeError("QueueInputTrainer needs a QueueInput, got {!r}".format(input))
        return super()._setup_graph(input, get_cost_fn, get_opt_fn)


class _TowerDeviceCheck(Callback):
    """Before training, checks that the session has every device a tower was built on."""

    _chief_only = False

    def __init__(self, devices, owner):
        self._devices = devices
        self._owner = owner

    def _before_train(self):
        check_session_devices(self.trainer.sess, self._devices, self._owner)


class DataParallelTrainer(SingleCostTrainer):
    """What the multi-tower trainers share: ``devices``, one tower per device, each taking its
    own batch from a feed-free InputSource, and a check that the session has the devices.

    Subclasses set ``self._builder`` and implement :meth:`_build_train_op`.
    """

    def __init__(self, gpus):
        self.devices = interpret_towers(gpus, type(self).__name__)
        super().__init__()

    @property
    def world_size(self):
        """One replica per tower."""
        return len(self.devices)

    def _setup_graph(self, input, get_cost_fn, get_opt_fn):
        if len(self.devices) > 1 and not isinstance(input, FeedfreeInput):
            raise TypeError("{} with {} towers needs a feed-free InputSource (e.g. QueueInput), so that "
                            "each tower takes its own batch; {} would give every tower the same one.".format(
                                type(self).__name__, len(self.devices), type(input).__name__))
        tower_fn = self._make_get_grad_fn(input, get_cost_fn, get_opt_fn)
        grad_list = self._builder.call_for_each_tower(tower_fn)
        check = _TowerDeviceCheck(self._builder.raw_devices, type(self).__name__)
        return [check] + list(self._build_train_op(grad_list, get_opt_fn))

    def _build_train_op(self, grad_list, get_opt_fn):
        """Set ``self.train_op`` from the towers' gradients; return extra callbacks."""
        raise NotImplementedError("{} must implement _build_train_op()".format(type(self).__name__))


class SyncMultiGPUTrainerParameterServer(DataParallelTrainer):
    """Data-parallel training with the variables in one place (a parameter server): each
    step every tower computes gradients on its own batch, they are averaged and applied once.
    The total batch of a step is the per-tower batch times the number of towers.

    Args:
        gpus (int or list): the towers: a number of GPUs, a list of GPU ids, or device
            strings such as ``['/cpu:0', '/cpu:1']``.
        ps_device (str): where the variables live: ``'cpu'`` ('/cpu:0') or ``'gpu'`` (spread
            over the towers' devices). Default: ``'gpu'`` for up to 2 towers, else ``'cpu'``.

    Example::

        launch_train_with_config(config, SyncMultiGPUTrainerParameterServer(2))
    """

    def __init__(self, gpus, ps_device=None):
        super().__init__(gpus)
        if ps_device is None:
            ps_device = 'gpu' if len(self.devices) <= 2 else 'cpu'
        self._builder = SyncMultiGPUParameterServerBuilder(self.devices, ps_device)

    def _build_train_op(self, grad_list, get_opt_fn):
        self.train_op = self._builder.build(grad_list, get_opt_fn)
        return []


def SyncMultiGPUTrainer(gpus):
    """The default synchronous multi-GPU trainer:
    ``SyncMultiGPUTrainerParameterServer(gpus, ps_device='cpu')``."""
    return SyncMultiGPUTrainerParameterServer(gpus, ps_device='cpu')


class SyncMultiGPUTrainerReplicated(DataParallelTrainer):
    """Data-parallel training where every tower keeps a replica of the variables: each step
    the gradients are all-reduced and every tower applies the same average to its replica,
    with optimizer state of its own (so K towers make the update of one tower on the K
    batches with any optimizer).
    Replicas start from (and, with :attr:`BROADCAST_EVERY_EPOCH`, are reset every epoch to)
    the main tower's variables, which are the ones saved in checkpoints.

    Args:
        gpus (int or list): the towers: a number of GPUs, a list of GPU ids, or device
            strings such as ``['/cpu:0', '/cpu:1']``.
        average (bool): average the gradients of the towers (else sum them).
        mode (str): how gradients are all-reduced: ``'nccl'`` (GPUs only: TensorFlow's
            collective ops through NCCL, as ``'collective'`` on GPUs), ``'cpu'``,
            ``'gpu'``, ``'hierarchical'`` (8 towers) or ``'collective'``. Default:
            ``'hierarchical'`` for 8 towers, else ``'gpu'``.

    Example::

        launch_train_with_config(config, SyncMultiGPUTrainerReplicated(['/cpu:0', '/cpu:1'],
                                                                       mode='collective'))
    """

    BROADCAST_EVERY_EPOCH = True
    """Copy the main tower's variables into the replicas after every epoch too (they should
    be equal already; this guards against numerical drift)."""

    def __init__(self, gpus, average=True, mode=None):
        super().__init__(gpus)
        mode = self._choose_mode(None if mode is None else str(mode).lower())
        self._builder = SyncMultiGPUReplicatedBuilder(self.devices, average, mode)

    def _choose_mode(self, mode):
        modes = SyncMultiGPUReplicatedBuilder.MODES
        if mode is not None and mode not in modes:
            raise ValueError("SyncMultiGPUTrainerReplicated: unknown mode {!r}; use one of {}".format(
                mode, ', '.join(repr(m) for m in modes)))
        num_tower = len(self.devices)
        if mode == 'hierarchical' and num_tower != 8:
            logger.warn("mode='hierarchical' needs 8 towers, not {}; using the default mode.".format(
                num_tower))
            mode = None
        if mode is None:
            mode = 'hierarchical' if num_tower == 8 else 'gpu'
        on_gpus = all(is_gpu_tower(t) for t in self.devices)
        if mode == 'cpu' and on_gpus:
            logger.warn("mode='cpu' would place the whole model on the CPU with TensorFlow 2; using "
                        "mode='gpu'.")
            mode = 'gpu'
        logger.info("SyncMultiGPUTrainerReplicated: all-reducing gradients with mode='{}'.".format(mode))
        return mode

    def _build_train_op(self, grad_list, get_opt_fn):
        self.train_op, post_init_op = self._builder.build(grad_list, get_opt_fn)
        if post_init_op is None:
            return []
        sync = RunOp(post_init_op, run_before=True, run_as_trigger=self.BROADCAST_EVERY_EPOCH, verbose=True)
        sync.name_scope = 'SyncVariables'
        return [sync]


class AsyncMultiGPUTrainer(DataParallelTrainer):
    """Data-parallel training where every tower applies its own gradients to the shared
    variables, without averaging: K updates per step for K towers.

    Args:
        gpus (int or list): the towers: a number of GPUs, a list of GPU ids, or device
            strings such as ``['/cpu:0', '/cpu:1']``.
        scale_gradient (bool): divide each tower's gradients by K, so that the K updates of a
            step together match one synchronous update in size.
    """

    def __init__(self, gpus, scale_gradient=True):
        super().__init__(gpus)
        self._builder = AsyncMultiGPUBuilder(self.devices, scale_gradient)

    def _build_train_op(self, grad_list, get_opt_fn):
        self.train_op = self._builder.build(grad_list, get_opt_fn)
        return []
