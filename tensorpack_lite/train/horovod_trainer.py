"""Data-parallel training across processes, Horovod-style: one process (rank) per device.

The engine is Horovod when ``horovod.tensorflow`` imports, otherwise MPI through mpi4py
(:mod:`tensorpack_lite.graph_builder.mpi_ops`, the same API; ``pip install
"tensorpack_lite[mpi]"``). Start one copy of the training script per rank::

    mpiexec -n 2 python train.py                           # MPI (or srun, the MPI Operator)
    horovodrun -np 2 -H localhost:2 --gloo python train.py  # Horovod

and in the script::

    trainer = HorovodTrainer()
    if trainer.is_chief:                       # rank 0 writes logs, stats and checkpoints
        logger.set_logger_dir('train_log/run1')
    df = RankShardData(my_dataflow, trainer.rank, trainer.size)   # this rank's share
    launch_train_with_config(TrainConfig(model=Model(), dataflow=BatchData(df, 32), ...), trainer)

Horovod 0.28.1 (its last release) builds against TensorFlow up to 2.18.1; see
``docs/horovod.md`` for both engines.
"""

from ..cluster import exposure
from ..compat import tf
from ..coordination.mpi import MPIProtocol
from ..coordination.protocol import BroadcastEveryEpoch
from ..dataflow.base import ProxyDataFlow
from ..dataflow.state import get_dataflow_state, set_dataflow_state
from ..graph_builder import mpi_ops
from ..graph_builder.backprop_order import backprop_order, consecutive_groups
from ..graph_builder.devices import interpret_towers, tower_device
from ..graph_builder.rank_towers import RankTowersBuilder, towers_and_ranks_mean
from ..input_source.input_source_base import FeedfreeInput
from ..multiprocess.sync_statistics import cross_rank_mean_scope
from ..tfutils.tower_context import TrainTowerContext
from ..utils import logger
from ..utils.argtools import is_int
from .multiprocess_trainer import MultiProcessTrainer

__all__ = ['HorovodTrainer', 'RankShardData']

INSTALL_COMMAND = ("HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_MPI=1 "
                   "pip install --no-build-isolation horovod==0.28.1")


def import_horovod():
    """``horovod.tensorflow``, or an ImportError that says how to install it."""
    try:
        import horovod.tensorflow as hvd
    except (ImportError, tf.errors.NotFoundError) as err:
        raise ImportError(
            "HorovodTrainer needs horovod built for TensorFlow, which cannot be imported here: "
            "{}: {}. Install TensorFlow <= 2.18.1 (horovod 0.28.1, its last release, does not build "
            "against newer versions; TensorFlow {} is installed), e.g. `pip install "
            "tensorflow-cpu==2.18.1`, then `{}` (needs cmake and g++). In a tensorpack_lite "
            "checkout, `bash .ci/horovod_env.sh` builds such an environment.".format(
                type(err).__name__, err, tf.__version__, INSTALL_COMMAND)) from err
    return hvd


def import_engine():
    """``(hvd, description)``: ``horovod.tensorflow`` when it imports, else the MPI engine
    (:mod:`~tensorpack_lite.graph_builder.mpi_ops`), else an ImportError saying how to get one."""
    try:
        return import_horovod(), 'Horovod'
    except ImportError as horovod_error:
        try:
            import mpi4py.MPI  # noqa: F401
        except ImportError as mpi_error:
            raise ImportError(
                "HorovodTrainer needs an engine: neither horovod nor mpi4py can be imported "
                "(mpi4py: {}). Install the MPI engine with `pip install \"tensorpack_lite[mpi]\"` "
                "(mpi4py and MPICH, no compiler needed), or horovod: {}".format(
                    mpi_error, horovod_error)) from mpi_error
    return mpi_ops, 'MPI ({})'.format(mpi_ops.engine_name())


class RankShardData(ProxyDataFlow):
    """The share of one rank of a DataFlow: datapoints ``rank``, ``rank + size``,
    ``rank + 2 * size``... of every epoch of ``ds``.

    Every rank gets the same number of datapoints, ``len(ds) // size`` (an incomplete last
    group of ``size`` datapoints is dropped on all ranks), so every rank runs the same number
    of steps: each step is a collective operation that all ranks must join. ``ds`` must yield
    the same datapoints in the same order on every rank (e.g. shuffle with the same seed).

    Example::

        df = RankShardData(DataFromList(samples, shuffle=False), trainer.rank, trainer.size)
        df = BatchData(df, 32)    # 32 per rank: 32 * size per step in total
    """

    def __init__(self, ds, rank, size):
        super().__init__(ds)
        for name, value in (('rank', rank), ('size', size)):
            if not is_int(value):
                raise TypeError("RankShardData: {} must be an integer, got {!r}".format(name, value))
        if size < 1:
            raise ValueError("RankShardData: size must be at least 1, got {}".format(size))
        if not 0 <= rank < size:
            raise ValueError("RankShardData: rank must be in [0, {}), got {}".format(size, rank))
        self.rank, self.size = int(rank), int(size)

    def __len__(self):
        return len(self.ds) // self.size

    def __iter__(self):
        mine = None
        for index, dp in enumerate(self.ds):
            position = index % self.size
            if position == self.rank:
                mine = dp
            if position == self.size - 1:
                yield mine

    def get_state(self):
        """The wrapped DataFlow's state: it yields after whole groups of ``size`` datapoints, so
        its position is at a group's boundary."""
        return {'ds': get_dataflow_state(self.ds)}

    def set_state(self, state):
        set_dataflow_state(self.ds, state['ds'])


class HorovodTrainer(MultiProcessTrainer):
    """Data-parallel training with one process per device, synchronised by Horovod or MPI.

    The engine (:attr:`hvd`) is ``horovod.tensorflow`` when it imports, else
    :mod:`~tensorpack_lite.graph_builder.mpi_ops` (mpi4py), which has the same API; the log
    says which ("... using Horovod" or "... using MPI (mpi4py x, MPICH y)").

    Each rank builds one training tower on its device and takes its own batches (so the
    total batch of a step is the per-rank batch x ``size``); the gradients are averaged (or
    summed) across ranks with ``hvd.allreduce`` before each rank applies them, so all ranks
    keep identical variables. With ``gpus``, each rank drives several towers instead (e.g.
    one rank per machine), each taking its own batch: the total batch of a step is then the
    per-tower batch x towers x ``size``, and the update is the mean (or sum) of the gradients
    of every tower of every rank (see
    :class:`~tensorpack_lite.graph_builder.rank_towers.RankTowersBuilder`). After the session
    is initialized (``session_init`` runs on rank 0 only), rank 0's variables are broadcast
    to all ranks, and again at each epoch's end when :attr:`BROADCAST_EVERY_EPOCH` (e.g. for
    statistics that are not trained).

    Rank 0 is the chief (``is_chief``): only it runs chief-only callbacks (e.g.
    :class:`ModelSaver`), and only it writes files. On other ranks, :class:`TFEventWriter`
    and :class:`JSONWriter` are not registered and, when training starts, the logger stops
    writing into the logger directory (set it on rank 0 only to leave no file at all).
    When training ends on one rank (finished, stopped or failed), it shuts the engine down,
    which ends the training of the other ranks too (see :meth:`main_loop`). What the ranks agree
    on goes through :attr:`protocol`, a :class:`~tensorpack_lite.coordination.mpi.MPIProtocol`.

    Notes:

    * Start the script with ``mpiexec -n N ...`` (or ``horovodrun -np N ...``); one rank per GPU
      (without ``gpus``). Then each rank sees only the GPU of its local rank
      (``visible_device_list``), so do not use the GPU in TensorFlow before the trainer is
      created. With ``gpus``, a rank sees every GPU of its machine: ranks that share a machine
      must name different GPUs, e.g. ``gpus=[2 * local_rank, 2 * local_rank + 1]``.
    * Give each rank its own share of the data, e.g. with :class:`RankShardData` or with a
      per-rank random seed; every rank must run the same number of steps.
    * Build the same graph on every rank: callbacks that create variables must run on all
      ranks. Ranks with different variables fail with an error naming them.
    * Use :attr:`rank`, :attr:`size` and :attr:`local_rank` (or ``hvd.rank()``) for code
      that depends on the rank.

    Args:
        average (bool): average the gradients over ranks (True) or sum them.
        compression: the engine's ``hvd.Compression.none`` (default) or ``hvd.Compression.fp16``
            to send the gradients as float16.
        gpus (int or list): None (the default): one tower per rank, as tensorpack's. Else this
            rank's towers, as for :class:`SyncMultiGPUTrainerReplicated`: a number of GPUs, a list
            of GPU ids, or device strings such as ``['/cpu:0', '/cpu:1']`` (create the session
            with ``ConfigProto(device_count={'CPU': 2})`` for those); the same number of towers
            on every rank. Tower 0 holds the variables, the others replicas; with ``average``,
            the update is the mean gradient over every tower of every rank (one process on the
            combined batch), else their sum (as Horovod's Sum with one rank per tower would give).
    """

    BROADCAST_EVERY_EPOCH = True
    """Broadcast the variables of rank 0 at the end of every epoch too."""

    MPI_GROUPS = 4
    """The MPI engine all-reduces the gradients in groups of at least 1 / MPI_GROUPS of their
    bytes (about this many, and a last one of what is left), taken in the order backprop
    completes them
    (:func:`~tensorpack_lite.graph_builder.backprop_order.consecutive_groups` of
    :func:`~tensorpack_lite.graph_builder.backprop_order.backprop_order`), one MPI call each,
    one after the other: the first group travels while backprop computes the rest (Horovod
    fuses what is ready by itself)."""

    def __init__(self, average=True, compression=None, gpus=None):
        self.devices = None if gpus is None else interpret_towers(gpus, type(self).__name__)
        hvd, self.engine = import_engine()
        if compression is None:
            compression = hvd.Compression.none
        base = mpi_ops.Compressor if hvd is mpi_ops else hvd.compression.Compressor
        if not (isinstance(compression, type) and issubclass(compression, base)):
            raise TypeError("HorovodTrainer: compression must be a compressor of its engine ({}) such "
                            "as trainer.hvd.Compression.none or .fp16, got {!r}".format(
                                self.engine, compression))
        self.hvd = hvd
        hvd.init()
        self._average = bool(average)
        self._compression = compression
        self.protocol = MPIProtocol(hvd, self.engine, 1 if self.devices is None else len(self.devices),
                                    type(self).__name__)
        self._rank, self._size = self.protocol.index, self.protocol.size
        self._local_rank, self._local_size = self.protocol.local_rank, self.protocol.local_size
        self.is_chief = self.protocol.is_chief
        self._builder = None
        super().__init__()
        towers = '' if self.devices is None else 'towers on {}, '.format(
            ', '.join(tower_device(t) for t in self.devices))
        logger.info("[HorovodTrainer] rank {} of {} (local rank {}), {}gradients {} with {}, "
                    "using {}.".format(self._rank, self._size, self._local_rank, towers,
                                       'averaged' if self._average else 'summed', compression.__name__,
                                       self.engine))
        if self._size > 1:     # what this rank's engine listens on, and who reaches it
            engine = ("the MPI engine unpickles nothing it receives" if hvd is mpi_ops else
                      "what else Horovod's own services accept is in docs/security.md")
            exposure.say_what_listens(
                'HorovodTrainer rank {} ({})'.format(self._rank, self.engine),
                "A peer that reaches them can send this rank tensors of its own (the job's sums and weights "
                "are then wrong); {}. Keep the network private (docs/security.md).".format(engine))

    rank = property(lambda self: self._rank, doc="This process's rank (0 is the chief).")
    size = property(lambda self: self._size, doc="The number of ranks.")
    local_rank = property(lambda self: self._local_rank, doc="This process's rank on its machine.")
    local_size = property(lambda self: self._local_size, doc="The number of ranks on this machine.")

    # ----- graph -------------------------------------------------------------------------------

    def _setup_graph(self, input, get_cost_fn, get_opt_fn):
        callbacks = [BroadcastEveryEpoch()] if self.BROADCAST_EVERY_EPOCH else []
        if self.devices is not None:
            self._setup_towers(input, get_cost_fn, get_opt_fn)
            return callbacks
        logger.info("Building graph for the training tower of rank {} ...".format(self._rank))
        with TrainTowerContext(''), self.protocol.ordered(), cross_rank_mean_scope(self._rank_mean):
            grads = self._make_get_grad_fn(input, get_cost_fn, get_opt_fn)()
            grads = self.allreduce(grads)
            self.train_op = get_opt_fn().apply_gradients(grads, name='train_op')
        return callbacks

    def _setup_towers(self, input, get_cost_fn, get_opt_fn):
        """``gpus``: this rank's towers, replicas of tower 0, one cross-rank reduction a step."""
        num_tower = len(self.devices)
        if num_tower > 1 and not isinstance(input, FeedfreeInput):
            raise TypeError("HorovodTrainer with {} towers needs a feed-free InputSource (e.g. QueueInput), "
                            "so that each tower takes its own batch; {} would give every tower the same "
                            "one.".format(num_tower, type(input).__name__))
        self._builder = RankTowersBuilder(self.devices, self._average, self._allreduce_tensors)
        logger.info("Building graph for the {} training towers of rank {} ...".format(num_tower, self._rank))
        rank_mean = towers_and_ranks_mean(num_tower, self._rank_mean)
        with self.protocol.ordered(), cross_rank_mean_scope(rank_mean):
            tower_fn = self._make_get_grad_fn(input, get_cost_fn, get_opt_fn)
            grad_list = self._builder.call_for_each_tower(tower_fn)
            self.train_op, self.protocol.post_init_op = self._builder.build(grad_list, get_opt_fn)
        self.protocol.session_devices = self._builder.raw_devices

    def _rank_mean(self, tensor):
        return self.hvd.allreduce(tensor, op=self.hvd.Average)

    def allreduce(self, grads):
        """Average (or sum) a list of (gradient, variable) across ranks."""
        reduced = self._allreduce_tensors([g for g, _ in grads])
        return list(zip(reduced, [v for _, v in grads]))

    def _allreduce_tensors(self, tensors):
        """The step's all-reduce of ``tensors`` (the gradients), with the protocol's stop vote."""
        vote = self.protocol.stop_vote_in_graph()
        tensors = list(tensors)
        costs = self._shared_costs()    # with this rank's mean cost: every rank reads the step's mean
        tensors.append(vote.tensor(tensors[0].dtype if tensors else tf.float32, cost=costs or None,
                                   gradient_norm=self._shared_gradient_norms() or None))
        if self._size > 1:
            op = self.hvd.Average if self._average else self.hvd.Sum
            with tf.name_scope('AllReduce'):
                if self.hvd is mpi_ops:
                    tensors = self._mpi_allreduce_in_backprop_order(tensors, op)
                else:
                    tensors = [self.hvd.allreduce(t, op=op, compression=self._compression) for t in tensors]
        vote.set_total(tensors.pop())
        return tensors

    def _mpi_allreduce_in_backprop_order(self, tensors, op):
        """The MPI engine's reduction of ``tensors``: groups of :attr:`MPI_GROUPS` (see there)."""
        sizes = [(t.shape.num_elements() or 0) * t.dtype.size for t in tensors]
        groups = consecutive_groups(backprop_order(tensors), sizes, -(-sum(sizes) // self.MPI_GROUPS))
        reduced = [None] * len(tensors)
        for group in groups:
            outputs = mpi_ops.grouped_allreduce([tensors[i] for i in group], op=op,
                                                compression=self._compression)
            for index, output in zip(group, outputs):
                reduced[index] = output
        return reduced
