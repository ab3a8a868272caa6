"""dataflow.zmq_pipes: sockets closed together, and a parent that receives from a worker process
what it sends, then its error report."""

import os
import shutil
import tempfile
import time

import pytest

from tensorpack_lite.dataflow.idle_watch import IdleWatch
from tensorpack_lite.dataflow.ipc_dir import IPCDir
from tensorpack_lite.dataflow.workers import DataFlowWorkerError, WorkerProcesses
from tensorpack_lite.dataflow.zmq_pipes import Sockets, ZMQCollector, ZMQWorker


def test_sockets_are_closed_with_their_context():
    pipes = Sockets()
    zmq = pipes.zmq
    push, pull = pipes.socket(zmq.PUSH, 5), pipes.socket(zmq.PULL, 5)
    pull.bind('inproc://sockets-test')
    push.connect('inproc://sockets-test')
    push.send_multipart([b'a', b'bc'])
    assert [f.bytes for f in pull.recv_multipart(copy=False)] == [b'a', b'bc']
    assert push.get_hwm() == 5 and push.copy_threshold == Sockets.copy_below
    pipes.close()
    assert push.closed and pull.closed and pipes.context.closed


class Talker(ZMQWorker):
    """Sends ``[b'hello', its number]``, then raises (``then='raise'``) or waits."""

    def __init__(self, idx, endpoint, then):
        super(Talker, self).__init__('Flow', idx, os.getpid())
        self.endpoint, self.then = endpoint, then

    def _open(self):
        self.pipes = Sockets()
        self.results = self.pipes.socket(self.pipes.zmq.PUSH, 10)
        self.results.connect(self.endpoint)

    def _loop(self):
        self.results.send_multipart([b'hello', bytes([self.idx])])
        if self.then == 'raise':
            raise ValueError('boom')
        while True:
            time.sleep(3600)


@pytest.fixture
def collector(monkeypatch):
    """``start(then)``: a Talker started, and the parent's collector of what it sends."""
    tmp = tempfile.mkdtemp(prefix='tpz-', dir='/tmp')
    monkeypatch.setattr(tempfile, 'tempdir', tmp)
    made = []

    def start(then):
        ipc, pipes = IPCDir('zmqtest'), Sockets()
        endpoint = ipc.endpoint('results')
        pull = pipes.socket(pipes.zmq.PULL, 10)
        pull.bind(endpoint)
        workers = WorkerProcesses([Talker(0, endpoint, then)], ipc)
        made.append((workers, ipc, pipes))
        workers.start()
        return ZMQCollector(pull, workers, IdleWatch('Flow', workers, None, None), lambda f: f[1].bytes[0])
    yield start
    for workers, ipc, pipes in made:
        workers.close()
        ipc.cleanup()
        pipes.close()
    leftovers = os.listdir(tmp)
    shutil.rmtree(tmp, ignore_errors=True)
    assert leftovers == []


def test_the_collector_receives_what_a_worker_sends_then_raises_its_report(collector):
    receive = collector('raise')
    assert [f.bytes for f in receive.recv()] == [b'hello', b'\0']
    with pytest.raises(DataFlowWorkerError) as err:
        receive.recv()
    assert 'raised ValueError: boom' in str(err.value)
    assert str(err.value).startswith('Flow worker #0 (pid ')


def test_a_wait_with_a_timeout_ends_with_none(collector):
    receive = collector('wait')
    assert [f.bytes for f in receive.recv()] == [b'hello', b'\0']
    assert receive.recv(timeout=0.2) is None
