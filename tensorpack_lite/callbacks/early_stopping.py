"""Stop training when a statistic stops improving: :class:`EarlyStopping`."""

import math

from ..loop.callback import Callback
from ..utils import logger
from ..utils.argtools import is_int
from .stat_reader import StatReader

__all__ = ['EarlyStopping']


class EarlyStopping(Callback):
    """Ends training once the statistic ``monitor`` has not improved for ``patience`` of its new
    values: with the default trigger (every epoch) and a statistic put every epoch (e.g. by an
    :class:`InferenceRunner`), after the epoch that makes ``patience`` epochs without a better
    value. A value improves when it beats the best so far by more than ``min_delta`` (smaller for
    ``mode='min'``, larger for ``'max'``); NaN never does. Only new values count: a trigger that
    finds no value put since the last one (a statistic on a slower schedule) changes nothing.

    The run then ends as finished (not failed): a single process stops right after the trigger
    (the trainer's ``request_stop``); with several processes the chief decides and every process
    stops after the same step, one step later for the collective and Horovod trainers and two for
    the parameter-server trainers (the request travels as a preemption does). A
    :class:`MaxSaver`/:class:`MinSaver` on the same statistic keeps the best model.

    Its state (the best value, its step, the values without improvement, whether it stopped the
    run) is saved with every checkpoint: a resumed run does not start its patience again, and a
    run it stopped, started again, stops before its first step.

    Place it after the callback that puts ``monitor``; where it stands relative to
    :class:`ModelSaver` does not matter (a checkpoint holds every callback's state after the
    whole step). The name is checked before the first step, as :class:`MinSaver` checks its own.

    Args:
        monitor (str): the statistic, e.g. ``'val-error'``.
        patience (int): how many new values without improvement end training.
        mode (str): ``'min'`` (smaller is better) or ``'max'``.
        min_delta (float): by how much a value must beat the best to count as better.

    Attribute ``best`` is ``(global_step, value)`` of the best so far (None before the first),
    ``waited`` the new values since then, ``stopped_at`` the global step whose value ended
    training (None while it goes on).

    Example::

        callbacks=[InferenceRunner(test, ScalarStats('cost')),
                   EarlyStopping('validation_cost', patience=5, min_delta=1e-3),
                   ModelSaver(), MinSaver('validation_cost')]
    """

    def __init__(self, monitor, patience=5, mode='min', min_delta=0.0):
        self._stat = StatReader(self, monitor)
        if not is_int(patience) or patience < 1:
            raise ValueError("EarlyStopping('{}'): patience must be a positive int, got {!r}".format(
                monitor, patience))
        if mode not in ('min', 'max'):
            raise ValueError("EarlyStopping('{}'): mode must be 'min' or 'max', got {!r}".format(
                monitor, mode))
        if not (isinstance(min_delta, (int, float)) and math.isfinite(min_delta) and min_delta >= 0):
            raise ValueError("EarlyStopping('{}'): min_delta must be a number >= 0, got {!r}".format(
                monitor, min_delta))
        self.monitor = monitor
        self.patience = patience
        self.mode = mode
        self.min_delta = float(min_delta)
        self.best = None
        self.waited = 0
        self.stopped_at = None

    def __str__(self):
        return "EarlyStopping('{}')".format(self.monitor)

    def _before_train(self):
        if self.stopped_at is not None:
            self.trainer.request_stop("{}: this run was stopped early at global_step={}.".format(
                self, self.stopped_at))
        if self.best is not None:
            logger.info("{}: resumed with the best {:.5g} at global_step={} and {} value(s) without "
                        "improvement since (patience {}).".format(self, self.best[1], self.best[0],
                                                                  self.waited, self.patience))

    def _before_epoch(self):
        self._stat.check_once()   # before the first step, once every callback is ready

    def improves(self, value):
        """Whether ``value`` beats the best so far by more than ``min_delta``."""
        if value != value:   # NaN
            return False
        if self.best is None:
            return True
        if self.mode == 'min':
            return value < self.best[1] - self.min_delta
        return value > self.best[1] + self.min_delta

    def _trigger(self):
        point = self._stat.new_value()
        if point is None or self.stopped_at is not None:
            return
        step, value = point
        if self.improves(value):
            self.best, self.waited = (step, value), 0
            return
        self.waited += 1
        if self.waited < self.patience:
            return
        self.stopped_at = step
        best = ("its best {:.5g} at global_step={}".format(self.best[1], self.best[0])
                if self.best else "a number")
        self.trainer.request_stop(
            "{}: '{}' is {:.5g} at global_step={}, the {} value(s) in a row not better than {} by more "
            "than min_delta={:g}.".format(self, self.monitor, value, step, self.waited, best, self.min_delta))

    def _get_state(self):
        return {'best': list(self.best) if self.best is not None else None, 'waited': self.waited,
                'last_seen_step': self._stat.last_seen_step, 'stopped_at': self.stopped_at}

    def _set_state(self, state):
        self.best = (int(state['best'][0]), float(state['best'][1])) if state['best'] is not None else None
        self.waited = int(state['waited'])
        self._stat.last_seen_step = state['last_seen_step']
        self.stopped_at = state['stopped_at']

    def _stat_names(self):
        return []
