"""The multi-process protocol: how the processes of one synchronous training job agree, written
once and composed by every multi-process trainer (``trainer.protocol``), which only builds the graph.

- :mod:`~tensorpack_lite.coordination.protocol`: :class:`MultiProcessProtocol`, what the processes
  agree on (the start and the schedule, the chief's variables, the stop, a failed step explained,
  whose resume state each writes, who writes files), and :class:`BroadcastEveryEpoch`.
- :mod:`~tensorpack_lite.coordination.tf_runtime`: :class:`TFRuntimeProtocol`, on TensorFlow's
  distributed runtime (the collective and parameter-server trainers).
- :mod:`~tensorpack_lite.coordination.mpi`: :class:`MPIProtocol`, on Horovod or MPI
  (``HorovodTrainer``).

The stop vote they carry is :mod:`tensorpack_lite.multiprocess.stop_vote`'s.
"""

from . import mpi, protocol, tf_runtime
from .mpi import MPIProtocol
from .protocol import BroadcastEveryEpoch, MultiProcessProtocol
from .tf_runtime import TFRuntimeProtocol

__all__ = ['MultiProcessProtocol', 'BroadcastEveryEpoch', 'TFRuntimeProtocol', 'MPIProtocol',
           'mpi', 'protocol', 'tf_runtime']
