"""Combining the gradients of several towers.

The gradients of K towers over N variables come as a *grad list*: K lists of N
``(gradient, variable)`` pairs, the variables in the same order in every tower.
:func:`split_grad_list` separates gradients from variables (``all_grads``: K lists of N
tensors), :func:`merge_grad_list` puts them back together. Then

* :func:`aggregate_grads` sums or averages them into one list of N pairs (parameter server);
* :func:`allreduce_grads_collective` (TensorFlow's collective ops: NCCL on GPUs, a ring on
  CPUs), :func:`allreduce_grads` (the same on GPUs only) and
  :func:`allreduce_grads_hierarchical` give every tower the sum or average (replicas);
* :class:`GradientPacker` concatenates many small gradients into a few large tensors, so
  that an all-reduce moves fewer, larger messages.
"""

from ..compat import tf
from ..multiprocess.collective import all_reduce, instance_keys, tower_group
from ..utils import logger
from ..utils.argtools import call_only_once
from .devices import LeastLoadedDeviceSetter, is_gpu_tower  # the first: tensorpack's path
from .pieces import PieceLayout

__all__ = ['split_grad_list', 'merge_grad_list', 'dense_gradient', 'aggregate_grads',
           'average_grads', 'allreduce_grads', 'allreduce_grads_hierarchical', 'allreduce_grads_collective',
           'GradientPacker', 'LeastLoadedDeviceSetter']


def split_grad_list(grad_list):
    """K lists of N (gradient, variable) pairs -> (K lists of N gradients, K lists of N variables)."""
    all_grads = [[g for g, _ in tower] for tower in grad_list]
    all_vars = [[v for _, v in tower] for tower in grad_list]
    return all_grads, all_vars


def merge_grad_list(all_grads, all_vars):
    """The inverse of :func:`split_grad_list`: K lists of N (gradient, variable) pairs."""
    if len(all_grads) != len(all_vars):
        raise ValueError("merge_grad_list: {} lists of gradients for {} lists of variables".format(
            len(all_grads), len(all_vars)))
    return [list(zip(grads, variables)) for grads, variables in zip(all_grads, all_vars)]


def dense_gradient(grad):
    """A plain tensor for a gradient (an IndexedSlices, e.g. of an embedding, is densified)."""
    if isinstance(grad, tf.IndexedSlices):
        return tf.convert_to_tensor(grad)
    return grad


def aggregate_grads(all_grads, colocation=False, devices=None, average=True):
    """Sum (or average) the gradients of K towers variable by variable.

    Args:
        all_grads: K lists of N (gradient, variable) pairs.
        colocation (bool): compute each sum on the device of its variable.
        devices (list[str]): otherwise, compute the sums on these devices, round-robin over
            the variables (None: no explicit device).
        average (bool): divide the sums by K.

    Returns:
        list of N (gradient, variable) pairs, with the variables of the first tower.
    """
    if colocation and devices is not None:
        raise ValueError("aggregate_grads: give colocation=True or devices, not both")
    if devices is not None and not isinstance(devices, (list, tuple)):
        raise TypeError("aggregate_grads: devices must be a list of device strings, got {!r}".format(devices))
    num_tower = len(all_grads)
    if num_tower == 1:
        return list(all_grads[0])
    result = []
    for index, pairs in enumerate(zip(*all_grads)):
        var = pairs[0][1]
        grads = [dense_gradient(g) for g, _ in pairs]
        if colocation:
            device = var.device
        elif devices is not None:
            device = devices[index % len(devices)]
        else:
            device = None
        with tf.device(device):
            grad = tf.add_n(grads)
            if average:
                grad = tf.multiply(grad, 1.0 / num_tower)
        result.append((grad, var))
    return result


average_grads = aggregate_grads
"""Old name of :func:`aggregate_grads`."""


def _scale_all(summed, devices, average):
    """The k-th sum on the k-th device, divided by the number of devices when ``average``."""
    result = []
    for grad, device in zip(summed, devices):
        with tf.device(device):
            result.append(tf.multiply(grad, 1.0 / len(devices)) if average else tf.identity(grad))
    return result


def allreduce_grads(all_grads, average, devices=None):
    """All-reduce on GPUs through NCCL: every tower gets the sum (or average) of every
    gradient, reduced on the GPUs by TensorFlow's collective ops with the communication hint
    ``'nccl'`` (:func:`allreduce_grads_collective`).

    Args:
        all_grads: K lists of N gradients, the k-th list on the k-th GPU.
        average (bool): divide by K.
        devices (list[str]): the K GPUs (default: the device of each list's first gradient).

    Returns:
        K lists of N gradients.
    """
    if devices is None:
        devices = [dense_gradient(grads[0]).device for grads in all_grads]
    not_gpu = [d for d in devices if not is_gpu_tower(d or '/cpu:0')]
    if not_gpu:
        raise ValueError("allreduce_grads: NCCL all-reduces on GPUs; {!r} is not one (use "
                         "allreduce_grads_collective on other devices)".format(not_gpu[0]))
    return allreduce_grads_collective(all_grads, devices, average)


def allreduce_grads_hierarchical(all_grads, devices, average=False):
    """All-reduce for 8 GPUs in two groups of 4 (as on DGX-1 machines): each gradient is summed
    within each group on one device, the two group sums are added, and the total is copied
    back to every device of the group. The devices that sum rotate with the variables.

    Args:
        all_grads: K lists of N gradients, K = 8.
        devices (list[str]): the K devices.
        average (bool): divide by K.

    Returns:
        K lists of N gradients.
    """
    num_device = len(devices)
    if num_device != 8 or len(all_grads) != num_device:
        raise ValueError("allreduce_grads_hierarchical works on 8 devices with one list of gradients "
                         "each, got {} devices and {} lists".format(num_device, len(all_grads)))
    half = num_device // 2
    per_variable = []
    for index, grads in enumerate(zip(*all_grads)):
        grads = [dense_gradient(g) for g in grads]
        leaders = [index % num_device, (index % num_device + half) % num_device]
        group_sums = []
        for leader in leaders:
            start = 0 if leader < half else half
            with tf.device(devices[leader]):
                group_sums.append(tf.add_n(grads[start:start + half], name='group_sum'))
        with tf.device(devices[leaders[1]]):
            total_second = tf.add(group_sums[0], group_sums[1], name='total_sum')
        with tf.device(devices[leaders[0]]):
            total_first = tf.identity(total_second, name='total_sum')
        first_group_low = leaders[0] < half
        totals = [total_first if (k < half) == first_group_low else total_second for k in range(num_device)]
        per_variable.append(_scale_all(totals, devices, average))
    return [list(grads) for grads in zip(*per_variable)]


def allreduce_grads_collective(all_grads, devices, average):
    """All-reduce with TensorFlow's collective ops (``CollectiveReduceV2``), which run on any
    device type: on GPUs through NCCL (communication hint ``'nccl'``), on CPU devices by
    TensorFlow's ring (``'ring'``). The towers form one collective group
    (:func:`~tensorpack_lite.multiprocess.collective.tower_group`), each gradient one reduction.

    Args:
        all_grads: K lists of N gradients.
        devices (list[str]): the K devices, one per list.
        average (bool): divide by K.

    Returns:
        K lists of N gradients.
    """
    num_device = len(devices)
    if len(all_grads) != num_device:
        raise ValueError("allreduce_grads_collective: {} lists of gradients for {} devices".format(
            len(all_grads), num_device))
    if num_device == 1:
        return [list(grads) for grads in all_grads]
    group = tower_group(num_device, devices[0])
    per_variable = []
    for grads, key in zip(zip(*all_grads), instance_keys(group, 'gradients', len(all_grads[0]))):
        per_variable.append([all_reduce(dense_gradient(grad), group, key, device,
                                        final_op='Div' if average else 'Id')
                             for grad, device in zip(grads, devices)])
    return [list(grads) for grads in zip(*per_variable)]


class GradientPacker:
    """Concatenates the N gradients of a tower into ``num_split`` flat tensors before an
    all-reduce, and splits them back afterwards (tensorpack's API on the layout of
    :meth:`~tensorpack_lite.graph_builder.pieces.PieceLayout.concatenated`).

    Example::

        packer = GradientPacker(num_split=4)
        if packer.compute_strategy(all_grads[0]):
            packed = packer.pack_all(all_grads, devices)          # K lists of 4 tensors
            all_grads = packer.unpack_all(allreduce(packed), devices)
    """

    MIN_ELEMENTS_PER_SPLIT = 1024
    """Gradients smaller than this per split are not worth packing."""

    def __init__(self, num_split=8):
        num_split = int(num_split)
        if num_split <= 0:
            raise ValueError("GradientPacker: num_split must be positive, got {}".format(num_split))
        self._num_split = num_split

    @call_only_once
    def compute_strategy(self, grads):
        """Plan the packing for gradients like ``grads`` (one tower's list).

        Returns:
            bool: False when they should not be packed: too few elements, or several dtypes.
        """
        for grad in grads:
            if not grad.shape.is_fully_defined():
                logger.info("GradientPacker: not packing, the shape of {} is {}.".format(
                    grad.name, grad.shape))
                return False
        total = sum(grad.shape.num_elements() for grad in grads)
        if total < self.MIN_ELEMENTS_PER_SPLIT * self._num_split:
            logger.info("GradientPacker: not packing {} gradient elements into {} splits (too few).".format(
                total, self._num_split))
            return False
        if len({grad.dtype.base_dtype for grad in grads}) != 1:
            logger.info("GradientPacker: not packing gradients of different dtypes.")
            return False
        split = total // self._num_split
        self._layout = PieceLayout.concatenated(
            grads, [split] * (self._num_split - 1) + [total - split * (self._num_split - 1)])
        logger.info("GradientPacker: packing {} gradients ({} elements) into {} splits.".format(
            len(grads), total, self._num_split))
        return True

    def _check_planned(self):
        if not hasattr(self, '_layout'):
            raise RuntimeError("GradientPacker: compute_strategy() has not returned True yet")

    def pack(self, grads):
        """One tower's N gradients -> ``num_split`` flat tensors: one concat, one split."""
        self._check_planned()
        grads = [dense_gradient(g) for g in grads]
        self._layout.check(grads)
        with tf.name_scope('GradientPacker'):
            flat = tf.concat([tf.reshape(g, [-1]) for g in grads], 0, name='concat_grads')
            return tf.split(flat, [sum(segment.size for segment in piece) for piece in self._layout.pieces])

    def unpack(self, packs):
        """``num_split`` flat tensors -> the N gradients, in their shapes."""
        self._check_planned()
        with tf.name_scope('GradientPacker'):
            return self._layout.unpack(packs)

    def pack_all(self, all_grads, devices):
        """:meth:`pack` of every tower's list, on its device."""
        return self._on_devices(self.pack, all_grads, devices)

    def unpack_all(self, all_packs, devices):
        """:meth:`unpack` of every tower's packs, on its device."""
        return self._on_devices(self.unpack, all_packs, devices)

    @staticmethod
    def _on_devices(func, per_tower, devices):
        result = []
        for items, device in zip(per_tower, devices):
            with tf.device(device):
                result.append(func(items))
        return result
