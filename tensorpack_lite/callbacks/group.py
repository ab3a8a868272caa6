"""Callbacks: runs a list of callbacks in order, names the culprit of any error and reports
which callbacks made an epoch's end slow."""

import time
from contextlib import contextmanager

from ..compat import tfv1
from ..utils import logger
from ..utils.utils import humanize_time_delta
from .base import Callback, name_culprit
from .hooks import CallbackToHook

__all__ = ['Callbacks']

_STAGES = ('before_train', 'before_epoch', 'after_epoch', 'trigger_step', 'trigger_epoch',
           'after_train', 'before_run', 'after_run')


# By default trigger_epoch() calls trigger(): overriding either makes a callback act there.
_IMPLIED_BY = {'trigger_epoch': ('trigger',)}


def _overrides(cb, stage):
    """Whether ``cb`` does anything at ``stage`` (the base class does nothing at any)."""
    cls = type(cb)
    for name in (stage,) + _IMPLIED_BY.get(stage, ()):
        for attr in (name, '_' + name):
            if attr in cb.__dict__ or getattr(cls, attr) is not getattr(Callback, attr):
                return True
    return False


class _EpochTimer:
    """Accumulates the time each callback spends at the end of an epoch."""

    total_threshold = 3.0
    """Seconds the callbacks must take in total before anything is reported."""

    slow_threshold = 1.0
    """Seconds a callback must take (and more than 30% of the total) to be named."""

    def __init__(self):
        self.times = []

    @contextmanager
    def timed(self, name):
        start = time.perf_counter()
        try:
            yield
        finally:
            self.times.append((name, time.perf_counter() - start))

    def report(self):
        total = sum(t for _, t in self.times)
        if total < self.total_threshold:
            return None
        slow = ['{}: {}'.format(name, humanize_time_delta(t)) for name, t in self.times
                if t > self.slow_threshold and t / total > 0.3]
        msg = "Callbacks took {:.3f} sec in total. {}".format(total, '; '.join(slow))
        logger.info(msg)
        return msg


class Callbacks(Callback):
    """A group of callbacks, itself a callback: each stage runs every member in order.

    Members that do nothing at a stage are skipped there, so a long list of callbacks
    costs nothing per step unless they work per step. An exception from a member carries a
    note naming it (``raised by callback X in trigger_epoch()``) and an attribute ``callback``.
    ``after_train`` runs every member even when some of them fail.
    """

    def __init__(self, cbs):
        for cb in cbs:
            if not isinstance(cb, Callback):
                raise TypeError("Callbacks takes Callback instances, got {!r} of type {}".format(
                    cb, type(cb).__name__))
        self.cbs = list(cbs)
        self._active = {stage: list(self.cbs) for stage in _STAGES}
        self.last_epoch_report = None

    def _run(self, stage, *args):
        for cb in self._active[stage]:
            try:
                getattr(cb, stage)(*args)
            except Exception as err:
                name_culprit(err, cb, stage)
                raise

    def _setup_graph(self):
        with tfv1.name_scope(None):
            for cb in self.cbs:
                try:
                    cb.setup_graph(self.trainer)
                except Exception as err:
                    name_culprit(err, cb, 'setup_graph')
                    raise
        self._active = {stage: [cb for cb in self.cbs if _overrides(cb, stage)] for stage in _STAGES}

    def setup_graph(self, trainer):
        self.trainer = trainer
        self.graph = tfv1.get_default_graph()
        self._setup_graph()

    def get_hooks(self):
        """The ``SessionRunHook``s of the members that act around ``hooked_sess.run``."""
        around_run = self._active['before_run'] + self._active['after_run']
        hooked = [cb for cb in self.cbs if cb in around_run]
        return [CallbackToHook(cb) for cb in hooked]

    def _before_train(self):
        self._run('before_train')

    def _before_epoch(self):
        self._run('before_epoch')

    def _after_epoch(self):
        self._run('after_epoch')

    def trigger_step(self):
        self._run('trigger_step')

    def _trigger_epoch(self):
        timer = _EpochTimer()
        for cb in self._active['trigger_epoch']:
            with timer.timed(str(cb)):
                try:
                    cb.trigger_epoch()
                except Exception as err:
                    name_culprit(err, cb, 'trigger_epoch')
                    raise
        self.last_epoch_report = timer.report()

    def _after_train(self):
        first_error = None
        for cb in self._active['after_train']:
            try:
                cb.after_train()
            except Exception as err:
                name_culprit(err, cb, 'after_train')
                logger.exception("Callback {} failed in after_train()".format(cb))
                first_error = first_error or err
        if first_error is not None:
            raise first_error
