"""A program that leaves its parallel DataFlows open exits promptly and leaves nothing behind
(issue 19, item 5): after its last line, after Ctrl-C (KeyboardInterrupt) and after SIGTERM.

Each test runs a small program with 8 workers of every process-based parallel DataFlow. The
program sets ``leave_grace`` (how long a worker may wait for the others before leaving the
ipc directory) to hours, so that a worker waiting out a grace period at exit shows as a hang
caught by the watchdog, never as a timing threshold.
"""

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile

import psutil
import pytest

from helpers.paths import REPO_DIR
from helpers.processes import kill_process_tree
from helpers.timing import HANG_TIMEOUT, run_or_hang, wait_until

ROOT = REPO_DIR
WORKERS = 8

PROGRAM = r'''
import json, signal, sys, tempfile
import psutil
signal.signal(signal.SIGINT, signal.default_int_handler)  # even if started with SIGINT ignored
signal.signal(signal.SIGTERM, signal.SIG_DFL)
tempfile.tempdir, mode, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
from tensorpack_lite.dataflow import (DataFromList, MultiProcessMapAndBatchData, MultiProcessMapData,
                                      MultiProcessMapDataZMQ, MultiProcessRunner, MultiProcessRunnerZMQ)
from tensorpack_lite.dataflow.workers import ProcessWorker
ProcessWorker.leave_grace = 10 ** 4

def numbers():
    return DataFromList([[k] for k in range(100)], shuffle=False)

def identity(dp):
    return dp

flows = [MultiProcessRunnerZMQ(numbers(), num_proc=n),
         MultiProcessRunner(numbers(), num_prefetch=4, num_proc=n),
         MultiProcessMapData(numbers(), num_proc=n, map_func=identity, buffer_size=16),
         MultiProcessMapDataZMQ(numbers(), num_proc=n, map_func=identity, buffer_size=16, strict=True),
         MultiProcessMapAndBatchData(numbers(), num_proc=n, map_func=identity, batch_size=2)]
def forever(df):
    while True:   # epoch after epoch: only the signal ends the loop below
        yield from df

for df in flows:
    df.reset_state()
iterators = [forever(df) for df in flows]
for _ in range(3):
    for itr in iterators:
        next(itr)
print('WORKERS', json.dumps([p.pid for p in psutil.Process().children()]), flush=True)
if mode == 'return':
    sys.stdin.readline()   # the test has looked at the workers
else:
    while True:            # until the signal
        for itr in iterators:
            next(itr)
'''


def gone(proc):
    """Whether the psutil.Process ``proc`` ended (a zombie counts: it runs nothing)."""
    try:
        return proc.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


class Program(object):
    """The program above, in a session of its own, its ipc directories in a private
    directory; :meth:`close` kills whatever of it is left."""

    def __init__(self, mode, log_path):
        self.tmpdir = tempfile.mkdtemp(prefix='tpx-', dir='/tmp')  # short: socket paths
        self.log = open(log_path, 'w+')
        self.proc = subprocess.Popen([sys.executable, '-c', PROGRAM, self.tmpdir, mode, str(WORKERS)],
                                     cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.log, text=True, start_new_session=True)
        self.workers = []

    def wait_for_workers(self):
        """The program's workers (psutil.Process), once it has iterated every dataflow."""
        line = run_or_hang(self._read_report)
        assert line, "the program ended early:\n" + self.stderr()
        self.workers = [psutil.Process(pid) for pid in json.loads(line[len('WORKERS'):])]
        return self.workers

    def _read_report(self):
        """The program's line 'WORKERS [pids]' (the logger prints to stdout too); '' at its end."""
        for line in self.proc.stdout:
            if line.startswith('WORKERS '):
                return line
        return ''

    def wait(self):
        return self.proc.wait(HANG_TIMEOUT)

    def stderr(self):
        self.log.seek(0)
        return self.log.read()

    def left_behind(self):
        """Workers alive and files in the ipc directories' parent, once either is empty or
        the watchdog expired."""
        wait_until(lambda: all(gone(p) for p in self.workers) and not os.listdir(self.tmpdir))
        return [p.pid for p in self.workers if not gone(p)], os.listdir(self.tmpdir)

    def close(self):
        kill_process_tree(self.proc)
        for proc in self.workers:
            with contextlib.suppress(psutil.NoSuchProcess):
                proc.kill()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)   # the session's leader is this pid
        self.proc.wait(HANG_TIMEOUT)
        self.log.close()
        shutil.rmtree(self.tmpdir, ignore_errors=True)


@pytest.fixture
def program(tmp_path):
    started = []

    def start(mode):
        started.append(Program(mode, tmp_path / 'stderr.txt'))
        return started[-1]
    yield start
    for prog in started:
        prog.close()


def expected_workers():
    return 4 * WORKERS + WORKERS + 1   # the map-and-batch dataflow adds its dispatcher


def test_returning_without_closing_exits_and_leaves_nothing(program):
    prog = program('return')
    assert len(prog.wait_for_workers()) == expected_workers()
    assert len(os.listdir(prog.tmpdir)) == 4   # the ipc directories of the ZeroMQ dataflows
    prog.proc.stdin.write('\n')
    prog.proc.stdin.flush()
    assert prog.wait() == 0, prog.stderr()
    assert prog.left_behind() == ([], [])
    assert 'Traceback' not in prog.stderr() and 'Exception ignored' not in prog.stderr(), prog.stderr()


def test_ctrl_c_while_workers_run_exits_and_leaves_nothing(program):
    prog = program('loop')
    assert len(prog.wait_for_workers()) == expected_workers()
    os.killpg(prog.proc.pid, signal.SIGINT)   # as Ctrl-C: the whole process group
    assert prog.wait() == -signal.SIGINT, prog.stderr()   # KeyboardInterrupt went up
    assert prog.left_behind() == ([], [])
    err = prog.stderr()
    assert 'KeyboardInterrupt' in err and 'Exception ignored' not in err, err


def test_sigterm_while_workers_run_exits_and_leaves_nothing(program):
    prog = program('loop')
    assert len(prog.wait_for_workers()) == expected_workers()
    prog.proc.send_signal(signal.SIGTERM)   # the parent only; its workers get the death signal
    assert prog.wait() == -signal.SIGTERM, prog.stderr()
    assert prog.left_behind() == ([], [])
