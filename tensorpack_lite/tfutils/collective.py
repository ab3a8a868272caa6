"""A differentiable mean over the members of a TensorFlow collective group.

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
the device's job and task, :func:`cluster_group` uses one for the whole cluster); the
instance key of a reduction is derived from its name and group key alone, so that every
member, in every process, finds the same key without talking to the others. Two names that
would share a key in one graph are an error. The keys lie in ``[2**29, 2**31)``, away from
the small keys the graph builders count from 1.

Every member must run its reduction in every step that runs one of them (else the step
waits): build them in every tower, and fetch every tower.
"""

import hashlib
import threading
import weakref

from ..compat import tf, tfv1
from .tower_context import get_current_tower_context

__all__ = ['CollectiveGroup', 'tower_group', 'cluster_group', 'collective_mean']

_CLUSTER_GROUP_KEY = 1 << 29
_TOWER_GROUP_BASE = 1 << 30          # + digest(job) % 4096 * 65536 + task
_INSTANCE_KEY_BASE = 1 << 30         # + 30 bits of digest(group key, name, role)


def _digest(text):
    """A stable 32-bit digest of ``text`` (the same in every process)."""
    return int.from_bytes(hashlib.sha1(text.encode('utf-8')).digest()[:4], 'big')


_keys_of_graph = weakref.WeakKeyDictionary()    # graph -> {instance key: (group key, name, role)}
_keys_lock = threading.Lock()


class CollectiveGroup(object):
    """The members of a collective reduction: how many, and the group key they share."""

    def __init__(self, size, key):
        if not isinstance(size, int) or size < 1:
            raise ValueError("CollectiveGroup: size must be a positive int, got {!r}".format(size))
        if not isinstance(key, int) or not 0 < key < 2 ** 31:
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


def _instance_key(group, name, role):
    key = _INSTANCE_KEY_BASE + _digest('{}|{}|{}'.format(group.key, name, role)) % _INSTANCE_KEY_BASE
    identity = (group.key, name, role)
    with _keys_lock:
        table = _keys_of_graph.setdefault(tfv1.get_default_graph(), {})
        other = table.setdefault(key, identity)
    if other != identity:
        raise ValueError("collective_mean: the reductions {!r} ({}) and {!r} ({}) would share the instance "
                         "key {} in group {}: rename one.".format(name, role, other[1], other[2], key,
                                                                  group.key))
    return key


def _tower_free_name(op_name):
    """``op_name`` without the name scope of the enclosing tower (the same in every tower)."""
    ctx = get_current_tower_context()
    prefix = ctx.ns_name + '/' if ctx is not None and ctx.ns_name else None
    return op_name[len(prefix):] if prefix and op_name.startswith(prefix) else op_name


def _hint(device):
    spec = tf.DeviceSpec.from_string(device or '')
    return 'nccl' if (spec.device_type or '').upper() == 'GPU' else 'ring'


def _reduce_mean(tensor, group, instance_key, device, name):
    with tf.device(device):
        return tf.raw_ops.CollectiveReduceV2(
            input=tensor, group_size=group.size, group_key=group.key, instance_key=instance_key,
            ordering_token=[], merge_op='Add', final_op='Div', communication_hint=_hint(device), name=name)


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
    forward_key = _instance_key(group, name, 'mean')
    backward_key = _instance_key(group, name, 'gradient')

    @tf.custom_gradient
    def mean(local):
        local = tf.identity(local, name='local')    # on the current device: the hint follows it
        result = _reduce_mean(local, group, forward_key, local.device, 'collective_mean')

        def grad(upstream):
            return _reduce_mean(upstream, group, backward_key, local.device, 'collective_mean_grad')
        return result, grad

    with tf.name_scope('collective_mean'):
        return mean(tensor)
