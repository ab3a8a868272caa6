"""The multi-process protocol: how the processes of one synchronous job agree, written once.

Every multi-process trainer composes one :class:`MultiProcessProtocol` (``trainer.protocol``)
and builds the graph; the protocol makes the processes agree. Its backends differ in how the
processes talk, not in what they agree on:
:class:`~tensorpack_lite.coordination.tf_runtime.TFRuntimeProtocol` (TensorFlow's distributed
runtime: the collective and parameter-server trainers) and
:class:`~tensorpack_lite.coordination.mpi.MPIProtocol` (Horovod or MPI: ``HorovodTrainer``).
"""

from ..callbacks.monitor import JSONWriter, TFEventWriter
from ..cluster.preemption import Preempted
from ..loop.callback import Callback
from ..loop.state import StopTraining
from ..multiprocess.stop_vote import PREEMPTED, PreemptionVote
from ..utils import logger

__all__ = ['MultiProcessProtocol', 'BroadcastEveryEpoch']


class BroadcastEveryEpoch(Callback):
    """Copies the chief's variables to every process at each epoch's end, through the trainer's
    ``broadcast_variables()`` (``HorovodTrainer``, ``CollectiveAllReduceTrainer``)."""

    _chief_only = False

    def _trigger(self):
        self.trainer.broadcast_variables()


class MultiProcessProtocol:
    """What the processes of one job agree on, and how a trainer asks (the backends say how
    the processes talk):

    * the start: the chief's schedule (:meth:`agree_on_schedule`), and its variables, copied to
      every process (:meth:`broadcast_variables`) once the session exists (:meth:`session_created`,
      after a check that every process built the same ones);
    * the stop: one vote (:mod:`~tensorpack_lite.multiprocess.stop_vote`, :attr:`vote`) read
      before each step (:meth:`check_stop`), so that every process stops after the same step;
    * a failed step explained (:meth:`explain`: a lost peer, a peer that ended);
    * the resume hand-off: whose resume state this process writes (:attr:`state_owner`);
    * the files: only the chief writes into the logger directory (:meth:`keeps`,
      :meth:`log_note`).

    The trainer calls, in this order: :meth:`session_creator`, :meth:`build_start`, then
    :meth:`session_created` once its session exists, :meth:`agree_on_schedule`, :meth:`check_stop`
    before each step, :meth:`ending` and :meth:`close` around the end of training, and
    :meth:`teardown` last, however training ended.

    Args:
        index (int): this process's index among ``size``.
        size (int): the number of processes.
        name (str): this process in the log (``'/job:worker/task:1'``, ``'Rank 1'``).
        is_chief (bool): whether this process is the chief.
    """

    KIND = 'process'
    """What one process is called (``'worker'``, ``'rank'``): in messages and :attr:`state_owner`."""

    CHIEF = 'the chief'
    """The chief, in messages."""

    def __init__(self, index, size, name, is_chief):
        self.index, self.size, self.name, self.is_chief = index, size, name, bool(is_chief)
        self.vote = None
        """The stop vote, once built (:meth:`stop_vote_in_graph` or the backend)."""
        self.cost_vote = None
        """The vote that carries each step's costs to every process (its
        :attr:`~tensorpack_lite.multiprocess.stop_vote.PreemptionVote.costs_carried`), once
        built: the stop vote, or one of its own (:meth:`cost_vote_in_graph`)."""
        self.broadcast_op = None
        """The op copying the chief's variables to every process (None: nothing to copy)."""
        self.post_init_op = None
        """The op copying the first tower's variables into the other towers' replicas, or None."""

    @property
    def state_owner(self):
        """Whose resume state this process writes beside a checkpoint: None on the chief,
        ``'<KIND>-<index>'`` on the others (``worker-1``, ``rank-1``)."""
        return None if self.is_chief else '{}-{}'.format(self.KIND, self.index)

    # ----- files -------------------------------------------------------------------------------

    def keeps(self, callback):
        """Whether a trainer registers ``callback``: the writers of event files and
        ``stats.json`` only on the chief (a line of the log says when one is skipped)."""
        if self.is_chief or not isinstance(callback, (TFEventWriter, JSONWriter)):
            return True
        logger.info("{}: {} skipped, only {} writes files.".format(
            self.name, type(callback).__name__, self.CHIEF))
        return False

    def log_note(self):
        """None on the chief; on the others, how the line saying that this process stops writing
        into the logger directory begins."""
        if self.is_chief:
            return None
        return "{}: only {} writes into the logger directory; this {}".format(
            self.name, self.CHIEF, self.KIND)

    def callbacks_at_end(self):
        """Callbacks of the protocol's, registered after the user's."""
        return []

    # ----- start -------------------------------------------------------------------------------

    def session_creator(self, session_creator):
        """The session creator to use instead of ``session_creator`` (checked)."""
        raise NotImplementedError("{} must implement session_creator()".format(type(self).__name__))

    def build_start(self):
        """Build what the start needs, once every variable exists (before the graph is finalized)."""

    def session_created(self, sess):
        """The trainer's session exists (initialized on the chief)."""

    def agree_on_schedule(self, sess, mine):
        """Every process takes the chief's schedule: this process's (``mine``, a
        ``Schedule``) or the chief's, which it follows."""
        chosen = self._exchange_schedule(sess, mine)
        if chosen != mine:
            logger.info("{} follows {}'s schedule: {}.".format(self.name, self.CHIEF, chosen.describe()))
        return chosen

    def _exchange_schedule(self, sess, mine):
        """The chief's schedule (``mine`` on the chief)."""
        raise NotImplementedError("{} must implement _exchange_schedule()".format(type(self).__name__))

    def broadcast_variables(self, sess):
        """Copy the chief's variables to every process, then into each tower's replicas. Every
        process must call it together."""
        if self.broadcast_op is not None:
            sess.run(self.broadcast_op, options=self._broadcast_options())
        if self.post_init_op is not None:
            sess.run(self.post_init_op)

    def _broadcast_options(self):
        """The ``RunOptions`` of the broadcast (None: the defaults)."""
        return None

    # ----- stop --------------------------------------------------------------------------------

    def stop_vote_in_graph(self):
        """A new :class:`~tensorpack_lite.multiprocess.stop_vote.PreemptionVote`, this protocol's
        vote: the trainer reduces its tensor with the gradients of every step."""
        self.vote = self.cost_vote = PreemptionVote()
        return self.vote

    def cost_vote_in_graph(self):
        """A new :class:`~tensorpack_lite.multiprocess.stop_vote.PreemptionVote` that only
        carries the steps' costs (:attr:`cost_vote`), for a trainer whose stop vote travels
        elsewhere (the parameter-server trainers' finish barrier)."""
        self.cost_vote = PreemptionVote()
        return self.cost_vote

    def _votes_in_graph(self):
        return [v for v in dict.fromkeys([self.vote, self.cost_vote]) if isinstance(v, PreemptionVote)]

    def hooks(self):
        """The protocol's hooks of the training session (the votes in the graph)."""
        return self._votes_in_graph()

    def accumulation_built(self, accumulate_op):
        """With ``accumulate`` > 1: the runs of ``accumulate_op`` reduce nothing, so the votes
        travel with the update's reduction."""
        for vote in self._votes_in_graph():
            vote.skip_runs_of(accumulate_op)

    def check_stop(self, sess, global_step, sigterm_received, stop_request):
        """Before a step, ``global_step`` steps done: vote (SIGTERM received, a stop requested,
        ``stop_request`` its reason) and stop when every process stops now: raise
        :class:`~tensorpack_lite.cluster.preemption.Preempted` when one was preempted (every
        process exits with status 143, the chief writes that step's checkpoint), else
        ``StopTraining`` (training ends as finished). False when there is no vote (nothing
        agreed: the trainer stops alone)."""
        if self.vote is None:
            return False
        agreed = self.vote.agreed_stop(sess, global_step, sigterm_received, self.name, stop_request)
        if agreed is None:
            return True
        stop_step, why = agreed
        self._stopping_together()
        if why == PREEMPTED:
            raise Preempted.together(sigterm_received, self.KIND, stop_step)
        raise StopTraining("every {} stops after global step {}: {}".format(
            self.KIND, stop_step, stop_request or '{} asked to stop.'.format(self.CHIEF)))

    def _stopping_together(self):
        """Every process stops now, together (template)."""

    def explain(self, err):
        """The error to raise for ``err``, a TensorFlow error that ended a step (``err``
        itself when there is nothing to add)."""
        return err

    # ----- end ---------------------------------------------------------------------------------

    def ending(self, failure):
        """Training ends (``failure``: the loop's ``RunFailure``, or None), before the
        callbacks' ``after_train``."""

    def close(self):
        """After the callbacks' ``after_train`` and the session's close."""
        if self.vote is not None:
            self.vote.close()

    def close_wait_reason(self):
        """What a session that does not close after a failure may wait for, as a clause."""
        return ""

    def teardown(self):
        """Last, however training ended (also when the start failed)."""
