"""The parent-death signal of Linux (``prctl(PR_SET_PDEATHSIG)``): the kernel sends a signal
to a process when its parent ends, however it ends (SIGKILL and the OOM killer included).

Standard library only, so that it also runs as a script in front of a command, which it then
becomes (the launcher's tasks, :mod:`tensorpack_lite.cluster.launch`)::

    python -I -S death_signal.py PARENT_PID -- command ...

asks for SIGKILL when the parent ends, exits at once if the process ``PARENT_PID`` has ended
already, then runs the command in its place (``exec``: same process, and the signal is kept).
Put it last in a chain of commands that ``exec`` (``nsenter ... --``, ``ip netns exec``), so
that the signal is set in the task itself.

The kernel's "parent" is the *thread* that forked the process: a process started from a thread
that then ends gets the signal although its parent process lives on. Start such processes
from a thread that lasts (the main thread).
"""

import ctypes
import os
import signal
import sys

__all__ = ['set_parent_death_signal', 'command_with_death_signal']

_PR_SET_PDEATHSIG = 1


def set_parent_death_signal(sig):
    """Ask the kernel to send ``sig`` to this process when its parent (thread) ends. Raises
    OSError where it cannot (not Linux, or prctl failed)."""
    if not sys.platform.startswith('linux'):
        raise OSError("the parent-death signal needs Linux (this is {})".format(sys.platform))
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError) as err:
        raise OSError("cannot call prctl: {}".format(err)) from None
    if prctl(_PR_SET_PDEATHSIG, ctypes.c_ulong(int(sig)), ctypes.c_ulong(0), ctypes.c_ulong(0),
             ctypes.c_ulong(0)) != 0:
        error = ctypes.get_errno()
        raise OSError(error, "prctl(PR_SET_PDEATHSIG): {}".format(os.strerror(error)))


def command_with_death_signal(argv, parent_pid=None):
    """``argv`` run through this script: the process gets SIGKILL when ``parent_pid`` (default:
    this process), which must start it, ends."""
    parent_pid = os.getpid() if parent_pid is None else int(parent_pid)
    return [sys.executable, '-I', '-S', os.path.abspath(__file__), str(parent_pid), '--'] + list(argv)


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def main(argv):
    """The script (see the module's text); returns an exit code where it does not ``exec``."""
    if len(argv) < 3 or argv[1] != '--':
        print("usage: death_signal.py PARENT_PID -- command ...", file=sys.stderr)
        return 2
    parent, command = int(argv[0]), argv[2:]
    try:
        set_parent_death_signal(signal.SIGKILL)
    except OSError as err:
        print("death_signal.py: {}: {} may outlive its parent".format(err, command[0]), file=sys.stderr)
    if os.getppid() != parent and not _alive(parent):
        print("death_signal.py: the parent (pid {}) ended before {} started".format(parent, command[0]),
              file=sys.stderr)
        return 1
    sys.stderr.flush()
    try:
        os.execvp(command[0], command)
    except OSError as err:
        print("death_signal.py: cannot run {}: {}".format(command[0], err.strerror or err), file=sys.stderr)
        return 127 if isinstance(err, FileNotFoundError) else 126


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
