"""Report a statistic to an Optuna trial and end a trial Optuna prunes: :class:`OptunaPruning`."""

from ..loop.callback import Callback
from ..utils import logger
from .stat_reader import StatReader

__all__ = ['OptunaPruning']


class OptunaPruning(Callback):
    """Reports the statistic ``monitor`` to an Optuna trial at every trigger (each epoch by
    default: ``trial.report(value, epoch)``), and when ``trial.should_prune()`` says so, ends
    training cleanly through ``trainer.request_stop()``: the epoch's callbacks all run
    (``ModelSaver`` writes its checkpoint), the run ends as finished, and with several processes
    every process stops after the same step (the chief alone talks to Optuna: the callback is
    chief-only). :func:`~tensorpack_lite.train.launch_optuna_trial` then raises
    ``optuna.TrialPruned``, so that Optuna marks the trial pruned.

    Attributes: ``last`` and ``best`` are ``(epoch, value)`` of the last value reported and of
    the best one (by the study's direction), ``pruned_at`` the epoch after which the trial was
    pruned (None while it goes on). They are saved with every checkpoint: a resumed trial does
    not report an epoch again, and a pruned one, started again, stops before its first step.

    Args:
        trial (optuna.trial.Trial): the trial.
        monitor (str): the statistic, e.g. ``'validation_cost'``, put by a callback before
            this one (e.g. an :class:`InferenceRunner`).

    Example::

        callbacks=[InferenceRunner(test, ScalarStats('cost')), OptunaPruning(trial, 'validation_cost')]
    """

    def __init__(self, trial, monitor):
        for method in ('report', 'should_prune'):
            if not callable(getattr(trial, method, None)):
                raise TypeError("OptunaPruning takes an Optuna trial (with report() and should_prune()), "
                                "got {!r}".format(trial))
        self._stat = StatReader(self, monitor)
        self.trial = trial
        self.monitor = monitor
        self.last = None
        self.best = None
        self.pruned_at = None

    def __str__(self):
        return "OptunaPruning('{}')".format(self.monitor)

    def _maximize(self):
        """Whether the trial's study maximizes (by its direction; minimizes when unknown)."""
        try:
            return self.trial.study.direction.name == 'MAXIMIZE'
        except (AttributeError, RuntimeError):   # no study (a stand-in), or several objectives
            return False

    def _before_train(self):
        if self.pruned_at is not None:
            self.trainer.request_stop("{}: this trial was pruned after epoch {}.".format(
                self, self.pruned_at))

    def _before_epoch(self):
        self._stat.check_once()   # before the first step, once every callback is ready

    def _trigger(self):
        point = self._stat.new_value()
        if point is None or self.pruned_at is not None:
            return
        epoch, value = self.epoch_num, float(point[1])
        self.trial.report(value, epoch)
        self.last = (epoch, value)
        if self.best is None or (value > self.best[1] if self._maximize() else value < self.best[1]):
            self.best = (epoch, value)
        if not self.trial.should_prune():
            return
        self.pruned_at = epoch
        reason = "{}: Optuna prunes trial {} after epoch {} ('{}' = {:.5g}).".format(
            self, getattr(self.trial, 'number', '?'), epoch, self.monitor, value)
        logger.info(reason)
        self.trainer.request_stop(reason)

    def _get_state(self):
        return {'last': list(self.last) if self.last else None,
                'best': list(self.best) if self.best else None,
                'pruned_at': self.pruned_at, 'last_seen_step': self._stat.last_seen_step}

    def _set_state(self, state):
        self.last = tuple(state['last']) if state['last'] else None
        self.best = tuple(state['best']) if state['best'] else None
        self.pruned_at = state['pruned_at']
        self._stat.last_seen_step = state['last_seen_step']

    def _stat_names(self):
        return []
