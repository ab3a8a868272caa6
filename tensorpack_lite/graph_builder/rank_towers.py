"""Several towers inside one rank of a multi-process job (``HorovodTrainer(gpus=...)``): the
towers of a rank are replicas as in :class:`SyncMultiGPUReplicatedBuilder`, and what
crosses the ranks (the gradients, the batch statistics of synchronized BatchNorm) goes
through one reduction per rank, given by the trainer (Horovod's or the MPI engine's)::

    builder = RankTowersBuilder(['/cpu:0', '/cpu:1'], average=True,
                                reduce_across_ranks=lambda ts: [hvd.allreduce(t) for t in ts])
    with cross_rank_mean_scope(towers_and_ranks_mean(2, lambda t: hvd.allreduce(t))):
        grad_list = builder.call_for_each_tower(tower_fn)
    train_op, post_init_op = builder.build(grad_list, get_opt_fn)
"""

from ..compat import tf
from ..multiprocess.collective import collective_mean, tower_group
from ..tfutils.tower_context import get_current_tower_context
from .training import SyncMultiGPUReplicatedBuilder

__all__ = ['RankTowersBuilder', 'towers_and_ranks_mean']


class RankTowersBuilder(SyncMultiGPUReplicatedBuilder):
    """The K towers of one rank: tower 0 owns the global variables, tower k > 0 keeps local
    replicas ``tower{k}/...`` (see :class:`SyncMultiGPUReplicatedBuilder`). Each step the
    towers' gradients are summed (``average``: averaged) on the towers' devices, that one list
    goes through ``reduce_across_ranks`` (the same sum or mean over the ranks), and every tower
    applies the result to its replica. With the same K on every rank, ``average=True`` applies
    the mean gradient over every tower of every rank, ``average=False`` their sum.

    Args:
        towers (int or list): this rank's towers (GPU ids or device strings).
        average (bool): average the towers' gradients (else sum them); ``reduce_across_ranks``
            must do the same over the ranks.
        reduce_across_ranks: ``list of tensors -> list of tensors``, the same on every rank:
            the sums (or means) over the ranks.
    """

    def __init__(self, towers, average, reduce_across_ranks):
        if not callable(reduce_across_ranks):
            raise TypeError("RankTowersBuilder: reduce_across_ranks must be callable, got {!r}".format(
                reduce_across_ranks))
        super().__init__(towers, average, 'gpu')
        self._reduce_across_ranks = reduce_across_ranks

    def _allreduce(self, grad_list):
        in_rank = super()._allreduce(grad_list)[0]   # 'gpu': one list, the same for every tower
        across = list(self._reduce_across_ranks(in_rank))
        if len(across) != len(in_rank):
            raise ValueError("RankTowersBuilder: reduce_across_ranks returned {} tensors for {}".format(
                len(across), len(in_rank)))
        return [across] * len(grad_list)


def towers_and_ranks_mean(num_tower, rank_mean):
    """The mean over every tower of every rank, as a function for
    :func:`~tensorpack_lite.multiprocess.sync_statistics.cross_rank_mean_scope`, called in each of
    the ``num_tower`` training towers of a rank (same shapes everywhere).

    Tower 0 alone crosses the ranks: it takes ``rank_mean`` (the differentiable mean over the
    ranks) of the mean over this rank's towers (:func:`collective_mean`); a second collective
    mean, to which tower 0 gives K times that value and the others zeros, hands it to every
    tower. So a rank makes one cross-rank reduction per call (a sequence that every rank runs
    in the same order, as the MPI engine needs), every tower of every rank gets the same bits,
    and the gradient reaches every tower's input (the mean of the upstream gradients of all
    towers of all ranks).

    Args:
        num_tower (int): the towers of each rank.
        rank_mean: ``tensor -> tensor``, the mean over the ranks, differentiable.
    """
    def mean(tensor):
        ctx = get_current_tower_context()
        if ctx is None or not ctx.is_training or ctx.total != num_tower:
            raise RuntimeError("towers_and_ranks_mean: called outside the {} training towers of this rank "
                               "(tower context: {})".format(num_tower, ctx and ctx.ns_name))
        tensor = tf.convert_to_tensor(tensor)
        group = tower_group(num_tower, tensor.device)
        in_rank = collective_mean(tensor, group)
        with tf.name_scope('towers_and_ranks_mean'):
            if ctx.index == 0:
                share = rank_mean(in_rank) * float(num_tower)
            else:   # depends on in_rank, so that this tower's member of the first mean runs
                share = in_rank * 0.0
            share = tf.identity(share, name='share')
        return collective_mean(share, group)
    return mean
