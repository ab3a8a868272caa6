"""Tests of the time, throughput, GPU and background-process callbacks, and of the
adapters between callbacks and TensorFlow's SessionRunHooks."""

import logging
import multiprocessing as mp
import signal
import time

import pytest

from tensorpack_lite.callbacks.base import Callback
from tensorpack_lite.callbacks.concurrency import StartProcOrThread
from tensorpack_lite.utils.concurrency import StoppableThread
from helpers.timing import HANG_TIMEOUT
from helpers.trainers import make_trainer, train


class _Spinner(StoppableThread):
    def __init__(self):
        super().__init__(daemon=True, name='spinner')

    def run(self):
        while not self.stopped():
            time.sleep(0.01)


class _AliveDuringTraining(Callback):
    def __init__(self, things):
        self.things = things
        self.alive = []

    def _trigger_epoch(self):
        self.alive.append([t.is_alive() for t in self.things])


def test_start_proc_or_thread_starts_and_stops_them():
    # forkserver: a fork of this multi-threaded process may hang on a lock another thread held at
    # the fork (before it takes its SIGTERM), which is not what this test is about
    proc = mp.get_context('forkserver').Process(target=time.sleep, args=(60,), daemon=True)
    thread = _Spinner()
    assert not proc.is_alive() and not thread.is_alive()
    watcher = _AliveDuringTraining([proc, thread])
    try:
        train(make_trainer(0.0), [StartProcOrThread([proc, thread]), watcher], 1, 2)
        assert watcher.alive == [[True, True], [True, True]]
        assert not proc.is_alive()
        assert proc.exitcode == -signal.SIGTERM
        assert not thread.is_alive() and thread.stopped()
    finally:
        if proc.is_alive():
            proc.kill()
            proc.join()


def _ignore_sigterm_and_sleep(ready):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    ready.set()
    time.sleep(120)


class _WaitUntilReady(Callback):
    def __init__(self, ready):
        self.ready = ready

    def _after_train(self):
        assert self.ready.wait(HANG_TIMEOUT), "the process did not start"


def test_start_proc_or_thread_kills_a_process_that_outlives_sigterm(log_records):
    ready = mp.Event()
    proc = mp.Process(target=_ignore_sigterm_and_sleep, args=(ready,), daemon=True, name='stubborn')
    starter = StartProcOrThread(proc)
    starter.join_timeout = 1.0
    try:
        train(make_trainer(0.0), [_WaitUntilReady(ready), starter], 1, 1)
        assert not proc.is_alive() and proc.exitcode == -signal.SIGKILL
        assert log_records.messages_at(logging.ERROR) == [
            "StartProcOrThread: stubborn is still alive 1.0 sec after SIGTERM: killed with SIGKILL."]
    finally:
        if proc.is_alive():
            proc.kill()
            proc.join()


def test_start_proc_or_thread_stops_them_after_a_failure():
    thread = _Spinner()

    class Boom(Callback):
        def _trigger_epoch(self):
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match='boom'):
        train(make_trainer(0.0), [StartProcOrThread(thread), Boom()], 1, 3)
    assert thread.stopped() and not thread.is_alive()


def test_start_proc_or_thread_keeps_them_without_stop_at_last():
    thread = _Spinner()
    try:
        train(make_trainer(0.0), [StartProcOrThread(thread, stop_at_last=False)], 1, 1)
        assert thread.is_alive() and not thread.stopped()
    finally:
        thread.stop()
        thread.join(5)


def test_start_proc_or_thread_rejects_unstartable():
    with pytest.raises(TypeError, match='item 1'):
        StartProcOrThread([_Spinner(), object()])
