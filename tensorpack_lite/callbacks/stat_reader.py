"""What a callback that reads a statistic of ``trainer.monitors`` (:class:`MinSaver`,
:class:`EarlyStopping`, :class:`StatMonitorParamSetter`, :class:`SendStat`) needs: a check of
its name, before the first step, against what the other callbacks declare they put
(:meth:`Callback.stat_names`), and the new (or the latest) value at each trigger."""

import difflib

from ..utils import logger

__all__ = ['StatReader']


class StatReader:
    """Reads the statistic ``name`` for the callback ``reader``.

    :meth:`check` (once, before the first step: :meth:`check_once` in ``_before_epoch``) compares
    the name with the statistics the trainer's callbacks declare: a name no callback puts raises
    a KeyError suggesting the closest ones; when some callbacks cannot tell what they put, a close
    match only gives a warning; a producer placed after the reader gives a warning (each trigger
    would see the previous value), unless the reader reads ``after_callbacks`` (once every
    callback of the trigger has run, see :meth:`~tensorpack_lite.loop.state.TrainLoop.after_callbacks`).
    :meth:`new_value` then gives, at each trigger, the value put since the last call, if any;
    :meth:`latest` the last value put, new or not.

    With ``wait``, a statistic not put yet is waited for (None, with a warning) even when no
    callback declares it, as tensorpack's readers did; :meth:`check` still refuses a name that
    certainly no callback puts.

    Example::

        self._stat = StatReader(self, 'val-error')      # in __init__
        self._stat.check_once()                         # in _before_epoch
        point = self._stat.new_value()                  # in _trigger: (global_step, value) or None
    """

    def __init__(self, reader, name, after_callbacks=False, wait=False):
        if not isinstance(name, str) or not name:
            raise TypeError("{}: the statistic must be named by a non-empty str, got {!r}".format(
                type(reader).__name__, name))
        self.reader = reader
        self.name = name
        self.after_callbacks = after_callbacks
        self.wait = bool(wait)
        self.declared = None     # the statistics the callbacks declare (set by check())
        self.last_seen_step = None
        self._checked = False

    def check_once(self):
        """:meth:`check` at the first call only: call it in the reader's ``_before_epoch``, where every
        callback is ready and no step has run yet."""
        if not self._checked:
            self._checked = True
            self.check()

    def check(self):
        """Compare the name with the statistics the trainer's callbacks declare (see above)."""
        trainer = self.reader.trainer
        callbacks = getattr(trainer, 'callbacks', None)
        if not isinstance(callbacks, tuple):
            return  # not run by a Trainer: nothing to compare with
        producers, undeclared = {}, []
        for cb in callbacks:
            names = cb.stat_names()
            if names is None:
                undeclared.append(str(cb))
            for name in names or []:
                producers.setdefault(name, cb)
        self.declared = set(producers)
        producer = producers.get(self.name)
        reader = self.reader
        if producer is not None:
            placed_before = reader in callbacks and callbacks.index(producer) > callbacks.index(reader)
            if placed_before and not self.after_callbacks:
                logger.warn("{}: '{}' is put by {}, which comes after it in the callbacks: each "
                            "trigger would see the previous value. Place {} after {}.".format(
                                reader, self.name, producer, reader, producer))
            return
        suggestion = self.suggest()
        if not undeclared:
            raise KeyError("{}: the statistic '{}' was never put into trainer.monitors and none of the "
                           "callbacks declares it (checked before training).{}".format(
                               reader, self.name, suggestion))
        if difflib.get_close_matches(self.name, self.declared, n=1, cutoff=0.6):
            logger.warn("{}: no callback declares the statistic '{}' ({} cannot tell what they "
                        "put).{}".format(reader, self.name, ', '.join(undeclared), suggestion))

    def suggest(self):
        """The closest declared names and all of them, for an error message."""
        if self.declared is None:
            return ""
        close = difflib.get_close_matches(self.name, sorted(self.declared), n=3, cutoff=0.6)
        return "{} The callbacks declare: {}.".format(
            " Did you mean {}?".format(' or '.join("'{}'".format(c) for c in close)) if close else "",
            ', '.join(sorted(self.declared)) or 'nothing')

    def new_value(self):
        """``(global_step, value)`` of the statistic when it was put since the last call, else
        None. A statistic never put is waited for (None, logged) when a callback declares it
        (e.g. an InferenceRunner on a slower schedule), and is a KeyError otherwise."""
        history = self.reader.trainer.monitors.get_history(self.name)
        if not history:
            if self.name in (self.declared or ()):
                logger.info("{}: '{}' was not put yet.".format(self.reader, self.name))
                return None
            if self.wait:
                logger.warn("{}: no value of '{}' was put into trainer.monitors yet, and no callback "
                            "declares it.{}".format(self.reader, self.name, self.suggest()))
                return None
            raise self._never_put()
        step, value = history[-1]
        if step == self.last_seen_step:
            return None  # not updated since the last trigger
        self.last_seen_step = step
        return step, value

    def latest(self):
        """``(global_step, value)`` of the last value put, new or not; a KeyError naming the
        statistic (and the closest declared names) when it was never put."""
        history = self.reader.trainer.monitors.get_history(self.name)
        if not history:
            raise self._never_put()
        return tuple(history[-1])

    def _never_put(self):
        return KeyError("{}: the statistic '{}' was never put into trainer.monitors. Check its "
                        "name, and that the callback producing it comes before {} in the "
                        "callbacks.{}".format(self.reader, self.name, self.reader, self.suggest()))
