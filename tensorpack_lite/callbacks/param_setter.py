"""The callbacks that set a hyper-parameter while training runs: the base class
:class:`HyperParamSetter`, and the setters that follow a schedule
(:class:`ScheduledHyperParamSetter`) or a function (:class:`HyperParamSetterWithFunc`).

Every setter sets its value before training (so that a resumed run starts with the value of
its starting epoch) and whenever it is triggered (by default after every epoch), and puts the
value the epoch's steps ran with into ``trainer.monitors`` at the end of every epoch (it shows
in ``stats.json`` and TensorBoard).
"""

import bisect

import numpy as np

from ..loop.callback import Callback
from ..utils import logger
from ..utils.argtools import is_int, is_real
from .hyperparam import GraphVarParam, HyperParam

__all__ = ['HyperParamSetter', 'ScheduledHyperParamSetter', 'HyperParamSetterWithFunc']


def _same_value(a, b):
    """Whether setting ``b`` over ``a`` would change nothing; real numbers are compared at
    float32 precision (what a float32 variable holds), integers exactly."""
    if a is None or b is None:
        return a is b
    try:
        x, y = np.asarray(a), np.asarray(b)
    except Exception:  # an object numpy cannot hold
        return a == b
    if x.shape != y.shape:
        return False
    if x.dtype.kind in 'biu' and y.dtype.kind in 'biu':
        return bool(np.array_equal(x, y))
    if x.dtype.kind in 'biuf' and y.dtype.kind in 'biuf':
        return bool(np.array_equal(x.astype(np.float32), y.astype(np.float32)))
    try:
        return bool(np.all(x == y))
    except Exception:
        return False


def _as_scalar(value):
    """A Python number for a real scalar value, None for anything else."""
    if isinstance(value, bool):
        return None
    arr = np.asarray(value)
    if arr.size != 1 or arr.dtype.kind not in 'iuf':
        return None
    item = arr.reshape(()).item()
    if arr.dtype.kind == 'f' and arr.dtype.itemsize < 8:
        item = float(str(arr.reshape(())))  # the shortest decimal of the float32 (0.1, not 0.100000001)
    return item


def _fmt(value):
    scalar = _as_scalar(value)
    return '{:.6g}'.format(scalar) if scalar is not None else repr(value)


class HyperParamSetter(Callback):
    """Base class of the callbacks that set a :class:`HyperParam`.

    Subclasses implement :meth:`_get_value_to_set`, which returns the value the parameter
    should have now, or None to leave it alone. It is asked before training and at every
    :meth:`trigger` (by default after every epoch); the parameter is set only when the value
    differs from the one this setter asked for last and from the current one (real numbers
    are compared at float32 precision).

    At the end of every epoch, right before this setter's own epoch trigger may change it, the
    value the epoch's last step ran with is put into ``trainer.monitors`` under the parameter's
    ``readable_name`` when it is a real scalar, so it shows in ``stats.json`` and TensorBoard
    with the same value, at the same step, as a summary of the variable evaluated in that
    step (the monitors keep one value per name and step, so a model that also summarizes
    the variable gives one point). A setter wrapped in :class:`PeriodicTrigger` does not put
    it (its epoch trigger is replaced).

    A change is logged as ``[HyperParamSetter] At global_step=..., learning_rate changes from
    x to y``, at most once per epoch (a step-based schedule may change the value every step).

    Args:
        param (HyperParam or str): a string is the name of a scalar graph variable
            (a :class:`GraphVarParam`).
    """

    _chief_only = False

    _enable_before_train = True
    """Whether the value is also set in :meth:`before_train`."""

    def __init__(self, param):
        if isinstance(param, str):
            param = GraphVarParam(param)
        if not isinstance(param, HyperParam):
            raise TypeError("{}: param must be a HyperParam or the name of a graph variable, got {!r} "
                            "of type {}".format(type(self).__name__, param, type(param).__name__))
        self.param = param
        self._last_value = None
        self._last_epoch_logged = None

    def _setup_graph(self):
        self.param.setup_graph()

    def _get_value_to_set(self):
        """The value the parameter should have now, or None to leave it unchanged."""
        raise NotImplementedError("{} must implement _get_value_to_set()".format(type(self).__name__))

    def get_value_to_set(self):
        """The value to set now: None when there is none, or when it is the one set last."""
        value = self._get_value_to_set()
        if value is None or _same_value(value, self._last_value):
            return None
        return value

    def get_current_value(self):
        """The parameter's current value."""
        return self.param.get_value()

    def _set_param(self):
        value = self.get_value_to_set()
        if value is None:
            return
        old = self.get_current_value()
        self._last_value = value
        if _same_value(old, value):   # e.g. the schedule's first value is the initial one
            return
        self.param.set_value(value)
        if self._last_epoch_logged != self.epoch_num:   # at most one message per epoch
            self._last_epoch_logged = self.epoch_num
            logger.info("[HyperParamSetter] At global_step={}, {} changes from {} to {}".format(
                self.global_step, self.param.readable_name, _fmt(old), _fmt(value)))

    def _before_train(self):
        if self._enable_before_train:
            self._set_param()

    def _trigger(self):
        self._set_param()

    def trigger_epoch(self):
        self._put_current_value()
        self._trigger_epoch()

    def _put_current_value(self):
        value = _as_scalar(self.get_current_value())
        if value is not None:
            self.trainer.monitors.put_scalar(self.param.readable_name, value)

    def _stat_names(self):
        return [self.param.readable_name]

    def __str__(self):
        return "{}({})".format(type(self).__name__, self.param.readable_name)


def _check_schedule(schedule, unit):
    """``schedule`` as a list of ``(int, float)``; a clear error naming it when it is not a
    strictly increasing list of ``(point, number)`` pairs."""
    owner = 'ScheduledHyperParamSetter'
    if isinstance(schedule, (str, bytes)) or not hasattr(schedule, '__iter__'):
        raise TypeError("{}: schedule must be a list of ({}, value) pairs, got {!r}".format(
            owner, unit, schedule))
    schedule = list(schedule)
    if not schedule:
        raise ValueError("{}: the schedule is empty.".format(owner))
    checked = []
    for index, item in enumerate(schedule):
        try:
            point, value = item
        except (TypeError, ValueError):
            raise ValueError("{}: schedule[{}] = {!r} is not a ({}, value) pair; schedule={!r}".format(
                owner, index, item, unit, schedule)) from None
        if isinstance(point, float) and point.is_integer():
            point = int(point)
        if not is_int(point) or point < 0:
            raise ValueError("{}: schedule[{}] has {} {!r}, which is not a non-negative integer; "
                             "schedule={!r}".format(owner, index, unit, point, schedule))
        if not is_real(value):
            raise ValueError("{}: schedule[{}] has value {!r}, which is not a number; schedule={!r}".format(
                owner, index, value, schedule))
        checked.append((int(point), float(value)))
    for index in range(1, len(checked)):
        if checked[index][0] <= checked[index - 1][0]:
            raise ValueError("{}: the schedule must be sorted by {}, each {} once, but {} {} comes "
                             "after {} {} in schedule={!r}".format(
                                 owner, unit, unit, unit, checked[index][0], unit,
                                 checked[index - 1][0], schedule))
    return checked


class ScheduledHyperParamSetter(HyperParamSetter):
    """Set a hyper-parameter by a schedule of epochs (or steps).

    Args:
        param: as in :class:`HyperParamSetter`.
        schedule (list): ``[(epoch1, value1), (epoch2, value2), ...]`` sorted by epoch. A pair
            ``(ep, val)`` sets the parameter to ``val`` after epoch ``ep`` finished, i.e. for
            epoch ``ep + 1`` on; ``ep = 0`` sets it before the first epoch. Until the first
            point the parameter keeps its initial value.
        interp (str or None): None: the value changes exactly at the given points;
            ``'linear'``: the value is interpolated linearly between two points (and stays at
            the last value after the last point).
        step_based (bool): the points are global steps instead of epochs (the value is then
            checked after every step: ``(s, val)`` applies from the step run at
            ``global_step == s`` on).
        set_at_beginning (bool): what happens before training, at the point training starts
            from (epoch ``starting_epoch - 1``, or the restored global step). True: the
            parameter gets the value the schedule gives there, so a resumed run continues
            with the scheduled value. False: it is set only when that point is itself in the
            schedule (or, with ``interp='linear'``, lies between two points); otherwise it
            keeps its value (a warning says when that differs from the schedule's) until the
            next point of the schedule is reached.

    Example::

        ScheduledHyperParamSetter('learning_rate', [(30, 1e-2), (60, 1e-3), (85, 1e-4)])
    """

    def __init__(self, param, schedule, interp=None, step_based=False, set_at_beginning=True):
        if interp not in (None, 'linear'):
            raise ValueError("ScheduledHyperParamSetter: interp must be None or 'linear', got {!r}".format(
                interp))
        self._step = bool(step_based)
        self.schedule = _check_schedule(schedule, 'step' if self._step else 'epoch')
        self.interp = interp
        self._points = [point for point, _ in self.schedule]
        self._set_at_beginning = bool(set_at_beginning)
        self._wait_for_scheduled_point = False
        super().__init__(param)

    def _current_point(self):
        return self.global_step if self._step else self.epoch_num

    def _unit(self):
        return 'step' if self._step else 'epoch'

    def _is_scheduled_at(self, point):
        """Whether the schedule itself sets a value at ``point``: one of its points, or a
        point between two of them when interpolating."""
        if point in self._points:
            return True
        return self.interp is not None and self._points[0] < point < self._points[-1]

    def _before_train(self):
        point = self._current_point()
        if self._set_at_beginning or self._is_scheduled_at(point):
            super()._before_train()
            return
        self._wait_for_scheduled_point = True
        expected = self.value_at(point)
        current = self.get_current_value()
        if expected is not None and not _same_value(expected, current):
            logger.warn("[ScheduledHyperParamSetter] By the schedule, {} should be {} at {} {}, but "
                        "it is {}; with set_at_beginning=False it stays so until the next {} of "
                        "the schedule.".format(self.param.readable_name, _fmt(expected), self._unit(),
                                               point, _fmt(current), self._unit()))

    def _get_value_to_set(self):
        point = self._current_point()
        if self._wait_for_scheduled_point:
            if not self._is_scheduled_at(point):
                return None
            self._wait_for_scheduled_point = False
        return self.value_at(point)

    def value_at(self, point):
        """The scheduled value once ``point`` (an epoch or step) has finished; None before the
        first point of the schedule."""
        index = bisect.bisect_right(self._points, point) - 1
        if index < 0:
            return None
        start, value = self.schedule[index]
        if self.interp is None or index == len(self.schedule) - 1 or start == point:
            return value
        end, next_value = self.schedule[index + 1]
        return value + (next_value - value) * (point - start) / (end - start)

    def _trigger_epoch(self):
        if not self._step:
            self.trigger()

    def _trigger_step(self):
        if self._step:
            self.trigger()

    def __str__(self):
        return "ScheduledHyperParamSetter({}, schedule={})".format(self.param.readable_name, self.schedule)


class HyperParamSetterWithFunc(HyperParamSetter):
    """Set a hyper-parameter to ``func(epoch_num, old_value)``, where ``epoch_num`` is the
    number of the epoch that just finished (the one before ``starting_epoch`` when called
    before training) and ``old_value`` the current value.

    Example::

        # halve the learning rate after every second epoch
        HyperParamSetterWithFunc('learning_rate', lambda e, x: x * 0.5 if e % 2 == 0 else x)
    """

    def __init__(self, param, func):
        if not callable(func):
            raise TypeError("HyperParamSetterWithFunc: func must be callable as func(epoch_num, "
                            "old_value), got {!r}".format(func))
        super().__init__(param)
        self.f = func

    def _get_value_to_set(self):
        return self.f(self.epoch_num, self.get_current_value())
