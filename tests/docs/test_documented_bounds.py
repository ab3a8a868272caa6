"""The time bounds the docs state are those of the code path: a failed step's end
(docs/trainer.md, docs/reliability.md) and a lost worker's (docs/distributed.md).

The end of training is run for real after a failed step, on a clock of its own
(:class:`WorstCaseClock`): every bounded wait it makes reaches its timeout, the probe of the
session answering at its deadline (so the state at the end is taken too) and everything else
never, and the exit is held for its bound. What that clock reads when the end is over is the
longest the code can take; the docs must state exactly that. A lost worker is run for real
too: the distributed trainer's watchdog watches a peer whose link is cut mid-run
(:class:`CutLink`: its waits and probes reach their timeouts), what the trainer does about the
loss (closing the session) ends its loop, whether it waited in a step or was between two runs,
and the end that follows is counted as above. The phases themselves are also tested at their
real timeouts in session/test_failure.py and distributed/test_trainers.py."""

import contextlib
import os
import re
import socket
import threading

import numpy as np
import pytest

from helpers.paths import REPO_DIR
from helpers.timing import HANG_TIMEOUT
from helpers.models import LineRegression
from helpers.process_guard import starts_tensorflow_server_here
from tensorpack_lite.callbacks.base import Callback
from tensorpack_lite.callbacks.saver import ModelSaver
from tensorpack_lite.cluster.config import ClusterConfig, LostTaskError, free_ports, local_cluster
from tensorpack_lite.compat import tf, tfv1
from tensorpack_lite.dataflow import BatchData, DataFromList
from tensorpack_lite.multiprocess.server import create_server
from tensorpack_lite.train import SimpleTrainer, TrainConfig, launch_train_with_config
from tensorpack_lite.train import base as train_base
from tensorpack_lite.coordination import tf_runtime as train_distributed
from tensorpack_lite.train.distributed import CollectiveAllReduceTrainer, DistributedTrainerBase
from tensorpack_lite.utils import logger
from tensorpack_lite.utils.concurrency import DaemonCall

pytestmark = starts_tensorflow_server_here   # servers made in this process

DOCS = os.path.join(REPO_DIR, 'docs')


def read(name):
    with open(os.path.join(DOCS, name), encoding='utf-8') as f:
        return ' '.join(f.read().split())     # lines joined: a sentence may wrap anywhere


class WorstCaseClock:
    """From :meth:`start` on, each ``DaemonCall.wait(timeout)`` counts ``timeout`` seconds and
    says that the call has not ended (it goes on in the background, abandoned), except the probe
    of the session (``'session-probe'``), which is waited for and answers at its deadline;
    ``bound_exit`` counts the shortest exit bound once. ``elapsed`` is the sum: the longest the
    end can take."""

    PROBE = 'session-probe'

    def __init__(self, monkeypatch):
        self.waits, self.exit_bounds, self.counting = [], [], False
        real_wait = DaemonCall.wait

        def wait(call, timeout=None):
            if timeout is None or not self.counting:
                return real_wait(call, timeout)
            self.waits.append((call.name, timeout))
            return call.name == self.PROBE and real_wait(call, HANG_TIMEOUT)

        monkeypatch.setattr(DaemonCall, 'wait', wait)
        for module in (train_base, train_distributed):
            monkeypatch.setattr(module, 'bound_exit', self.exit_bounds.append)

    def start(self):
        self.counting = True

    @property
    def elapsed(self):
        return sum(timeout for _, timeout in self.waits) + (min(self.exit_bounds) if self.exit_bounds else 0)


class CutLink:
    """The link between this worker and a peer task at ``('localhost', port)``, as the trainer's
    watchdog sees it (its probes: ``socket.create_connection``; its waits: ``threading.Event.wait``
    in its thread, named 'TaskWatchdog'), on a clock of its own. The peer answers until
    :meth:`cut` is called; the probe after that still answers, and the link is cut right after it:
    the worst case, where a whole wait and a whole probe pass before the loss can be seen. From
    then on each wait of the watchdog counts its timeout and returns at once, and each probe of
    the peer counts its timeout and fails (``counted``); ``found`` is what the clock reads when
    the watchdog has reported the loss (its thread's first wait that is not one between two
    probes). Each bounded wait its thread makes after that (what the trainer does about the
    loss) is recorded in ``after_loss`` and waited for for real, up to HANG_TIMEOUT (``hung`` if
    that passes, instead of the process's exit)."""

    REACTION = 'cancel-step'
    """The thread in which the trainer closes its session once it knows the peer lost."""

    def __init__(self, monkeypatch, port):
        self.peer = ('localhost', port)
        self.requested = self.cut_done = self.hung = False
        self.counted, self.after_loss, self.found, self.between_probes = [], [], None, None
        self.reacting = threading.Event()
        real_connect, real_wait = socket.create_connection, threading.Event.wait

        def create_connection(address, timeout=None, *args, **kwargs):
            if tuple(address) != self.peer:
                return real_connect(address, timeout, *args, **kwargs)
            if not self.cut_done:
                self.cut_done = self.requested
                return contextlib.nullcontext()
            self.counted.append(('probe', timeout))
            raise socket.timeout('timed out (the link is cut)')

        def wait(event, timeout=None):
            if timeout is None or threading.current_thread().name != 'TaskWatchdog':
                return real_wait(event, timeout)
            if not self.cut_done:
                self.between_probes = event    # until the cut, the watchdog waits only between probes
                return real_wait(event, timeout)
            if event is self.between_probes:
                self.counted.append(('wait', timeout))
                return event.is_set()
            if self.found is None:         # the watchdog's first other wait: it reported the loss
                self.found = sum(seconds for _, seconds in self.counted)
            self.after_loss.append(timeout)
            self.reacting.set()
            if not real_wait(event, HANG_TIMEOUT):
                self.hung = True
            return True

        monkeypatch.setattr(socket, 'create_connection', create_connection)
        monkeypatch.setattr(threading.Event, 'wait', wait)

    def cut(self):
        self.requested = True

    def wait_for_the_reaction(self):
        """Until the trainer has done what it does about the loss (closed its session)."""
        assert self.reacting.wait(HANG_TIMEOUT), "the loss was not found"
        for thread in threading.enumerate():
            if thread.name == self.REACTION:
                thread.join(HANG_TIMEOUT)


class LosePeerAtStep2(Callback):
    """Puts the peer of ``link`` in the trainer's cluster as worker 1 before the session starts
    (so the trainer's watchdog watches it), cuts the link after step 2 (and starts ``clock``).
    Then either step 3 waits in a queue nothing fills, as a collective op waits for a lost peer,
    until what the trainer does about the loss (closing the session) cancels it; or, with
    ``between_runs``, the loss is met between two runs: once the trainer has closed the session,
    this callback runs in it, as any run after the close would (the error is not TensorFlow's)."""

    def __init__(self, clock, link, between_runs=False):
        self.clock, self.link, self.between_runs = clock, link, between_runs
        self._held = self._step = None

    def _setup_graph(self):
        cluster = self.trainer.cluster
        own = cluster.address(cluster.job_name, cluster.task_index)
        self.trainer.cluster = ClusterConfig({'worker': [own, '{}:{}'.format(*self.link.peer)]}, 'worker', 0)
        self._held = tfv1.FIFOQueue(1, tf.float32).dequeue()
        self._step = tfv1.train.get_global_step()

    def _before_run(self, ctx):
        return [self._held] if self.link.requested and not self.between_runs else None

    def _trigger_step(self):
        if self.global_step == 2:
            self.clock.start()
            self.link.cut()
            if self.between_runs:
                self.link.wait_for_the_reaction()
                self.trainer.sess.run(self._step)      # the session is closed


RELEASE = threading.Event()
"""Set at the end of the module: the ``after_train`` of :class:`HoldsAtEnd` returns."""


@pytest.fixture(scope='module', autouse=True)
def abandoned_threads_end():
    """The ``after_train`` threads the trainers abandoned (:class:`HoldsAtEnd`) end with the module:
    released, they finish the callbacks' ``after_train`` (the event writers close)."""
    yield
    RELEASE.set()
    for thread in threading.enumerate():
        if thread.name == 'after-train':
            thread.join(HANG_TIMEOUT)


class HoldsAtEnd(Callback):
    """An ``after_train`` that does not end while the trainer waits (its thread is a daemon,
    abandoned by the trainer; released at the end of the module)."""

    def _after_train(self):
        RELEASE.wait()


class BreakStep(Callback):
    """At global step 2, a run in the trainer's session that raises inside TensorFlow's session
    module (``sess.run(object())``): the kind of error after which the session is probed."""

    def __init__(self, clock):
        self.clock = clock

    def _trigger_step(self):
        if self.global_step == 2:
            self.clock.start()
            self.trainer.sess.run(object())


def end_of_a_failed_step(trainer, logdir, monkeypatch, failure=BreakStep, error=TypeError):
    """The worst case of the end of training after a failed step, by the trainer's code path:
    ``failure(clock)`` is the callback that makes step 3 fail with ``error``."""
    clock = WorstCaseClock(monkeypatch)
    logger.set_logger_dir(logdir, action='d')
    data = BatchData(DataFromList([[np.ones(2, 'float32')]] * 8, shuffle=False), 2)
    model = LineRegression(dim=2, init=1.0, target=1.0, lr=0.1, lr_variable=False)
    config = TrainConfig(model=model, dataflow=data, steps_per_epoch=4, max_epoch=1,
                         callbacks=[HoldsAtEnd(), ModelSaver(), failure(clock)])
    try:
        with pytest.raises(error) as info:
            launch_train_with_config(config, trainer)
    finally:
        logger.unset_logger_dir()      # the module's fixtures leave no logger directory
    assert trainer.loop.failure is not None
    clock.error = info.value
    return clock


@pytest.fixture(scope='module')
def lone_worker():
    """The server of the only worker of a cluster without parameter server."""
    return create_server(local_cluster(1), 'worker', 0)


@pytest.fixture(scope='module')
def ends(tmp_path_factory, lone_worker):
    """{'single': clock, 'distributed': clock}: the end of a failed step, measured."""
    measured = {}
    trainers = (('single', SimpleTrainer),
                ('distributed', lambda: CollectiveAllReduceTrainer(['/cpu:0'], lone_worker)))
    for name, make in trainers:
        with pytest.MonkeyPatch.context() as monkeypatch, tf.Graph().as_default():
            measured[name] = end_of_a_failed_step(make(), str(tmp_path_factory.mktemp(name)), monkeypatch)
    return measured


def test_every_phase_of_the_end_is_bounded_and_reached(ends):
    for name, clock in ends.items():
        print("{}: {} + exit {} = {:g} s".format(name, clock.waits, min(clock.exit_bounds), clock.elapsed))
    single = ends['single']
    assert [name for name, _ in single.waits] == ['session-probe', 'resume-state-at-end', 'after-train',
                                                  'close-session']
    assert [timeout for _, timeout in single.waits] == [
        SimpleTrainer.SESSION_PROBE_TIMEOUT, SimpleTrainer.CLOSE_TIMEOUT,
        SimpleTrainer.AFTER_FAILURE_TIMEOUT, SimpleTrainer.CLOSE_TIMEOUT]
    assert min(single.exit_bounds) == SimpleTrainer.EXIT_TIMEOUT
    distributed = ends['distributed']
    assert [name for name, _ in distributed.waits][-1] == 'close-finish-barrier'


def test_the_end_after_a_failed_step_is_the_one_measured(ends):
    single, distributed = ends['single'].elapsed, ends['distributed'].elapsed
    stated = re.search(r'ends with that error within (\d+) seconds at most \(([\d +]+), the timeouts of '
                       r'its phases above\); (\d+) for the distributed trainers', read('trainer.md'))
    assert stated, "docs/trainer.md no longer states the bound after a failed step"
    total, terms, total_distributed = int(stated.group(1)), stated.group(2), int(stated.group(3))
    assert total == single == sum(int(t) for t in terms.split('+')) == 50
    assert total_distributed == distributed == 46
    assert '({} s at most: the sum of the timeouts of its phases)'.format(total) in read('reliability.md')


@pytest.fixture(scope='module')
def lost(tmp_path_factory, lone_worker):
    """{how: (link, clock)}: a collective worker whose peer's link is cut after step 2, measured
    for each way its loop ends after the loss: the step waiting for the peer cancelled ('in a
    step': LostTaskError), or the closed session met by a run between two steps ('between runs':
    RuntimeError, no TensorFlow error, so the session is probed)."""
    measured = {}
    ways = (('in a step', False, LostTaskError), ('between runs', True, RuntimeError))
    for how, between_runs, error in ways:
        with pytest.MonkeyPatch.context() as monkeypatch, tf.Graph().as_default():
            link = CutLink(monkeypatch, free_ports(1)[0])
            trainer = CollectiveAllReduceTrainer(['/cpu:0'], lone_worker)
            trainer.STEP_TIMEOUT = HANG_TIMEOUT     # were the step never cancelled: a failure, not a hang
            measured[how] = link, end_of_a_failed_step(
                trainer, str(tmp_path_factory.mktemp('lost')), monkeypatch, error=error,
                failure=lambda clock: LosePeerAtStep2(clock, link, between_runs))
    return measured


def test_a_lost_worker_ends_within_the_stated_bound_after_the_cut(lost):
    """The bound after a cut link, measured on the code path: from the cut to the watchdog's
    report (``found``), then the longest of what ends the worker: the end of the failed step,
    however the loop met the loss, or the wait after which the trainer exits when its loop does
    not end (a call TensorFlow cannot cancel)."""
    interval, misses = DistributedTrainerBase.PROBE_INTERVAL, DistributedTrainerBase.PROBE_MISSES
    for how, (link, clock) in sorted(lost.items()):
        print("{}: found {} = {} s; after the loss {}; the end {} + exit {} = {:g} s".format(
            how, link.counted, link.found, link.after_loss, clock.waits, min(clock.exit_bounds),
            clock.elapsed))
        assert not link.hung, "{}: the loop did not end after the loss".format(how)
        # per miss one wait, then a probe of as long; lost after PROBE_MISSES probes unanswered
        assert link.counted == [('wait', interval), ('probe', interval)] * misses
        assert link.after_loss == [DistributedTrainerBase.EXIT_AFTER_LOSS_TIMEOUT]
    (link, in_a_step), (_, between_runs) = lost['in a step'], lost['between runs']
    assert 'lost worker 1 (localhost:{})'.format(link.peer[1]) in str(in_a_step.error)
    assert 'closed Session' in str(between_runs.error)
    assert 'session-probe' not in dict(in_a_step.waits)                # a TensorFlow error: not probed
    assert 'resume-state-at-end' not in dict(between_runs.waits)      # probed, found closed: no state
    bound = link.found + max(sum(link.after_loss), in_a_step.elapsed, between_runs.elapsed)
    stated = re.search(r'a lost task is found within 2 x `PROBE_MISSES` x `PROBE_INTERVAL` \((\d+) s\b.*?'
                       r'not probed \((\d+) s at most\)'
                       r'.*?no state is taken at the end \((\d+) s at most\).*?(\d+) s at most after the cut',
                       read('distributed.md'))
    assert stated, "docs/distributed.md no longer states the bound after a cut link"
    measured = [link.found, in_a_step.elapsed, between_runs.elapsed, bound]
    assert [int(n) for n in stated.groups()] == measured == [10, 36, 44, 54]
    assert 'within {:g} s at most of the cut'.format(bound) in read('reliability.md')
