"""The process that holds a job's private network namespace (see
:mod:`tensorpack_lite.cluster.private_network`), run as a script with no package import:

    python -I -S netns_holder.py

It moves itself into a new network namespace (as root a plain one; otherwise, or where a
container denies that, inside a new user namespace that maps only its own uid and gid),
brings the loopback interface up, prints one line, ``ok net`` or ``ok user+net``, or
``error <reason>``, and then waits until its standard input closes. The job's processes join
the namespace with ``nsenter --target <its pid>``.
"""

import ctypes
import fcntl
import os
import socket
import struct
import sys

__all__ = []

CLONE_NEWNET = 0x40000000
CLONE_NEWUSER = 0x10000000
SIOCGIFFLAGS = 0x8913
SIOCSIFFLAGS = 0x8914
IFF_UP = 0x1


def _unshare(libc, flags):
    """None on success, else the error's text."""
    if libc.unshare(flags) == 0:
        return None
    return os.strerror(ctypes.get_errno())


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


def enter_new_namespace():
    """``'net'`` or ``'user+net'``: the namespaces made; an OSError saying why none could be."""
    libc = ctypes.CDLL(None, use_errno=True)
    errors = []
    if os.geteuid() == 0:
        error = _unshare(libc, CLONE_NEWNET)
        if error is None:
            return 'net'
        errors.append('a network namespace: {}'.format(error))
    error = _unshare(libc, CLONE_NEWUSER | CLONE_NEWNET)
    if error is None:
        _map_own_ids()
        return 'user+net'
    errors.append('a user and network namespace: {}'.format(error))
    raise OSError('cannot make ' + '; nor '.join(errors))


def main():
    try:
        kind = enter_new_namespace()
        _loopback_up()
    except OSError as err:
        print('error {}'.format(err), flush=True)
        return 1
    print('ok {}'.format(kind), flush=True)
    sys.stdin.buffer.read()
    return 0


if __name__ == '__main__':
    sys.exit(main())
