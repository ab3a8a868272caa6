"""The tests' child processes (tests/helpers/processes.py): ``kill_process_tree`` ends what a
process left behind in its session, before and after it was reaped, and never a process that took
its pid afterwards (the kernel reuses pids: pid_max is 32768 on many machines, and a suite starts
tens of thousands of processes); ``listening_ports`` names the ports a server's processes listen on,
not the ports other processes listen on."""

import socket
import subprocess
import sys
import types

import psutil
import pytest

from helpers.processes import kill_process_tree, listening_ports
from helpers.timing import HANG_TIMEOUT, wait_until

SLEEPER = [sys.executable, '-c', 'import time; time.sleep(600)']

LEAVES_A_SLEEPER = [sys.executable, '-c',
                    'import subprocess, sys; '
                    'p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"]); '
                    'print(p.pid, flush=True)']
"""A process that starts a sleeper in its session, says its pid and exits, leaving it behind."""


@pytest.fixture
def started():
    """``start(command)``: a Popen in a session of its own; each is SIGKILLed and reaped at the end."""
    procs = []

    def start(command, **kwargs):
        proc = subprocess.Popen(command, start_new_session=True, **kwargs)
        procs.append(proc)
        return proc
    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait(HANG_TIMEOUT)


def ended(pid):
    """The process ``pid`` is gone, or a zombie (killed, not yet reaped by its parent)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def sleeper_left_behind(started):
    """(the reaped leader, the pid of the sleeper it left in its session)."""
    leader = started(LEAVES_A_SLEEPER, stdout=subprocess.PIPE, text=True)
    pid = int(leader.stdout.readline())
    leader.stdout.close()
    assert leader.wait(HANG_TIMEOUT) == 0
    assert psutil.Process(pid).status() != psutil.STATUS_ZOMBIE and not ended(pid)
    return leader, pid


def test_a_running_process_and_what_it_started_are_killed(started):
    leader = started([sys.executable, '-c', 'import subprocess, sys, time; '
                      'subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"]); '
                      'print("started", flush=True); time.sleep(600)'], stdout=subprocess.PIPE, text=True)
    assert leader.stdout.readline() == 'started\n'
    child, = psutil.Process(leader.pid).children()
    kill_process_tree(leader)
    assert leader.wait(HANG_TIMEOUT) == -9
    assert wait_until(lambda: ended(child.pid), timeout=HANG_TIMEOUT)
    leader.stdout.close()


def test_what_a_reaped_process_left_in_its_session_is_killed(started):
    leader, pid = sleeper_left_behind(started)
    kill_process_tree(leader)
    assert wait_until(lambda: ended(pid), timeout=HANG_TIMEOUT)


def test_a_process_that_took_a_reaped_process_pid_is_left_alone(started):
    """The pid reused: a new process in a session of its own has the pid of a process that was
    reaped (its session empty). Stood in for by a reaped Popen's record holding the new process's
    pid: what kill_process_tree sees when the kernel hands the pid out again."""
    server = started(SLEEPER)
    assert psutil.Process(server.pid).status() != psutil.STATUS_ZOMBIE
    reaped_with_that_pid = types.SimpleNamespace(pid=server.pid, returncode=0)
    kill_process_tree(reaped_with_that_pid)
    assert server.poll() is None and not ended(server.pid)


def test_the_ports_a_server_listens_on_are_its_own(started):
    server = started([sys.executable, '-c',
                      'import socket, subprocess, sys, time\n'
                      's = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen()\n'
                      'print(s.getsockname()[1], flush=True); time.sleep(600)'],
                     stdout=subprocess.PIPE, text=True)
    port = int(server.stdout.readline())
    server.stdout.close()
    with socket.socket() as other:    # a port this process listens on: not the server's
        other.bind(('127.0.0.1', 0))
        other.listen()
        assert listening_ports(server) == {port}
        assert other.getsockname()[1] not in listening_ports(server)
    server.kill()
    server.wait(HANG_TIMEOUT)
    assert listening_ports(server) == set()
