"""The Callback interface: every hook a trainer calls, as template methods.

A trainer calls, in this order::

    setup_graph(trainer)          # once, before the graph is finalized: build ops here
    before_train()                # once, the session exists
    for each epoch:
        before_epoch()
        for each step:
            before_run(ctx)       # only around hooked_sess.run(): may ask for extra fetches
            after_run(ctx, vals)  #   ... and receives them here
            trigger_step()        # after the step
        after_epoch()
        trigger_epoch()           # by default calls trigger()
    after_train()                 # always, also after an error or Ctrl-C

Subclasses override the underscored methods (``_setup_graph``, ``_trigger_step``...).

Example::

    class PrintLoss(Callback):
        def _setup_graph(self):
            self._loss = self.graph.get_tensor_by_name('loss:0')
        def _before_run(self, ctx):
            return [self._loss]
        def _after_run(self, ctx, values):
            self.last_loss = values.results[0]
"""

from ..compat import tf, tfv1
from ..tfutils.common import get_op_or_tensor_by_name
from ..utils import logger

__all__ = ['Callback', 'ProxyCallback', 'CallbackFactory', 'name_culprit']

# Looked up once: before_run runs with every step (see session/hooked_session.py).
_SessionRunArgs = tfv1.train.SessionRunArgs
_FETCHABLE = (tf.Tensor, tf.Operation, tf.Variable)


def name_culprit(err, cb, stage):
    """Mark ``err`` as raised by callback ``cb`` at ``stage``: a note shown in the traceback
    (``raised by callback X in trigger_epoch()``) and an attribute ``err.callback``.
    The innermost callback wins when groups are nested."""
    if getattr(err, 'callback', None) is not None:
        return
    err.callback = cb
    note = "raised by callback {} in {}()".format(cb, stage)
    if hasattr(err, 'add_note'):
        err.add_note(note)
    else:  # Python 3.10: stored where 3.11 would show it
        err.__notes__ = getattr(err, '__notes__', []) + [note]


def _defined_in_library(obj):
    """Whether class or function ``obj`` is defined in tensorpack_lite (whose callbacks say
    what they put)."""
    return (getattr(obj, '__module__', None) or '').split('.')[0] == __name__.split('.')[0]


class Callback:
    """Base class of all callbacks; every method is a no-op until a subclass overrides it.

    Attributes available after :meth:`setup_graph`: ``trainer`` and ``graph``.
    """

    _chief_only = True
    """Chief-only callbacks are skipped on non-chief workers (e.g. Horovod ranks > 0)."""

    name_scope = ""
    """Name scope the callback's ops are created in; defaults to the class name."""

    def setup_graph(self, trainer):
        self.trainer = trainer
        self.graph = tfv1.get_default_graph()
        scope = (self.name_scope or type(self).__name__).replace('_', '')
        with tfv1.name_scope(scope):
            self._setup_graph()

    def _setup_graph(self):
        """Build the ops the callback needs. The graph is not finalized yet."""

    def before_train(self):
        self._before_train()

    def _before_train(self):
        """Called once the session exists, right before the first epoch."""

    def before_epoch(self):
        self._before_epoch()

    def _before_epoch(self):
        """Called at the start of every epoch, before its first step."""

    def after_epoch(self):
        self._after_epoch()

    def _after_epoch(self):
        """Called at the end of every epoch, before :meth:`trigger_epoch`."""

    def before_run(self, ctx):
        """Collect what this callback wants fetched along with the step.

        Returns None or a ``tf.compat.v1.train.SessionRunArgs``.
        """
        fetches = self._before_run(ctx)
        if fetches is None or isinstance(fetches, _SessionRunArgs):
            return fetches
        if isinstance(fetches, (list, tuple)):
            fetches = [f if isinstance(f, _FETCHABLE) else get_op_or_tensor_by_name(f) for f in fetches]
            return _SessionRunArgs(fetches=fetches)
        raise TypeError("{}._before_run() must return None, a SessionRunArgs or a list of "
                        "tensors/variables/ops/names, got {!r}".format(self, type(fetches)))

    def _before_run(self, ctx):
        """Called before each ``hooked_sess.run``. Return None, a ``SessionRunArgs``, or a list
        of tensors, variables, ops or their names to fetch."""
        return None

    def after_run(self, run_context, run_values):
        self._after_run(run_context, run_values)

    def _after_run(self, run_context, run_values):
        """Called after each ``hooked_sess.run``; ``run_values.results`` holds the fetches asked
        for in :meth:`_before_run`."""

    def trigger_step(self):
        self._trigger_step()

    def _trigger_step(self):
        """Called after every step (after :meth:`run_step` returned)."""

    def trigger_epoch(self):
        self._trigger_epoch()

    def _trigger_epoch(self):
        """Called after every epoch; calls :meth:`trigger` by default."""
        self.trigger()

    def trigger(self):
        self._trigger()

    def _trigger(self):
        """The callback's periodic work. By default runs at the end of every epoch;
        :class:`PeriodicTrigger` and friends call it on other schedules."""

    def after_train(self):
        self._after_train()

    def _after_train(self):
        """Called once when training ends, normally or not."""

    def get_state(self):
        """The callback's own state, saved with every checkpoint so that a run resumed from it
        goes on as if never stopped (see :class:`~tensorpack_lite.checkpoint.resume_state.ResumeState`);
        None when it has none. Called between two steps (possibly inside a trigger)."""
        return self._get_state()

    def _get_state(self):
        """What :meth:`get_state` returns: a value :func:`~tensorpack_lite.utils.serialize.dumps`
        can store (dicts, lists, numbers, strings, numpy arrays); None: nothing to save."""
        return None

    def set_state(self, state):
        """Take back a state :meth:`get_state` gave, in a resumed run: called after
        :meth:`setup_graph` and before :meth:`before_train`."""
        self._set_state(state)

    def _set_state(self, state):
        """Restore what :meth:`_get_state` returned. A callback that overrides ``_get_state``
        overrides this too."""
        raise NotImplementedError("{} saved a state but does not implement _set_state()".format(self))

    @property
    def epoch_num(self):
        """The trainer's current epoch (``self.trainer.loop.epoch_num``)."""
        return self.trainer.loop.epoch_num

    @property
    def global_step(self):
        """The trainer's global step (``self.trainer.loop.global_step``)."""
        return self.trainer.loop.global_step

    @property
    def local_step(self):
        """The step within the trainer's current epoch (``self.trainer.loop.local_step``)."""
        return self.trainer.loop.local_step

    def after_callbacks(self, action):
        """Run ``action()`` once every callback of the current trigger has run
        (:meth:`~tensorpack_lite.loop.state.TrainLoop.after_callbacks`); now for an owner without a
        training loop (e.g. a test driving the callback alone)."""
        loop = getattr(self.trainer, 'loop', None)
        if loop is None:
            action()
        else:
            loop.after_callbacks(self, action)

    def session_usable(self, work):
        """Whether the trainer's session can still run things (``self.trainer.loop.session_usable``;
        True for an owner without a training loop, e.g. a predictor running an InputSource's
        callbacks); when it cannot, logs that ``work`` (what the caller would have run, e.g.
        'the final checkpoint') is skipped. For what runs in the session at the end of training."""
        loop = getattr(self.trainer, 'loop', None)
        if loop is None or loop.session_usable:
            return True
        logger.warn("{}: {} skipped: the session is in an unknown state after {}.".format(
            self, work, loop.failure.describe()))
        return False

    @property
    def chief_only(self):
        """Whether this callback runs on the chief worker only."""
        return self._chief_only

    @chief_only.setter
    def chief_only(self, value):
        self._chief_only = bool(value)

    def set_chief_only(self, value=True):
        """Set :attr:`chief_only` and return self, for chaining."""
        self._chief_only = bool(value)
        return self

    def stat_names(self):
        """The names of the scalars this callback puts into ``trainer.monitors`` (as far as
        known after :meth:`setup_graph`), or None when it cannot tell. Lets a callback that
        reads a statistic (e.g. :class:`~tensorpack_lite.callbacks.saver.MinSaver`) check
        its name before training.

        A subclass that puts statistics overrides ``_stat_names()``, as tensorpack_lite's
        own do (the others answer an empty list). A subclass defined elsewhere that does not
        override it answers None: it may put anything.

        Example::

            class Evaluator(Callback):
                def _stat_names(self):
                    return ['mAP']
        """
        answering = next(cls for cls in type(self).__mro__ if '_stat_names' in vars(cls))
        for cls in type(self).__mro__:
            if cls is answering:
                break
            if not _defined_in_library(cls):
                return None  # a user's subclass, silent about what it adds
        names = self._stat_names()
        if names is None:
            return None
        if isinstance(names, str) or not all(isinstance(name, str) for name in names):
            raise TypeError("{}._stat_names() must return a list of names (str) or None, got {!r}".format(
                self, names))
        return list(names)

    def _stat_names(self):
        """The names of the scalars this callback puts, or None if unknown: none for the base
        class."""
        return []

    def __str__(self):
        return type(self).__name__

    def get_tensors_maybe_in_tower(self, names):
        """Find tensors by name in the graph, or else inside the first training tower
        (so that ``'loss'`` finds ``'tower0/loss:0'``). Raises KeyError naming the culprit."""
        return [self._get_tensor_maybe_in_tower(name) for name in names]

    def _get_tensor_maybe_in_tower(self, name):
        try:
            return get_op_or_tensor_by_name(name if ':' in name else name + ':0')
        except KeyError:
            pass
        towers = getattr(self.trainer, 'towers', None)
        if towers is not None:
            try:
                return towers.training()[0][name]
            except (KeyError, IndexError):
                pass
        raise KeyError("{}: tensor '{}' is not in the graph, nor in the first training "
                       "tower.".format(self, name))


class ProxyCallback(Callback):
    """A callback that forwards every hook to another callback.

    Subclass it to change when or whether the wrapped callback runs.
    """

    def __init__(self, cb):
        if not isinstance(cb, Callback):
            raise TypeError("ProxyCallback wraps a Callback, got {!r}".format(type(cb)))
        self.cb = cb
        self._chief_only = cb.chief_only

    def _setup_graph(self):
        self.cb.setup_graph(self.trainer)

    def setup_graph(self, trainer):
        # No extra name scope: the wrapped callback opens its own.
        self.trainer = trainer
        self.graph = tfv1.get_default_graph()
        self._setup_graph()

    def _before_train(self):
        self.cb.before_train()

    def _before_epoch(self):
        self.cb.before_epoch()

    def _after_epoch(self):
        self.cb.after_epoch()

    def _before_run(self, ctx):
        return self.cb.before_run(ctx)

    def _after_run(self, ctx, run_values):
        self.cb.after_run(ctx, run_values)

    def _trigger_step(self):
        self.cb.trigger_step()

    def _trigger_epoch(self):
        self.cb.trigger_epoch()

    def _trigger(self):
        self.cb.trigger()

    def _after_train(self):
        self.cb.after_train()

    def _get_state(self):
        return self.cb.get_state()

    def _set_state(self, state):
        self.cb.set_state(state)

    def _stat_names(self):
        return self.cb.stat_names()

    def __str__(self):
        return "Proxy-" + str(self.cb)


class CallbackFactory(Callback):
    """A callback made of plain functions, each taking the callback itself.

    Example::

        CallbackFactory(trigger=lambda cb: print(cb.epoch_num))
    """

    def __init__(self, setup_graph=None, before_train=None, trigger=None, after_train=None):
        self._cb_setup_graph = setup_graph
        self._cb_before_train = before_train
        self._cb_trigger = trigger
        self._cb_after_train = after_train

    def _setup_graph(self):
        if self._cb_setup_graph:
            self._cb_setup_graph(self)

    def _before_train(self):
        if self._cb_before_train:
            self._cb_before_train(self)

    def _trigger(self):
        if self._cb_trigger:
            self._cb_trigger(self)

    def _after_train(self):
        if self._cb_after_train:
            self._cb_after_train(self)

    def _stat_names(self):
        functions = [self._cb_setup_graph, self._cb_before_train, self._cb_trigger, self._cb_after_train]
        if all(_defined_in_library(f) for f in functions if f is not None):
            return []  # tensorpack_lite's own (e.g. an InputSource's)
        return None  # a user's functions may put anything

    def __str__(self):
        named = [f for f in (self._cb_setup_graph, self._cb_before_train, self._cb_trigger,
                             self._cb_after_train) if f is not None]
        return "CallbackFactory({})".format(', '.join(getattr(f, '__name__', '?') for f in named))
