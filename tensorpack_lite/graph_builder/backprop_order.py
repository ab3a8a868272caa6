"""In which order backprop produces a tower's gradients, read from the graph.

A gradient can be sent as soon as the op producing it has run, and an op runs only after every
op it depends on. :func:`backprop_order` ranks the tensors by the length of the longest chain
of ops leading to each (its *depth*): a gradient that another needs (the last layer's before the
first's) is always ranked before it, and gradients of one layer come together. All-reduces that
take their pieces in this order can start while backprop still runs (as PyTorch DDP fills its
buckets in reverse parameter order, and Horovod fuses what is ready).

Example::

    order = backprop_order(grads)            # e.g. [5, 4, 3, 2, 1, 0] for a 3-layer MLP
    groups = consecutive_groups(order, [g.shape.num_elements() * 4 for g in grads], 4 << 20)
    # runs of >= 4 MB in that order, e.g. [[5, 4, 3, 2], [1, 0]]
"""

__all__ = ['backprop_order', 'op_depths', 'consecutive_groups']


def op_depths(ops):
    """{op: depth} for ``ops`` and every op they depend on (inputs and control inputs): 0 for
    an op without any, else 1 + the largest depth among them. One pass over the graph."""
    depth = {}
    for root in ops:
        stack = [root]
        while stack:
            op = stack[-1]
            if op in depth:
                stack.pop()
                continue
            before = [tensor.op for tensor in op.inputs] + list(op.control_inputs)
            missing = [b for b in before if b not in depth]
            if missing:
                stack.extend(missing)
                continue
            stack.pop()
            depth[op] = 1 + max((depth[b] for b in before), default=-1)
    return depth


def backprop_order(tensors):
    """The indices of ``tensors`` (one tower's gradients), sorted by the depth of the op
    producing each (see the module's text); equal depths keep their order. Deterministic:
    every worker building the same model gets the same order."""
    depth = op_depths([tensor.op for tensor in tensors])
    return sorted(range(len(tensors)), key=lambda index: (depth[tensors[index].op], index))


def consecutive_groups(order, sizes, limit):
    """``order`` (indices) cut into runs of consecutive entries: a run ends as soon as the
    ``sizes`` of its entries add up to ``limit`` or more (the last run may hold less). A list of
    lists of indices, in the order of ``order``."""
    groups, total = [], limit
    for index in order:
        if total >= limit:
            groups.append([])
            total = 0
        groups[-1].append(index)
        total += sizes[index]
    return groups
