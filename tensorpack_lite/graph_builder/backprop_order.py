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


def _before(op):
    """The ops ``op`` depends on: its inputs' ops, then its control inputs."""
    return [tensor.op for tensor in op.inputs] + list(op.control_inputs)


def op_depths(ops):
    """{op: depth} for ``ops`` and every op they depend on (inputs and control inputs): 0 for
    an op without any, else 1 + the largest depth among them.

    A cycle counts as one op: TF1 loops (``tf.while_loop`` with v1 control flow) are cycles,
    the ``Merge`` at the top of a frame taking the iteration before from a ``NextIteration``.
    The ops of a cycle (strongly connected component) share one depth, 1 + the largest depth of
    what they need from outside it, so a loop's results (its ``Exit`` ops) come after
    everything the loop needs. One pass over the graph without recursion (Tarjan's algorithm):
    each op and each edge is visited once."""
    depth, before, order, low = {}, {}, {}, {}
    component, on_component = [], set()

    def discover(op):
        order[op] = low[op] = len(order)
        before[op] = _before(op)
        component.append(op)
        on_component.add(op)
        return [op, 0]

    for root in ops:
        if root in order:
            continue
        walk = [discover(root)]
        while walk:
            entry = walk[-1]
            op, position = entry
            if position < len(before[op]):
                entry[1] += 1
                needed = before[op][position]
                if needed not in order:
                    walk.append(discover(needed))
                elif needed in on_component:
                    low[op] = min(low[op], order[needed])
                continue
            walk.pop()
            if walk:
                parent = walk[-1][0]
                low[parent] = min(low[parent], low[op])
            if low[op] != order[op]:
                continue
            members = []
            while not members or members[-1] is not op:      # the cycle (or op alone) ends here
                members.append(component.pop())
                on_component.discard(members[-1])
            inside = set(members)
            shared = 1 + max((depth[b] for m in members for b in before[m] if b not in inside), default=-1)
            depth.update((m, shared) for m in members)
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
