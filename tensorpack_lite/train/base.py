"""The base Trainer: the epoch/step double loop, callbacks and a hooked session.

A trainer needs a graph with something to run each step. Either set ``trainer.train_op``::

    trainer = Trainer()            # switches TensorFlow to graph mode
    loss = build_my_model()
    trainer.train_op = tf.train.AdamOptimizer(1e-3).minimize(loss)
    trainer.train_with_defaults(steps_per_epoch=100, max_epoch=10)

or subclass it and override :meth:`Trainer.run_step` (e.g. a GAN alternating two ops).
"""

import time

from ..callbacks.monitor import MonitorBase, Monitors
from ..callbacks.remote_sync import RemoteSync
from ..callbacks.steps import MaintainStepCounter
from ..checkpoint.directory import find_resume_states
from ..checkpoint.files import resume_state_path
from ..checkpoint.remote import mirror_for
from ..checkpoint.resume_state import ResumeState
from ..cluster.preemption import Preempted, PreemptionNotice
from ..compat import enable_graph_mode, tf, tfv1
from ..input_source.input_source_base import is_position_key
from ..loop.callback import Callback
from ..loop.dispatch import Callbacks
from ..loop.state import Schedule, StopTraining, TrainLoop
from ..precision.mixed_precision import MixedPrecision, MixedPrecisionError, PrecisionReport, check_rewrite
from ..session.hooked_session import HookedSession
from ..tfutils.model_utils import describe_trainable_vars
from ..tfutils.sesscreate import NewSessionCreator
from ..tfutils.sessinit import JustCurrentSession, SessionInit
from ..utils import logger
from ..utils.argtools import call_only_once
from ..utils.concurrency import DaemonCall, bound_exit, run_with_timeout
from ..utils.utils import humanize_time_delta
from .defaults import DEFAULT_CALLBACKS, DEFAULT_MONITORS

__all__ = ['StopTraining', 'TrainLoop', 'Trainer']


class _CountRuns(tfv1.train.SessionRunHook):
    """The trainer's account of its hooked runs: each one advances the loop (global step, runs
    of the step). It comes before the callbacks, so that their ``after_run`` sees the new
    global step."""

    def __init__(self, loop):
        self._loop = loop

    def after_run(self, run_context, run_values):
        self._loop.count_run()


class Trainer:
    """Runs callbacks and a step function in an epoch/step double loop.

    :meth:`train` is :meth:`setup_callbacks` + :meth:`initialize` + :meth:`main_loop`;
    :meth:`train_with_defaults` fills in tensorpack's default callbacks, monitors, session
    creator and initializer. ``sess`` is the plain session; ``hooked_sess`` also runs the
    callbacks' ``before_run``/``after_run`` and increments the global step.
    """

    is_chief = True
    """Whether this process is the chief worker; only the chief runs chief-only callbacks
    and initializes variables from ``session_init``."""

    world_size = 1
    """The number of model replicas whose batches make one training step (towers times
    processes). ``JSONWriter`` records it at each epoch's end; a run resumed with another number
    is reported (see :class:`~tensorpack_lite.train.config.AutoResumeTrainConfig`)."""

    position_fits_any_world = False
    """Whether the data position this process saves holds for any number of processes (a
    ShardedData's: see :func:`~tensorpack_lite.dataflow.shards.share.position_fits_any_world`);
    set by :func:`~tensorpack_lite.train.interface.launch_train_with_config`."""

    state_owner = None
    """Whose resume state this process writes beside a checkpoint: None on the chief (or a single
    process: ``<prefix>.resume``), a name of its own on the other processes of a job
    (``worker-1``, ``rank-1``: ``<prefix>.resume.worker-1``)."""

    global_batch = None
    """The datapoints of one training step, all replicas together, once the trainer measured
    it (:class:`SingleCostTrainer` does in each epoch's first step); None when not known."""

    sess = None
    """The session, once :meth:`initialize` created it (None before)."""

    hooked_sess = None
    """The session that also runs the hooks, once :meth:`initialize` created it (None before)."""

    AFTER_FAILURE_TIMEOUT = 20.0
    """Seconds the callbacks' ``after_train`` may take in all after training failed with an
    error. Past it, the one still running is abandoned and those after it are not run (a
    warning names them); then the session is closed and the error raised."""

    SESSION_PROBE_TIMEOUT = 10.0
    """After an error raised from inside TensorFlow that is not an ``OpError`` (which may leave
    the session's locks held), the seconds a trivial run (reading the global step) may take to
    show that the session still answers. One that answers is used for the end of training (the
    final checkpoint included); one that does not is left alone."""

    CLOSE_TIMEOUT = 5.0
    """Seconds closing the session may take after training failed; past it, the close goes
    on in the background and the error is raised."""

    EXIT_TIMEOUT = 10.0
    """Once something was abandoned after a failure, the most seconds the interpreter's exit
    may take (then the process ends with status 1; see
    :func:`~tensorpack_lite.utils.concurrency.bound_exit`)."""

    config_parameters = None
    """The settings of the ``TrainConfig`` the trainer was launched with
    (``TrainConfig.parameters()``, set by ``launch_train_with_config``); None otherwise."""

    _stop_request = None
    _mixed_precision = None
    precision_report = None
    """With a mixed-precision mode, its :class:`PrecisionReport`: after the first step, which path
    the mode took on this machine (``.path``: 'native', 'emulated' or 'float32', measured)."""
    _state_at_end = None

    def __init__(self):
        enable_graph_mode()
        self._callbacks = []
        self.loop = TrainLoop()
        """The :class:`TrainLoop`: the run's schedule and position, advanced by the trainer only."""
        self._preemption = PreemptionNotice()    # takes SIGTERM while main_loop runs

    # The loop's state, as attributes of the trainer.
    epoch_num = property(lambda self: self.loop.epoch_num)
    global_step = property(lambda self: self.loop.global_step)
    local_step = property(lambda self: self.loop.local_step)
    starting_epoch = property(lambda self: self.loop.starting_epoch)
    max_epoch = property(lambda self: self.loop.max_epoch)
    steps_per_epoch = property(lambda self: self.loop.steps_per_epoch)

    @property
    def mixed_precision(self):
        """The :class:`MixedPrecision` of the run, or None (float32). Set it to 'bf16', 'fp16'
        or a :class:`MixedPrecision` before the graph is set up (``setup_graph``); the
        session then gets the rewrite (see docs/mixed_precision.md)."""
        return self._mixed_precision

    @mixed_precision.setter
    def mixed_precision(self, value):
        if self._graph_set_up():
            raise RuntimeError("{}.mixed_precision must be set before the graph is set up".format(
                type(self).__name__))
        self._mixed_precision = MixedPrecision.of(value)

    def _graph_set_up(self):
        """Whether the training graph was built (template: trainers that build it say so)."""
        return isinstance(self._callbacks, Callbacks)

    @property
    def callbacks(self):
        """The trainer's callbacks in the order they run, as a tuple (read-only): those
        registered so far, and after :meth:`setup_callbacks` all of them (step counter, the
        given callbacks, the monitors and ``trainer.monitors``)."""
        registered = self._callbacks.cbs if isinstance(self._callbacks, Callbacks) else self._callbacks
        return tuple(registered)

    def register_callback(self, cb):
        """Add a callback (or a list of them) before :meth:`setup_callbacks` runs.

        Returns False when the callback is skipped because it is chief-only and this
        trainer is not the chief, True otherwise.
        """
        if isinstance(cb, (list, tuple)):
            return [self.register_callback(c) for c in cb]
        if not isinstance(cb, Callback):
            raise TypeError("register_callback() takes a Callback, got {!r} of type {}".format(
                cb, type(cb).__name__))
        if isinstance(self._callbacks, Callbacks):
            raise RuntimeError("Cannot register callback {} after the callbacks were set up.".format(cb))
        if not self.is_chief and cb.chief_only:
            logger.warn("Callback {} is chief-only, skipped.".format(cb))
            return False
        self._callbacks.append(cb)
        return True

    def run_parameters(self):
        """The parameters of the run, as experiment trackers record them (see
        :func:`~tensorpack_lite.callbacks.tracking.run_parameters`): :attr:`config_parameters`,
        then the trainer's class, :attr:`world_size`, the mixed-precision mode, and, once
        training started, ``steps_per_epoch`` and ``max_epoch``."""
        params = dict(self.config_parameters or {})
        params.update(trainer=type(self).__name__, world_size=self.world_size)
        if self.mixed_precision is not None:
            params['mixed_precision'] = self.mixed_precision.mode
        if self.loop.schedule is not None:
            params.update(steps_per_epoch=self.loop.steps_per_epoch, max_epoch=self.loop.max_epoch)
        return params

    def request_stop(self, reason):
        """End training as finished (not failed, not preempted), on every process of the run:
        what :class:`~tensorpack_lite.callbacks.EarlyStopping` calls from a trigger. A single
        process stops once the callbacks of the current step (or epoch) are done. The trainers of
        several processes carry the request as they carry a preemption, so that every process
        stops after the same step, one or two steps later (see docs/callbacks.md).

        Args:
            reason (str): why, for the log.
        """
        if not isinstance(reason, str) or not reason:
            raise TypeError("request_stop() takes the reason as a non-empty str, got {!r}".format(reason))
        if self._stop_request is None:
            self._stop_request = reason

    def _stop_if_requested(self):
        """After the callbacks of each step and each epoch: end training (``StopTraining``) when a
        stop was requested (template: the trainers of several processes stop at the step they
        agree on, in :meth:`_check_preemption`)."""
        if self._stop_request is not None:
            raise StopTraining(self._stop_request)

    def run_step(self):
        """Run one training step. By default runs :meth:`_step_fetch` (``self.train_op``) in the
        hooked session; override it for anything else (e.g. several ops per step)."""
        self.hooked_sess.run(self._step_fetch())

    def _step_fetch(self):
        """What the step runs (template): ``self.train_op``."""
        try:
            return self.train_op
        except AttributeError:
            raise NotImplementedError("Set trainer.train_op, or override {}.run_step()".format(
                type(self).__name__)) from None

    @staticmethod
    def _check_callbacks_and_monitors(callbacks, monitors):
        if not isinstance(callbacks, (list, tuple)):
            raise TypeError("callbacks must be a list of Callback, got {}".format(type(callbacks).__name__))
        if not isinstance(monitors, (list, tuple)):
            raise TypeError("monitors must be a list of MonitorBase, got {}".format(type(monitors).__name__))
        for index, cb in enumerate(callbacks):
            if not isinstance(cb, Callback):
                raise TypeError("callbacks[{}] is not a Callback: {!r} of type {}".format(
                    index, cb, type(cb).__name__))
        for index, m in enumerate(monitors):
            if not isinstance(m, MonitorBase):
                raise TypeError("monitors[{}] is not a MonitorBase: {!r} of type {}".format(
                    index, m, type(m).__name__))

    @call_only_once
    def setup_callbacks(self, callbacks, monitors):
        """Register the step counter, ``callbacks`` and ``monitors`` and let them all build
        their ops. The callbacks run in this order: step counter, ``callbacks`` (in the
        given order), ``monitors``, then ``trainer.monitors`` itself, and when the logger
        directory mirrors a URL of object storage, :class:`RemoteSync` (the bucket is pulled
        first; see docs/checkpoints.md)."""
        self._check_callbacks_and_monitors(callbacks, monitors)
        describe_trainable_vars()
        self.register_callback(MaintainStepCounter())
        for cb in callbacks:
            self.register_callback(cb)
        registered_monitors = [m for m in monitors if self.register_callback(m)]
        self.monitors = Monitors(registered_monitors)
        self.register_callback(self.monitors)
        mirror = mirror_for(logger.get_logger_dir()) if self.is_chief else None
        if mirror is not None:
            mirror.prepare()
            self.register_callback(RemoteSync())
        logger.info("Setup callbacks graph ...")
        self._callbacks = Callbacks(self._callbacks)
        self._callbacks.setup_graph(self)

    def _trainer_hooks(self):
        """The trainer's own hooks of ``hooked_sess``, which act before the callbacks' (the run
        counter first). A subclass may add its own after these."""
        hooks = [_CountRuns(self.loop)]
        if self.precision_report is not None:
            hooks.append(self.precision_report)
        return hooks

    @call_only_once
    def initialize(self, session_creator, session_init):
        """Create the session, build the hooked session, run ``session_init`` (on the chief)
        and finalize the graph."""
        if not isinstance(session_creator, tfv1.train.SessionCreator):
            raise TypeError("session_creator must be a tf.compat.v1.train.SessionCreator, got {}".format(
                type(session_creator).__name__))
        if not isinstance(session_init, SessionInit):
            raise TypeError("session_init must be a SessionInit, got {}".format(type(session_init).__name__))
        session_init.setup_graph()
        self._use_mixed_precision(session_creator)
        logger.info("Creating the session ...")
        self.sess = session_creator.create_session()
        self._check_mixed_precision()
        self.hooked_sess = HookedSession(self.sess, self._trainer_hooks() + self._callbacks.get_hooks())
        if self.is_chief:
            logger.info("Initializing the session ...")
            session_init.run_init(self.sess)
        elif not isinstance(session_init, JustCurrentSession):
            logger.warn("This is not the chief worker: session_init {} was ignored.".format(
                type(session_init).__name__))
        self.sess.graph.finalize()
        logger.info("Graph finalized.")

    def _use_mixed_precision(self, session_creator):
        """Give the session creator's config the rewrite of :attr:`mixed_precision`; warn once
        when the hardware lacks what makes it fast."""
        precision = self._mixed_precision
        if precision is None:
            return
        if not isinstance(getattr(session_creator, 'config', None), tfv1.ConfigProto):
            raise ValueError("{}.mixed_precision={!r} needs a session creator with a ConfigProto `config` "
                             "(e.g. NewSessionCreator), got {}".format(
                                 type(self).__name__, precision.mode, type(session_creator).__name__))
        session_creator.config = precision.session_config(session_creator.config)
        precision.warn_if_unsupported()
        self.precision_report = PrecisionReport(precision.mode)
        logger.info("Mixed precision: {}.".format(precision))

    def _check_mixed_precision(self):
        """With a mode, build the step's executors once before training (an in-process session
        with a ``train_op``): a rewrite TensorFlow cannot apply is refused here, the session
        closed, rather than failing the first step."""
        precision = self._mixed_precision
        in_process = isinstance(self.sess, tfv1.Session) and not self.sess.sess_str
        if precision is None or not hasattr(self, 'train_op') or not in_process:
            return
        try:
            check_rewrite(self.sess, self.train_op, precision.mode)
        except MixedPrecisionError:
            self.sess.close()
            raise

    def resume_state(self):
        """The :class:`~tensorpack_lite.checkpoint.resume_state.ResumeState` of the run now: where the
        loop is and every callback's state (the data position among them), which
        :class:`ModelSaver` writes beside each checkpoint. None while a step runs (after a
        step raised, the variables may hold part of its update: no resume point)."""
        if self._state_at_end is not None:   # training ended: as it was before after_train began
            return self._state_at_end
        loop = self.loop
        if not loop.between_steps or loop.schedule is None:
            return None
        epoch, steps_done = loop.epoch_num, loop.steps_done
        if epoch < loop.starting_epoch:     # before the first epoch: where the run starts
            schedule = loop.schedule
            epoch, steps_done = ((schedule.starting_epoch, schedule.first_step) if schedule.first_step
                                 else (schedule.starting_epoch - 1, schedule.steps_per_epoch))
        return ResumeState(epoch, steps_done, loop.global_step, loop.steps_per_epoch,
                           callbacks=self._callbacks.get_states(), world_size=self.world_size)

    def _follow_resume_point(self, schedule, global_step):
        """On a process that took the chief's ``schedule`` (its global step ``global_step``):
        take back this process's own callback states (its data position) saved at that step in
        the logger directory, when the schedule resumes a run."""
        if self.is_chief or (schedule.starting_epoch == 1 and not schedule.first_step):
            return
        directory = self._own_state_directory()
        state = self._saved_state(directory, global_step, self.state_owner)
        if self.position_fits_any_world and (state is None or state.world_size != self.world_size):
            if self._take_any_worlds_position(directory, global_step, state):
                return
        if state is None:
            logger.warn("{}: no state of its own at global step {} (no '*-{}{}' in {}): its data starts at "
                        "the beginning of an epoch, not where it was.".format(
                            self.state_owner, global_step, global_step,
                            resume_state_path('', self.state_owner), directory or "no logger directory"))
            return
        if state.world_size != self.world_size:    # as the chief does (train/interface.py)
            logger.info("{}: its state at global step {} was saved by {} model replicas, this run has {}: "
                        "not restored, its data starts anew.".format(
                            self.state_owner, global_step, state.world_size, self.world_size))
            return
        logger.info("{} takes back its own state at global step {} ({}).".format(
            self.state_owner, global_step, state.describe()))
        self._callbacks.set_states(state.callbacks)

    @staticmethod
    def _saved_state(directory, global_step, owner):
        """The resume state ``owner`` saved at ``global_step`` in ``directory``, or None."""
        prefix = find_resume_states(directory, owner).get(global_step) if directory else None
        return ResumeState.read(prefix, owner) if prefix else None

    def _take_any_worlds_position(self, directory, global_step, own):
        """A position that holds for any number of processes: this process's own state (saved
        with another world size), else the data position of the chief's state of that step (in
        a logger directory shared with it: a process new to the job). Whether one was taken."""
        state, whose = own, 'its own state'
        if state is None:
            state = self._saved_state(directory, global_step, None)
            if state is None:
                return False
            state = ResumeState(state.epoch, state.steps_done, state.global_step, state.steps_per_epoch,
                                {key: s for key, s in state.callbacks.items() if is_position_key(key)},
                                state.world_size)
            whose = "the chief's data position"
        logger.info("{} takes {} at global step {} ({}), saved by {} model replicas (this run has {}): the "
                    "position holds for any number (ShardedData).".format(
                        self.state_owner, whose, global_step, state.describe(), state.world_size,
                        self.world_size))
        self._callbacks.set_states(state.callbacks)
        return True

    _state_directory = None

    def _own_state_directory(self):
        """Where this process's ModelSaver writes its own resume states: the logger directory
        (the one it had before :meth:`_stop_writing_logs`)."""
        return self._state_directory or logger.get_logger_dir()

    def _stop_writing_logs(self, who):
        """On a process other than the chief: stop writing into the logger directory (``who``
        begins the line that says so); ModelSaver still writes this process's own resume states
        there."""
        self._state_directory = logger.get_logger_dir()
        if self._state_directory is not None:
            logger.info("{} stops writing into {} but for its own resume states.".format(
                who, self._state_directory))
            logger.unset_logger_dir()

    @call_only_once
    def main_loop(self, steps_per_epoch, starting_epoch, max_epoch, first_step=0):
        """Run the epochs. ``after_train`` of every callback runs and the session is closed
        however the loop ends (finished, StopTraining, an error, Ctrl-C). After an error the
        loop records it (``loop.failure``), and that end is bounded in time
        (:attr:`AFTER_FAILURE_TIMEOUT`, :attr:`CLOSE_TIMEOUT`); when the error left the session
        in an unknown state, nothing more runs in it (``loop.session_usable``)."""
        with self.sess.as_default(), PreemptionNotice() as self._preemption:
            self.loop.start(Schedule(steps_per_epoch, starting_epoch, max_epoch, first_step))
            try:
                self._run_epochs()
            except (StopTraining, tf.errors.OutOfRangeError) as err:
                logger.info("Training was stopped by {}: {}".format(type(err).__name__, err))
            except Preempted as err:
                self.loop.fail(err)
                logger.warn("Training was preempted (SIGTERM) after global step {} ({}): ending training "
                            "as after Ctrl-C (ModelSaver writes a checkpoint), then exiting with status "
                            "{}.".format(self.loop.global_step, err, err.code))
                raise
            except KeyboardInterrupt as err:
                self.loop.fail(err)
                logger.info("Detected Ctrl-C and exiting main loop.")
                raise
            except Exception as err:
                failure = self.loop.fail(err)
                if not failure.session_usable:
                    failure.session_usable = self._session_answers()
                self._report_failure(failure)
                raise
            finally:
                self._end_training(self.loop.failure)

    def _session_answers(self):
        """Whether the session answers a trivial run (the global step's value) within
        :attr:`SESSION_PROBE_TIMEOUT`; a run left waiting stays in a daemon thread."""
        step = tfv1.train.get_global_step(self.sess.graph)
        if step is None:
            return False
        probe = DaemonCall(lambda: self.sess.run(step), 'session-probe')
        if not probe.wait(self.SESSION_PROBE_TIMEOUT):
            return False
        try:
            probe.result()
        except Exception:   # the session is broken or closed: it does not answer
            return False
        logger.info("The session still answers after this error: the end of training uses it.")
        return True

    def _report_failure(self, failure):
        culprit = getattr(failure.error, 'callback', None)
        where = " in callback {}".format(culprit) if culprit is not None else ""
        logger.error("Training failed{}: {}".format(where, failure.describe()))
        if not failure.session_usable:
            logger.error("The session is in an unknown state after this error (raised inside TensorFlow, "
                         "not a TensorFlow OpError, and a trivial run got no answer within {:g} s): nothing "
                         "more runs in it. The end of training skips what needs it (no checkpoint is "
                         "written from it; the last one written stays).".format(self.SESSION_PROBE_TIMEOUT))

    def _run_epochs(self):
        loop = self.loop
        callbacks = self._callbacks
        callbacks.before_train()
        loop.update_global_step()  # callbacks may have changed it
        for epoch in loop.epochs():
            logger.info("Start Epoch {} ...".format(epoch))
            callbacks.before_epoch()
            start = time.time()
            for _ in loop.steps():
                if self.hooked_sess.should_stop():
                    logger.info("A hook requested to stop training.")
                    return
                self._check_preemption()
                loop.step_started()
                self.run_step()
                loop.step_finished()
                with loop.trigger():
                    callbacks.trigger_step()
                if not loop.is_last_step_of_epoch:   # else once the epoch has ended
                    self._stop_if_requested()
            callbacks.after_epoch()
            logger.info("Epoch {} (global_step {}) finished, time:{}.".format(
                epoch, loop.global_step, humanize_time_delta(time.time() - start)))
            with loop.trigger():
                callbacks.trigger_epoch()
            self._stop_if_requested()
        logger.info("Training has finished!")

    def _check_preemption(self):
        """Before each step: raise :class:`~tensorpack_lite.cluster.preemption.Preempted` when
        training must stop because of SIGTERM, ``StopTraining`` when a stop was requested
        (:meth:`request_stop`) and recorded (template: the distributed trainers stop every
        worker after the same step)."""
        self._preemption.check()
        self._stop_if_requested()

    def _end_training(self, failure):
        """Run the callbacks' ``after_train`` and close the session; after ``failure`` (a
        :class:`~tensorpack_lite.loop.state.RunFailure`), each within its bound."""
        self._state_at_end = self._resume_state_at_end(failure)
        if failure is None:
            try:
                self._callbacks.after_train()
            finally:
                self._close_session()
            return
        try:
            finished = run_with_timeout(self._after_train_in_session, self.AFTER_FAILURE_TIMEOUT,
                                        'after-train')
        except Exception:
            finished = True   # logged by Callbacks; the error that stopped training matters more
        if not finished:
            stuck, *skipped = self._callbacks.after_train_pending
            logger.warn("After the failure, {}.after_train() did not finish within {:g} s "
                        "(AFTER_FAILURE_TIMEOUT): abandoned.{}".format(
                            stuck, self.AFTER_FAILURE_TIMEOUT,
                            " Not run: {}.".format(', '.join(map(str, skipped))) if skipped else ""))
            bound_exit(self.EXIT_TIMEOUT)
        if not run_with_timeout(self._close_session, self.CLOSE_TIMEOUT, 'close-session'):
            logger.warn("After the failure, the session did not close within {:g} s (CLOSE_TIMEOUT){}. "
                        "Moving on without it.".format(self.CLOSE_TIMEOUT, self._close_wait_reason()))
            bound_exit(self.EXIT_TIMEOUT)

    def _resume_state_at_end(self, failure):
        """The resume state as training ends, before any ``after_train`` (which may stop an input
        source or empty a staging area): what the final checkpoint resumes. None when the session
        cannot be used, or a callback cannot give its state (a warning names it), or, after
        ``failure``, it takes longer than :attr:`CLOSE_TIMEOUT`."""
        if not self.loop.session_usable:
            return None

        def take():
            with self.sess.graph.as_default(), self.sess.as_default():
                return self.resume_state()
        try:
            if failure is None:
                return take()
            call = DaemonCall(take, 'resume-state-at-end')
            if not call.wait(self.CLOSE_TIMEOUT):
                logger.warn("After the failure, the state at the end of training was not taken within "
                            "{:g} s (CLOSE_TIMEOUT): the final checkpoint is not a resume point.".format(
                                self.CLOSE_TIMEOUT))
                return None
            return call.result()
        except Exception as err:
            logger.warn("The state at the end of training could not be taken ({}: {}): the final "
                        "checkpoint is not a resume point.".format(type(err).__name__, err))
            return None

    def _after_train_in_session(self):
        """The callbacks' ``after_train`` with the session and its graph as defaults (as in the
        training loop: it runs in a thread of its own after a failure)."""
        with self.sess.graph.as_default(), self.sess.as_default():
            self._callbacks.after_train()

    def _close_session(self):
        """Close the session at the end of training."""
        self.hooked_sess.close()

    def _close_wait_reason(self):
        """What a session that does not close after a failure may be waiting for, as a clause
        (template: a distributed trainer names the tasks it lost)."""
        return ""

    def train(self, callbacks, monitors, session_creator, session_init, steps_per_epoch,
              starting_epoch=1, max_epoch=9999999, resume_state=None):
        """Set up callbacks, create and initialize the session, then run the loop.

        ``resume_state`` (a :class:`~tensorpack_lite.checkpoint.resume_state.ResumeState`, as
        :class:`AutoResumeTrainConfig` finds it) resumes a run at its step: the first epoch is
        ``resume_state.epoch`` from step ``resume_state.steps_done`` (the next epoch when that
        one had ended), and the callbacks take back their states before training.
        Every argument is checked before any graph change or session.
        """
        first_step = 0
        if resume_state is not None:
            if not isinstance(resume_state, ResumeState):
                raise TypeError("resume_state must be a ResumeState, got {!r}".format(resume_state))
            if not resume_state.at_epoch_end:
                starting_epoch, first_step = resume_state.epoch, resume_state.steps_done
        Schedule(steps_per_epoch, starting_epoch, max_epoch, first_step)  # a bad schedule fails here
        self.setup_callbacks(callbacks, monitors)
        self.initialize(session_creator, session_init)
        if resume_state is not None and self.is_chief:   # the others find theirs: _follow_resume_point
            self._callbacks.set_states(resume_state.callbacks)
        self.main_loop(steps_per_epoch, starting_epoch, max_epoch, first_step)

    def train_with_defaults(self, _sentinel=None, callbacks=None, monitors=None,
                            session_creator=None, session_init=None, steps_per_epoch=None,
                            starting_epoch=1, max_epoch=9999999, extra_callbacks=None,
                            resume_state=None):
        """:meth:`train` with defaults: ``monitors`` default to ``DEFAULT_MONITORS()``,
        ``extra_callbacks`` (appended to ``callbacks``) to ``DEFAULT_CALLBACKS()``, a
        :class:`NewSessionCreator` and :class:`JustCurrentSession`. Keyword arguments only;
        ``steps_per_epoch`` is required.
        """
        if _sentinel is not None:
            raise TypeError("train_with_defaults() takes keyword arguments only")
        if steps_per_epoch is None:
            raise ValueError("train_with_defaults() needs steps_per_epoch")
        callbacks = list(callbacks or [])
        callbacks.extend(DEFAULT_CALLBACKS() if extra_callbacks is None else extra_callbacks)
        monitors = DEFAULT_MONITORS() if monitors is None else monitors
        self.train(callbacks, monitors, session_creator or NewSessionCreator(),
                   session_init or JustCurrentSession(), steps_per_epoch, starting_epoch, max_epoch,
                   resume_state)
