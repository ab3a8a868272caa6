"""multiprocess/server.py in this process: what create_server refuses and the config it gives, and
the barrier at which the workers end together (FinishBarrier). (The builders and trainers on
such servers: graph_builder/test_distributed.py; processes that train together:
distributed/test_trainers.py.) The servers made here live until the test process ends."""

import re
import subprocess
import sys
import threading

import pytest

from helpers.processes import subprocess_env
from helpers.process_guard import starts_tensorflow_server_here
from helpers.timing import wait_until
from tensorpack_lite.cluster.config import LostTaskError, held_free_port, local_cluster
from tensorpack_lite.compat import tf, tfv1
from tensorpack_lite.multiprocess.server import FinishBarrier, cluster_of_server, create_server
from tensorpack_lite.multiprocess.stop_vote import PREEMPTED, REQUESTED

pytestmark = starts_tensorflow_server_here   # servers made in this process


def test_create_server_refuses_a_taken_port_and_mixed_arguments():
    with held_free_port(listen=True) as port:
        expected = 'Cannot start the server of worker 0 (localhost:{0}): port {0} of this machine is taken'
        with pytest.raises(ValueError, match=re.escape(expected.format(port))):
            create_server({'worker': ['localhost:{}'.format(port)]}, 'worker', 0)
    with pytest.raises(ValueError, match='give job_name and task_index with an explicit cluster'):
        create_server(job_name='worker', task_index=0)


def test_create_server_enables_collective_nccl_only_with_a_gpu(monkeypatch):
    assert not create_server(local_cluster(1), 'worker', 0).server_def.default_session_config \
        .experimental.collective_nccl                  # this machine: no GPU
    monkeypatch.setattr(tf.config, 'list_physical_devices',
                        lambda kind=None: ['GPU:0'] if kind == 'GPU' else [])
    config = create_server(local_cluster(1), 'worker', 0).server_def.default_session_config
    assert config.experimental.collective_nccl
    no_gpu = tfv1.ConfigProto(device_count={'GPU': 0})
    assert not create_server(local_cluster(1), 'worker', 0, config=no_gpu).server_def \
        .default_session_config.experimental.collective_nccl


# ----- the workers end together (FinishBarrier) ---------------------------------------------------

@pytest.fixture(scope='module')
def two_workers():
    cluster = local_cluster(2)
    return [create_server(cluster, 'worker', k) for k in range(2)]


@pytest.fixture(scope='module')
def two_of_three_workers():
    """The servers of workers 0 and 1 of a cluster of 3 workers (worker 2's is never started)."""
    cluster = local_cluster(3)
    return [create_server(cluster, 'worker', k) for k in range(2)]


def test_the_finish_barrier_lets_the_chief_go_only_after_every_worker_left(two_workers):
    chief, other = FinishBarrier(two_workers[0]), FinishBarrier(two_workers[1])
    chief.prepare()
    assert list(chief.state()) == [0, 0]
    errors = []

    def finish(barrier):
        try:
            barrier.finish()
        except Exception as err:      # reported below
            errors.append(err)

    chief_thread = threading.Thread(target=finish, args=(chief,), daemon=True)
    chief_thread.start()
    assert wait_until(lambda: list(chief.state()) == [FinishBarrier.ARRIVED, 0])
    assert chief_thread.is_alive()        # it cannot go before worker 1 arrived (timeout: 600 s)
    finish(other)
    chief_thread.join(60)
    assert not errors and not chief_thread.is_alive()
    assert list(chief.state()) == [FinishBarrier.ARRIVED, FinishBarrier.LEAVING]
    for barrier in (chief, other):
        barrier.close()


def test_the_smallest_proposed_stop_step_stands_and_every_worker_reads_it(two_workers):
    """Each worker proposes from its own session; the chief's number is the minimum, a SIGTERM
    wins over a requested stop as the reason, and a new prepare() (a new run of training)
    forgets both."""
    chief, other = FinishBarrier(two_workers[0]), FinishBarrier(two_workers[1])
    chief.prepare()
    assert chief.stop_step() == other.stop_step() == FinishBarrier.NEVER
    assert other.agreed_stop() == (FinishBarrier.NEVER, None)
    chief.propose_stop(10, REQUESTED)      # e.g. the chief's EarlyStopping
    assert other.agreed_stop() == (10, REQUESTED)
    other.propose_stop(9)
    assert chief.stop_step() == other.stop_step() == 9
    assert chief.agreed_stop() == (9, PREEMPTED)
    chief.propose_stop(12)       # later than the standing one: no change
    assert other.stop_step() == 9
    chief.propose_stop(8, REQUESTED)
    assert other.agreed_stop() == (8, PREEMPTED)     # SIGTERM was proposed: it stays the reason
    chief.prepare()
    assert other.agreed_stop() == (FinishBarrier.NEVER, None)
    for barrier in (chief, other):
        barrier.close()


def test_the_finish_barrier_names_the_workers_that_never_arrive_or_are_gone(two_of_three_workers):
    chief = FinishBarrier(two_of_three_workers[0], timeout=0.5, lost_after=600)
    chief.prepare()
    address = [cluster_of_server(two_of_three_workers[0]).address('worker', k) for k in range(3)]
    expected = r'worker 0 \({}\): training ended here, but worker 1 \({}\), worker 2 \({}\) did not finish ' \
               r'within 0.5 s'.format(*map(re.escape, address))
    with pytest.raises(LostTaskError, match=expected):
        chief.finish()
    chief.close()
    chief = FinishBarrier(two_of_three_workers[0], timeout=600, lost_after=0)
    chief.prepare()
    with pytest.raises(LostTaskError, match=r'worker 0 \(.*\): lost worker 2 \({}\): no longer accepts '
                                            r'connections'.format(re.escape(address[2]))):
        chief.finish()
    chief.close()
    with pytest.raises(ValueError, match=r"prepare\(\) is the chief's, not worker 1 \(.*\)'s"):
        FinishBarrier(two_of_three_workers[1]).prepare()


def test_a_worker_that_finishes_before_the_chief_prepared_waits_for_it():
    cluster = local_cluster(2)
    servers = [create_server(cluster, 'worker', k) for k in range(2)]
    chief, other = FinishBarrier(servers[0]), FinishBarrier(servers[1])
    for barrier in (chief, other):
        barrier.connect()
    errors = []

    def finish():
        try:
            other.finish()
        except Exception as err:      # reported below
            errors.append(err)

    thread = threading.Thread(target=finish, daemon=True)
    thread.start()
    thread.join(1.0)
    assert thread.is_alive() and not errors      # the meeting point is not made yet: worker 1 waits
    chief.prepare()
    chief.finish()
    thread.join(60)
    assert not thread.is_alive() and not errors
    assert list(chief.state()) == [FinishBarrier.ARRIVED, FinishBarrier.LEAVING]


GONE_CHIEF = """
import os, sys
from tensorpack_lite.multiprocess.server import FinishBarrier, create_server
from tensorpack_lite.cluster.config import LostTaskError, local_cluster
server = create_server(local_cluster(2), 'worker', 1)      # the chief's server is never started
FinishBarrier.MIN_CALL_TIMEOUT = 1.0     # the wait for the chief's first answer (10 s otherwise)
barrier = FinishBarrier(server, lost_after=1)
try:
    barrier.connect()
    print('connected?!')
except LostTaskError as err:
    print('LostTaskError:', err)
sys.stdout.flush()
os._exit(0)     # a thread is left waiting for the chief inside TensorFlow: no interpreter exit
"""


def test_a_worker_whose_chief_is_gone_is_told_so_instead_of_hanging():
    """TensorFlow's first run of a session waits for ever for a task that never answers. (In a
    process of its own: the thread left waiting could hold this one's exit.)"""
    out = subprocess.run([sys.executable, '-c', GONE_CHIEF], capture_output=True, text=True, timeout=300,
                         env=subprocess_env())
    lost = r'LostTaskError: worker 1 \(localhost:\d+\): lost worker 0 \(localhost:\d+\)'
    assert re.search(lost, out.stdout), out.stdout + out.stderr[-3000:]
