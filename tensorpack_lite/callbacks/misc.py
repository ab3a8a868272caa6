"""Callbacks that report on the training run itself (e.g. how long it will still take).

``InjectShell`` and ``SendStat`` live in :mod:`.stats`; they are importable from here too,
tensorpack's path."""

import time
from collections import deque

import numpy as np

from ..loop.callback import Callback
from ..utils import logger
from ..utils.argtools import is_int
from ..utils.utils import humanize_time_delta
from .stats import InjectShell, SendStat  # tensorpack's path

__all__ = ['EstimatedTimeLeft', 'InjectShell', 'SendStat']

UNKNOWN_MAX_EPOCH = 9999999
"""A ``max_epoch`` at least this large (the trainer's default) means "train until stopped"."""


class EstimatedTimeLeft(Callback):
    """After every epoch, log how long training should still take.

    The estimate is the typical duration of the last ``last_k_epochs`` epochs (wall time between
    two ends of epoch, so the work of other callbacks counts too) times the number of epochs
    left. Nothing is logged when ``max_epoch`` is unknown (``>= 9999999``) or no epoch is left.

    Attributes:
        estimated_time_left (float or None): the latest estimate in seconds; None before the
            first epoch ended or when ``max_epoch`` is unknown.

    Example::

        trainer.train_with_defaults(callbacks=[EstimatedTimeLeft()], steps_per_epoch=100, max_epoch=50)
        # -> "Estimated Time Left: 1 hour 12 minutes 5 seconds"
    """

    def __init__(self, last_k_epochs=5, median=True):
        """
        Args:
            last_k_epochs (int): how many recent epochs the estimate uses.
            median (bool): use the median of their durations (robust to one slow epoch, e.g.
                one that ran a long evaluation); the mean when False.
        """
        if not is_int(last_k_epochs) or last_k_epochs < 1:
            raise ValueError("EstimatedTimeLeft: last_k_epochs must be a positive integer, got {!r}"
                             .format(last_k_epochs))
        self._durations = deque(maxlen=int(last_k_epochs))
        self._median = bool(median)
        self.estimated_time_left = None

    def _before_train(self):
        self.estimated_time_left = None
        self._last_time = time.perf_counter()

    def _get_state(self):
        return {'durations': list(self._durations)}

    def _set_state(self, state):
        self._durations.clear()
        self._durations.extend(float(d) for d in state['durations'])

    def _trigger_epoch(self):
        now = time.perf_counter()
        self._durations.append(now - self._last_time)
        self._last_time = now
        max_epoch = self.trainer.loop.max_epoch
        if max_epoch >= UNKNOWN_MAX_EPOCH:
            return
        typical = np.median(self._durations) if self._median else np.mean(self._durations)
        self.estimated_time_left = float(typical) * (max_epoch - self.epoch_num)
        if self.estimated_time_left > 0:
            logger.info("Estimated Time Left: " + humanize_time_delta(self.estimated_time_left))
