"""Dynamic loss scaling for float16 training (mixed-precision mode 'fp16'): the loss is
multiplied by a scale before differentiation and the gradients divided by it, so that small
gradients do not underflow float16; a step whose gradients overflow is skipped and the scale
halves, and after enough finite steps it doubles.

Example::

    loss_scale = DynamicLossScale()
    opt = LossScaleOptimizer(tfv1.train.MomentumOptimizer(0.01, 0.9), loss_scale)
    train_op = loss_scale.update_after(opt.minimize(cost))
"""

from ..compat import tf, tfv1
from ..tfutils.optimizer import ProxyOptimizer

__all__ = ['DynamicLossScale', 'LossScaleOptimizer']


class DynamicLossScale:
    """The state of dynamic loss scaling: float32 ``scale``, int64 ``good_steps`` (finite
    steps since the last change) and ``skipped_steps``, global variables under
    ``loss_scale/`` (so in checkpoints and broadcast like the others), on ``device`` when
    given (e.g. a parameter server, where every worker reads the one shared state).

    Each ``apply_gradients`` of a :class:`LossScaleOptimizer` records whether its gradients
    are finite; :meth:`update_after` builds the once-a-step update from all records: if any
    was not finite the scale halves (not below 1) and ``skipped_steps`` grows by one, else
    after ``growth_interval`` finite steps the scale doubles (not above 2**24).
    """

    MAX_SCALE = 2.0 ** 24

    def __init__(self, initial_scale=2.0 ** 15, growth_interval=2000, device=None):
        self.growth_interval = int(growth_interval)
        self._finite_flags = []
        root = tfv1.VariableScope(reuse=tfv1.AUTO_REUSE, name='')
        with tfv1.variable_scope(root), tfv1.variable_scope('loss_scale'), tfv1.name_scope(None), \
                tfv1.device(device or ''):
            self.scale = tfv1.get_variable('scale', initializer=tf.constant(float(initial_scale)),
                                           trainable=False)
            self.good_steps = tfv1.get_variable('good_steps', initializer=tf.constant(0, tf.int64),
                                                trainable=False)
            self.skipped_steps = tfv1.get_variable('skipped_steps', initializer=tf.constant(0, tf.int64),
                                                   trainable=False)

    def record_finite(self, grads):
        """A bool tensor: every gradient in ``grads`` is finite; recorded for the update."""
        checks = [tf.reduce_all(tf.math.is_finite(g.values if isinstance(g, tf.IndexedSlices) else g))
                  for g in grads if g is not None]
        finite = tf.reduce_all(tf.stack(checks)) if checks else tf.constant(True)
        self._finite_flags.append(finite)
        return finite

    def update_after(self, train_op):
        """``train_op`` followed by the update of the scale and counters (one op)."""
        if not self._finite_flags:
            raise RuntimeError("DynamicLossScale: no LossScaleOptimizer.apply_gradients was built, "
                               "so there is nothing to decide the loss scale from.")
        with tf.name_scope('loss_scale_update'), tf.control_dependencies([train_op]):
            finite = tf.reduce_all(tf.stack(self._finite_flags))
            good = tf.where(finite, self.good_steps + 1, tf.constant(0, tf.int64))
            grow = tf.logical_and(finite, good >= self.growth_interval)
            halved = tf.maximum(self.scale / 2.0, 1.0)
            doubled = tf.minimum(self.scale * 2.0, self.MAX_SCALE)
            new_scale = tf.where(grow, doubled, tf.where(finite, self.scale.read_value(), halved))
            updates = [self.scale.assign(new_scale),
                       self.good_steps.assign(tf.where(grow, tf.constant(0, tf.int64), good)),
                       self.skipped_steps.assign_add(1 - tf.cast(finite, tf.int64))]
            return tf.group(*updates, name='train_op_with_loss_scale')

    def add_summaries(self):
        """Scalar summaries ``loss_scale/scale`` and ``loss_scale/skipped_steps`` (written by
        :class:`MergeAllSummaries` to the monitors: stats.json, TensorBoard)."""
        with tfv1.name_scope('loss_scale_summaries'):
            for tag, value in (('loss_scale/scale', self.scale),
                               ('loss_scale/skipped_steps', tf.cast(self.skipped_steps, tf.float32))):
                # the tag as given: summary.scalar would uniquify it against the variables' ops
                summary = tf.raw_ops.ScalarSummary(tags=tag, values=value.read_value()
                                                   if isinstance(value, tf.Variable) else value)
                tfv1.add_to_collection(tfv1.GraphKeys.SUMMARIES, summary)


class LossScaleOptimizer(ProxyOptimizer):
    """Dynamic loss scaling around an optimizer, in graph mode.

    :meth:`compute_gradients` differentiates ``loss * scale`` and divides the gradients by
    ``scale``; :meth:`apply_gradients` applies them only when all are finite (else nothing
    changes: neither the variables nor the optimizer's slots) and records the decision for
    ``loss_scale.update_after(train_op)``, which the trainer runs once per step. Data-parallel
    trainers apply the all-reduced gradients, so every replica decides the same; with
    parameter servers the chief applies the averaged gradients once and updates the one
    shared scale there.

    Args:
        opt (tf.compat.v1.train.Optimizer): the optimizer.
        loss_scale (DynamicLossScale): the scale state.
    """

    def __init__(self, opt, loss_scale):
        super().__init__(opt, name='LossScaleOptimizer')
        self._loss_scale = loss_scale

    def compute_gradients(self, loss, *args, **kwargs):
        scale = self._loss_scale.scale
        scaled = loss * tf.cast(scale, loss.dtype)
        pairs = self._opt.compute_gradients(scaled, *args, **kwargs)
        return [(self._unscale(g, scale), v) for g, v in pairs]

    @staticmethod
    def _unscale(grad, scale):
        if grad is None:
            return None
        if isinstance(grad, tf.IndexedSlices):
            return tf.IndexedSlices(grad.values / tf.cast(scale, grad.dtype), grad.indices, grad.dense_shape)
        return grad / tf.cast(scale, grad.dtype)

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        pairs = list(grads_and_vars)
        finite = self._loss_scale.record_finite([g for g, _ in pairs])

        def apply():
            with tf.control_dependencies([self._opt.apply_gradients(pairs, global_step=global_step)]):
                return tf.constant(True)

        # the graph pushed as the default explicitly: the optimizer's slots, made inside the
        # branch, are lifted into it (init_scope), not into the eager context
        with tfv1.get_default_graph().as_default():
            applied = tf.cond(finite, apply, lambda: tf.constant(False))
        return tf.group(applied, name=name or 'apply_if_finite')
