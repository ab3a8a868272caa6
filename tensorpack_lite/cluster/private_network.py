"""A private network for the processes of one job on this machine: a Linux network namespace
that only they share, so the servers they start (TensorFlow's, which listen on every interface
and authenticate nobody) answer nothing outside the job.

    network = PrivateNetwork()
    network.start()                      # PrivateNetworkUnavailable says why it cannot
    proc = subprocess.Popen(network.command(['python', 'train.py']), env=network.environ(env))
    ...
    network.close()

Inside, the job's processes reach each other on ``localhost`` as before. Outbound connections
(a tracking server, a data feed that the job connects to, another machine) go through
``slirp4netns``, a user-mode network stack that opens no port towards the namespace; this
machine's own loopback is at :data:`HOST_LOOPBACK` from inside. Without slirp4netns the job
is still private, but has no way out (one warning says so and how to install it).

How the namespace is made (``cluster/netns_holder.py``, run as a script): as root a plain network
namespace; otherwise (or where a container denies that) a user namespace that maps only the
user's own uid, with a network namespace in it, as ``unshare --user --net`` does without
privileges. The job's processes join it with ``nsenter`` and keep their uid. Processes of the
same user (who could already attach a debugger to the job) and root can join it too.
"""

import os
import select
import shutil
import subprocess
import sys
import tempfile

from .exposure import PRIVATE_NETWORK_VARIABLE

__all__ = ['PrivateNetwork', 'PrivateNetworkUnavailable', 'HOST_LOOPBACK']

HOLDER = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'netns_holder.py')
HOST_LOOPBACK = '10.0.2.2'
"""The address of this machine's loopback (``127.0.0.1``) seen from inside the private network
(slirp4netns's gateway): e.g. ``http://10.0.2.2:5000`` for an MLflow server on
``localhost:5000``."""

_START_TIMEOUT = 10.0


class PrivateNetworkUnavailable(RuntimeError):
    """A private network namespace cannot be made here (the message says why)."""


class PrivateNetwork:
    """A network namespace for one job's processes (see the module doc).

    Args:
        outbound (bool): give the namespace outbound connectivity through slirp4netns (when
            installed; :attr:`outbound_missing` says why not otherwise).
    """

    def __init__(self, outbound=True):
        self._outbound = bool(outbound)
        self._holder = None
        self._slirp = None
        self._slirp_exit_fd = None
        self.kind = None
        """``'net'`` or ``'user+net'``: the namespaces made (after :meth:`start`)."""
        self.identity = None
        """The namespace's identity, ``'net:[inode]'`` (after :meth:`start`)."""
        self.outbound_missing = None
        """Why the namespace has no way out (a str), or None when it has one."""

    @property
    def started(self):
        return self._holder is not None

    def start(self):
        """Make the namespace (and its outbound link). Raises
        :class:`PrivateNetworkUnavailable` naming the reason when it cannot."""
        if self.started:
            raise RuntimeError("PrivateNetwork.start() was called already")
        if sys.platform != 'linux':
            raise PrivateNetworkUnavailable("network namespaces need Linux (this is {})".format(sys.platform))
        if shutil.which('nsenter') is None:
            raise PrivateNetworkUnavailable("'nsenter' not found: install util-linux")
        holder = subprocess.Popen([sys.executable, '-I', '-S', HOLDER], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
        line = _read_within(holder.stdout, _START_TIMEOUT, holder.stdout.readline)
        line = line.decode('utf-8', 'replace').strip() if line is not None else None
        if line is None or not line.startswith('ok '):
            holder.stdin.close()
            _end(holder)
            if line is None:
                raise PrivateNetworkUnavailable("its holder process did not answer within {:g} s".format(
                    _START_TIMEOUT))
            raise PrivateNetworkUnavailable(line[len('error '):] if line.startswith('error ') else
                                            "its holder process ended ({!r})".format(line))
        self._holder, self.kind = holder, line[len('ok '):]
        self.identity = os.readlink('/proc/{}/ns/net'.format(holder.pid))
        if self._outbound:
            self.outbound_missing = self._start_outbound()
        else:
            self.outbound_missing = "turned off"

    def _start_outbound(self):
        """Start slirp4netns; returns None, or why the namespace has no way out."""
        if shutil.which('slirp4netns') is None:
            return "slirp4netns is not installed (apt-get install slirp4netns)"
        ready_read, ready_write = os.pipe()
        exit_read, exit_write = os.pipe()
        command = ['slirp4netns', '--configure', '--mtu=65520', '--ready-fd={}'.format(ready_write),
                   '--exit-fd={}'.format(exit_read)]
        if self.kind == 'user+net':
            command.append('--userns-path=/proc/{}/ns/user'.format(self._holder.pid))
        command += [str(self._holder.pid), 'tap0']
        errors = tempfile.TemporaryFile()     # not a pipe: nobody reads it while the job runs
        try:
            slirp = subprocess.Popen(command, pass_fds=(ready_write, exit_read), stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=errors, start_new_session=True)
        finally:
            os.close(ready_write)
            os.close(exit_read)
        with os.fdopen(ready_read, 'rb') as ready:
            signalled = _read_within(ready, _START_TIMEOUT, lambda: ready.read(1))
        if signalled != b'1':
            os.close(exit_write)
            _end(slirp)
            errors.seek(0)
            lines = [line for line in errors.read().decode('utf-8', 'replace').splitlines()
                     if line.strip() and 'child failed' not in line]
            errors.close()
            return "slirp4netns failed: {}".format(
                lines[0] if lines else 'no answer within {:g} s'.format(_START_TIMEOUT) if signalled is None
                else 'exit code {}'.format(slirp.returncode))
        errors.close()
        self._slirp, self._slirp_exit_fd = slirp, exit_write
        return None

    def command(self, argv):
        """``argv`` run inside the namespace, as the same user."""
        if not self.started:
            raise RuntimeError("PrivateNetwork.command(): call start() first")
        prefix = ['nsenter', '--target', str(self._holder.pid)]
        if self.kind == 'user+net':
            prefix += ['--user', '--preserve-credentials']
        return prefix + ['--net', '--'] + list(argv)

    def environ(self, env):
        """``env`` plus the variable that lets a process check it is inside (see
        :func:`~tensorpack_lite.cluster.exposure.in_private_network`)."""
        return dict(env, **{PRIVATE_NETWORK_VARIABLE: self.identity})

    def describe(self):
        """One line for the launcher's output."""
        way_out = ("outbound connections go through slirp4netns (this machine's loopback is {})".format(
            HOST_LOOPBACK) if self.outbound_missing is None else
            "NO outbound connections: {}".format(self.outbound_missing))
        return ("private network {}: the tasks' ports answer only inside this job; {}".format(
            self.identity, way_out))

    def close(self):
        """End the holder and slirp4netns. The namespace goes away with the last process in it."""
        if self._slirp is not None:
            os.close(self._slirp_exit_fd)
            _end(self._slirp)
            self._slirp = None
        if self._holder is not None:
            self._holder.stdin.close()
            _end(self._holder)
            self._holder.stdout.close()
            self._holder = None

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.close()


def _read_within(stream, timeout, read):
    """``read()`` once ``stream`` has something to read, or None after ``timeout`` seconds."""
    ready, _, _ = select.select([stream], [], [], timeout)
    return read() if ready else None


def _end(proc):
    try:
        proc.wait(timeout=_START_TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    if proc.stderr is not None:
        proc.stderr.close()
