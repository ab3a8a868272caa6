"""Gradient processors: transformations of a list of ``(gradient, variable)`` pairs applied
between computing and applying gradients.

Use them through :func:`tensorpack_lite.tfutils.optimizer.apply_grad_processors`::

    opt = tf.compat.v1.train.MomentumOptimizer(lr, 0.9)
    opt = apply_grad_processors(opt, [GlobalNormClip(5.0), SummaryGradient()])

Variables are matched by their op name (``'fc/W'``, not ``'fc/W:0'``), and a regex must
match the whole name (``$`` is appended when missing).
"""

import inspect
import numbers
import re
import sys
import weakref

from ..compat import tf, tfv1
from ..utils import logger
from .summary import add_moving_summary, as_dense
from .symbolic_functions import rms

__all__ = ['GradientProcessor', 'FilterNoneGrad', 'GlobalNormClip', 'MapGradient',
           'SummaryGradient', 'PrintGradient', 'CheckGradient', 'ScaleGradient']


def _full_match_regex(regex, owner):
    if not isinstance(regex, str):
        raise TypeError("{}: regex must be a str, got {!r}".format(owner, regex))
    regex = regex if regex.endswith('$') else regex + '$'
    try:
        re.compile(regex)
    except re.error as err:
        raise ValueError("{}: invalid regex {!r}: {}".format(owner, regex, err)) from None
    return regex


def _check_grads(grads, owner):
    try:
        pairs = [tuple(pair) for pair in grads]
    except TypeError:
        raise TypeError("{}: expected a list of (gradient, variable) pairs, got {!r}".format(
            owner, grads)) from None
    for pair in pairs:
        if len(pair) != 2 or not hasattr(pair[1], 'op'):
            raise TypeError("{}: expected (gradient, variable) pairs, got {!r}".format(owner, pair))
    return pairs


class _PerGraphNames(object):
    """Names already handled, remembered per graph (a processor may serve several graphs)."""

    def __init__(self):
        self._seen = weakref.WeakKeyDictionary()

    def add(self, name):
        """Remember ``name`` in the default graph; False when it was already there."""
        seen = self._seen.setdefault(tfv1.get_default_graph(), set())
        if name in seen:
            return False
        seen.add(name)
        return True


class GradientProcessor(object):
    """Base class of gradient processors.

    :meth:`process` runs :meth:`_process` under a name scope named after the class, created
    once per graph and re-entered by later calls. Subclasses implement :meth:`_process`.
    """

    def process(self, grads):
        """Process gradients.

        Args:
            grads (list): ``(gradient, variable)`` pairs.

        Returns:
            list: the processed ``(gradient, variable)`` pairs.
        """
        grads = _check_grads(grads, type(self).__name__)
        graph = tfv1.get_default_graph()
        scopes = self.__dict__.setdefault('_name_scopes', weakref.WeakKeyDictionary())
        scope = scopes.get(graph)
        if scope is None:
            with tfv1.name_scope(type(self).__name__) as scope:
                scopes[graph] = scope
                return self._process(grads)
        with tfv1.name_scope(scope):
            return self._process(grads)

    def _process(self, grads):
        """Return the processed list of ``(gradient, variable)`` pairs."""
        raise NotImplementedError("{} must implement _process()".format(type(self).__name__))


class FilterNoneGrad(GradientProcessor):
    """Drop the pairs whose gradient is None (variables the cost does not depend on).

    Args:
        verbose (bool): log a warning naming those variables.
    """

    def __init__(self, verbose=True):
        self._verbose = bool(verbose)

    def _process(self, grads):
        kept = [(g, v) for g, v in grads if g is not None]
        dropped = [v.op.name for g, v in grads if g is None]
        if dropped and self._verbose:
            logger.warning("No gradient w.r.t. {} trainable variable(s): {}".format(
                len(dropped), ', '.join(dropped)))
        return kept


class GlobalNormClip(GradientProcessor):
    """Rescale all gradients together so that their global norm (the L2 norm of all of them
    concatenated) is at most ``global_norm``, with ``tf.clip_by_global_norm``.

    Example::

        GlobalNormClip(5.0)
    """

    def __init__(self, global_norm):
        """
        Args:
            global_norm (float): the largest allowed global norm, > 0.
        """
        try:
            norm = float(global_norm)
        except (TypeError, ValueError):
            norm = None
        if norm is None or isinstance(global_norm, bool) or not norm > 0:
            raise ValueError("GlobalNormClip: global_norm must be a positive number, got "
                             "{!r}".format(global_norm))
        self._norm = norm

    def _process(self, grads):
        if not grads:
            return []
        clipped, _ = tf.clip_by_global_norm([g for g, _ in grads], self._norm,
                                            name='clip_by_global_norm')
        return list(zip(clipped, [v for _, v in grads]))


def _count_arguments(func, owner):
    """How many arguments (1 or 2) ``func`` is to be called with."""
    try:
        params = inspect.signature(func).parameters.values()
    except (TypeError, ValueError):   # some builtins have no signature: assume f(grad)
        return 1
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    required = [p for p in positional if p.default is p.empty]
    has_varargs = any(p.kind == p.VAR_POSITIONAL for p in params)
    if len(required) in (1, 2):
        return len(required)
    if not required and (positional or has_varargs):
        return 2 if has_varargs or len(positional) >= 2 else 1
    raise TypeError("{}: the function must take 1 argument (grad) or 2 arguments (grad, var); "
                    "{!r} takes {} required positional arguments".format(
                        owner, func, len(required)))


class MapGradient(GradientProcessor):
    """Apply a function to the gradient of every variable matching a regex.

    The function returns the new gradient, or None to drop the variable's gradient. Pairs
    whose gradient is already None are passed through untouched.

    Example::

        MapGradient(lambda grad: tf.clip_by_value(grad, -1, 1), regex='fc.*')
        MapGradient(lambda grad, var: grad + 1e-4 * var)   # weight decay
    """

    def __init__(self, func, regex='.*'):
        """
        Args:
            func: ``func(grad) -> grad`` or ``func(grad, var) -> grad``.
            regex (str): which variables (by op name) to process; must match the whole name.
        """
        if not callable(func):
            raise TypeError("{}: func must be callable, got {!r}".format(type(self).__name__, func))
        if _count_arguments(func, type(self).__name__) == 1:
            self._func = lambda grad, var: func(grad)
        else:
            self._func = func
        self._regex = _full_match_regex(regex, type(self).__name__)

    def _process(self, grads):
        result = []
        matched = False
        for grad, var in grads:
            if not re.match(self._regex, var.op.name):
                result.append((grad, var))
                continue
            matched = True
            if grad is None:
                result.append((grad, var))
                continue
            grad = self._func(grad, var)
            if grad is not None:
                result.append((grad, var))
        if not matched:
            logger.warning("[{}] No variable matches the regex '{}'.".format(
                type(self).__name__, self._regex))
        return result


class SummaryGradient(MapGradient):
    """Summarize the gradients of the variables matching a regex: a histogram
    ``<var>-grad`` and a moving summary of its root mean square (``<var>/rms``), under the
    name scope ``SummaryGradient``. Each variable is summarized once per graph; variables of
    replicated towers (``towerN/...``) are skipped.
    """

    def __init__(self, regex='.*', collections=None):
        """
        Args:
            regex (str): which variables to summarize.
            collections (list[str]): collections of the summary ops; defaults to
                ``tf.compat.v1.GraphKeys.SUMMARIES``.
        """
        super(SummaryGradient, self).__init__(self._summarize, regex)
        self._collections = collections
        self._done = _PerGraphNames()

    def _summarize(self, grad, var):
        name = var.op.name
        if re.match('tower[0-9]+/', name) or not self._done.add(name):
            return grad
        dense = as_dense(grad)
        tfv1.summary.histogram(name + '-grad', dense, collections=self._collections)
        add_moving_summary(rms(dense, name=name + '/rms'),
                           summary_collections=self._collections)
        return grad


class PrintGradient(MapGradient):
    """Print the shape, mean and root mean square of the gradients of the variables matching
    a regex to stderr whenever they are computed (each variable once per graph)."""

    def __init__(self, regex='.*'):
        super(PrintGradient, self).__init__(self._print, regex)
        self._done = _PerGraphNames()

    def _print(self, grad, var):
        name = var.op.name
        if not self._done.add(name):
            return grad
        dense = as_dense(grad)
        print_op = tf.print(name + '-grad', 'shape:', tf.shape(dense), 'mean:',
                            tf.reduce_mean(dense), 'rms:', rms(dense, name='rms'), output_stream=sys.stderr)
        with tf.control_dependencies([print_op]):
            if isinstance(grad, tf.IndexedSlices):
                return tf.IndexedSlices(tf.identity(grad.values), grad.indices, grad.dense_shape)
            return tf.identity(grad)


class CheckGradient(MapGradient):
    """Fail the step with ``InvalidArgumentError`` when a gradient holds NaN or Inf; the error
    message names the variable (``CheckGradient/<var>``)."""

    def __init__(self):
        super(CheckGradient, self).__init__(self._check)

    def _check(self, grad, var):
        message = 'CheckGradient/' + var.op.name
        if isinstance(grad, tf.IndexedSlices):
            return tf.IndexedSlices(tf.debugging.check_numerics(grad.values, message),
                                    grad.indices, grad.dense_shape)
        return tf.debugging.check_numerics(grad, message)


class ScaleGradient(MapGradient):
    """Multiply the gradients of some variables by constants.

    The first rule whose regex matches the variable's whole op name applies; a multiplier of
    0 drops the gradient.

    Example::

        ScaleGradient([('fc.*', 0.1), ('.*/b', 2.0)])
    """

    def __init__(self, multipliers, verbose=True):
        """
        Args:
            multipliers (tuple or list[tuple]): ``(regex, multiplier)`` pairs.
            verbose (bool): log which gradients are multiplied.
        """
        if isinstance(multipliers, tuple):
            multipliers = [multipliers]
        if not isinstance(multipliers, list):
            raise TypeError("ScaleGradient: multipliers must be a (regex, multiplier) tuple or a "
                            "list of them, got {!r}".format(multipliers))
        self._rules = []
        for rule in multipliers:
            if not (isinstance(rule, (tuple, list)) and len(rule) == 2):
                raise TypeError("ScaleGradient: expected (regex, multiplier) pairs, got "
                                "{!r}".format(rule))
            regex, value = rule
            self._rules.append((_full_match_regex(regex, 'ScaleGradient'), value))
        if verbose not in (True, False):
            raise TypeError("ScaleGradient: verbose must be a bool, got {!r}".format(verbose))
        self._verbose = verbose
        super(ScaleGradient, self).__init__(self._scale)

    def _scale(self, grad, var):
        name = var.op.name
        for regex, value in self._rules:
            if not re.match(regex, name):
                continue
            if self._verbose:
                logger.info("Gradient of '{}' is multiplied by {}".format(name, value))
            if isinstance(value, numbers.Real) and value == 0:
                return None
            if isinstance(grad, tf.IndexedSlices):
                return tf.IndexedSlices(grad.values * tf.cast(value, grad.values.dtype),
                                        grad.indices, grad.dense_shape)
            return grad * tf.cast(value, grad.dtype)
        return grad
