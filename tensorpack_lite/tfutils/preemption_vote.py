"""A vote to stop, carried by the all-reduce of every training step: when one process of a
synchronous job receives SIGTERM, every process stops after the same step.

Each process holds its vote (0, then 1 once it received SIGTERM) in a local variable; the
trainer reduces it together with the gradients, in the same collective operation (no
message of its own), so every process sees the same total in the same step. A process that
votes before step ``k`` makes every process stop after step ``k``.

Example (what :class:`HorovodTrainer` and :class:`CollectiveAllReduceTrainer` do)::

    vote = PreemptionVote()
    reduced = allreduce(gradients + [vote.tensor(gradients[0].dtype)])   # in the graph
    vote.set_total(reduced[-1])
    ...                                            # vote is one of the session's hooks
    if vote.due(sess, notice.received, 'rank 1'):  # before each step
        stop
"""

from ..compat import tf, tfv1
from ..utils import logger

__all__ = ['PreemptionVote']


class PreemptionVote(tfv1.train.SessionRunHook):
    """This process's vote to stop and the total of every process's vote in the last step (a
    hook of the training session: each step fetches the total)."""

    def __init__(self):
        self._variable = tfv1.Variable(0., trainable=False, collections=[tfv1.GraphKeys.LOCAL_VARIABLES],
                                       name='preemption_vote')
        self._cast_op = self._variable.assign(1.).op
        self._total = None
        self.cast_already = False
        self.total = 0.0
        """The votes of every process in the last step (> 0 once one voted: a mean of a few
        ones and zeros, also in 16 bits, is never 0)."""

    def tensor(self, dtype=tf.float32):
        """This process's vote as a tensor of ``dtype`` (reduce it with gradients of that dtype:
        it then travels in their buffer)."""
        return tf.cast(self._variable, dtype if dtype.is_floating else tf.float32)

    def set_total(self, reduced):
        """The reduced vote (sum or mean over every process), fetched by every step from now on."""
        self._total = reduced

    def due(self, sess, sigterm_received, voter):
        """Before a step: vote once SIGTERM came (``voter`` names this process in the log);
        whether every process stops now (some process voted before the last step)."""
        if sigterm_received and not self.cast_already:
            sess.run(self._cast_op)
            self.cast_already = True
            logger.info("{} voted to stop: every process stops after the next step.".format(voter))
        return self.total > 0

    def before_run(self, run_context):
        return tfv1.train.SessionRunArgs(self._total) if self._total is not None else None

    def after_run(self, run_context, run_values):
        if self._total is not None:
            self.total = float(run_values.results)
