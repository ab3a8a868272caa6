"""Wrappers around ``tf.compat.v1.train.Optimizer``.

* :class:`ProxyOptimizer` forwards everything to another optimizer; the base of the others.
* :func:`apply_grad_processors` runs gradient processors before the update.
* :class:`PostProcessOptimizer` and :class:`VariableAssignmentOptimizer` run an op per
  variable after the update (e.g. clipping weights).
* :class:`AccumGradOptimizer` accumulates gradients over several steps before an update.

All of them work with any graph-mode TensorFlow code, not only with tensorpack_lite trainers.
"""

from contextlib import contextmanager

from ..compat import tf, tfv1
from ..utils.argtools import is_int
from .gradproc import FilterNoneGrad, GradientProcessor

__all__ = ['ProxyOptimizer', 'apply_grad_processors', 'PostProcessOptimizer',
           'VariableAssignmentOptimizer', 'AccumGradOptimizer']


class ProxyOptimizer(tfv1.train.Optimizer):
    """An optimizer that forwards :meth:`compute_gradients`, :meth:`apply_gradients`,
    :meth:`get_slot` and :meth:`get_slot_names` to another optimizer. Subclasses override
    what they change."""

    def __init__(self, opt, name='ProxyOptimizer'):
        """
        Args:
            opt (tf.compat.v1.train.Optimizer): the optimizer doing the work.
            name (str): the name of this optimizer (used for its own variables, if any).
        """
        if not isinstance(opt, tfv1.train.Optimizer):
            raise TypeError("{}: opt must be a tf.compat.v1.train.Optimizer, got {!r}".format(
                type(self).__name__, opt))
        super(ProxyOptimizer, self).__init__(False, name)
        self._opt = opt

    def compute_gradients(self, *args, **kwargs):
        return self._opt.compute_gradients(*args, **kwargs)

    def get_slot(self, *args, **kwargs):
        return self._opt.get_slot(*args, **kwargs)

    def get_slot_names(self, *args, **kwargs):
        return self._opt.get_slot_names(*args, **kwargs)

    def apply_gradients(self, *args, **kwargs):
        return self._opt.apply_gradients(*args, **kwargs)


class _GradientProcessingOptimizer(ProxyOptimizer):
    """The optimizer returned by :func:`apply_grad_processors`."""

    def __init__(self, opt, gradprocs):
        super(_GradientProcessingOptimizer, self).__init__(opt)
        self._gradprocs = list(gradprocs)

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        grads_and_vars = list(grads_and_vars)
        for proc in self._gradprocs:
            grads_and_vars = proc.process(grads_and_vars)
        return self._opt.apply_gradients(grads_and_vars, global_step=global_step, name=name)


def apply_grad_processors(opt, gradprocs):
    """Wrap an optimizer so that its :meth:`apply_gradients` first runs the gradient
    processors, in order (so :meth:`minimize` runs them too; :meth:`compute_gradients`
    returns the raw gradients).

    Args:
        opt (tf.compat.v1.train.Optimizer): the optimizer.
        gradprocs (list[GradientProcessor]): the processors.

    Returns:
        tf.compat.v1.train.Optimizer: the wrapped optimizer.

    Example::

        opt = apply_grad_processors(tf.compat.v1.train.AdamOptimizer(1e-3),
                                    [GlobalNormClip(5.0), SummaryGradient()])
    """
    if not isinstance(gradprocs, (list, tuple)):
        raise TypeError("apply_grad_processors: gradprocs must be a list of GradientProcessor, "
                        "got {!r}".format(gradprocs))
    for proc in gradprocs:
        if not isinstance(proc, GradientProcessor):
            raise TypeError("apply_grad_processors: {!r} is not a GradientProcessor".format(proc))
    return _GradientProcessingOptimizer(opt, gradprocs)


def _as_op(thing, owner):
    """The ``tf.Operation`` behind what an assignment returns (an op, a tensor, or the
    unread variable that resource variables return in graph mode)."""
    if isinstance(thing, tf.Operation):
        return thing
    op = getattr(thing, 'op', None)
    if isinstance(op, tf.Operation):
        return op
    raise TypeError("{}: the function must return a tf.Operation (or None), got {!r}".format(
        owner, thing))


class PostProcessOptimizer(ProxyOptimizer):
    """An optimizer that runs an op for every variable after each update, e.g. clipping or
    quantizing the weights.

    Example::

        # keep the critic's weights in [-0.01, 0.01] (WGAN)
        opt = PostProcessOptimizer(
            opt, lambda v: tf.compat.v1.assign(v, tf.clip_by_value(v, -0.01, 0.01)).op)
    """

    def __init__(self, opt, func, colocate=True):
        """
        Args:
            opt (tf.compat.v1.train.Optimizer): the optimizer.
            func: ``func(variable) -> tf.Operation or None``, called once per variable of
                ``grads_and_vars`` when the update op is built; its op runs after the update.
            colocate (bool): build the op of each variable on the variable's device.
        """
        super(PostProcessOptimizer, self).__init__(opt)
        if not callable(func):
            raise TypeError("{}: func must be callable, got {!r}".format(type(self).__name__, func))
        self._func = func
        self._colocate = bool(colocate)

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        grads_and_vars = list(grads_and_vars)
        update_op = super(PostProcessOptimizer, self).apply_gradients(
            grads_and_vars, global_step=global_step)
        post_ops = []
        with tf.control_dependencies([update_op]):
            for _, var in grads_and_vars:
                with self._maybe_colocate(var):
                    result = self._func(var)
                if result is not None:
                    post_ops.append(_as_op(result, type(self).__name__))
        return tf.group(update_op, *post_ops, name=name)

    @contextmanager
    def _maybe_colocate(self, var):
        if self._colocate:
            with tfv1.get_default_graph().colocate_with(var):
                yield
        else:
            yield


class VariableAssignmentOptimizer(PostProcessOptimizer):
    """An optimizer that assigns every variable a new value after each update.

    Example::

        opt = VariableAssignmentOptimizer(opt, lambda v: tf.clip_by_value(v, -0.01, 0.01))
    """

    def __init__(self, opt, func):
        """
        Args:
            opt (tf.compat.v1.train.Optimizer): the optimizer.
            func: ``func(variable) -> tf.Tensor or None``, the new value of the variable
                (None leaves it as the update made it).
        """
        if not callable(func):
            raise TypeError("VariableAssignmentOptimizer: func must be callable, got {!r}".format(
                func))

        def assign(var):
            value = func(var)
            if value is None:
                return None
            return _as_op(tfv1.assign(var, value, use_locking=False), type(self).__name__)

        super(VariableAssignmentOptimizer, self).__init__(opt, assign)


class AccumGradOptimizer(ProxyOptimizer):
    """An optimizer that accumulates gradients over ``niter`` calls of the op returned by
    :meth:`apply_gradients` (or :meth:`minimize`), and applies them together at every
    ``niter``-th call.

    Every call adds the gradients to accumulators (slots ``<var>/AccumGrad``, not trainable)
    and counts the call (variable ``AccumGrad/counter``). At every ``niter``-th call the
    wrapped optimizer applies the *sum* of the accumulated gradients and the accumulators are
    reset to zero; the other calls leave the variables unchanged. With a loss averaged over a
    batch, this is about the same as a ``niter`` times larger batch with a ``niter`` times
    larger learning rate, using the memory of one batch. If you want the mean instead, divide
    the learning rate by ``niter``.

    If ``global_step`` is given it is incremented at *every* call, not only at the calls that
    update the variables (tensorpack_lite trainers maintain the global step themselves and
    pass none).

    Gradients are accumulated densely (``IndexedSlices`` are converted). Pairs with a None
    gradient are dropped.

    Example::

        opt = AccumGradOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.01), niter=5)
        train_op = opt.minimize(loss)
    """

    def __init__(self, opt, niter):
        """
        Args:
            opt (tf.compat.v1.train.Optimizer): the optimizer applying the accumulated
                gradients.
            niter (int): the number of calls to accumulate over, >= 1.
        """
        if not is_int(niter) or niter < 1:
            raise ValueError("AccumGradOptimizer: niter must be an integer >= 1, got {!r}".format(
                niter))
        super(AccumGradOptimizer, self).__init__(opt, 'AccumGrad')
        self._niter = int(niter)

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        grads_and_vars = FilterNoneGrad().process(list(grads_and_vars))
        if not grads_and_vars:
            raise ValueError("AccumGradOptimizer: no variable has a gradient.")
        for grad, var in grads_and_vars:
            if not isinstance(var, tf.Variable):
                raise TypeError("AccumGradOptimizer: '{}' is not a tf.Variable ({})".format(
                    getattr(var, 'name', var), type(var).__name__))
        variables = [v for _, v in grads_and_vars]

        with tf.control_dependencies(None):
            slots = [self._zeros_slot(v, 'accum', self._name) for v in variables]
            with tfv1.variable_scope(self._name):
                counter = tfv1.Variable(0, name='counter', trainable=False, dtype=tf.int32)

        with tfv1.name_scope('AccumGradOptimizer'):
            accumulate = [slot.assign_add(tf.convert_to_tensor(grad), read_value=False)
                          for slot, (grad, _) in zip(slots, grads_and_vars)]
            count = tf.convert_to_tensor(counter.assign_add(1), name='count')
            accumulate_op = tf.group(count.op, *accumulate, name='update_slot')

            def apply_and_reset():
                update = self._opt.apply_gradients(list(zip(slots, variables)))
                with tf.control_dependencies([update]):
                    reset = [slot.assign(tf.zeros_like(slot), read_value=False) for slot in slots]
                return tf.group(*reset, name='update_grad')

            is_update_step = tf.equal(tf.math.floormod(count, self._niter), 0)
            with tf.control_dependencies([accumulate_op]):
                cond = tfv1.cond(is_update_step, apply_and_reset, tf.no_op)
            extra = []
            if global_step is not None:
                with tf.control_dependencies([accumulate_op]):
                    extra.append(_as_op(tfv1.assign_add(global_step, 1), 'AccumGradOptimizer'))
            return tf.group(cond, *extra, name=name or 'cond_update_grad')
