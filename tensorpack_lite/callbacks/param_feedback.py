"""Hyper-parameter setters that react to the run: to a statistic that stopped improving
(:class:`StatMonitorParamSetter`) or to a file a human edits (:class:`HumanHyperParamSetter`)."""

import math
import os
from collections import deque

from ..utils import logger
from ..utils.argtools import is_int, is_real
from .param_setter import HyperParamSetter
from .stat_reader import StatReader

__all__ = ['StatMonitorParamSetter', 'HumanHyperParamSetter']


class StatMonitorParamSetter(HyperParamSetter):
    """Change a hyper-parameter when a statistic stops improving.

    At every trigger (by default after every epoch) the latest value of ``stat_name`` in
    ``trainer.monitors`` is observed (through :class:`StatReader`: a name that no callback puts
    fails before the first step, suggesting the closest). With ``history`` the last ``last_k``
    observations, the parameter becomes ``value_func(old_value)`` when
    ``min(history) >= history[0] - threshold`` (the statistic did not decrease by more than
    ``threshold``), or, with ``reverse=True``, when ``max(history) <= history[0] + threshold``.
    A value is observed once (a trigger without a new value observes nothing). After a change
    the history starts afresh: the next change needs ``last_k`` new observations. Nothing
    happens before training.

    The statistic must be put at least as often as this callback is triggered; put it with a
    callback placed before this one (callbacks run in order), or the observation lags by one.

    Args:
        param: as in :class:`HyperParamSetter`.
        stat_name (str): the scalar to watch, e.g. ``'val-error'``.
        value_func: ``new_value = value_func(old_value)``.
        threshold (float): the least improvement that counts.
        last_k (int): the number of observations compared.
        reverse (bool): watch for an increase instead of a decrease.

    Example::

        # validation error not lower for 5 epochs: learning rate x 0.2
        StatMonitorParamSetter('learning_rate', 'val-error', lambda x: x * 0.2,
                               threshold=0, last_k=5)
    """

    _enable_before_train = False

    def __init__(self, param, stat_name, value_func, threshold, last_k, reverse=False):
        if not isinstance(stat_name, str):
            raise TypeError("StatMonitorParamSetter: stat_name must be a str, got {!r}".format(stat_name))
        if not callable(value_func):
            raise TypeError("StatMonitorParamSetter: value_func must be callable, got {!r}".format(
                value_func))
        if not is_real(threshold):
            raise TypeError("StatMonitorParamSetter: threshold must be a number, got {!r}".format(threshold))
        if not is_int(last_k) or last_k < 1:
            raise ValueError("StatMonitorParamSetter: last_k must be a positive integer, got {!r}".format(
                last_k))
        super().__init__(param)
        self.stat_name = stat_name
        self._stat = StatReader(self, stat_name, wait=True)
        self.value_func = value_func
        self.threshold = float(threshold)
        self.last_k = int(last_k)
        self.reverse = bool(reverse)
        self.history = deque(maxlen=self.last_k)

    def _get_state(self):
        return {'history': [list(item) for item in self.history],
                'last_observed_step': self._stat.last_seen_step}

    def _set_state(self, state):
        self.history.clear()
        self.history.extend(tuple(item) for item in state['history'])
        self._stat.last_seen_step = state['last_observed_step']

    def _before_epoch(self):
        self._stat.check_once()   # before the first step, once every callback is ready

    def _get_value_to_set(self):
        point = self._stat.new_value()
        if point is None:
            if self._stat.last_seen_step is not None:
                logger.warn("[StatMonitorParamSetter] Triggered, but no new value of '{}' was put since "
                            "the last time.".format(self.stat_name))
            return None
        self.history.append(point)
        if len(self.history) < self.last_k:
            return None
        values = [value for _, value in self.history]
        if self.reverse:
            stalled = max(values) <= values[0] + self.threshold
        else:
            stalled = min(values) >= values[0] - self.threshold
        if not stalled:
            return None
        self.history.clear()
        logger.info("[StatMonitorParamSetter] Triggered, history of {}: {}".format(
            self.stat_name, ', '.join('{:.4g}'.format(v) for v in values)))
        return self.value_func(self.get_current_value())


class HumanHyperParamSetter(HyperParamSetter):
    """Set a hyper-parameter from a file you edit while training runs.

    Before training and after every epoch the file is read; each line is ``name:value``
    (e.g. ``learning_rate:1e-4``), where ``name`` is the parameter's ``readable_name``. Blank
    lines and lines starting with ``#`` are skipped. A missing file or a missing entry leaves
    the parameter unchanged (and is logged); a malformed line is logged and skipped; a value
    that is not a finite number (``nan``, ``inf``, ``1e999``) is logged and leaves the
    parameter unchanged.

    Args:
        param: as in :class:`HyperParamSetter`.
        file_name (str): the file, relative to the logger directory.

    Example::

        HumanHyperParamSetter('learning_rate')
        # then, during training:  echo "learning_rate:1e-4" > train_log/run1/hyper.txt
    """

    def __init__(self, param, file_name='hyper.txt'):
        super().__init__(param)
        logdir = logger.get_logger_dir()
        if logdir is None and not os.path.isabs(file_name):
            raise ValueError("HumanHyperParamSetter reads '{}' in the logger directory, which is not "
                             "set: call logger.set_logger_dir() first.".format(file_name))
        self.file_name = os.path.join(logdir or '', file_name)
        self._reported = set()
        logger.info("Use {} to set hyperparam: '{}'.".format(self.file_name, self.param.readable_name))

    def _read_file(self):
        """``({name: value}, [problems])`` for the file's lines; the value of an entry that
        is not a finite number is None."""
        entries, problems = {}, []
        with open(self.file_name) as f:
            lines = f.read().splitlines()
        for lineno, line in enumerate(lines, 1):
            text = line.strip()
            if not text or text.startswith('#'):
                continue
            name, sep, value = text.partition(':')
            try:
                if not sep or not name.strip():
                    raise ValueError
                number = float(value)
            except ValueError:
                problems.append("[HumanHyperParamSetter] {}:{}: cannot parse line {!r}, expected "
                                "'name:value' with a number.".format(self.file_name, lineno, line))
                continue
            name = name.strip()
            if math.isfinite(number):
                entries[name] = number
            else:  # refused, and no "missing entry" message either
                entries[name] = None
                problems.append("[HumanHyperParamSetter] {}:{}: {} is set to {!r}, which is not a finite "
                                "number: {} is left unchanged.".format(
                                    self.file_name, lineno, name, value.strip(), name))
        return entries, problems

    def _report(self, messages, log=logger.warn):
        """Log the messages not already logged at the previous reading."""
        for message in messages:
            if message not in self._reported:
                log(message)
        self._reported = set(messages)

    def _get_value_to_set(self):
        name = self.param.readable_name
        if not os.path.isfile(self.file_name):
            self._report(["[HumanHyperParamSetter] {} does not exist: {} is left unchanged.".format(
                self.file_name, name)], log=logger.info)
            return None
        try:
            entries, problems = self._read_file()
        except (OSError, UnicodeDecodeError) as err:
            self._report(["[HumanHyperParamSetter] cannot read {}: {}".format(self.file_name, err)])
            return None
        if name not in entries:
            problems.append("[HumanHyperParamSetter] {} has no entry '{}:<value>': {} is left "
                            "unchanged.".format(self.file_name, name, name))
        self._report(problems)
        return entries.get(name)
