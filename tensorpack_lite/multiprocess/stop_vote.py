"""A vote to stop, carried by the all-reduce of every training step: when one process of a
synchronous job receives SIGTERM, or the chief asks to stop (``Trainer.request_stop``, e.g.
from :class:`EarlyStopping`), every process stops after the same step.

Each process holds its votes (two numbers: SIGTERM received, a stop requested; 0, then 1) in
a local variable; the trainer reduces them together with the gradients, in the same collective
operation (no message of its own), so every process sees the same totals in the same step. A
process that votes before step ``k`` makes every process stop after step ``k``: as preempted
when some process received SIGTERM, else as finished.

Example (what :class:`HorovodTrainer` and :class:`CollectiveAllReduceTrainer` do)::

    vote = PreemptionVote()
    reduced = allreduce(gradients + [vote.tensor(gradients[0].dtype)])   # in the graph
    vote.set_total(reduced[-1])
    ...                                            # vote is one of the session's hooks
    why = vote.due(sess, notice.received, 'rank 1', stop_request)   # before each step
    if why == PREEMPTED: ...                       # every process stops after this step
"""

from ..compat import tf, tfv1
from ..utils import logger

__all__ = ['PreemptionVote', 'PREEMPTED', 'REQUESTED']

PREEMPTED, REQUESTED = 'preempted', 'requested'
"""Why every process stops: a process received SIGTERM (it wins), or a stop was requested."""
_INDEX = {PREEMPTED: 0, REQUESTED: 1}


class PreemptionVote(tfv1.train.SessionRunHook):
    """This process's votes to stop and the totals of every process's votes in the last step (a
    hook of the training session: each step fetches the totals)."""

    def __init__(self):
        self._variable = tfv1.Variable([0., 0.], trainable=False,
                                       collections=[tfv1.GraphKeys.LOCAL_VARIABLES], name='preemption_vote')
        self._cast_ops = {why: tfv1.scatter_update(self._variable, [index], [1.]).op
                          for why, index in _INDEX.items()}
        self._total = None
        self._runs_without = ()
        self.cast = set()
        """The votes this process cast (:data:`PREEMPTED`, :data:`REQUESTED`)."""
        self.total = (0.0, 0.0)
        """The votes of every process in the last step, SIGTERM and requests (> 0 once one
        voted: a mean of a few ones and zeros, also in 16 bits, is never 0)."""

    def tensor(self, dtype=tf.float32):
        """This process's votes as a tensor of shape [2] and type ``dtype`` (reduce it with
        gradients of that dtype: it then travels in their buffer)."""
        return tf.cast(self._variable, dtype if dtype.is_floating else tf.float32)

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
        if self._total is not None and run_values.results is not None:
            self.total = tuple(float(v) for v in run_values.results)
