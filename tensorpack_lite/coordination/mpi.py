"""The multi-process protocol on Horovod or MPI: what the ranks of ``HorovodTrainer`` agree
through. The engine (``horovod.tensorflow``, or :mod:`~tensorpack_lite.graph_builder.mpi_ops` on
mpi4py, the same API) broadcasts rank 0's schedule and variables, gathers every rank's variable
names to check them, and is shut down when training ends on one rank, which ends the others'.
"""

import contextlib
import re

import numpy as np

from ..compat import tf, tfv1
from ..graph_builder import mpi_ops
from ..graph_builder.devices import check_session_devices
from ..loop.state import Schedule, StopTraining
from ..tfutils.sesscreate import NewSessionCreator
from ..utils import logger
from ..utils.cpu import usable_cpus
from ..utils.gpu import get_num_gpu
from .protocol import MultiProcessProtocol

__all__ = ['MPIProtocol', 'SHUT_DOWN_MESSAGES']

SHUT_DOWN_MESSAGES = ('Horovod has been shut down', mpi_ops.SHUT_DOWN_MESSAGE)
"""What a collective op's error says when another rank shut the engine down."""


class MPIProtocol(MultiProcessProtocol):
    """The protocol of one rank, on an initialized engine.

    Args:
        hvd: the engine (``horovod.tensorflow`` or ``mpi_ops``), initialized (``hvd.init()``).
        engine (str): the engine in the log ('Horovod', 'MPI (...)').
        num_tower (int): this rank's towers (the same on every rank, checked).
        owner (str): the trainer, in errors.

    Attributes:
        session_devices (list): the devices the session must have (this rank's towers), or None.
    """

    KIND = 'rank'
    CHIEF = 'rank 0'

    def __init__(self, hvd, engine, num_tower=1, owner='HorovodTrainer'):
        rank = hvd.rank()
        super().__init__(rank, hvd.size(), 'Rank {}'.format(rank), rank == 0)
        self.hvd, self.engine = hvd, engine
        self.local_rank, self.local_size = hvd.local_rank(), hvd.local_size()
        self.num_tower = num_tower
        self.owner = owner
        self.session_devices = None
        self._gather_names = self._schedule_in = self._schedule_of_rank0 = None
        self._num_variables = 0

    def ordered(self):
        """Collectives built inside run in creation order (the MPI engine needs it; Horovod
        orders them itself)."""
        return mpi_ops.ordered_collectives() if self.hvd is mpi_ops else contextlib.nullcontext()

    # ----- start -------------------------------------------------------------------------------

    def session_creator(self, session_creator):
        """``session_creator``, a :class:`NewSessionCreator`, its config given this rank's GPU
        (one tower per rank) and, unless the user set the config, a share of the machine's CPUs
        as inter-op threads."""
        if not isinstance(session_creator, NewSessionCreator):
            raise ValueError("HorovodTrainer needs a NewSessionCreator (it sets the devices of each "
                             "rank in its config), got {}".format(type(session_creator).__name__))
        config = session_creator.config
        if get_num_gpu() > 0 and self.session_devices is None:
            config.gpu_options.visible_device_list = str(self.local_rank)
        if not session_creator.user_provided_config:
            config.inter_op_parallelism_threads = max(1, usable_cpus() // self.local_size)
        return session_creator

    def build_start(self):
        """The gather of every rank's variable names, the broadcast of rank 0's variables and
        of its schedule."""
        variables = tfv1.global_variables()
        self._num_variables = len(variables)
        with tf.name_scope('HorovodTrainer'):
            with self.ordered():   # run together: in the same order on every rank
                self._gather_names = self._build_variable_names_gather(variables)
            self.broadcast_op = self.hvd.broadcast_variables(variables, root_rank=0)
            self._schedule_in = tfv1.placeholder(tf.int64, [Schedule.VECTOR_LENGTH], name='schedule_in')
            self._schedule_of_rank0 = self.hvd.broadcast(self._schedule_in, root_rank=0, name='schedule')

    def session_created(self, sess):
        """Check that the session has this rank's towers and that every rank built the same
        variables (and towers), then copy rank 0's variables to every rank."""
        if self.session_devices is not None:
            check_session_devices(sess, self.session_devices, self.owner)
        try:
            self.check_same_variables(*sess.run(self._gather_names))
        except RuntimeError:
            self.hvd.shutdown()     # raised on every rank: they end together, with no abort
            raise
        if self.is_chief:
            logger.info("Broadcasting {} global variables to {} ranks ...".format(
                self._num_variables, self.size))
        else:
            logger.info("Rank {}: waiting for the variables of rank 0 ...".format(self.index))
        self.broadcast_variables(sess)

    def _build_variable_names_gather(self, variables):
        names = '\n'.join(sorted(v.op.name for v in variables)).encode('utf-8')
        blob = tf.constant(np.frombuffer(names, dtype=np.uint8))
        return (self.hvd.allgather(blob, name='variable_names'),
                self.hvd.allgather(tf.constant([len(names), self.num_tower], tf.int64),
                                   name='variable_names_size'))

    @staticmethod
    def check_same_variables(blobs, sizes_and_towers):
        """Raise on every rank when the ranks built different variables (a broadcast would
        hang) or different numbers of towers (the mean would be wrong). ``blobs``: every rank's
        sorted variable names, newline-separated, concatenated as uint8; ``sizes_and_towers``:
        each rank's byte count and towers."""
        sizes, towers = sizes_and_towers[0::2], sizes_and_towers[1::2]
        if len(set(towers.tolist())) > 1:
            raise RuntimeError("HorovodTrainer: the ranks built different numbers of towers: {} (rank by "
                               "rank). Give every rank the same number of towers (gpus=...).".format(
                                   ', '.join(str(t) for t in towers)))
        offsets = np.concatenate([[0], np.cumsum(sizes)])
        per_rank = [set(blobs[offsets[r]:offsets[r + 1]].tobytes().decode('utf-8').split('\n'))
                    for r in range(len(sizes))]
        differences = []
        for r, names in enumerate(per_rank[1:], start=1):
            if names != per_rank[0]:
                differences.append("rank {} lacks {} and has extra {}".format(
                    r, sorted(per_rank[0] - names)[:10], sorted(names - per_rank[0])[:10]))
        if differences:
            raise RuntimeError(
                "HorovodTrainer: the ranks built different global variables; compared with rank 0: "
                "{}. Every rank must build the same graph (callbacks that create variables must "
                "not be chief-only).".format('; '.join(differences)))

    def _exchange_schedule(self, sess, mine):
        return Schedule.from_vector(sess.run(self._schedule_of_rank0, {self._schedule_in: mine.as_vector()}))

    # ----- end ---------------------------------------------------------------------------------

    def explain(self, err):
        """A step whose collective failed because another rank shut the engine down: that rank
        ended its training, and this one stops as if a callback raised ``StopTraining``."""
        if not any(m in str(err.message) for m in SHUT_DOWN_MESSAGES):
            return err
        ended = re.search(r'shut down by rank (\d+)', str(err.message))   # the MPI engine says
        return StopTraining("rank {}: {} ended its training and shut {} down".format(
            self.index, 'rank ' + ended.group(1) if ended else 'another rank', self.engine))

    def teardown(self):
        """Shut the engine down, which ends the training of the other ranks too."""
        logger.info("Rank {}: shutting {} down.".format(self.index, self.engine))
        self.hvd.shutdown()
