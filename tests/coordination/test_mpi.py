"""coordination/mpi.py: the protocol of one rank of Horovod or MPI, on an engine that records
what it is asked (the ranks of a real job: tests/distributed/test_mpi.py, test_horovod.py)."""

import numpy as np
import pytest

from tensorpack_lite.compat import tfv1
from tensorpack_lite.coordination.mpi import MPIProtocol
from tensorpack_lite.graph_builder import mpi_ops
from tensorpack_lite.loop.state import StopTraining
from tensorpack_lite.tfutils.sesscreate import NewSessionCreator


class Engine:
    """The part of Horovod's API the protocol asks outside the graph."""

    def __init__(self, rank, size=2):
        self._rank, self._size, self.shut_down = rank, size, 0

    def rank(self):
        return self._rank

    def size(self):
        return self._size

    def local_rank(self):
        return self._rank

    def local_size(self):
        return self._size

    def shutdown(self):
        self.shut_down += 1


def names_of_ranks(*ranks, towers=None):
    """What the gather of the ranks' variable names gives: the blobs, the sizes and towers."""
    blobs = [np.frombuffer('\n'.join(sorted(names)).encode('utf-8'), np.uint8) for names in ranks]
    towers = towers or [1] * len(ranks)
    return np.concatenate(blobs), np.array([x for b, t in zip(blobs, towers) for x in (len(b), t)])


def test_rank_0_is_the_chief_and_the_others_name_their_resume_states():
    chief, other = MPIProtocol(Engine(0), 'Horovod'), MPIProtocol(Engine(1), 'Horovod')
    assert (chief.is_chief, chief.state_owner, chief.name) == (True, None, 'Rank 0')
    assert (other.is_chief, other.state_owner, other.name, other.size) == (False, 'rank-1', 'Rank 1', 2)
    assert other.log_note() == "Rank 1: only rank 0 writes into the logger directory; this rank"


def test_the_ranks_must_build_the_same_variables_and_towers():
    MPIProtocol.check_same_variables(*names_of_ranks(['a', 'b'], ['b', 'a']))
    with pytest.raises(RuntimeError, match=r"rank 1 lacks \['b'\] and has extra \['c'\]"):
        MPIProtocol.check_same_variables(*names_of_ranks(['a', 'b'], ['a', 'c']))
    with pytest.raises(RuntimeError, match='different numbers of towers: 1, 2'):
        MPIProtocol.check_same_variables(*names_of_ranks(['a'], ['a'], towers=[1, 2]))


def test_a_peer_that_shut_the_engine_down_ends_this_ranks_training_as_stopped():
    engine = Engine(1)
    protocol = MPIProtocol(engine, 'MPI (test)')
    shut = tfv1.errors.UnknownError(None, None, '{}: shut down by rank 0'.format(mpi_ops.SHUT_DOWN_MESSAGE))
    stopped = protocol.explain(shut)
    assert isinstance(stopped, StopTraining)
    assert str(stopped) == "rank 1: rank 0 ended its training and shut MPI (test) down"
    horovod = tfv1.errors.UnknownError(None, None, 'Horovod has been shut down')
    assert str(protocol.explain(horovod)) == \
        "rank 1: another rank ended its training and shut MPI (test) down"
    other = tfv1.errors.UnknownError(None, None, 'something else')
    assert protocol.explain(other) is other
    protocol.teardown()
    assert engine.shut_down == 1


def test_the_session_is_a_new_one_with_a_share_of_the_cpus_unless_configured():
    protocol = MPIProtocol(Engine(0, size=2), 'Horovod')
    with pytest.raises(ValueError, match='HorovodTrainer needs a NewSessionCreator'):
        protocol.session_creator(tfv1.train.ChiefSessionCreator())
    given = NewSessionCreator(config=tfv1.ConfigProto(inter_op_parallelism_threads=7))
    assert protocol.session_creator(given) is given and given.config.inter_op_parallelism_threads == 7
    default = protocol.session_creator(NewSessionCreator())
    assert default.config.inter_op_parallelism_threads >= 1
