"""Gradient accumulation in the graph: K micro-batches make one update.

A trainer with ``accumulate=K`` builds two ops from the same towers. The *accumulate* op adds
each tower's gradients of this micro-batch to accumulators of the tower's own (local variables
on the gradient's device) and nothing else. The *update* op computes the gradients of the K-th
micro-batch and hands ``(accumulated + gradient) / K`` to the trainer's usual all-reduce and
``apply_gradients``; after the apply, the accumulators return to zero. The trainer runs the
accumulate op for K - 1 runs, then the update op, so gradients cross devices and machines once
per update, and the optimizer's state (momentum, Adam's moments and step) advances once per
update: the update is that of one batch K times larger (the cost being a mean over the batch).

Example (what :class:`~tensorpack_lite.train.tower.SingleCostTrainer` does)::

    accumulator = GradientAccumulator(4)
    grads = accumulator.add_tower(grads)            # in each tower, before any all-reduce
    train_op = accumulator.after_update(opt.apply_gradients(allreduce(grads)))
    op = train_op if accumulator.updates_at(run) else accumulator.accumulate_op
"""

from ..compat import tf, tfv1
from ..tfutils.tower_context import get_current_tower_context
from ..utils.argtools import is_int

__all__ = ['GradientAccumulator']


class GradientAccumulator:
    """The accumulators of every tower and the ops around them.

    Args:
        num_micro_batches (int): K >= 2, the micro-batches of one update.
    """

    def __init__(self, num_micro_batches):
        if not is_int(num_micro_batches) or num_micro_batches < 2:
            raise ValueError("GradientAccumulator: num_micro_batches must be an int >= 2, got {!r}".format(
                num_micro_batches))
        self.num_micro_batches = int(num_micro_batches)
        self.variables = []
        """The accumulators, tower by tower (local variables: each process keeps its own), then
        those of the costs (:meth:`add_cost`)."""
        self.costs = []
        """``(cost, mean over the update)`` of every :meth:`add_cost`."""
        self._adds = []
        self._accumulate_op = None

    def add_tower(self, grads):
        """Accumulators for one tower's list of (gradient, variable); returns the list of
        (gradient of the update, variable), ``(accumulated + gradient) / K``, to be reduced and
        applied by the update op. Call it where the tower is built (its name scope)."""
        if self._accumulate_op is not None:
            raise RuntimeError("GradientAccumulator: a tower was added after the accumulate op was built")
        update_grads = []
        tower = get_current_tower_context()
        scope = 'accumulate/' + (tower.name + '/' if tower is not None and tower.name else '')
        for grad, var in grads:
            with tfv1.name_scope(None), tfv1.name_scope(scope):
                dense = tf.convert_to_tensor(grad)
                if not dense.shape.is_fully_defined():
                    raise ValueError("GradientAccumulator: the gradient of {} has the shape {}, not fully "
                                     "known; accumulation needs it (give the variable a static shape)".format(
                                         var.op.name, dense.shape))
                update_grads.append((self._mean_over_update(dense, var.op.name.replace(':', '_')), var))
        return update_grads

    def add_cost(self, cost):
        """An accumulator for one tower's ``cost`` (a scalar): returns the mean of its values over
        the update's micro-batches (float32), read by the update op's run (e.g. for every process
        to judge the whole update, ``RollbackOnAnomaly``). Call it before the accumulate op is
        built."""
        if self._accumulate_op is not None:
            raise RuntimeError("GradientAccumulator: a cost was added after the accumulate op was built")
        with tfv1.name_scope(None), tfv1.name_scope('accumulate/'):
            mean = self._mean_over_update(tf.cast(cost, tf.float32), 'cost')
        self.costs.append((cost, mean))
        return mean

    def _mean_over_update(self, value, name):
        """A local variable (on ``value`` 's device, whatever the device function does with
        variables) that the accumulate op adds ``value`` to; returns ``(accumulated + value) / K``."""
        with tfv1.device(None), tfv1.device(value.device or None):
            accumulator = tfv1.Variable(
                tf.zeros(value.shape, value.dtype.base_dtype), trainable=False,
                collections=[tfv1.GraphKeys.LOCAL_VARIABLES], use_resource=True, name=name)
            self.variables.append(accumulator)
            self._adds.append(accumulator.assign_add(value, read_value=False))
            scale = tf.constant(1.0 / self.num_micro_batches, value.dtype.base_dtype)
            return (accumulator.read_value() + value) * scale

    @property
    def accumulate_op(self):
        """The op of the first K - 1 runs of an update: every tower's gradients into its
        accumulators."""
        if self._accumulate_op is None:
            if not self._adds:
                raise RuntimeError("GradientAccumulator: no tower was added")
            self._accumulate_op = tf.group(*self._adds, name='accumulate_gradients')
        return self._accumulate_op

    def after_update(self, train_op):
        """``train_op`` (the update: reduce and apply), then the accumulators back to zero."""
        with tf.name_scope('accumulate'), tf.control_dependencies([train_op]):
            resets = []
            for accumulator in self.variables:
                with tfv1.device(accumulator.device):
                    resets.append(accumulator.assign(tf.zeros_like(accumulator), read_value=False))
        return tf.group(train_op, *resets, name='train_op_and_reset_accumulators')

    def updates_at(self, run):
        """Whether the run numbered ``run`` (the global step before it, counting from 0) is the
        last of its update, the one that runs the update op."""
        return (run + 1) % self.num_micro_batches == 0

    def micro_batches_done(self, global_step):
        """How many micro-batches of the current update are in the accumulators after
        ``global_step`` runs."""
        return global_step % self.num_micro_batches
