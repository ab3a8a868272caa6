"""What running some ops or ``sess.run`` fetches runs: every op they need, each once
(:func:`ops_run_by`). The one walk of a graph back from fetches: the FLOP count
(:mod:`~tensorpack_lite.profiling.flops`) adds up the ops it finds, and
:mod:`tensorpack_lite.tfutils.dependency` answers whether a run needs a given op with it.

Example::

    matmuls = [op for op in ops_run_by([train_op]) if op.type == 'MatMul']
"""

from ..compat import tf

__all__ = ['ops_run_by']


def ops_run_by(fetches):
    """Every op that running ``fetches`` (ops and tensors) runs, each once: the fetched ones
    and all they depend on through data or control dependencies. A generator: a caller that
    looks for something can stop at the first op that answers."""
    seen = set()
    pending = [f if isinstance(f, tf.Operation) else f.op for f in fetches]
    while pending:
        op = pending.pop()
        if op in seen:
            continue
        seen.add(op)
        yield op
        pending.extend(t.op for t in op.inputs)
        pending.extend(op.control_inputs)
