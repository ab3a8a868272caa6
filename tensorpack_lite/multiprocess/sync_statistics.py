"""How a layer reaches the other ranks of a multi-process job while its graph is built.

``BatchNorm(sync_statistics='horovod')`` averages its batch statistics over every rank of the
job. The layer does not know the engine that connects the ranks (Horovod, MPI, TensorFlow's
collective ops between workers): the trainer that builds the towers does, and provides the
mean for the time it builds them::

    with cross_rank_mean_scope(lambda t: hvd.allreduce(t, op=hvd.Average)):
        build_the_towers()

Inside the scope, :func:`cross_rank_mean` gives the mean of a tensor over the ranks (the
provider's result must be differentiable: its gradient is the mean of the gradients). The
scope belongs to the thread that opened it, and ends with the ``with`` block.
"""

import contextlib
import threading

__all__ = ['cross_rank_mean_scope', 'cross_rank_mean', 'has_cross_rank_mean']

_state = threading.local()


@contextlib.contextmanager
def cross_rank_mean_scope(mean_fn):
    """Make ``mean_fn(tensor) -> tensor`` the mean over the ranks, inside the ``with`` block."""
    if not callable(mean_fn):
        raise TypeError("cross_rank_mean_scope: mean_fn must be callable, got {!r}".format(mean_fn))
    previous = getattr(_state, 'mean_fn', None)
    _state.mean_fn = mean_fn
    try:
        yield
    finally:
        _state.mean_fn = previous


def has_cross_rank_mean():
    """Whether a trainer provides the mean over the ranks here."""
    return getattr(_state, 'mean_fn', None) is not None


def cross_rank_mean(tensor, owner='cross_rank_mean'):
    """The mean of ``tensor`` over the ranks of the job, from the enclosing
    :func:`cross_rank_mean_scope`. ``owner`` names the caller in the error raised outside one."""
    mean_fn = getattr(_state, 'mean_fn', None)
    if mean_fn is None:
        raise RuntimeError(
            "{}: no mean across ranks is available here. It is provided while a multi-process "
            "trainer (HorovodTrainer, under horovodrun or mpiexec, or CollectiveAllReduceTrainer) "
            "builds its towers.".format(owner))
    return mean_fn(tensor)
