"""ZeroMQ data channels under attack (issue 13, item 4): bad messages are dropped and counted
(strict=True ends training), nothing received is unpickled, CURVE keys keep other peers out,
and an unprivileged local user cannot reach a CURVE endpoint nor the multiprocess runner's
ipc socket. Real sockets on 127.0.0.1, real sender processes, each killed in a finally."""

import glob
import json
import logging
import multiprocessing as mp
import os
import pickle
import shutil
import socket
import stat
import struct
import tempfile
import threading

import msgpack
import numpy as np
import pytest
import zmq

from helpers.timing import HANG_TIMEOUT, VirtualClock, wait_until
from helpers.models import PointMean
from tensorpack_lite.callbacks.base import Callback
from tensorpack_lite.cluster.config import free_ports
from tensorpack_lite.dataflow.base import DataFlow
from tensorpack_lite.dataflow.parallel import MultiProcessRunnerZMQ
from tensorpack_lite.dataflow.raw import DataFromList
from tensorpack_lite.dataflow.remote import RemoteDataZMQ, send_dataflow_zmq
from tensorpack_lite.input_source.queue import ZMQInput
from tensorpack_lite.train import SimpleTrainer, TrainConfig, launch_train_with_config
from tensorpack_lite.utils.serialize import dumps, loads
from tensorpack_lite.utils.zmq_security import (CurveKeypair, CurveReceiver, DroppedMessages,
                                                create_curve_keypair, load_curve_keypair)

FORK = mp.get_context('fork')
SEND_TIMEOUT_MS = 3000  # an intruder's send gives up after this long (it is expected to)


def free_tcp_endpoint():
    return 'tcp://127.0.0.1:{}'.format(free_ports(1, '127.0.0.1')[0])


def point(k):
    """The k-th valid datapoint: one row [k, k]."""
    return [np.full((1, 2), k, np.float32)]


class RecordSeen(Callback):
    """The value of every step's datapoint; at the end, the scalar ZMQInput put last."""

    def __init__(self, wait_for_drops=None):
        self.seen = []
        self.scalar = None
        self._wait_for_drops = wait_for_drops  # (source, count): wait at the first epoch's end

    def _setup_graph(self):
        self.tensor = self.get_tensors_maybe_in_tower(['seen'])[0]

    def _before_run(self, ctx):
        return [self.tensor]

    def _after_run(self, ctx, values):
        self.seen.append(float(values.results[0]))

    def _trigger_epoch(self):
        if self._wait_for_drops and self.epoch_num == 1:
            source, count = self._wait_for_drops
            assert wait_until(lambda: source.dropped_messages >= count), source.dropped_messages

    def _after_train(self):
        self.scalar = self.trainer.monitors.get_latest('ZMQInput/dropped_messages')


def train(source, steps, recorder):
    config = TrainConfig(model=PointMean(), data=source, callbacks=[recorder], steps_per_epoch=steps,
                         max_epoch=2)
    launch_train_with_config(config, SimpleTrainer())


class Process(object):
    """A forked process running ``target(*args)`` while the block runs; killed at its end."""

    def __init__(self, target, *args):
        self.proc = FORK.Process(target=target, args=args, daemon=True)

    def __enter__(self):
        self.proc.start()
        return self.proc

    def __exit__(self, *exc):
        if self.proc.exitcode is None:
            self.proc.kill()
        self.proc.join(HANG_TIMEOUT)
        assert self.proc.exitcode is not None


def raw_push(end_point, messages, curve=None, immediate=True):
    """Send raw byte messages on a PUSH socket (waiting for a connection); returns True when
    all were handed to a connected peer, False when a send timed out."""
    ctx = zmq.Context()
    sock = ctx.socket(zmq.PUSH)
    try:
        sock.immediate = immediate  # no queueing before a connection (and its handshake) succeeds
        sock.sndtimeo = SEND_TIMEOUT_MS
        if curve is not None:
            keys, server_key = curve
            sock.curve_secretkey, sock.curve_publickey, sock.curve_serverkey = (
                keys.secret, keys.public, server_key)
        sock.connect(end_point)
        for message in messages:
            try:
                sock.send(message)
            except zmq.Again:
                return False
        return True
    finally:
        sock.close(linger=HANG_TIMEOUT * 1000)
        ctx.term()


# ------------------------------------------------------------- (1) garbage does not end a run

class GatedPoints(DataFlow):
    """``point(k)`` for k = 0..99; after the first two, sets ``two_sent`` and waits for
    ``go`` (while the garbage is sent)."""

    def __init__(self, two_sent, go):
        self.two_sent, self.go = two_sent, go

    def __iter__(self):
        for k in range(100):
            if k == 2 and not self.go.is_set():
                self.two_sent.set()
                self.go.wait(HANG_TIMEOUT)
            yield point(k)


GARBAGE = [
    b'',                          # empty
    b'\xc1 not msgpack at all',   # 0xc1 is never used by msgpack
    b'\x05',                      # valid msgpack, but the number 5, not a datapoint
    b'TPLF' + struct.pack('<IQ', 3, 1 << 40) + b'x',   # a container header that lies about sizes
]


def test_garbage_between_valid_datapoints_does_not_end_training(log_records):
    end_point = free_tcp_endpoint()
    two_sent, go = FORK.Event(), FORK.Event()
    source = ZMQInput(end_point, hwm=10)
    recorder = RecordSeen(wait_for_drops=(source, len(GARBAGE)))
    outcome = {}

    def send_garbage():
        if two_sent.wait(HANG_TIMEOUT):
            outcome['delivered'] = raw_push(end_point, GARBAGE)
        go.set()

    garbage = threading.Thread(target=send_garbage, daemon=True)
    garbage.start()
    with Process(send_dataflow_zmq, GatedPoints(two_sent, go), end_point, 10):
        train(source, 3, recorder)
    garbage.join(HANG_TIMEOUT)
    assert outcome == {'delivered': True}
    assert recorder.seen == [0, 1, 2, 3, 4, 5]     # every valid datapoint, in order
    assert source.dropped_messages == len(GARBAGE)
    assert recorder.scalar == len(GARBAGE)
    warnings = log_records.messages_at(logging.WARNING)
    drops = [m for m in warnings if 'dropped a message' in m]
    assert len(drops) == len(GARBAGE)
    assert all(end_point in m and 'cannot be decoded' in m for m in drops[:2])
    assert 'datapoint must be a list' in drops[2]   # the number 5, refused by the input check
    assert not any(r.levelno >= logging.ERROR for r in log_records)


# ------------------------------------------------------------- (2) datapoints that do not fit

def push_datapoints(end_point, datapoints):
    """A thread sending ``dumps(dp)`` for each datapoint, in order, on one connection."""
    thread = threading.Thread(target=raw_push, args=(end_point, [dumps(dp) for dp in datapoints]),
                              daemon=True)
    thread.start()
    return thread


MISFITS = [
    ([np.zeros((1, 3), np.float32)], ["input 'x'", '(1, 3)']),               # shape
    ([np.zeros((1, 2), np.float64)], ["input 'x'", 'float64', 'float32']),  # dtype
    ([np.zeros((1, 2), np.float32)] * 2, ['2 components', '1 inputs']),     # count
]


def test_datapoints_that_do_not_fit_are_dropped_and_counted(log_records):
    end_point = free_tcp_endpoint()
    source = ZMQInput(end_point, hwm=10)
    recorder = RecordSeen()
    sender = push_datapoints(end_point, [point(0)] + [dp for dp, _ in MISFITS]
                             + [point(k) for k in range(1, 60)])
    train(source, 2, recorder)
    sender.join(HANG_TIMEOUT)
    assert recorder.seen == [0, 1, 2, 3]
    assert source.dropped_messages == len(MISFITS) and recorder.scalar == len(MISFITS)
    drops = [m for m in log_records.messages_at(logging.WARNING) if 'dropped a message' in m]
    assert len(drops) == len(MISFITS)
    for message, (_, words) in zip(drops, MISFITS):
        for word in words:
            assert word in message, (word, message)


def test_strict_mode_ends_training_at_a_datapoint_that_does_not_fit():
    end_point = free_tcp_endpoint()
    source = ZMQInput(end_point, hwm=10, strict=True)
    recorder = RecordSeen()
    sender = push_datapoints(end_point, [point(0), MISFITS[0][0]] + [point(k) for k in range(1, 60)])
    with pytest.raises(ValueError) as info:   # re-raised after training
        train(source, 5, recorder)
    sender.join(HANG_TIMEOUT)
    assert "input 'x'" in str(info.value) and '(1, 3)' in str(info.value)
    assert recorder.seen == [0]
    assert source.dropped_messages == 0


def test_dropped_messages_are_logged_in_full_then_rate_limited(log_records):
    clock = VirtualClock()
    dropped = DroppedMessages('Receiver', clock=clock)
    for k in range(8):
        dropped.drop(ValueError('bad message {}'.format(k)))
    clock.advance(DroppedMessages.log_interval)
    dropped.drop(ValueError('bad message 8'))
    dropped.drop(ValueError('bad message 9'))
    lines = log_records.messages_at(logging.WARNING)
    assert dropped.count == 10
    assert len(lines) == DroppedMessages.full_logs + 1 == 6
    for k in range(5):
        assert '({} dropped so far'.format(k + 1) in lines[k] and 'bad message {}'.format(k) in lines[k]
    assert 'further ones are logged at most every 60 s' in lines[4]
    assert '(9 dropped so far)' in lines[5] and 'ValueError: bad message 8' in lines[5]


# ------------------------------------------------------------- (3) nothing is ever unpickled

class CreatesMarker(object):
    """Unpickling this opens (creates) the marker file."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return open, (self.path, 'w')


def pickled_payloads(marker):
    payload = pickle.dumps(CreatesMarker(marker), protocol=4)
    header = msgpack.packb(['|O', [1]])   # an array message declaring the object dtype
    object_array = msgpack.ExtType(1, struct.pack('<II', len(header), 8 + len(header)) + header + payload)
    return [payload,
            pickle.dumps([np.array([CreatesMarker(marker)], dtype=object)], protocol=2),
            msgpack.packb([object_array], use_bin_type=True)]


def test_the_pickle_payloads_are_live(tmp_path):
    """The payloads of the next test do create their marker when unpickled."""
    marker = str(tmp_path / 'pwned')
    pickle.loads(pickled_payloads(marker)[0])
    assert os.path.exists(marker)


def test_pickled_payloads_are_refused_without_running_code(tmp_path):
    marker = str(tmp_path / 'pwned')
    payloads = pickled_payloads(marker)
    for payload in payloads:
        with pytest.raises(ValueError):
            loads(payload)
    end_point = free_tcp_endpoint()
    remote = RemoteDataZMQ(end_point, hwm=10)
    remote.reset_state()
    itr = iter(remote)
    sender = threading.Thread(target=raw_push, args=(end_point, payloads + [dumps(point(7))]),
                              daemon=True)
    sender.start()
    try:
        first = next(itr)
    finally:
        itr.close()
        sender.join(HANG_TIMEOUT)
    assert first[0].tolist() == [[7, 7]]
    assert remote.dropped_messages == len(payloads) and remote.cnt1 == 1
    assert not os.path.exists(marker)


def test_remote_data_strict_mode_raises_naming_the_endpoint():
    end_point = free_tcp_endpoint()
    itr = iter(RemoteDataZMQ(end_point, hwm=10, strict=True))
    sender = threading.Thread(target=raw_push, args=(end_point, [b'\xc1']), daemon=True)
    sender.start()
    try:
        with pytest.raises(ValueError, match='RemoteDataZMQ .strict.: a message received on {}'.format(
                end_point)):
            next(itr)
    finally:
        sender.join(HANG_TIMEOUT)


# ------------------------------------------------------------- (4) CURVE keeps other peers out

@pytest.fixture
def keys(tmp_path):
    """Keypairs 'trainer' (the receiver), 'loader' (allowed) and 'intruder' (not allowed)."""
    files = {name: create_curve_keypair(str(tmp_path / 'keys'), name)
             for name in ('trainer', 'loader', 'intruder')}
    return files


def test_keypair_files(keys):
    public_file, secret_file = keys['trainer']
    assert stat.S_IMODE(os.stat(secret_file).st_mode) == 0o600
    pair = load_curve_keypair(secret_file)
    assert isinstance(pair, CurveKeypair) and len(pair.public) == len(pair.secret) == 40
    assert zmq.curve_public(pair.secret) == pair.public      # the two halves belong together
    with pytest.raises(ValueError, match='holds no secret key'):
        load_curve_keypair(public_file)


def test_curve_arguments_are_checked(keys):
    with pytest.raises(ValueError, match='curve_clients .* is missing'):
        ZMQInput('tcp://127.0.0.1:5555', 10, curve_keys=keys['trainer'][1])
    with pytest.raises(ValueError, match='curve_keys .* is missing'):
        RemoteDataZMQ('tcp://127.0.0.1:5555', curve_clients=[keys['loader'][0]])
    with pytest.raises(TypeError, match='curve_clients must be a list'):
        CurveReceiver('ZMQInput', keys['trainer'][1], keys['loader'][0])
    with pytest.raises(TypeError, match=r'curve_clients\[1\] must be a z85 public key'):
        CurveReceiver('ZMQInput', keys['trainer'][1], [keys['loader'][0], b'short'])
    with pytest.raises(ValueError, match='curve_server_key .* is missing'):
        send_dataflow_zmq(DataFromList([point(0)]), 'tcp://127.0.0.1:5555', curve_keys=keys['loader'][1])


def send_points(end_point, keys):
    send_dataflow_zmq(DataFromList([point(k) for k in range(5)], shuffle=False), end_point, hwm=5,
                      curve_keys=keys['loader'][1], curve_server_key=keys['trainer'][0])


def intruder_attempts(end_point, intruder, server_key):
    """What an intruder tries: a plain socket, and CURVE with its own keys (``intruder``, not
    allowed) and the receiver's public key. Each is True if its datapoint was handed to the
    receiver."""
    return {'plain': raw_push(end_point, [dumps(point(-1))]),
            'unknown key': raw_push(end_point, [dumps(point(-2))], curve=(intruder, server_key))}


def intruder_keys(keys):
    """The intruder's keypair and the receiver's public key."""
    return load_curve_keypair(keys['intruder'][1]), load_curve_keypair(keys['trainer'][1]).public


def receive_during(itr, attack):
    """Datapoints received from ``itr`` (which must already be flowing) until ``attack()``,
    run in a thread, ends; returns them and the attack's result."""
    result = {}
    thread = threading.Thread(target=lambda: result.update(attack()), daemon=True)
    thread.start()
    received = []
    while thread.is_alive():
        received.append(int(next(itr)[0][0, 0]))
    thread.join()
    return received + [int(next(itr)[0][0, 0]) for _ in range(5)], result


def test_curve_lets_only_the_allowed_sender_in(keys):
    end_point = free_tcp_endpoint()
    remote = RemoteDataZMQ(end_point, hwm=5, curve_keys=keys['trainer'][1],
                           curve_clients=[keys['loader'][0]])
    remote.reset_state()
    itr = iter(remote)
    try:
        with Process(send_points, end_point, keys):
            assert int(next(itr)[0][0, 0]) == 0   # the allowed sender is in: the receiver is up
            received, attempts = receive_during(
                itr, lambda: intruder_attempts(end_point, *intruder_keys(keys)))
    finally:
        itr.close()
    assert attempts == {'plain': False, 'unknown key': False}
    assert set(received) <= {0, 1, 2, 3, 4} and len(received) >= 5
    assert remote.dropped_messages == 0


def test_without_curve_any_peer_gets_in():
    """The default channel is open, as documented: the same plain attempt succeeds."""
    end_point = free_tcp_endpoint()
    itr = iter(RemoteDataZMQ(end_point, hwm=5))
    sender = threading.Thread(target=raw_push, args=(end_point, [dumps(point(-1))]), daemon=True)
    sender.start()
    try:
        assert int(next(itr)[0][0, 0]) == -1
    finally:
        itr.close()
        sender.join(HANG_TIMEOUT)


# ------------------------------------------------------------- (5) the 'nobody' attack

def as_nobody(report, end_point, intruder, server_key, ipc_path):
    """In a forked child: become 'nobody', then try the CURVE endpoint and the runner's pipe
    (the keys were read before: nobody cannot read the test's directory)."""
    import pwd
    try:
        nobody = pwd.getpwnam('nobody')
        os.setgroups([])
        os.setgid(nobody.pw_gid)
        os.setuid(nobody.pw_uid)
        outcome = {'uid': os.getuid()}
        outcome.update(intruder_attempts(end_point, intruder, server_key))
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                sock.connect(ipc_path)
            outcome['ipc'] = 'connected'
        except OSError as err:
            outcome['ipc'] = type(err).__name__
    except Exception as err:
        outcome = {'error': repr(err)}
    report.send(json.dumps(outcome))


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root, to run an attacker as 'nobody'")
def test_nobody_cannot_inject_into_curve_nor_into_the_runner_pipe(keys, monkeypatch):
    import pwd
    # the runner's directory goes to a base of this test's own, open to everyone as /tmp is (so
    # what stops 'nobody' is the runner's directory): tests running beside it make theirs in /tmp
    base = tempfile.mkdtemp(prefix='tpt-', dir='/tmp')
    os.chmod(base, 0o1777)
    monkeypatch.setattr(tempfile, 'tempdir', base)
    runner = MultiProcessRunnerZMQ(DataFromList([point(k) for k in range(3)], shuffle=False), 1)
    runner.reset_state()
    try:
        (ipc_dir,) = glob.glob(os.path.join(base, 'tplite-runner-*'))
        ipc_path = os.path.join(ipc_dir, 'data')
        assert stat.S_ISSOCK(os.stat(ipc_path).st_mode)
        end_point = free_tcp_endpoint()
        remote = RemoteDataZMQ(end_point, hwm=5, curve_keys=keys['trainer'][1],
                               curve_clients=[keys['loader'][0]])
        itr = iter(remote)
        report, child_end = FORK.Pipe(duplex=False)
        try:
            with Process(send_points, end_point, keys):
                assert int(next(itr)[0][0, 0]) == 0
                with Process(as_nobody, child_end, end_point, *intruder_keys(keys), ipc_path) as attacker:
                    received, _ = receive_during(itr, lambda: {'ended': attacker.join(HANG_TIMEOUT)})
        finally:
            itr.close()
        assert report.poll(HANG_TIMEOUT)
        outcome = json.loads(report.recv())
        assert set(received) <= {0, 1, 2, 3, 4}
        assert outcome == {'uid': pwd.getpwnam('nobody').pw_uid, 'plain': False, 'unknown key': False,
                           'ipc': 'PermissionError'}
        assert [int(dp[0][0, 0]) for dp, _ in zip(runner, range(3))] == [0, 1, 2]  # the runner works
    finally:
        runner.close()
        shutil.rmtree(base, ignore_errors=True)
