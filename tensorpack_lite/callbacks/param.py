"""Hyper-parameters and the callbacks that change them while training runs.

A :class:`HyperParam` is something that can be read and set: a variable of the graph
(:class:`GraphVarParam`, e.g. the learning rate) or an attribute of a Python object
(:class:`ObjAttrParam`). A :class:`HyperParamSetter` decides its value: from a schedule, a
function, a statistic that stopped improving, or a file edited by hand.

Example::

    class Model(ModelDesc):
        def optimizer(self):
            lr = tf.get_variable('learning_rate', initializer=0.1, trainable=False)
            return tf.train.MomentumOptimizer(lr, 0.9)

    callbacks = [ScheduledHyperParamSetter('learning_rate', [(30, 1e-2), (60, 1e-3)])]

Every setter sets its value before training (so that a resumed run starts with the value of
its starting epoch) and whenever it is triggered (by default after every epoch), and puts the
current value into ``trainer.monitors`` after every epoch's trigger (it shows in
``stats.json``).
"""

import bisect
import numbers
import os
from collections import deque

import numpy as np

from ..compat import tfv1
from ..loop.callback import Callback
from ..tfutils.common import get_op_tensor_name
from ..utils import logger

__all__ = ['HyperParam', 'GraphVarParam', 'ObjAttrParam',
           'HyperParamSetter', 'HumanHyperParamSetter', 'ScheduledHyperParamSetter',
           'StatMonitorParamSetter', 'HyperParamSetterWithFunc']


# ---------------------------------------------------------------------------------------------
# Hyper-parameters
# ---------------------------------------------------------------------------------------------

class HyperParam:
    """Something a :class:`HyperParamSetter` can read and set.

    Subclasses implement :meth:`set_value` and :meth:`get_value`, may build ops in
    :meth:`setup_graph`, and set ``_readable_name``.
    """

    _readable_name = None

    def setup_graph(self):
        """Prepare (e.g. build ops) while the graph is not finalized; raise a clear error
        when the parameter does not exist."""

    def set_value(self, v):
        """Give the parameter the value ``v``."""
        raise NotImplementedError("{} must implement set_value()".format(type(self).__name__))

    def get_value(self):
        """The current value of the parameter."""
        raise NotImplementedError("{} must implement get_value()".format(type(self).__name__))

    @property
    def readable_name(self):
        """The name used in logs, in ``stats.json`` and in :class:`HumanHyperParamSetter`'s file."""
        return self._readable_name

    def __str__(self):
        return "{}({})".format(type(self).__name__, self.readable_name)


class GraphVarParam(HyperParam):
    """A variable of the graph, e.g. the learning rate, found by name.

    The variable must exist when the callbacks are set up (create it in the model, e.g.
    ``tf.get_variable('learning_rate', initializer=0.1, trainable=False)``). It is set with
    an assign op fed through a placeholder, both built in :meth:`setup_graph`, and read and
    set in the default session.

    Args:
        name (str): the variable's name, with or without ``:0``.
        shape (tuple): the shape of the values to set; ``()`` for a scalar.
    """

    def __init__(self, name, shape=()):
        if not isinstance(name, str):
            raise TypeError("GraphVarParam: name must be the name of a variable (str), got {!r}".format(name))
        self.name = name
        self.shape = shape
        self._readable_name, self.var_name = get_op_tensor_name(name)
        self.var = None
        self._graph = None

    def setup_graph(self):
        graph = tfv1.get_default_graph()
        if self._graph is graph:   # the same param shared by several setters
            return
        variables = tfv1.global_variables() + tfv1.local_variables()
        found = [v for v in variables if v.name == self.var_name]
        if not found:
            raise ValueError(self._not_found_message(variables))
        var = found[0]
        try:
            shape_ok = var.shape.is_compatible_with(self.shape)
        except (TypeError, ValueError):
            shape_ok = False
        if not shape_ok:
            raise ValueError("GraphVarParam: variable '{}' has shape {}, which does not match the "
                             "shape={!r} given for it.".format(self.var_name, var.shape, self.shape))
        self.var = var
        self._placeholder = tfv1.placeholder(var.dtype.base_dtype, shape=self.shape,
                                             name=self._readable_name.replace('/', '_') + '_feed')
        self._assign_op = var.assign(self._placeholder, read_value=False)
        self._graph = graph

    def _not_found_message(self, variables):
        base = self._readable_name.split('/')[-1]
        similar = [v.name for v in variables if v.name.split('/')[-1] == base + ':0']
        hint = " Variables with a similar name: {}.".format(', '.join(similar)) if similar else ""
        return ("GraphVarParam: there is no variable named '{}' in the graph.{} Create it in the "
                "model, e.g. tf.get_variable('{}', initializer=0.1, trainable=False), before the "
                "callbacks are set up.".format(self.var_name, hint, self._readable_name))

    def _session(self):
        if self.var is None:
            raise RuntimeError("GraphVarParam('{}'): setup_graph() must run before the variable is "
                               "read or set.".format(self.name))
        sess = tfv1.get_default_session()
        if sess is None:
            raise RuntimeError("GraphVarParam('{}'): there is no default session to read or set the "
                               "variable in.".format(self.name))
        return sess

    def set_value(self, v):
        sess = self._session()
        dtype = self.var.dtype.base_dtype
        value = np.asarray(v)
        if (dtype.is_integer or dtype.is_bool) and value.dtype.kind == 'f':
            if not np.all(np.isfinite(value)) or not np.array_equal(value, np.round(value)):
                raise ValueError("GraphVarParam: variable '{}' has type {} and cannot be set to {!r}."
                                 .format(self.var_name, dtype.name, v))
            value = value.astype(dtype.as_numpy_dtype)
        try:
            sess.run(self._assign_op, feed_dict={self._placeholder: value})
        except (ValueError, TypeError) as err:
            raise ValueError("GraphVarParam: cannot set variable '{}' (shape {}, {}) to {!r}: {}".format(
                self.var_name, self.var.shape, dtype.name, v, err)) from err

    def get_value(self):
        return self._session().run(self.var)


class ObjAttrParam(HyperParam):
    """An attribute of a Python object, e.g. the exploration rate of an RL player.

    Args:
        obj: the object.
        attrname (str): the attribute; it must exist when the callbacks are set up.
        readable_name (str): the name to show; defaults to ``attrname``.

    Example::

        ScheduledHyperParamSetter(ObjAttrParam(player, 'exploration'), [(0, 1.0), (100, 0.1)],
                                  interp='linear')
    """

    def __init__(self, obj, attrname, readable_name=None):
        if not isinstance(attrname, str):
            raise TypeError("ObjAttrParam: attrname must be a str, got {!r}".format(attrname))
        self.obj = obj
        self.attrname = attrname
        self._readable_name = attrname if readable_name is None else str(readable_name)

    def setup_graph(self):
        if not hasattr(self.obj, self.attrname):
            raise AttributeError("ObjAttrParam: {!r} has no attribute '{}' to use as a "
                                 "hyper-parameter.".format(self.obj, self.attrname))

    def set_value(self, v):
        setattr(self.obj, self.attrname, v)

    def get_value(self):
        return getattr(self.obj, self.attrname)


# ---------------------------------------------------------------------------------------------
# Setters
# ---------------------------------------------------------------------------------------------

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

    At the end of every epoch, right after this setter's own epoch trigger, the current value
    (the one the next epoch runs with) is put into ``trainer.monitors`` under the parameter's
    ``readable_name`` when it is a real scalar, so it shows in ``stats.json`` (as a summary
    of the variable evaluated at the end of the epoch would). A setter wrapped in
    :class:`PeriodicTrigger` does not put it (its epoch trigger is replaced).

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
        self._trigger_epoch()
        self._put_current_value()

    def _put_current_value(self):
        value = _as_scalar(self.get_current_value())
        if value is not None:
            self.trainer.monitors.put_scalar(self.param.readable_name, value)

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
        if isinstance(point, bool) or not isinstance(point, numbers.Integral) or point < 0:
            raise ValueError("{}: schedule[{}] has {} {!r}, which is not a non-negative integer; "
                             "schedule={!r}".format(owner, index, unit, point, schedule))
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
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


class StatMonitorParamSetter(HyperParamSetter):
    """Change a hyper-parameter when a statistic stops improving.

    At every trigger (by default after every epoch) the latest value of ``stat_name`` in
    ``trainer.monitors`` is observed. With ``history`` the last ``last_k`` observations, the
    parameter becomes ``value_func(old_value)`` when ``min(history) >= history[0] - threshold``
    (the statistic did not decrease by more than ``threshold``), or, with ``reverse=True``,
    when ``max(history) <= history[0] + threshold``. A value is observed once (a trigger
    without a new value observes nothing). After a change the history starts afresh: the
    next change needs ``last_k`` new observations. Nothing happens before training.

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
        if isinstance(threshold, bool) or not isinstance(threshold, numbers.Real):
            raise TypeError("StatMonitorParamSetter: threshold must be a number, got {!r}".format(threshold))
        if isinstance(last_k, bool) or not isinstance(last_k, numbers.Integral) or last_k < 1:
            raise ValueError("StatMonitorParamSetter: last_k must be a positive integer, got {!r}".format(
                last_k))
        super().__init__(param)
        self.stat_name = stat_name
        self.value_func = value_func
        self.threshold = float(threshold)
        self.last_k = int(last_k)
        self.reverse = bool(reverse)
        self.history = deque(maxlen=self.last_k)
        self._last_observed_step = None

    def _get_value_to_set(self):
        records = self.trainer.monitors.get_history(self.stat_name)
        if not records:
            logger.warn("[StatMonitorParamSetter] No value of '{}' was put into the monitors yet."
                        .format(self.stat_name))
            return None
        last = records[-1]
        if last[0] == self._last_observed_step:
            logger.warn("[StatMonitorParamSetter] Triggered, but no new value of '{}' was put since "
                        "the last time.".format(self.stat_name))
            return None
        self._last_observed_step = last[0]
        self.history.append(last)
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
    the parameter unchanged (and is logged); a malformed line is logged and skipped.

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
        """``({name: value}, [problems])`` for the file's lines."""
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
                entries[name.strip()] = float(value)
            except ValueError:
                problems.append("[HumanHyperParamSetter] {}:{}: cannot parse line {!r}, expected "
                                "'name:value' with a number.".format(self.file_name, lineno, line))
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
