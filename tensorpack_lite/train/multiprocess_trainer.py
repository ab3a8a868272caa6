"""What every multi-process trainer is: a :class:`SingleCostTrainer` that composes a
:class:`~tensorpack_lite.coordination.protocol.MultiProcessProtocol` (``self.protocol``) for
everything the processes agree on. A subclass builds the graph; the protocol does the rest.
"""

from ..compat import tf
from ..loop.state import Schedule
from ..tfutils.common import get_global_step_value
from .tower import SingleCostTrainer

__all__ = ['MultiProcessTrainer']


class MultiProcessTrainer(SingleCostTrainer):
    """A trainer of one process of a synchronous job. Subclasses set :attr:`protocol` in their
    constructor and build the graph (``_setup_graph``); the trainer's stages ask the protocol:
    which callbacks this process registers (only the chief writes files), how its session is
    created and started (every process takes the chief's variables and schedule), whether every
    process stops before a step (one vote), what a failed step means (a lost peer), and whose
    resume state this process writes."""

    protocol = None
    """The :class:`~tensorpack_lite.coordination.protocol.MultiProcessProtocol` of this process."""

    @property
    def world_size(self):
        """One replica per tower of every process."""
        devices = getattr(self, 'devices', None)
        return self.protocol.size * (1 if devices is None else len(devices))

    @property
    def state_owner(self):
        return self.protocol.state_owner

    # ----- only the chief writes files ----------------------------------------------------------

    def register_callback(self, cb):
        if not self.protocol.keeps(cb):
            return False
        return super().register_callback(cb)

    def setup_callbacks(self, callbacks, monitors):
        note = self.protocol.log_note()
        if note is not None:
            self._stop_writing_logs(note)
        extra = self.protocol.callbacks_at_end()
        super().setup_callbacks(list(callbacks) + extra if extra else callbacks, monitors)

    # ----- the start ---------------------------------------------------------------------------

    def initialize(self, session_creator, session_init):
        """Create the session as the protocol says (``session_init`` runs on the chief), then
        start together: every process checks and takes the chief's variables."""
        creator = self.protocol.session_creator(session_creator)
        self.protocol.build_start()
        super().initialize(creator, session_init)
        self.protocol.session_created(self.sess)

    def broadcast_variables(self):
        """Copy the chief's variables to every process (and into the replicas of each tower).
        Every process must call it together."""
        self.protocol.broadcast_variables(self.sess)

    def main_loop(self, steps_per_epoch, starting_epoch, max_epoch, first_step=0):
        """Take the chief's schedule (steps per epoch, first and last epoch: a resumed run needs
        the resume point, and with it the logger directory, on the chief only) and this
        process's own state at the resume point, run the epochs, then end the protocol
        (``teardown``), whatever ended the loop."""
        try:
            mine = Schedule(steps_per_epoch, starting_epoch, max_epoch, first_step)
            chosen = self.protocol.agree_on_schedule(self.sess, mine)
            with self.sess.as_default():
                self._follow_resume_point(chosen, get_global_step_value())
            super().main_loop(*chosen.as_vector())
        finally:
            self.protocol.teardown()

    # ----- steps and the stop ------------------------------------------------------------------

    def _trainer_hooks(self):
        return super()._trainer_hooks() + self.protocol.hooks()

    def _accumulation_built(self, accumulate_op):
        super()._accumulation_built(accumulate_op)
        self.protocol.accumulation_built(accumulate_op)

    def _check_preemption(self):
        """Every process stops after the same step (the protocol's vote): after SIGTERM on any of
        them, the chief writes that step's checkpoint and every process exits with status 143; a
        requested stop (:meth:`request_stop`) ends every process after the same step as finished."""
        if not self.protocol.check_stop(self.sess, self.loop.global_step, self._preemption.received,
                                        self._stop_request):
            super()._check_preemption()     # no vote: nothing to agree on

    def _stop_if_requested(self):
        """With a vote, every process stops after the step it agrees on (:meth:`_check_preemption`)."""
        if self.protocol.vote is None:
            super()._stop_if_requested()

    def _run_epochs(self):
        try:
            super()._run_epochs()
        except tf.errors.OpError as err:
            explained = self.protocol.explain(err)
            if explained is err:
                raise
            raise explained from err

    # ----- the end -----------------------------------------------------------------------------

    def _end_training(self, failure):
        self.protocol.ending(failure)
        try:
            super()._end_training(failure)
        finally:
            self.protocol.close()

    def _close_wait_reason(self):
        return self.protocol.close_wait_reason()
