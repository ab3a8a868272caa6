"""dataflow.workers: a worker process's body reports its failure to the parent and ends; the
parent's group of workers sees it end, and ends the others (SIGTERM) when closed."""

import multiprocessing as mp
import os
import signal
import time

import pytest

import tensorpack_lite.dataflow as dataflow
from tensorpack_lite.dataflow import parallel
from tensorpack_lite.dataflow.workers import (DataFlowWorkerError, ProcessWorker, WorkerProcesses,
                                              describe_exit, start_method_context)


class Reporting(ProcessWorker):
    """Runs ``loop()`` and writes its report into the file ``report``."""

    def __init__(self, idx, loop, report=None):
        super(Reporting, self).__init__('Flow', idx, os.getpid())
        self.loop, self.report = loop, report

    def _loop(self):
        self.loop()

    def _report(self, text):
        with open(self.report, 'w') as f:
            f.write(text)


def boom():
    raise ValueError('boom')


def forever():
    while True:
        time.sleep(3600)


@pytest.fixture
def group():
    """``make(*workers)``: their WorkerProcesses, closed after the test."""
    made = []

    def make(*workers):
        made.append(WorkerProcesses(list(workers)))
        return made[-1]
    yield make
    for workers in made:
        workers.close()


def test_a_failing_worker_reports_its_exception_then_exits_with_1(group, tmp_path):
    report = str(tmp_path / 'report')
    workers = group(Reporting(0, boom, report))
    workers.start()
    name, proc = workers.dead(timeout=60)
    with open(report) as f:
        text = f.read()
    assert name == 'Flow worker #0'
    assert text.startswith('Flow worker #0 (pid {}) raised ValueError: boom\n--- traceback in the worker ---'
                           .format(proc.pid))
    assert "raise ValueError('boom')" in text
    assert proc.exitcode == 1 and describe_exit(proc.exitcode) == 'exited with code 1'


def test_close_ends_the_running_workers_by_sigterm(group):
    workers = group(Reporting(0, forever), Reporting(1, forever))
    workers.start()
    assert workers.dead(timeout=0) is None
    workers.close()
    assert [p.exitcode for p in workers.procs] == [-signal.SIGTERM] * 2
    assert describe_exit(-signal.SIGTERM) == 'was killed by signal SIGTERM'


def test_how_a_worker_ended_in_words():
    assert describe_exit(0) == 'exited with code 0'
    assert describe_exit(-signal.SIGKILL) == 'was killed by signal SIGKILL'
    assert describe_exit(-200) == 'was killed by signal 200'   # not a signal Python names


def test_workers_fork_where_they_can_and_the_error_keeps_its_public_paths():
    if 'fork' in mp.get_all_start_methods():
        assert start_method_context().get_start_method() == 'fork'
    assert parallel.DataFlowWorkerError is DataFlowWorkerError is dataflow.DataFlowWorkerError
