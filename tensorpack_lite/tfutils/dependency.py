"""What running some ops or ``sess.run`` fetches runs: every op they need (:func:`ops_run_by`,
the walk of :mod:`tensorpack_lite.profiling.graph_walk`, below tfutils since the FLOP count
needs it too), and whether a given op is among them (e.g. to run a session hook only with the
steps that run a certain op).

Example::

    if dependency_of_fetches(run_context.original_args.fetches, train_op):
        ...   # this run trains
"""

from ..compat import tf
from ..profiling.graph_walk import ops_run_by
from ..utils.argtools import graph_memoized

__all__ = ['dependency_of_targets', 'dependency_of_fetches', 'ops_run_by']


def _as_op(thing, graph):
    """The operation of a tensor, an operation, a variable or a name in ``graph``."""
    element = graph.as_graph_element(thing)
    return element if isinstance(element, tf.Operation) else element.op


@graph_memoized
def dependency_of_targets(targets, op):
    """Whether any of ``targets`` depends on ``op`` (or is ``op``), through data or control
    dependencies. Memoized per graph.

    Args:
        targets (tuple): ops or tensors (a tuple, so that the result can be memoized).
        op (tf.Operation or tf.Tensor): the op (or the tensor of the op) to look for.

    Returns:
        bool
    """
    if isinstance(op, tf.Tensor):
        op = op.op
    if not isinstance(op, tf.Operation):
        raise TypeError("dependency_of_targets: op must be a tf.Operation or tf.Tensor, got {!r}".format(op))
    return any(needed is op for needed in ops_run_by([_as_op(t, op.graph) for t in targets]))


def dependency_of_fetches(fetches, op):
    """Whether any of ``fetches`` (anything ``sess.run`` takes: a tensor, an op, a variable,
    a name, or a nested list, tuple or dict of these) depends on ``op``.

    Args:
        fetches: the fetches of a ``sess.run``.
        op (tf.Operation or tf.Tensor):

    Returns:
        bool
    """
    graph = op.graph
    targets = tuple(_as_op(thing, graph) for thing in tf.nest.flatten(fetches) if thing is not None)
    return dependency_of_targets(targets, op)
