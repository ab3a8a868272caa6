"""tensorpack_lite/cluster/netns.py: hosts in network namespaces on one bridge, shaped links, a
link cut and restored while processes live, nothing left behind (also after the owner was
SIGKILLed). Skipped, saying why, where namespaces cannot be made (not root, no iproute2)."""

import signal
import subprocess
import sys

import pytest

from helpers.processes import subprocess_env
from helpers.timing import wait_until
from tensorpack_lite.cluster import netns

REASON = netns.unavailable()
pytestmark = pytest.mark.skipif(REASON is not None, reason=str(REASON))

PORT = 45678
LISTENER = """
import socket, sys
server = socket.create_server(('0.0.0.0', {port}))
server.settimeout(60)
print('listening', flush=True)
while True:
    conn, peer = server.accept()
    conn.sendall(b'hello from ' + sys.argv[1].encode())
    conn.close()
""".format(port=PORT)
CONNECT = """
import socket, sys, time
try:
    start = time.monotonic()
    with socket.create_connection((sys.argv[1], {port}), timeout=2) as conn:
        if len(sys.argv) > 2:
            print('{{:.6f}}'.format(time.monotonic() - start))
        print(conn.recv(100).decode())
except OSError as err:
    print('failed:', type(err).__name__)
""".format(port=PORT)


def listed_namespaces():
    return subprocess.run(['ip', 'netns', 'list'], capture_output=True, text=True).stdout


def root_links():
    return subprocess.run(['ip', '-o', 'link'], capture_output=True, text=True).stdout.count('\n')


class Listener:
    def __init__(self, net, host):
        argv = [sys.executable, '-c', LISTENER, 'host{}'.format(host)]
        self.proc = subprocess.Popen(net.command(host, argv), stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout.readline().strip() == 'listening'

    def stop(self):
        self.proc.kill()
        self.proc.wait(10)


def connect(net, src, dst):
    out = subprocess.run(net.command(src, [sys.executable, '-c', CONNECT, net.address(dst)]),
                         capture_output=True, text=True, timeout=60)
    return out.stdout.strip()


def test_hosts_reach_each_other_and_nothing_is_left():
    links = root_links()
    with netns.NetnsCluster(3) as net:
        names = list(net.namespaces) + [net.switch]
        assert [net.address(k) for k in range(3)] == ['10.213.0.1', '10.213.0.2', '10.213.0.3']
        listener = Listener(net, 2)
        try:
            assert connect(net, 0, 2) == 'hello from host2'
            assert connect(net, 1, 2) == 'hello from host2'
        finally:
            listener.stop()
        assert root_links() == links      # nothing added to the machine's own network
        with pytest.raises(IndexError, match='hosts 0..2, got 3'):
            net.address(3)
    remaining = listed_namespaces()
    assert not [n for n in names if n in remaining]


def test_links_are_shaped_and_the_limit_removed():
    with netns.NetnsCluster(2, rate_mbit=200) as net:
        for host in range(2):
            assert 'tbf' in net.qdisc(host) and 'rate 200Mbit' in net.qdisc(host)
        net.shape(1, 20)
        assert 'rate 20Mbit' in net.qdisc(1)
        net.shape(1, None)
        assert 'tbf' not in net.qdisc(1)


def netem_reason():
    """Why links get no delay or loss here (probed when a test asks, not at import)."""
    return netns.netem_unavailable() if REASON is None else REASON


def test_a_delay_holds_every_packet_of_the_host_and_is_removed():
    """Host 1's packets are held 200 ms: a connection from host 0 takes at least that (host
    1's SYN-ACK waits), whatever the load; without the delay the setting is gone."""
    if netem_reason() is not None:
        pytest.skip(netem_reason())
    with netns.NetnsCluster(2, rate_mbit=20) as net:
        net.shape(1, 20, delay_ms=200, loss_percent=0.5)
        assert 'netem' in net.qdisc(1) and 'delay 200ms' in net.qdisc(1) and 'loss 0.5%' in net.qdisc(1)
        assert 'rate 20Mbit' in net.qdisc(1) and 'tbf' in net.qdisc(0)
        listener = Listener(net, 1)
        try:
            out = subprocess.run(net.command(0, [sys.executable, '-c', CONNECT, net.address(1), 'time']),
                                 capture_output=True, text=True, timeout=60).stdout.split('\n')
            assert float(out[0]) >= 0.2 and out[1] == 'hello from host1', out
        finally:
            listener.stop()
        net.shape(1, None)
        assert 'netem' not in net.qdisc(1) and 'tbf' not in net.qdisc(1)


def test_without_netem_a_delay_is_refused_naming_the_host_and_what_is_missing():
    if netem_reason() is None:
        pytest.skip("this kernel has sch_netem: the delay test above runs instead")
    with netns.NetnsCluster(2) as net:
        with pytest.raises(netns.NetnsUnavailable, match=r"host 1: tc qdisc netem delay 20ms .*needs the "
                                                         r"kernel's sch_netem"):
            net.shape(1, 20, delay_ms=20)
    assert 'no sch_netem' in netem_reason()


def test_a_cut_link_lets_nothing_through_until_restored():
    with netns.NetnsCluster(2) as net:
        listener = Listener(net, 1)
        try:
            assert connect(net, 0, 1) == 'hello from host1'
            net.cut(1)
            assert connect(net, 0, 1).startswith('failed:')
            assert listener.proc.poll() is None       # the process lives on
            net.restore(1)
            assert wait_until(lambda: connect(net, 0, 1) == 'hello from host1', interval=0.5)
        finally:
            listener.stop()


SENDER = """
import socket, sys
with socket.create_connection((sys.argv[1], {port}), timeout=10) as conn:
    conn.sendall(b'x' * int(sys.argv[2]))
    conn.shutdown(socket.SHUT_WR)
    print(conn.recv(100).decode())
""".format(port=PORT)
SINK = """
import socket
server = socket.create_server(('0.0.0.0', {port}))
server.settimeout(60)
print('listening', flush=True)
conn, peer = server.accept()
received = 0
while True:
    data = conn.recv(1 << 16)
    if not data:
        break
    received += len(data)
conn.sendall(str(received).encode())
conn.close()
""".format(port=PORT)


def test_counters_count_what_a_host_sends_and_receives():
    size = 4 * 10 ** 6
    with netns.NetnsCluster(3, rate_mbit=200) as net:
        sink = subprocess.Popen(net.command(1, [sys.executable, '-c', SINK]), stdout=subprocess.PIPE,
                                text=True)
        try:
            assert sink.stdout.readline().strip() == 'listening'
            before = [net.counters(k) for k in range(3)]
            out = subprocess.run(net.command(0, [sys.executable, '-c', SENDER, net.address(1), str(size)]),
                                 capture_output=True, text=True, timeout=60)
            assert out.stdout.strip() == str(size)
            after = [net.counters(k) for k in range(3)]
        finally:
            sink.kill()
            sink.wait(10)
        assert sorted(after[0]) == sorted(netns.NetnsCluster.COUNTERS)
        sent = {k: {name: after[k][name] - before[k][name] for name in after[k]} for k in range(3)}
        # the payload plus at most 10% of Ethernet/IP/TCP headers, and the ACKs going back
        assert size <= sent[0]['tx_bytes'] < 1.1 * size
        assert size <= sent[1]['rx_bytes'] < 1.1 * size
        assert sent[1]['tx_bytes'] < 0.1 * size and sent[0]['rx_bytes'] < 0.1 * size
        assert sent[0]['tx_packets'] > 0 and sent[1]['rx_packets'] > 0
        assert sent[2]['tx_bytes'] < 1000 and sent[2]['rx_bytes'] < 1000     # the bridge does not flood it
        with pytest.raises(IndexError):
            net.counters(3)


OWNER = """
import sys, time
from tensorpack_lite.cluster import netns
net = netns.NetnsCluster(1)
print(' '.join(net.namespaces + [net.switch]), flush=True)
time.sleep(600)
"""


def test_the_namespaces_of_a_killed_owner_are_removed_by_the_next_cluster():
    env = subprocess_env()
    owner = subprocess.Popen([sys.executable, '-c', OWNER], stdout=subprocess.PIPE, text=True, env=env)
    try:
        names = owner.stdout.readline().split()
        assert len(names) == 2 and all(n in listed_namespaces() for n in names)
    finally:
        owner.send_signal(signal.SIGKILL)
        owner.wait(10)
    assert all(n in listed_namespaces() for n in names)     # a SIGKILL runs no clean-up
    with netns.NetnsCluster(1):
        remaining = listed_namespaces()
        assert not [n for n in names if n in remaining]
