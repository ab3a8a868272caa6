"""The dispatcher: :class:`Callbacks` runs a group of callbacks at every stage, including
around each hooked session run, and names the culprit of any error in one place.

A trainer hands the group to its :class:`HookedSession` as one ``SessionRunHook``
(:meth:`Callbacks.get_hooks`): the group merges what its members ask of each run (fetches,
feeds, run options) and hands each its own results. :class:`CallbackToHook` presents any
callback as a ``SessionRunHook`` the same way, e.g. for a ``tf.compat.v1.train.MonitoredSession``.
"""

import time
from contextlib import contextmanager

from ..compat import tfv1
from ..session.hooked_session import RunRequests
from ..utils import logger
from ..utils.utils import humanize_time_delta
from .callback import Callback, name_culprit

__all__ = ['Callbacks', 'CallbackToHook']

# TensorFlow's classes used at every run, looked up once (see session/hooked_session.py).
_SessionRunArgs = tfv1.train.SessionRunArgs
_SessionRunValues = tfv1.train.SessionRunValues

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
    costs nothing per step unless they work per step. Around a hooked run, the members'
    requests are merged into one (a tensor fed by two members is an error naming the
    second) and each member receives the values it asked for. An exception from a member
    carries a note naming it (``raised by callback X in trigger_epoch()``) and an attribute
    ``callback``. ``after_train`` runs every member even when some of them fail.
    """

    def __init__(self, cbs):
        for cb in cbs:
            if not isinstance(cb, Callback):
                raise TypeError("Callbacks takes Callback instances, got {!r} of type {}".format(
                    cb, type(cb).__name__))
        self.cbs = list(cbs)
        self._active = {stage: list(self.cbs) for stage in _STAGES}
        self._find_requesters()
        self.last_epoch_report = None
        self.after_train_pending = []
        """During ``after_train``: the members whose ``after_train`` has not finished, the
        one running first (what was left undone, if it never finishes)."""

    def _find_requesters(self):
        """Number the members that act around hooked runs (a member's number keys its fetches
        in the merged request) and list, with their numbers, those asked in ``before_run``
        and those handed results in ``after_run``."""
        asking, receiving = self._active['before_run'], self._active['after_run']
        around_run = [cb for cb in self.cbs if cb in asking or cb in receiving]
        self._requesters = [(index, cb) for index, cb in enumerate(around_run) if cb in asking]
        self._receivers = [(index, cb) for index, cb in enumerate(around_run) if cb in receiving]

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
        self._find_requesters()

    def setup_graph(self, trainer):
        self.trainer = trainer
        self.graph = tfv1.get_default_graph()
        self._setup_graph()

    def _keys(self):
        """``[(key, member)]``: each member's key in a saved state, its name (``str(cb)``) with
        ``#2``, ``#3``... for the second and later members of the same name."""
        seen, keys = {}, []
        for cb in self.cbs:
            name = str(cb)
            seen[name] = seen.get(name, 0) + 1
            keys.append((name if seen[name] == 1 else '{}#{}'.format(name, seen[name]), cb))
        return keys

    def get_states(self):
        """``{key: state}`` of the members that have a state (see :meth:`Callback.get_state`)."""
        states = {}
        for key, cb in self._keys():
            try:
                state = cb.get_state()
            except Exception as err:
                name_culprit(err, cb, 'get_state')
                raise
            if state is not None:
                states[key] = state
        return states

    def set_states(self, states):
        """Give each member its state from ``states`` (what :meth:`get_states` returned in the
        run being resumed). States of members this run does not have are named in a warning;
        members that have none in ``states`` keep their own start."""
        states = dict(states)
        for key, cb in self._keys():
            if key in states:
                try:
                    cb.set_state(states.pop(key))
                except Exception as err:
                    name_culprit(err, cb, 'set_state')
                    raise
        if states:
            logger.warn("The resumed run saved the state of callback(s) this run does not have: {}; "
                        "ignored.".format(', '.join(sorted(states))))

    def _stat_names(self):
        names = [cb.stat_names() for cb in self.cbs]
        if any(member_names is None for member_names in names):
            return None  # a member that cannot tell
        return list(dict.fromkeys(name for member_names in names for name in member_names))

    def get_hooks(self):
        """The group as the one ``SessionRunHook`` to run around every hooked session run
        (none when no member acts there)."""
        return [CallbackToHook(self)] if self._requesters or self._receivers else []

    def before_run(self, ctx):
        """Collect the members' requests for this run, merged into one ``SessionRunArgs``."""
        requests = RunRequests('Callback')
        for index, cb in self._requesters:
            try:
                requests.add(index, cb, cb.before_run(ctx))
            except Exception as err:
                name_culprit(err, cb, 'before_run')
                raise
        if not (requests.fetches or requests.feeds or requests.options_added):
            return None
        return _SessionRunArgs(requests.fetches, requests.checked_feeds(), requests.options)

    def after_run(self, run_context, run_values):
        """Hand each member the values it asked for in :meth:`before_run`."""
        results = run_values.results or {}
        nothing = None   # the values of the members that fetched nothing: one (immutable) for all of them
        for index, cb in self._receivers:
            member_results = results.get(index)
            if member_results is None:
                if nothing is None:
                    nothing = _SessionRunValues(results=None, options=run_values.options,
                                                run_metadata=run_values.run_metadata)
                values = nothing
            else:
                values = _SessionRunValues(results=member_results, options=run_values.options,
                                           run_metadata=run_values.run_metadata)
            try:
                cb.after_run(run_context, values)
            except Exception as err:
                name_culprit(err, cb, 'after_run')
                raise

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
        self.after_train_pending = list(self._active['after_train'])
        while self.after_train_pending:
            cb = self.after_train_pending[0]
            try:
                cb.after_train()
            except Exception as err:
                name_culprit(err, cb, 'after_train')
                logger.exception("Callback {} failed in after_train()".format(cb))
                first_error = first_error or err
            self.after_train_pending.pop(0)
        if first_error is not None:
            raise first_error


class CallbackToHook(tfv1.train.SessionRunHook):
    """Presents a callback's ``before_run``/``after_run`` as a ``SessionRunHook``; an error
    raised there carries a note naming the callback.

    Example::

        with tf.train.MonitoredSession(hooks=[CallbackToHook(my_callback)]) as sess:
            ...
    """

    def __init__(self, cb):
        if not isinstance(cb, Callback):
            raise TypeError("CallbackToHook takes a Callback, got {!r}".format(cb))
        self._cb = cb if isinstance(cb, Callbacks) else Callbacks([cb])

    def before_run(self, run_context):
        return self._cb.before_run(run_context)

    def after_run(self, run_context, run_values):
        self._cb.after_run(run_context, run_values)
