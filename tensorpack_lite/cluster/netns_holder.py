"""The process that holds a job's private network namespace (see
:mod:`tensorpack_lite.cluster.private_network`), run as a script with no package import:

    python -I -S netns_holder.py

It moves itself into a new network namespace (as root a plain one; otherwise, or where a
container denies that, inside a new user namespace that maps only its own uid and gid): with
``os.unshare`` on Python 3.12+, else by running itself again under util-linux's ``unshare``
(an exec: the same process). It brings the loopback interface up, prints one line, ``ok net``
or ``ok user+net``, or ``error <reason>``, and then waits until its standard input closes. The
job's processes join the namespace with ``nsenter --target <its pid>``.
"""

import fcntl
import os
import shutil
import socket
import struct
import subprocess
import sys

__all__ = []

SIOCGIFFLAGS = 0x8913
SIOCSIFFLAGS = 0x8914
IFF_UP = 0x1
ENTERED = '--entered'
"""The argument (followed by the kind) with which ``unshare`` runs this script in the namespace."""


def _map_own_ids():
    """Map this process's uid and gid to themselves in its new user namespace."""
    uid, gid = os.geteuid(), os.getegid()
    with open('/proc/self/setgroups', 'w') as f:
        f.write('deny')
    with open('/proc/self/uid_map', 'w') as f:
        f.write('{0} {0} 1\n'.format(uid))
    with open('/proc/self/gid_map', 'w') as f:
        f.write('{0} {0} 1\n'.format(gid))


def _loopback_up():
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack('16sh', b'lo', 0)
        flags = struct.unpack('16sh', fcntl.ioctl(sock, SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(sock, SIOCSIFFLAGS, struct.pack('16sh', b'lo', flags | IFF_UP))


def _unshare_in_process(kind):
    if kind == 'net':
        os.unshare(os.CLONE_NEWNET)
    else:
        os.unshare(os.CLONE_NEWUSER | os.CLONE_NEWNET)
        _map_own_ids()


def _exec_under_unshare(kind):
    """Run this script again inside new namespaces made by util-linux's ``unshare`` (which
    maps the ids with ``--map-user``/``--map-group``, util-linux 2.38+, and keeps the
    capabilities of the new user namespace across the exec); returns only by an
    OSError saying why it cannot (a trial run of ``unshare`` failed)."""
    unshare = shutil.which('unshare')
    if unshare is None:
        raise OSError("util-linux's unshare is not installed (and Python {}.{} has no os.unshare)".format(
            *sys.version_info[:2]))
    command = [unshare, '--net']
    if kind != 'net':
        command += ['--user', '--keep-caps',     # the capabilities to bring the loopback up
                    '--map-user={}'.format(os.geteuid()), '--map-group={}'.format(os.getegid())]
    trial = subprocess.run(command + ['--', sys.executable, '-I', '-S', '-c', ''], stdin=subprocess.DEVNULL,
                           capture_output=True, text=True)
    if trial.returncode != 0:
        lines = trial.stderr.strip().splitlines()
        raise OSError(lines[-1].replace('unshare: ', '', 1) if lines else
                      'unshare ended with exit code {}'.format(trial.returncode))
    os.execv(unshare, command + ['--', sys.executable] + sys.orig_argv[1:] + [ENTERED, kind])


def enter_new_namespace():
    """``'net'`` or ``'user+net'``: the namespaces made (where Python has no ``os.unshare``, the
    process is replaced by itself inside them, see :data:`ENTERED`); an OSError saying why none
    could be."""
    attempts = ([('net', 'a network namespace')] if os.geteuid() == 0 else []) + \
        [('user+net', 'a user and network namespace')]
    errors = []
    for kind, what in attempts:
        try:
            if hasattr(os, 'unshare'):
                _unshare_in_process(kind)
                return kind
            _exec_under_unshare(kind)
        except OSError as err:
            errors.append('{}: {}'.format(what, err.strerror or err))
    raise OSError('cannot make ' + '; nor '.join(errors))


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    try:
        kind = argv[1] if argv[:1] == [ENTERED] else enter_new_namespace()
        _loopback_up()
    except OSError as err:
        print('error {}'.format(err), flush=True)
        return 1
    print('ok {}'.format(kind), flush=True)
    sys.stdin.buffer.read()
    return 0


if __name__ == '__main__':
    sys.exit(main())
