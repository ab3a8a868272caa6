"""The time bounds the docs state are those of the code path: a failed step's end
(docs/trainer.md, docs/reliability.md) and a lost worker's (docs/distributed.md).

The end of training is run for real after a failed step, on a clock of its own
(:class:`WorstCaseClock`): every bounded wait it makes reaches its timeout, the probe of the
session answering at its deadline (so the state at the end is taken too) and everything else
never, and the exit is held for its bound. What that clock reads when the end is over is the
longest the code can take; the docs must state exactly that. The phases themselves are also
tested at their real timeouts in tfutils/test_session_failure.py and distributed/test_trainers.py."""

import os
import re
import threading

import numpy as np
import pytest

from helpers import HANG_TIMEOUT, REPO_DIR
from helpers.models import LineRegression
from tensorpack_lite.callbacks.base import Callback
from tensorpack_lite.callbacks.saver import ModelSaver
from tensorpack_lite.cluster.config import local_cluster
from tensorpack_lite.compat import tf
from tensorpack_lite.dataflow import BatchData, DataFromList
from tensorpack_lite.tfutils.distributed import create_server
from tensorpack_lite.train import SimpleTrainer, TrainConfig, launch_train_with_config
from tensorpack_lite.train import base as train_base
from tensorpack_lite.train import distributed as train_distributed
from tensorpack_lite.train.distributed import CollectiveAllReduceTrainer, DistributedTrainerBase
from tensorpack_lite.utils import logger
from tensorpack_lite.utils.concurrency import DaemonCall

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


class HoldsAtEnd(Callback):
    """An ``after_train`` that never ends (its thread is a daemon, abandoned by the trainer)."""

    def _after_train(self):
        threading.Event().wait()


class BreakStep(Callback):
    """At global step 2, a run in the trainer's session that raises inside TensorFlow's session
    module (``sess.run(object())``): the kind of error after which the session is probed."""

    def __init__(self, clock):
        self.clock = clock

    def _trigger_step(self):
        if self.global_step == 2:
            self.clock.start()
            self.trainer.sess.run(object())


def end_of_a_failed_step(trainer, logdir, monkeypatch):
    """The worst case of the end of training after a failed step, by the trainer's code path."""
    clock = WorstCaseClock(monkeypatch)
    logger.set_logger_dir(logdir, action='d')
    data = BatchData(DataFromList([[np.ones(2, 'float32')]] * 8, shuffle=False), 2)
    model = LineRegression(dim=2, init=1.0, target=1.0, lr=0.1, lr_variable=False)
    config = TrainConfig(model=model, dataflow=data, steps_per_epoch=4, max_epoch=1,
                         callbacks=[HoldsAtEnd(), ModelSaver(), BreakStep(clock)])
    with pytest.raises(TypeError):
        launch_train_with_config(config, trainer)
    assert trainer.loop.failure is not None
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


def test_a_lost_worker_ends_within_the_stated_bound_after_the_cut(ends):
    found = 2 * DistributedTrainerBase.PROBE_INTERVAL      # one wait, then a probe of as long
    bound = found + max(DistributedTrainerBase.EXIT_AFTER_LOSS_TIMEOUT, ends['distributed'].elapsed)
    stated = re.search(r'a lost task is found within 2 x `PROBE_INTERVAL`.*?failed step \((\d+) s at '
                       r'most.*?(\d+) s at most after the cut', read('distributed.md'))
    assert stated, "docs/distributed.md no longer states the bound after a cut link"
    assert [int(n) for n in stated.groups()] == [ends['distributed'].elapsed, bound] == [46, 48]
    assert 'within {:g} s at most of the cut'.format(bound) in read('reliability.md')
