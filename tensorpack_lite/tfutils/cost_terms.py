"""The terms a cost adds up, and which of them are finite whenever the weights are.

A training step computes what its gradients need. The gradient of a sum does not need the
value of its summands, and the gradient of a weight decay (``scale * sum(w ** 2) / 2``) needs
``w``, not the decay: so a step never computes the weight decay of its cost unless something
fetches the cost. A check that the cost is finite would compute it every step, reading every
weight once more. :func:`terms_to_check` names what such a check can test instead: the cost's
summands but those that are finite whenever the weights are (a weight term, below). A weight
that is not finite already shows in the data terms, which are computed from it.

Example::

    cost = tf.add_n([xent, regularize_cost('.*/W', l2_regularizer(1e-4))], name='cost')
    terms_to_check(cost)     # [xent]
"""

import numpy as np

from ..compat import tf

__all__ = ['cost_summands', 'is_weight_term', 'terms_to_check']

_SUM_OPS = ('Identity', 'Add', 'AddV2', 'AddN')
_WEIGHT_OPS = ('ReadVariableOp', 'VariableV2', 'Variable')
# ops whose float outputs are finite when their float inputs are (overflow aside; not Mean:
# the mean of nothing is NaN)
_FINITE_FROM_FINITE_OPS = ('Identity', 'L2Loss', 'Square', 'Abs', 'Neg', 'Mul', 'Add',
                           'AddV2', 'AddN', 'Sub', 'Sum', 'Cast')
# a term computed in 16 bits overflows at 65504: a weight decay over a large layer can
_WIDE_FLOATS = (tf.float32, tf.float64)


def cost_summands(cost):
    """The tensors ``cost`` adds up (through ``Identity``, ``Add``, ``AddV2`` and ``AddN``), in
    the order of the sums' inputs; ``[cost]`` when it is not a sum."""
    summands, pending = [], [cost]
    while pending:
        tensor = pending.pop(0)
        if tensor.op.type in _SUM_OPS:
            pending[:0] = list(tensor.op.inputs)
        else:
            summands.append(tensor)
    return summands


def _floating(tensor):
    dtype = tensor.dtype.base_dtype
    return dtype.is_floating or dtype.is_complex


def is_weight_term(tensor):
    """Whether ``tensor`` is finite whenever the variables it reads are: computed from variables
    and finite constants alone, in 32 or 64 bits, by sums, products, squares, absolute values and
    reductions (a weight decay, as :func:`~tensorpack_lite.models.regularize.l2_regularizer` and
    ``l1_regularizer`` make it). Integer values it uses (shapes, sizes) may come from anywhere."""
    seen, pending = set(), [tensor]
    while pending:
        tensor = pending.pop()
        if tensor.ref() in seen or not _floating(tensor):
            continue
        seen.add(tensor.ref())
        op = tensor.op
        if tensor.dtype.base_dtype not in _WIDE_FLOATS:
            return False
        if op.type in _WEIGHT_OPS:
            continue
        if op.type == 'Const':
            if not np.all(np.isfinite(tf.make_ndarray(op.get_attr('value')))):
                return False
            continue
        if op.type not in _FINITE_FROM_FINITE_OPS:
            return False
        pending.extend(op.inputs)
    return True


def terms_to_check(cost):
    """What a check that ``cost`` is finite needs to test: the summands of ``cost`` that are not
    weight terms (:func:`is_weight_term`); ``[cost]`` itself when none or all of its summands
    are."""
    summands = cost_summands(cost)
    data_terms = [term for term in summands if not is_weight_term(term)]
    if not data_terms or len(data_terms) == len(summands):
        return [cost]
    return data_terms
