"""The run state of a training loop: its schedule and where it is (epoch, step, global step).

The trainer owns one :class:`TrainLoop` (``trainer.loop``) and is the only thing that advances
it; callbacks read it (``self.trainer.loop``) instead of working the answers out themselves::

    loop = self.trainer.loop
    if loop.is_last_step_of_epoch and loop.is_first_run_of_step:
        ...   # fetch something once, with the last step of the epoch
"""

import numbers
from time import perf_counter

from ..session.failure import leaves_session_unusable
from ..tfutils.common import get_global_step_value
from ..utils.argtools import is_int
from .callback import name_culprit

__all__ = ['Schedule', 'TrainLoop', 'RunFailure', 'StopTraining']


def _whole_number(name, value):
    """``value`` as an int: an integer, or a float with a whole value (``4.0``, as schedules
    computed with a float factor give); anything else raises a TypeError naming ``name``."""
    if is_int(value):
        return int(value)
    if isinstance(value, numbers.Real) and not isinstance(value, bool) and float(value).is_integer():
        return int(value)
    raise TypeError("{} must be an integer (or a float with a whole value), got {!r} of type {}".format(
        name, value, type(value).__name__))


class Schedule:
    """Which epochs a run trains and how many steps each has, checked when it is made.

    Epochs are numbered from ``starting_epoch`` to ``max_epoch`` inclusive; each has
    ``steps_per_epoch`` steps. A run resumed in the middle of an epoch starts that epoch at
    step ``first_step`` (the number of its steps already run).

    Example::

        Schedule(steps_per_epoch=100, starting_epoch=1, max_epoch=10)
        Schedule(steps_per_epoch=100, starting_epoch=3, max_epoch=10, first_step=40)
    """

    __slots__ = ('steps_per_epoch', 'starting_epoch', 'max_epoch', 'first_step')

    def __init__(self, steps_per_epoch, starting_epoch=1, max_epoch=9999999, first_step=0):
        steps_per_epoch = _whole_number('steps_per_epoch', steps_per_epoch)
        starting_epoch = _whole_number('starting_epoch', starting_epoch)
        max_epoch = _whole_number('max_epoch', max_epoch)
        first_step = _whole_number('first_step', first_step)
        if steps_per_epoch <= 0:
            raise ValueError("steps_per_epoch must be a positive number of steps, got {}".format(
                steps_per_epoch))
        if starting_epoch < 1:
            raise ValueError("starting_epoch counts from 1, got {}".format(starting_epoch))
        if max_epoch < starting_epoch:
            raise ValueError("max_epoch ({}) is smaller than starting_epoch ({}): no epoch would "
                             "run".format(max_epoch, starting_epoch))
        if not 0 <= first_step < steps_per_epoch:
            raise ValueError("first_step (the steps of the starting epoch already run) must be in "
                             "[0, steps_per_epoch={}), got {}".format(steps_per_epoch, first_step))
        self.steps_per_epoch = int(steps_per_epoch)
        self.starting_epoch = int(starting_epoch)
        self.max_epoch = int(max_epoch)
        self.first_step = int(first_step)

    VECTOR_LENGTH = 4
    """The length of :meth:`as_vector`: what processes of one job send each other to agree."""

    def as_vector(self):
        """``[steps_per_epoch, starting_epoch, max_epoch, first_step]``, as the chief or rank 0
        sends it to the others (see :meth:`from_vector`)."""
        return [self.steps_per_epoch, self.starting_epoch, self.max_epoch, self.first_step]

    @classmethod
    def from_vector(cls, values):
        """The schedule :meth:`as_vector` gave."""
        steps_per_epoch, starting_epoch, max_epoch, first_step = (int(v) for v in values)
        return cls(steps_per_epoch, starting_epoch, max_epoch, first_step)

    def describe(self):
        """``30 steps per epoch, epochs 2..3`` (``, from step 15 of epoch 2`` when resumed
        inside one)."""
        return "{} steps per epoch, epochs {}..{}{}".format(
            self.steps_per_epoch, self.starting_epoch, self.max_epoch,
            ", from step {} of epoch {}".format(self.first_step, self.starting_epoch)
            if self.first_step else "")

    def __eq__(self, other):
        return isinstance(other, Schedule) and self.as_vector() == other.as_vector()

    def __hash__(self):
        return hash(tuple(self.as_vector()))

    def __repr__(self):
        return "Schedule(steps_per_epoch={}, starting_epoch={}, max_epoch={}{})".format(
            self.steps_per_epoch, self.starting_epoch, self.max_epoch,
            ", first_step={}".format(self.first_step) if self.first_step else "")


class StopTraining(Exception):
    """Raise it from a callback or ``run_step`` to end training early and cleanly."""


class RunFailure:
    """Why training ended with an error: the ``error`` and whether the session can still be
    used (``session_usable``: False when the error may have left it in an unknown state, see
    :func:`~tensorpack_lite.session.failure.leaves_session_unusable`; the trainer then
    probes it and sets it True when it still answers)."""

    __slots__ = ('error', 'session_usable')

    def __init__(self, error):
        self.error = error
        self.session_usable = not leaves_session_unusable(error)

    def describe(self):
        """The error in one line, ``Type: message``."""
        text = str(self.error).strip().splitlines()
        return "{}: {}".format(type(self.error).__name__, text[0] if text else '')

    def __repr__(self):
        return "RunFailure({}, session_usable={})".format(self.describe(), self.session_usable)


class _TriggerScope:
    """What :meth:`TrainLoop.trigger` returns: while it is entered, :meth:`TrainLoop.after_callbacks`
    queues its actions; they run when it is left without an error."""

    __slots__ = ('_loop',)

    def __init__(self, loop):
        self._loop = loop

    def __enter__(self):
        self._loop._deferred = []

    def __exit__(self, error_type, error, traceback):
        try:
            if error_type is None:
                self._loop._run_deferred()
        finally:
            self._loop._deferred = None


class TrainLoop:
    """Where the training loop is, and the questions callbacks ask about it.

    ``local_step`` numbers the steps of an epoch from 0; ``global_step`` counts every hooked
    run ever made, across restarts (it starts from the graph's global step variable). A step
    may make several hooked runs (e.g. a GAN's two optimizers); :attr:`is_first_run_of_step`
    tells the first one apart.

    The trainer advances the loop with :meth:`start`, :meth:`epochs`, :meth:`steps` and
    :meth:`count_run`, and records an error that ends training with :meth:`fail`; nothing else
    changes it. After such an error, the work done at the end of training asks
    :attr:`session_usable` before it runs anything in the session.
    """

    def __init__(self):
        self.failure = None
        """The :class:`RunFailure` that ended training, or None."""
        self._schedule = None
        self._epoch_num = 0
        self._global_step = 0
        self._local_step = -1
        self._runs_in_step = 0
        self._steps_done = 0
        self._in_step = False
        self._deferred = None   # [(callback, action)] while the callbacks of a trigger run
        self._trigger_scope = _TriggerScope(self)
        self._clock = 0.0           # perf_counter() at the last step's start or end
        self._step_seconds = 0.0
        self._between_seconds = 0.0
        self._waits = {}
        self._last_run_end = None

    # ----- advanced by the trainer ------------------------------------------------------------

    def start(self, schedule):
        """Take the :class:`Schedule` of the run and read the global step from the graph (in
        the default session)."""
        if not isinstance(schedule, Schedule):
            raise TypeError("TrainLoop.start() takes a Schedule, got {!r}".format(schedule))
        self._schedule = schedule
        self._epoch_num = schedule.starting_epoch - 1
        self.update_global_step()

    def update_global_step(self):
        """Read the global step from the graph's variable (in the default session)."""
        self._global_step = get_global_step_value()

    def epochs(self):
        """Iterate over the epochs of the schedule, making each the current one."""
        for epoch in range(self.starting_epoch, self.max_epoch + 1):
            self._epoch_num = epoch
            yield epoch

    def steps(self):
        """Iterate over the steps of the current epoch, making each the current one (the
        starting epoch of a resumed run begins at ``schedule.first_step``)."""
        first = self._schedule.first_step if self._epoch_num == self.starting_epoch else 0
        self._steps_done = first
        self._clock = perf_counter()
        for step in range(first, self.steps_per_epoch):
            self._local_step = step
            self._runs_in_step = 0
            yield step
        self._between_seconds += perf_counter() - self._clock

    def step_started(self):
        """The trainer starts running the current step (its ``run_step``)."""
        self._in_step = True
        now = perf_counter()
        self._between_seconds += now - self._clock
        self._clock = now

    def step_finished(self):
        """The current step ran to its end: it counts in :attr:`steps_done`."""
        now = perf_counter()
        self._step_seconds += now - self._clock
        self._clock = now
        self._in_step = False
        self._steps_done = self._local_step + 1

    def record_wait(self, kind, seconds):
        """Add ``seconds`` during which the loop waited for ``kind`` of work to the run's total
        (:meth:`waited`). The library records ``'input'`` (a datapoint produced in the loop's
        thread inside a step: ``FeedInput``) and ``'checkpoint'`` (a checkpoint holding the loop:
        ``ModelSaver``, ``MinSaver``); :class:`~tensorpack_lite.callbacks.StepTimeMonitor` reads them."""
        self._waits[kind] = self._waits.get(kind, 0.0) + seconds

    def count_run(self):
        """Account for one hooked run of the step (it incremented the global step variable),
        right after the session returned (before the callbacks' ``after_run``)."""
        self._last_run_end = perf_counter()
        self._global_step += 1
        self._runs_in_step += 1

    def fail(self, error):
        """Record ``error`` as the end of training; returns its :class:`RunFailure`."""
        self.failure = RunFailure(error)
        return self.failure

    def trigger(self):
        """Around the callbacks of a step's or an epoch's trigger (``with loop.trigger():
        callbacks.trigger_step()``): when they have all run, the actions they left with
        :meth:`after_callbacks` run, in order. (A plain context manager: it is entered every step.)"""
        return self._trigger_scope

    def _run_deferred(self):
        while self._deferred:
            callback, action = self._deferred.pop(0)
            try:
                action()
            except Exception as err:
                name_culprit(err, callback, 'trigger')
                raise

    # ----- asked by callbacks ---------------------------------------------------------------------

    def after_callbacks(self, callback, action):
        """Run ``action()`` once every callback of the current trigger (of a step or an epoch) has
        run, whatever their order; now when no trigger is running (e.g. in ``after_train``). What
        depends on the state of the whole step waits so: a checkpoint, whose resume state holds
        every callback's state after that step. An error it raises names ``callback``."""
        if self._deferred is None:
            action()
        else:
            self._deferred.append((callback, action))

    # ----- read by everyone ---------------------------------------------------------------------

    @property
    def step_seconds(self):
        """Wall-clock seconds spent in the steps (the trainer's ``run_step``) of the whole run,
        measured with two ``time.perf_counter()`` reads a step."""
        return self._step_seconds

    @property
    def between_steps_seconds(self):
        """Wall-clock seconds of the run between steps inside the epochs: the callbacks'
        ``trigger_step`` (and the loop's own checks), from each epoch's first step to its end."""
        return self._between_seconds

    @property
    def last_run_end(self):
        """``time.perf_counter()`` when the session returned from the latest hooked run (before
        the callbacks' ``after_run``); None before the first."""
        return self._last_run_end

    def waited(self, kind):
        """Seconds recorded with :meth:`record_wait` for ``kind`` over the run (0 if none)."""
        return self._waits.get(kind, 0.0)

    @property
    def session_usable(self):
        """False once training failed with an error that left the session in an unknown state:
        nothing may run in it any more (every later run could wait for ever)."""
        return self.failure is None or self.failure.session_usable

    @property
    def schedule(self):
        """The :class:`Schedule` of the run (None before it starts)."""
        return self._schedule

    @property
    def steps_per_epoch(self):
        return self._scheduled('steps_per_epoch')

    @property
    def starting_epoch(self):
        return self._scheduled('starting_epoch')

    @property
    def max_epoch(self):
        return self._scheduled('max_epoch')

    def _scheduled(self, name):
        if self._schedule is None:
            raise AttributeError("The training loop has no {} before training starts".format(name))
        return getattr(self._schedule, name)

    @property
    def epoch_num(self):
        """The current epoch (the last finished one outside an epoch)."""
        return self._epoch_num

    @property
    def global_step(self):
        """Hooked runs made so far, across restarts."""
        return self._global_step

    @property
    def local_step(self):
        """The step within the current epoch, from 0."""
        return self._local_step

    @property
    def steps_done(self):
        """The steps of the current epoch that ran to their end (``steps_per_epoch`` once the
        epoch's last step did)."""
        return self._steps_done

    @property
    def between_steps(self):
        """False while a step runs (from :meth:`step_started` to :meth:`step_finished`): a step
        that raised leaves the loop inside it, and the variables may hold part of its update."""
        return not self._in_step

    @property
    def is_last_step_of_epoch(self):
        """Whether the current step is the last one of its epoch."""
        return self._local_step == self.steps_per_epoch - 1

    @property
    def is_last_epoch(self):
        """Whether the current epoch is the last one of the schedule."""
        return self._epoch_num == self.max_epoch

    @property
    def is_first_run_of_step(self):
        """Whether no hooked run of the current step has finished yet (True in the
        ``before_run`` of its first run)."""
        return self._runs_in_step == 0
