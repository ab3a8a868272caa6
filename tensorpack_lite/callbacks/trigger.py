"""Wrappers that change when another callback runs.

* :class:`PeriodicTrigger` calls a callback's ``trigger()`` on a schedule of its own
  (every k global steps, every k epochs, and/or once before training).
* :class:`EnableCallbackIf` lets a callback's per-epoch and per-step hooks run only when a
  predicate holds.
* :class:`PeriodicCallback` is :class:`EnableCallbackIf` with a periodic predicate: it can
  only make a callback run *less* often.

Example::

    # evaluate every 500 steps and after every 2nd epoch, instead of after every epoch
    PeriodicTrigger(InferenceRunner(...), every_k_steps=500, every_k_epochs=2)
"""

import time

from ..loop.callback import Callback, ProxyCallback
from ..utils.argtools import is_int, is_real

__all__ = ['PeriodicTrigger', 'PeriodicCallback', 'EnableCallbackIf']


def _check_period(owner, arg_name, value):
    """None, or a positive integer; anything else is a clear error naming ``owner``."""
    if value is None:
        return None
    if not is_int(value):
        raise TypeError("{}: {} must be a positive integer or None, got {!r} of type {}".format(
            owner, arg_name, value, type(value).__name__))
    if value <= 0:
        raise ValueError("{}: {} must be a positive integer or None, got {}".format(
            owner, arg_name, value))
    return int(value)


def _check_callback(owner, cb):
    if not isinstance(cb, Callback):
        raise TypeError("{} wraps a Callback, got {!r} of type {}".format(owner, cb, type(cb).__name__))


def _check_minutes(owner, value):
    """None, or a positive number of minutes."""
    if value is None:
        return None
    if not is_real(value) or not value > 0:
        raise ValueError("{}: every_k_minutes must be a positive number or None, got {!r}".format(
            owner, value))
    return float(value)


class PeriodicTrigger(ProxyCallback):
    """Call the wrapped callback's :meth:`~Callback.trigger` every ``every_k_steps`` global
    steps (when ``global_step % k == 0`` after a step), after the first step that ends
    ``every_k_minutes`` or more after the previous trigger (or the start of training), and/or at
    the end of every ``every_k_epochs``-th epoch (``epoch_num % k == 0``), and once before
    training when ``before_train`` is True.

    ``every_k_minutes`` is not in tensorpack. Each process measures its own time: in a job of
    several processes, prefer ``every_k_steps`` for :class:`ModelSaver`, so that every process
    saves its data position at the chief's checkpoint steps.

    The wrapped callback's own ``trigger_epoch`` is replaced by this schedule (so it no
    longer triggers after every epoch); all its other hooks (``setup_graph``,
    ``before_train``, ``before_run``/``after_run``, ``trigger_step``, ``after_train``...) run
    as usual.

    ``every_k_steps`` and ``every_k_epochs`` may both be given; they cannot both be None
    unless ``before_train`` is True.

    Example::

        PeriodicTrigger(ModelSaver(), every_k_steps=1000)
        PeriodicTrigger(ModelSaver(), every_k_minutes=10)
    """

    def __init__(self, triggerable, every_k_steps=None, every_k_epochs=None, before_train=False,
                 every_k_minutes=None):
        _check_callback('PeriodicTrigger', triggerable)
        super().__init__(triggerable)
        owner = 'PeriodicTrigger({})'.format(triggerable)
        self._step_k = _check_period(owner, 'every_k_steps', every_k_steps)
        self._epoch_k = _check_period(owner, 'every_k_epochs', every_k_epochs)
        self._minutes = _check_minutes(owner, every_k_minutes)
        self._do_before_train = bool(before_train)
        self._last_time = None
        if (self._step_k, self._epoch_k, self._minutes) == (None, None, None) and not self._do_before_train:
            raise ValueError("{}: every_k_steps, every_k_epochs and every_k_minutes are all None and "
                             "before_train is False, so the callback would never be triggered.".format(owner))

    def _before_train(self):
        self.cb.before_train()
        self._last_time = time.monotonic()
        if self._do_before_train:
            self.cb.trigger()

    def _trigger_step(self):
        self.cb.trigger_step()
        if self._step_k is not None and self.global_step % self._step_k == 0:
            self._trigger_now()
        elif self._minutes is not None and time.monotonic() - self._last_time >= 60 * self._minutes:
            self._trigger_now()

    def _trigger_now(self):
        self._last_time = time.monotonic()
        self.cb.trigger()

    def _trigger_epoch(self):
        if self._epoch_k is not None and self.epoch_num % self._epoch_k == 0:
            self.cb.trigger()

    def __str__(self):
        return "PeriodicTrigger-" + str(self.cb)


class EnableCallbackIf(ProxyCallback):
    """Run the wrapped callback's ``before_epoch``, ``after_epoch``, ``before_run``/``after_run``,
    ``trigger_step``, ``trigger_epoch`` and ``trigger`` only when ``pred(self)`` returns True.

    ``pred`` is asked at each of these hooks, except ``after_run``: it follows the decision
    taken at the matching ``before_run``. ``setup_graph``, ``before_train`` and ``after_train``
    always run.

    Example::

        # only log during the first 3 epochs
        EnableCallbackIf(TensorPrinter(['loss']), lambda self: self.epoch_num <= 3)
    """

    def __init__(self, callback, pred):
        _check_callback(type(self).__name__, callback)
        if not callable(pred):
            raise TypeError("{}({}): pred must be a callable taking the callback and returning a "
                            "bool, got {!r}".format(type(self).__name__, callback, pred))
        self._pred = pred
        self._run_enabled = False
        super().__init__(callback)

    def _enabled(self):
        return bool(self._pred(self))

    def _before_run(self, ctx):
        self._run_enabled = self._enabled()
        if self._run_enabled:
            return super()._before_run(ctx)
        return None

    def _after_run(self, ctx, run_values):
        if self._run_enabled:
            super()._after_run(ctx, run_values)

    def _before_epoch(self):
        if self._enabled():
            super()._before_epoch()

    def _after_epoch(self):
        if self._enabled():
            super()._after_epoch()

    def _trigger_step(self):
        if self._enabled():
            super()._trigger_step()

    def _trigger_epoch(self):
        if self._enabled():
            super()._trigger_epoch()

    def _trigger(self):
        if self._enabled():
            super()._trigger()

    def __str__(self):
        return "EnableCallbackIf-" + str(self.cb)


class PeriodicCallback(EnableCallbackIf):
    """Run the wrapped callback's ``before_epoch``, ``after_epoch``, ``before_run``/``after_run``,
    ``trigger_step``, ``trigger_epoch`` and ``trigger`` only when ``global_step % every_k_steps
    == 0`` or ``epoch_num % every_k_epochs == 0``; with ``every_k_epochs`` also during the
    very last step of training. Other hooks are unaffected.

    It can only make a callback run less often; use :class:`PeriodicTrigger` to call a
    callback's ``trigger()`` more often than once per epoch.

    Example::

        # a callback that works every epoch, now every 5th epoch
        PeriodicCallback(MyEpochCallback(), every_k_epochs=5)
    """

    def __init__(self, callback, every_k_steps=None, every_k_epochs=None):
        _check_callback('PeriodicCallback', callback)
        owner = 'PeriodicCallback({})'.format(callback)
        self._step_k = _check_period(owner, 'every_k_steps', every_k_steps)
        self._epoch_k = _check_period(owner, 'every_k_epochs', every_k_epochs)
        if self._step_k is None and self._epoch_k is None:
            raise ValueError("{}: every_k_steps and every_k_epochs cannot both be None.".format(owner))
        super().__init__(callback, PeriodicCallback.predicate)

    def predicate(self):
        """Whether the wrapped callback is enabled now."""
        if self._step_k is not None and self.global_step % self._step_k == 0:
            return True
        if self._epoch_k is not None:
            if self.epoch_num % self._epoch_k == 0:
                return True
            loop = self.trainer.loop
            if loop.is_last_epoch and loop.is_last_step_of_epoch:
                return True
        return False

    def __str__(self):
        return "PeriodicCallback-" + str(self.cb)
