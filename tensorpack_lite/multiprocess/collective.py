"""TensorFlow's collective ops, built in one place: the groups and their keys, the instance keys
of the reductions of a graph, the ops (:func:`all_reduce`, :func:`broadcast`), and a
differentiable mean over the members of a group (:func:`collective_mean`).

A collective group is a fixed set of devices (the towers of one process, or every tower of
every worker of a cluster) that each build the same reduction: every member calls
:func:`collective_mean` on its own tensor, under its own device, with the same group and the
same name, and each gets the mean of all the members' tensors. The reduction is TensorFlow's
``CollectiveReduceV2``, through NCCL on GPUs and a ring on CPUs; its gradient is the mean of
the members' upstream gradients (another collective), so that the gradient of the sum of
the members' losses reaches every member::

    group = tower_group(2, '/gpu:0')
    with tf.device('/gpu:0'):
        m0 = collective_mean(x0, group, name='bn/statistics')
    with tf.device('/gpu:1'):
        m1 = collective_mean(x1, group, name='bn/statistics')

Keys: a group key tells the groups apart (:func:`tower_group` derives one per worker from
the device's job and task, :func:`cluster_group` uses one for every tower of a cluster,
:func:`worker_group` one for a device of every worker); they lie in ``[2**29, 2**31)``. Every
member, in every process, must find the same instance key for a reduction without talking to
the others, and no two reductions of a graph may share one; one table per graph hands them out:

* a reduction with a name of its own (:func:`instance_key`) gets a digest of its group key,
  name and role, in ``[2**30, 2**31)``, whatever the order the graph is built in; two names
  that would share a key in one graph are an error;
* the reductions a builder makes in sequence, the same in every process (the pieces of a
  gradient all-reduce, the variables of a broadcast; :func:`instance_keys`), take the next keys
  of their sequence (:data:`SEQUENCES`), below ``2**29``.

Every member must run its reduction in every step that runs one of them (else the step
waits): build them in every tower, and fetch every tower.
"""

import contextlib
import hashlib
import threading
import weakref

from ..compat import tf, tfv1
from ..tfutils.tower_context import get_current_tower_context
from ..utils.argtools import is_int

__all__ = ['CollectiveGroup', 'tower_group', 'cluster_group', 'worker_group', 'instance_key', 'instance_keys',
           'SEQUENCES', 'communication_hint', 'all_reduce', 'broadcast', 'collective_mean']

_CLUSTER_GROUP_KEY = 1 << 29
_WORKER_GROUP_KEY = _CLUSTER_GROUP_KEY + 1
_TOWER_GROUP_BASE = 1 << 30          # + digest(job) % 4096 * 65536 + task
_INSTANCE_KEY_BASE = 1 << 30         # + 30 bits of digest(group key, name, role)

SEQUENCES = {'gradients': (1000, 1 << 24), 'broadcast': (1 << 24, 1 << 29)}
"""The sequences of instance keys (:func:`instance_keys`): name -> ``[first, end)``."""


def _digest(text):
    """A stable 32-bit digest of ``text`` (the same in every process)."""
    return int.from_bytes(hashlib.sha1(text.encode('utf-8')).digest()[:4], 'big')


# graph -> ({instance key: (group key, name or sequence, role or index)}, {sequence: its next key})
_keys_of_graph = weakref.WeakKeyDictionary()
_keys_lock = threading.Lock()


class CollectiveGroup(object):
    """The members of a collective reduction: how many, and the group key they share."""

    def __init__(self, size, key):
        if not is_int(size) or size < 1:
            raise ValueError("CollectiveGroup: size must be a positive int, got {!r}".format(size))
        if not is_int(key) or not 0 < key < 2 ** 31:
            raise ValueError("CollectiveGroup: key must be an int in [1, 2**31), got {!r}".format(key))
        self.size = size
        self.key = key

    def __repr__(self):
        return 'CollectiveGroup(size={}, key={})'.format(self.size, self.key)


def tower_group(size, device):
    """The group of the ``size`` towers of the worker that owns ``device`` (e.g.
    ``'/job:worker/task:1/device:GPU:0'``, or ``'/gpu:0'`` in a process without cluster): its
    key differs from one job/task to another, so the towers of two workers of a cluster form
    two groups."""
    spec = tf.DeviceSpec.from_string(device or '')
    job, task = spec.job or '', spec.task or 0
    if not 0 <= task < 65536:
        raise ValueError("tower_group: task index {} of device {!r} is out of range".format(task, device))
    return CollectiveGroup(size, _TOWER_GROUP_BASE + _digest(job) % 4096 * 65536 + task)


def cluster_group(size):
    """The group of every tower of every worker of a cluster (``size`` members in all), with
    a key that is the same on every worker."""
    return CollectiveGroup(size, _CLUSTER_GROUP_KEY)


def worker_group(num_worker):
    """The group of one device (the CPU) of every worker of a cluster, with a key that is the same
    on every worker."""
    return CollectiveGroup(num_worker, _WORKER_GROUP_KEY)


def _keys_of_default_graph():
    return _keys_of_graph.setdefault(tfv1.get_default_graph(), ({}, {}))


def instance_key(group, name, role):
    """The instance key, in the default graph, of the reduction ``name`` of ``group`` in its
    ``role`` (e.g. ``'mean'``, ``'gradient'``): every member in every process asks with the same
    arguments and gets the same key; a name whose key another reduction of the graph has is a
    ValueError naming both."""
    key = _INSTANCE_KEY_BASE + _digest('{}|{}|{}'.format(group.key, name, role)) % _INSTANCE_KEY_BASE
    identity = (group.key, name, role)
    with _keys_lock:
        other = _keys_of_default_graph()[0].setdefault(key, identity)
    if other != identity:
        raise ValueError("multiprocess.collective: the reductions {!r} ({}) and {!r} ({}) would share the "
                         "instance key {} in group {}: rename one.".format(
                             name, role, other[1], other[2], key, group.key))
    return key


def instance_keys(group, sequence, count):
    """The next ``count`` instance keys of ``sequence`` (one of :data:`SEQUENCES`) in the default
    graph, for reductions of ``group`` that every process builds in the same order."""
    first, end = SEQUENCES[sequence]
    with _keys_lock:
        table, following = _keys_of_default_graph()
        start = following.get(sequence, first)
        if start + count > end:
            raise ValueError("multiprocess.collective: the graph needs more than the {} instance keys of "
                             "sequence {!r}".format(end - first, sequence))
        following[sequence] = start + count
        for key in range(start, start + count):
            table[key] = (group.key, sequence, key - first)
    return list(range(start, start + count))


def _tower_free_name(op_name):
    """``op_name`` without the name scope of the enclosing tower (the same in every tower)."""
    ctx = get_current_tower_context()
    prefix = ctx.ns_name + '/' if ctx is not None and ctx.ns_name else None
    return op_name[len(prefix):] if prefix and op_name.startswith(prefix) else op_name


def communication_hint(device):
    """The ``communication_hint`` of a collective op on ``device``: ``'nccl'`` on a GPU (the
    reduction runs on the GPUs through NCCL), else ``'ring'`` (TensorFlow's ring, on the CPU,
    over gRPC between processes)."""
    spec = tf.DeviceSpec.from_string(device or '')
    return 'nccl' if (spec.device_type or '').upper() == 'GPU' else 'ring'


def all_reduce(tensor, group, key, device=None, merge_op='Add', final_op='Id', max_subdivs_per_device=-1,
               name=None):
    """This member's ``CollectiveReduceV2`` of ``tensor`` over ``group``, instance ``key``: on
    ``device`` (default: the current one), with its :func:`communication_hint`."""
    with tf.device(device) if device is not None else contextlib.nullcontext():
        return tf.raw_ops.CollectiveReduceV2(
            input=tensor, group_size=group.size, group_key=group.key, instance_key=key, ordering_token=[],
            merge_op=merge_op, final_op=final_op, max_subdivs_per_device=max_subdivs_per_device,
            communication_hint=communication_hint(device or tensor.device), name=name)


def broadcast(tensor, group, key, is_source, device=None):
    """The source's value of ``tensor`` (of a known shape; a variable is read) on every member
    of ``group``: the source sends it (``CollectiveBcastSendV2``), the others receive it; on
    ``device``."""
    keys = dict(group_size=group.size, group_key=group.key, instance_key=key)
    with tf.device(device) if device is not None else contextlib.nullcontext():
        if is_source:
            return tf.raw_ops.CollectiveBcastSendV2(input=tensor, **keys)
        return tf.raw_ops.CollectiveBcastRecvV2(T=tensor.dtype.base_dtype, shape=tensor.shape, **keys)


def collective_mean(tensor, group, name=None):
    """The mean of ``tensor`` over the members of ``group``; differentiable (the gradient is
    the mean of the members' upstream gradients).

    Args:
        tensor: this member's tensor (same shape and dtype in every member).
        group (CollectiveGroup): the members.
        name (str): what the reduction is, the same in every member and distinct among the
            reductions of the group (it makes the instance keys). Default: the op name of
            ``tensor`` without the name scope of the enclosing tower.

    Returns:
        A tensor on the current device; ``communication_hint`` is ``'nccl'`` on a GPU and
        ``'ring'`` elsewhere.
    """
    if not isinstance(group, CollectiveGroup):
        raise TypeError("collective_mean: group must be a CollectiveGroup, got {!r}".format(group))
    tensor = tf.convert_to_tensor(tensor)
    if group.size == 1:
        return tf.identity(tensor)
    name = _tower_free_name(tensor.op.name) if name is None else name
    forward_key = instance_key(group, name, 'mean')
    backward_key = instance_key(group, name, 'gradient')

    @tf.custom_gradient
    def mean(local):
        local = tf.identity(local, name='local')    # on the current device: the hint follows it
        result = all_reduce(local, group, forward_key, local.device, final_op='Div', name='collective_mean')

        def grad(upstream):
            return all_reduce(upstream, group, backward_key, local.device, final_op='Div',
                              name='collective_mean_grad')
        return result, grad

    with tf.name_scope('collective_mean'):
        return mean(tensor)
