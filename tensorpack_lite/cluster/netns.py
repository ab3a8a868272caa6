"""Machines on one box: each host a Linux network namespace with its own address, all on one
bridge, each behind a link of its own that can be shaped (rate) and cut while its processes
live. For trying multi-machine training where the network is the limit, and for the tests
that do (a slow or lost peer never shows on loopback).

    with NetnsCluster(3, rate_mbit=200) as net:
        proc = subprocess.Popen(net.command(1, ['python', 'train.py']))
        net.shape(2, 200, delay_ms=20, loss_percent=1)   # needs sch_netem: netem_unavailable()
        net.cut(1)        # host 1's link goes down; its processes live on
        net.restore(1)
        net.counters(1)   # {'tx_bytes': ..., 'rx_bytes': ...}: what host 1 sent and received

MPI ranks on the hosts: ``net.mpiexec_command(mpiexec, [0, 1], argv)`` (MPICH's hydra).

Nothing is added to the machine's own network: the bridge lives in a namespace of its own
(the "switch"), every host in another, joined by veth pairs made directly inside them. The
hosts' addresses (``10.213.0.<k + 1>``) exist only inside the cluster, so clusters made at
the same time never collide. Needs root and iproute2 (``ip``, ``tc``); :func:`unavailable`
says why not when it cannot work. Every namespace is removed by :meth:`NetnsCluster.close`
(also at interpreter exit), and the next cluster made on the machine removes those that a
killed process left behind (their names carry the pid of their owner).
"""

import os
import re
import shutil
import subprocess
import tempfile
import weakref

import psutil

__all__ = ['NetnsCluster', 'NetnsUnavailable', 'unavailable', 'netem_unavailable', 'remove_stale']

_PREFIX = 'tplnet'
_SUBNET = '10.213.0'
_DEVICE = 'eth0'
_SSH = 'ssh-into-host'
_SSH_SCRIPT = r'''#!/bin/sh
# A stand-in for ssh in MPICH hydra's ssh launcher (written by tensorpack_lite.cluster.netns):
# called as "$0 [-x] HOST COMMAND...", it runs COMMAND (a shell command line) in the network
# namespace HOST, in a UTS namespace of its own whose hostname is HOST.
while [ "${1#-}" != "$1" ]; do shift; done
host=$1
shift
exec ip netns exec "$host" unshare --uts sh -c 'hostname "$0" && exec sh -c "exec $1"' "$host" "$*"
'''


class NetnsUnavailable(RuntimeError):
    """Network namespaces cannot be made here (the message says why)."""


_UNAVAILABLE_REASON = []


def unavailable():
    """Why network namespaces cannot be made here (a str), or None when they can: probed once
    per process by making a namespace and removing it (root without ``CAP_SYS_ADMIN``, as in
    many containers, cannot)."""
    if not _UNAVAILABLE_REASON:
        _UNAVAILABLE_REASON.append(_probe_unavailable())
    return _UNAVAILABLE_REASON[0]


def _probe_unavailable():
    if os.name != 'posix' or not os.path.isdir('/proc/self/ns'):
        return "network namespaces need Linux"
    if os.geteuid() != 0:
        return "making network namespaces needs root (this process runs as uid {})".format(os.geteuid())
    for tool in ('ip', 'tc'):
        if shutil.which(tool) is None:
            return "'{}' not found: install iproute2 (apt-get install iproute2)".format(tool)
    probe = '{}{}x0-probe'.format(_PREFIX, os.getpid())      # removed by remove_stale() if left
    made = _ip('netns', 'add', probe, check=False)
    if made.returncode != 0:
        return "cannot make a network namespace here (ip netns add: {})".format(made.stderr.strip())
    _ip('netns', 'del', probe, check=False)
    return None


_NETEM_REASON = []


def netem_unavailable():
    """Why links cannot get a delay or a loss here (a str), or None when they can: that takes
    the kernel's ``sch_netem`` (``tc qdisc ... netem``), which some kernels (containers, slim
    VMs) lack. Tried once per process, on a host made for it."""
    if not _NETEM_REASON:
        reason = unavailable()
        if reason is None:
            with NetnsCluster(1) as probe:
                tried = _ip('netns', 'exec', probe.namespaces[0], 'tc', 'qdisc', 'replace', 'dev', _DEVICE,
                            'root', 'netem', 'delay', '1ms', check=False)
            if tried.returncode != 0:
                reason = "this kernel has no sch_netem, so links get a rate but no delay or loss " \
                         "(tc: {})".format(tried.stderr.strip())
        _NETEM_REASON.append(reason)
    return _NETEM_REASON[0]


def _ip(*args, check=True):
    result = subprocess.run(('ip',) + args, capture_output=True, text=True, timeout=30)
    if check and result.returncode != 0:
        raise NetnsUnavailable("ip {} failed: {}".format(' '.join(args), result.stderr.strip()))
    return result


def remove_stale():
    """Remove the namespaces of clusters whose owner process is gone; returns their names."""
    listed = _ip('netns', 'list', check=False).stdout.split('\n')
    removed = []
    for line in listed:
        name = line.split(' ')[0]
        match = re.match(r'^{}(\d+)x\d+-'.format(_PREFIX), name)
        if match and not psutil.pid_exists(int(match.group(1))):
            _ip('netns', 'del', name, check=False)
            removed.append(name)
    for name in os.listdir(tempfile.gettempdir()):     # the folders of ssh stand-ins
        match = re.match(r'^{}(\d+)x\d+$'.format(_PREFIX), name)
        if match and not psutil.pid_exists(int(match.group(1))):
            shutil.rmtree(os.path.join(tempfile.gettempdir(), name), ignore_errors=True)
    return removed


class NetnsCluster:
    """``num_hosts`` hosts (numbered from 0) on one bridge.

    Args:
        num_hosts (int): hosts to make (at most 250).
        rate_mbit (float): every host's link rate in Mbit/s, each way (None: unlimited).
        delay_ms, loss_percent (float): every host's packets delayed this long, and this
            share of them dropped (see :meth:`shape`; None: none).

    Attributes:
        namespaces (list[str]): the hosts' namespace names.
    """

    _count = 0

    def __init__(self, num_hosts, rate_mbit=None, delay_ms=None, loss_percent=None):
        reason = unavailable()
        if reason:
            raise NetnsUnavailable(reason)
        if not 1 <= int(num_hosts) <= 250:
            raise ValueError("NetnsCluster: num_hosts must be 1..250, got {!r}".format(num_hosts))
        remove_stale()
        NetnsCluster._count += 1
        self._tag = '{}{}x{}'.format(_PREFIX, os.getpid(), NetnsCluster._count)
        self.switch = self._tag + '-switch'
        self.namespaces = ['{}-h{}'.format(self._tag, k) for k in range(int(num_hosts))]
        self._made = []         # namespaces, then the folder of the ssh stand-in once written
        self._finalizer = weakref.finalize(self, _delete_namespaces, self._made)   # also at exit
        try:
            self._build()
            if (rate_mbit, delay_ms, loss_percent) != (None, None, None):
                for k in range(num_hosts):
                    self.shape(k, rate_mbit, delay_ms, loss_percent)
        except BaseException:
            self.close()
            raise

    def _add_namespace(self, name):
        _ip('netns', 'add', name)
        self._made.append(name)
        _ip('-n', name, 'link', 'set', 'lo', 'up')

    def _build(self):
        self._add_namespace(self.switch)
        _ip('-n', self.switch, 'link', 'add', 'br0', 'type', 'bridge')
        _ip('-n', self.switch, 'link', 'set', 'br0', 'up')
        for k, name in enumerate(self.namespaces):
            self._add_namespace(name)
            port = 'port{}'.format(k)
            _ip('link', 'add', _DEVICE, 'netns', name, 'type', 'veth',
                'peer', 'name', port, 'netns', self.switch)
            _ip('-n', self.switch, 'link', 'set', port, 'master', 'br0')
            _ip('-n', self.switch, 'link', 'set', port, 'up')
            _ip('-n', name, 'addr', 'add', '{}/24'.format(self.address(k)), 'dev', _DEVICE)
            _ip('-n', name, 'link', 'set', _DEVICE, 'up')

    def address(self, host):
        """Host ``host``'s IP address (a str)."""
        self._check_host(host)
        return '{}.{}'.format(_SUBNET, host + 1)

    def _check_host(self, host):
        if not 0 <= host < len(self.namespaces):
            raise IndexError("NetnsCluster has hosts 0..{}, got {}".format(len(self.namespaces) - 1, host))

    def command(self, host, argv):
        """``argv`` run inside host ``host`` (a list for subprocess)."""
        self._check_host(host)
        return ['ip', 'netns', 'exec', self.namespaces[host]] + list(argv)

    def mpiexec_command(self, mpiexec, hosts, argv, ranks_per_host=1, launch_host=None, options=()):
        """MPICH's ``mpiexec`` (hydra) running ``ranks_per_host`` ranks of ``argv`` on each of
        ``hosts`` (host numbers; ranks fill them in order), as a list for subprocess.

        mpiexec runs in host ``launch_host`` (default: the last host; not one of ``hosts``) and
        starts each host's proxy through a stand-in for ssh, which enters the host's namespace
        and a UTS namespace with the namespace's name as hostname (a machine of its own). UCX,
        MPICH's network module, is told to use TCP on the host's link: ranks of different hosts
        talk over the bridge, not through shared memory. ``options``: more mpiexec options, e.g.
        ``['-disable-auto-cleanup']``."""
        if shutil.which('unshare') is None:
            raise NetnsUnavailable("'unshare' not found: install util-linux")
        launch_host = len(self.namespaces) - 1 if launch_host is None else launch_host
        self._check_host(launch_host)
        for host in hosts:
            self._check_host(host)
            if host == launch_host:
                raise ValueError("NetnsCluster.mpiexec_command: host {} runs mpiexec; give the ranks "
                                 "other hosts".format(host))
        ssh = os.path.join(tempfile.gettempdir(), self._tag, _SSH)
        if not os.path.exists(ssh):
            os.makedirs(os.path.dirname(ssh), exist_ok=True)
            self._made.append(os.path.dirname(ssh))
            with open(ssh, 'w') as f:
                f.write(_SSH_SCRIPT)
            os.chmod(ssh, 0o755)
        placed = ','.join('{}:{}'.format(self.namespaces[host], ranks_per_host) for host in hosts)
        command = [mpiexec, '-launcher', 'ssh', '-launcher-exec', ssh,
                   '-localhost', self.address(launch_host), '-hosts', placed,
                   '-genv', 'UCX_TLS', 'tcp,self', '-genv', 'UCX_NET_DEVICES', _DEVICE]
        command += list(options) + ['-n', str(len(hosts) * ranks_per_host)] + list(argv)
        return self.command(launch_host, command)

    def pids(self, host):
        """The processes that live in host ``host`` (a list of pids)."""
        self._check_host(host)
        return [int(pid) for pid in _ip('netns', 'pids', self.namespaces[host]).stdout.split()]

    def shape(self, host, rate_mbit, delay_ms=None, loss_percent=None):
        """Limit host ``host``'s link to ``rate_mbit`` Mbit/s each way (a token bucket on both
        ends of its veth pair; None: no limit). ``delay_ms`` delays every packet the host
        sends, ``loss_percent`` drops that share of them (both with ``netem`` on the host's
        end, which then also applies the rate; see :func:`netem_unavailable`). ``shape(host,
        None)`` removes every limit."""
        self._check_host(host)
        ends = [(self.namespaces[host], _DEVICE), (self.switch, 'port{}'.format(host))]
        impaired = delay_ms is not None or loss_percent is not None
        for namespace, device in ends:
            if impaired and namespace == self.namespaces[host]:
                rule = ['netem'] + (['delay', '{:g}ms'.format(delay_ms)] if delay_ms is not None else []) \
                    + (['loss', '{:g}%'.format(loss_percent)] if loss_percent is not None else []) \
                    + (['rate', '{:g}mbit'.format(rate_mbit)] if rate_mbit is not None else []) \
                    + ['limit', '10000']
            elif rate_mbit is not None:
                burst = max(int(rate_mbit * 1e6 / 8 / 250), 32 * 1024)    # a tick's worth, at least 32 KiB
                rule = ['tbf', 'rate', '{:g}mbit'.format(rate_mbit), 'burst', str(burst), 'latency', '100ms']
            else:
                _ip('netns', 'exec', namespace, 'tc', 'qdisc', 'del', 'dev', device, 'root', check=False)
                continue
            tried = _ip('netns', 'exec', namespace, 'tc', 'qdisc', 'replace', 'dev', device, 'root', *rule,
                        check=False)
            if tried.returncode != 0:
                raise NetnsUnavailable("host {}: tc qdisc {} failed: {}{}".format(
                    host, ' '.join(rule), tried.stderr.strip(),
                    " (a delay or loss needs the kernel's sch_netem)" if rule[0] == 'netem' else ''))

    def qdisc(self, host):
        """``tc qdisc show`` of host ``host``'s own end of its link (a str)."""
        self._check_host(host)
        return _ip('netns', 'exec', self.namespaces[host], 'tc', 'qdisc', 'show', 'dev', _DEVICE).stdout

    COUNTERS = ('tx_bytes', 'tx_packets', 'rx_bytes', 'rx_packets')
    """The interface counters :meth:`counters` reads."""

    def counters(self, host):
        """What host ``host`` has sent and received on its link since it was made: a dict of
        :attr:`COUNTERS` (bytes count whole Ethernet frames, headers included), read from its
        interface's statistics. A process inside the host reads the same numbers from
        ``/sys/class/net/eth0/statistics/``."""
        self._check_host(host)
        paths = ['/sys/class/net/{}/statistics/{}'.format(_DEVICE, name) for name in self.COUNTERS]
        values = _ip('netns', 'exec', self.namespaces[host], 'cat', *paths).stdout.split()
        return dict(zip(self.COUNTERS, (int(v) for v in values)))

    def cut(self, host):
        """Take host ``host``'s link down (its processes live on; nothing gets through)."""
        self._check_host(host)
        _ip('-n', self.switch, 'link', 'set', 'port{}'.format(host), 'down')

    def restore(self, host):
        """Bring host ``host``'s link back up."""
        self._check_host(host)
        _ip('-n', self.switch, 'link', 'set', 'port{}'.format(host), 'up')

    def close(self):
        """Remove every namespace of the cluster (its links and bridge go with them)."""
        self._finalizer()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _delete_namespaces(names):
    for name in reversed(names):
        if os.path.isabs(name):
            shutil.rmtree(name, ignore_errors=True)
        else:
            _ip('netns', 'del', name, check=False)
    del names[:]
