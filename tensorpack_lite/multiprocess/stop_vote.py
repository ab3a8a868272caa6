"""The one way the processes of a synchronous job agree to stop: when one process receives
SIGTERM, or the chief asks to stop (``Trainer.request_stop``, e.g. from :class:`EarlyStopping`),
every process stops after the same step. Two votes answer the same question before each step
(:meth:`agreed_stop`: after which step every process stops, and why): :class:`PreemptionVote`,
carried by the all-reduce of every training step, and :class:`BarrierStopVote`, a proposal at
the chief's :class:`~tensorpack_lite.multiprocess.server.FinishBarrier` (the parameter-server
trainers, whose steps carry no all-reduce of the workers).

Each process holds its votes (two numbers: SIGTERM received, a stop requested; 0, then 1) in
a local variable; the trainer reduces them together with the gradients, in the same collective
operation (no message of its own), so every process sees the same totals in the same step. A
process that votes before step ``k`` makes every process stop after step ``k``: as preempted
when some process received SIGTERM, else as finished.

Example (what :class:`HorovodTrainer` and :class:`CollectiveAllReduceTrainer` do, through
:class:`~tensorpack_lite.distributed.protocol.MultiProcessProtocol`)::

    vote = PreemptionVote()
    reduced = allreduce(gradients + [vote.tensor(gradients[0].dtype)])   # in the graph
    vote.set_total(reduced[-1])
    ...                                            # vote is one of the session's hooks
    why = vote.due(sess, notice.received, 'rank 1', stop_request)   # before each step
    if why == PREEMPTED: ...                       # every process stops after this step
"""

from ..compat import tf, tfv1
from ..utils import logger
from ..utils.concurrency import DaemonCall, bound_exit

__all__ = ['PreemptionVote', 'BarrierStopVote', 'PREEMPTED', 'REQUESTED']

PREEMPTED, REQUESTED = 'preempted', 'requested'
"""Why every process stops: a process received SIGTERM (it wins), or a stop was requested."""
_INDEX = {PREEMPTED: 0, REQUESTED: 1}


class PreemptionVote(tfv1.train.SessionRunHook):
    """This process's votes to stop and the totals of every process's votes in the last step (a
    hook of the training session: each step fetches the totals)."""

    MARKS = ('snapshot', 'rollback')
    """What a process may mark a step with (:meth:`mark`), beside its votes, when the vote carries
    a cost: every process sees the marks of that step after it (``RollbackOnAnomaly``'s replays)."""

    def __init__(self):
        self._variable = tfv1.Variable([0., 0.], trainable=False,
                                       collections=[tfv1.GraphKeys.LOCAL_VARIABLES], name='preemption_vote')
        self._cast_ops = {why: tfv1.scatter_update(self._variable, [index], [1.]).op
                          for why, index in _INDEX.items()}
        self._marks = self._mark_ops = self._clear_marks = None     # built with the first cost carried
        self._marked = False
        self._total = None
        self._runs_without = ()
        self.cast = set()
        """The votes this process cast (:data:`PREEMPTED`, :data:`REQUESTED`)."""
        self.total = (0.0, 0.0)
        """The votes of every process in the last step, SIGTERM and requests (> 0 once one
        voted: a mean of a few ones and zeros, also in 16 bits, is never 0)."""
        self.costs_carried = []
        """The cost tensors the vote carries (:meth:`tensor` with ``cost``), in the order given."""
        self.gradient_norms_carried = []
        """The gradient norms it carries (:meth:`tensor` with ``gradient_norm``)."""
        self.step_cost = None
        """The mean of the carried costs over every process in the last step (None when the vote
        carries none): the same value on every process (it travels with the gradients)."""
        self.step_gradient_norm = None
        """The same of the carried gradient norms."""
        self.marks = set()
        """The :attr:`MARKS` some process gave the last step."""

    def tensor(self, dtype=tf.float32, cost=None, gradient_norm=None):
        """This process's votes as a tensor of shape [2] and type ``dtype`` (reduce it with
        gradients of that dtype: it then travels in their buffer). With ``cost`` (a scalar, this
        tower's cost in the step, or a list of them: their mean), shape [6]: the votes, the
        marks, a count of one and the cost, so that every process reads the step's mean cost
        (:attr:`step_cost`) from the same reduction, whether it sums or averages; with
        ``gradient_norm`` too (the same for the gradients' norm), shape [7]."""
        dtype = dtype if dtype.is_floating else tf.float32
        if cost is None:
            return tf.cast(self._variable, dtype)
        if self._marks is None:
            self._marks = tfv1.Variable([0.] * len(self.MARKS), trainable=False,
                                        collections=[tfv1.GraphKeys.LOCAL_VARIABLES], name='step_marks')
            self._mark_ops = {name: tfv1.scatter_update(self._marks, [index], [1.]).op
                              for index, name in enumerate(self.MARKS)}
            self._clear_marks = self._marks.assign(tf.zeros_like(self._marks)).op
        values = [self._carried_mean(cost, self.costs_carried)]
        if gradient_norm is not None:
            values.append(self._carried_mean(gradient_norm, self.gradient_norms_carried))
        return tf.cast(tf.concat([self._variable, self._marks, [1.]] + values, 0), dtype)

    @staticmethod
    def _carried_mean(value, carried):
        """The mean of ``value`` (a scalar, or a list of them), shape [1]; noted in ``carried``."""
        values = list(value) if isinstance(value, (list, tuple)) else [value]
        carried.extend(values)
        values = [tf.cast(v, tf.float32) for v in values]
        return tf.reshape(values[0] if len(values) == 1 else tf.add_n(values) / float(len(values)), [1])

    def mark(self, sess, name):
        """Mark the next step that reduces with ``name`` (one of :attr:`MARKS`): every process
        finds it in :attr:`marks` after that step. The marks are cleared after it."""
        sess.run(self._mark_ops[name])
        self._marked = True

    def set_total(self, reduced):
        """The reduced vote (sum or mean over every process), fetched by every step from now on."""
        self._total = reduced

    def skip_runs_of(self, op):
        """Runs of ``op`` reduce nothing (e.g. the accumulate op of a trainer with
        ``accumulate`` > 1): they fetch no total, which would pull the all-reduce into them; the
        totals of the last run that reduced stay."""
        self._runs_without = self._runs_without + (op,)

    def due(self, sess, sigterm_received, voter, stop_request=None):
        """Before a step: vote once SIGTERM came, or once a stop was requested (``stop_request``,
        the reason; ``voter`` names this process in the log). Whether every process stops now
        (some process voted before the last step) and why: :data:`PREEMPTED` (some process
        received SIGTERM), :data:`REQUESTED`, or None (not now)."""
        if sigterm_received:
            self._cast(sess, PREEMPTED, "{} voted to stop".format(voter))
        if stop_request is not None:
            self._cast(sess, REQUESTED, "{} asked to stop ({})".format(voter, stop_request.rstrip('.')))
        if self.total[0] > 0:
            return PREEMPTED
        return REQUESTED if self.total[1] > 0 else None

    def agreed_stop(self, sess, global_step, sigterm_received, voter, stop_request=None):
        """Before a step, ``global_step`` steps done: the step after which every process stops
        and why (``(global_step, why)``, see :meth:`due`), or None."""
        why = self.due(sess, sigterm_received, voter, stop_request)
        return None if why is None else (global_step, why)

    def close(self):
        """Nothing to end: the vote lives in the training session."""

    def _cast(self, sess, why, what):
        if why not in self.cast:
            sess.run(self._cast_ops[why])
            self.cast.add(why)
            # with runs that reduce nothing (accumulation), the next that reduces carries the vote
            when = ('the next step that reduces (the end of this update)' if self._runs_without
                    else 'the next step')
            logger.info("{}: every process stops after {}.".format(what, when))

    def before_run(self, run_context):
        if self._total is None or any(run_context.original_args.fetches is op for op in self._runs_without):
            return None
        return tfv1.train.SessionRunArgs(self._total)

    def after_run(self, run_context, run_values):
        if self._total is None or run_values.results is None:
            return
        values = [float(v) for v in run_values.results]
        self.total = tuple(values[:2])
        if len(values) > 2:
            marks, carried = values[2:2 + len(self.MARKS)], values[2 + len(self.MARKS):]
            self.marks = {name for name, value in zip(self.MARKS, marks) if value > 0}
            means = [total / carried[0] for total in carried[1:]]     # (carried[0]: the count)
            self.step_cost = means[0]
            self.step_gradient_norm = means[1] if len(means) > 1 else None
            if self._marked:
                run_context.session.run(self._clear_marks)
                self._marked = False


class BarrierStopVote:
    """The vote to stop of workers whose steps carry no all-reduce of theirs (the parameter-server
    trainers): a worker preempted (SIGTERM), or asked to stop (``stop_request``), proposes, after
    its step ``k``, to stop after step ``k + 2`` at the
    :class:`~tensorpack_lite.multiprocess.server.FinishBarrier` on the chief (see there why every
    worker hears of it in time).

    Each worker reads the agreed stop step after every step, in a thread of its own so that no
    step waits for the chief: the read started after step ``k`` is looked at after step
    ``k + 1``, which is still in time for a proposal made after step ``k - 1`` or earlier.
    The thread is a daemon: a read left waiting for a chief behind a cut link never holds up
    the process's exit for long (see :meth:`close`).

    Args:
        barrier (FinishBarrier): this worker's barrier, connected.
        steps_per_update (int): the steps of one update (``accumulate``).
    """

    MARGIN = 2
    """Steps that synchronize the workers between the proposal and the stop (see above: the
    read lags one step). With ``accumulate=K`` only the last step of each update synchronizes
    them: a worker may run the other K - 1 ahead of the rest, so the stop is the end of the second
    update after the proposal."""

    EXIT_TIMEOUT = 10.0
    """Seconds the interpreter's exit may take when a read was left waiting (then status 1)."""

    def __init__(self, barrier, steps_per_update=1):
        self._barrier = barrier
        self._steps_per_update = steps_per_update
        self._pending = None      # the DaemonCall of the read started after the last step
        self.proposed = {}        # why -> the step proposed

    def agreed_stop(self, sess, global_step, sigterm_received, voter, stop_request=None):
        """Called before each step, ``global_step`` steps done: propose a stop if SIGTERM came or
        a stop was requested (``stop_request``: why); once the agreed stop step is reached,
        return it and why (:data:`PREEMPTED` or :data:`REQUESTED`), else None. ``sess`` and
        ``voter`` are unused: the barrier has a session of its own and names this worker."""
        if sigterm_received:
            self._propose(global_step, PREEMPTED, None)
        if stop_request is not None:
            self._propose(global_step, REQUESTED, stop_request)
        # the wait is bounded by the barrier's call timeout (and a loss ends the loop anyway)
        step, why = self._pending.result() if self._pending is not None else (self._barrier.NEVER, None)
        self._pending = DaemonCall(self._barrier.agreed_stop, 'stop-step')
        return (step, why) if step <= global_step else None

    def _propose(self, global_step, why, reason):
        if why in self.proposed:
            return
        per_update = self._steps_per_update
        next_update = (global_step // per_update + 1) * per_update    # the next step that synchronizes
        self.proposed[why] = next_update + (self.MARGIN - 1) * per_update
        self._barrier.propose_stop(self.proposed[why], why)
        logger.info("{} proposed that every worker stop after global step {}{}.".format(
            self._barrier.cluster.task_name, self.proposed[why],
            '' if why == PREEMPTED else ' ({})'.format(reason.rstrip('.'))))

    def close(self):
        """Stop reading. A read still running is left to end on its own; the exit then waits
        for it at most :attr:`EXIT_TIMEOUT` seconds."""
        if self._pending is not None and self._pending.running:
            bound_exit(self.EXIT_TIMEOUT)
        self._pending = None
