"""The floating-point operations of one run of a training step, counted from the graph.

:func:`count_flops` walks the ops that running some fetches runs (see
:func:`~tensorpack_lite.profiling.graph_walk.ops_run_by`) and adds up those of the ops that carry
nearly all of a model's arithmetic: matrix products and convolutions, forward and backward
(:data:`COUNTED_OP_TYPES`), at 2 FLOPs per multiply-add. Element-wise ops, reductions and the
optimizer's updates are not counted (a few percent of a dense model's). Dimensions the graph
leaves unknown (the batch) are taken as ``batch_size``.

Example: a 64-32-10 MLP trained on a batch of B counts ``2B(64*32 + 32*10)`` forward and
``2B(64*32 + 2*32*10)`` backward (no gradient of the input)::

    flops = count_flops([train_op], batch_size=64)
"""

from .graph_walk import ops_run_by

__all__ = ['count_flops', 'COUNTED_OP_TYPES']

COUNTED_OP_TYPES = frozenset([
    'MatMul', 'BatchMatMul', 'BatchMatMulV2', 'BatchMatMulV3',
    'Conv2D', 'Conv2DBackpropInput', 'Conv2DBackpropFilter',
    'DepthwiseConv2dNative', 'DepthwiseConv2dNativeBackpropInput', 'DepthwiseConv2dNativeBackpropFilter'])
"""The op types :func:`count_flops` counts."""


def _dims(tensor, batch_size):
    """The shape of ``tensor`` as ints, unknown dimensions taken as ``batch_size``; None when
    the rank is unknown, or a dimension is and there is no ``batch_size``."""
    shape = tensor.shape
    if shape.rank is None:
        return None
    dims = shape.as_list()
    if None in dims:
        if batch_size is None:
            return None
        dims = [batch_size if d is None else d for d in dims]
    return dims


def _product(dims):
    total = 1
    for d in dims:
        total *= d
    return total


def _op_flops(op, batch_size):
    """FLOPs of one op of :data:`COUNTED_OP_TYPES`, or None when its shapes are unknown."""
    kind = op.type
    if kind.startswith('MatMul') or kind.startswith('BatchMatMul'):
        a, out = _dims(op.inputs[0], batch_size), _dims(op.outputs[0], batch_size)
        if a is None or out is None:
            return None
        transposed = op.get_attr('transpose_a') if kind == 'MatMul' else op.get_attr('adj_x')
        inner = a[-2] if transposed else a[-1]
        return 2 * _product(out) * inner
    # convolutions: every element of the forward output takes kernel-size multiply-adds
    if kind in ('Conv2D', 'DepthwiseConv2dNative'):
        out, kernel = _dims(op.outputs[0], batch_size), _dims(op.inputs[1], batch_size)
    elif kind.endswith('BackpropInput'):       # (input sizes, filter, output gradient)
        out, kernel = _dims(op.inputs[2], batch_size), _dims(op.inputs[1], batch_size)
    else:                                       # BackpropFilter: (input, filter sizes, output gradient)
        out, kernel = _dims(op.inputs[2], batch_size), _dims(op.outputs[0], batch_size)
    if out is None or kernel is None:
        return None
    per_output = kernel[0] * kernel[1] * (1 if kind.startswith('Depthwise') else kernel[2])
    return 2 * _product(out) * per_output


def count_flops(fetches, batch_size=None):
    """FLOPs of one run of ``fetches`` (ops or tensors): the ops of :data:`COUNTED_OP_TYPES`
    it runs, at 2 per multiply-add, unknown dimensions taken as ``batch_size``.

    Returns:
        int, or None when an op's shapes cannot be known (an unknown rank, or an unknown
        dimension without ``batch_size``).
    """
    total = 0
    for op in ops_run_by(list(fetches)):
        if op.type in COUNTED_OP_TYPES:
            flops = _op_flops(op, batch_size)
            if flops is None:
                return None
            total += flops
    return total
