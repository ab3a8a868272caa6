"""A :class:`~tensorpack_lite.dataflow.shards.stream.ShardedData` in a job of several processes:
each process's share, given by its trainer, and whether a DataFlow's saved position holds for
any number of processes (what lets an elastic job resume in the middle of an epoch).

:func:`~tensorpack_lite.train.interface.launch_train_with_config` calls :func:`deal_shares` with
the rank and the number of processes of a multi-process trainer, and asks
:func:`position_fits_any_world` when a run resumes with another number of replicas.

Example::

    df = BatchData(ShardedData('s3://bucket/data'), 32)   # no rank/world: the trainer's
    deal_shares(df, rank=1, world=4)                        # what the launch does
    position_fits_any_world(df)                             # True
"""

from ...utils import logger
from ..common import BatchData, MapData, MapDataComponent, SelectComponent
from .stream import ShardedData

__all__ = ['sharded_streams', 'deal_shares', 'position_fits_any_world']

_KEEP_POSITION = (BatchData, MapData, MapDataComponent, SelectComponent)
"""Proxies whose state between two of their datapoints is the state of the DataFlow they wrap
(a batch holds nothing then): a position of the stream under them is theirs. Exact classes: a
subclass may hold more (``BatchDataByShape``'s holders, an augmentation's random state)."""


def _chain(df):
    """``df`` and the DataFlows it wraps (``.ds``), outermost first."""
    while df is not None:
        yield df
        df = getattr(df, 'ds', None)


def sharded_streams(df):
    """The :class:`ShardedData` in the chain of DataFlows ``df`` wraps (``df`` included)."""
    return [d for d in _chain(df) if isinstance(d, ShardedData)]


def deal_shares(df, rank, world):
    """Give every :class:`ShardedData` under ``df`` made without ``rank`` and ``world`` the share
    of process ``rank`` of ``world``; one line says so. Those made with them keep theirs."""
    for stream in sharded_streams(df):
        if stream.share_from_trainer:
            stream.set_share(rank, world)
            logger.info("ShardedData({}): the share of process {} of {} (from the trainer), {} datapoints "
                        "per epoch.".format(stream.store.url, rank, world, len(stream)))


def position_fits_any_world(df):
    """Whether the state of ``df`` taken between two of its datapoints is the same on every process
    and holds for any number of them: ``df`` is a :class:`ShardedData`, or one wrapped only in
    proxies that add nothing to its position (``BatchData``, ``MapData``, ``MapDataComponent``,
    ``SelectComponent``)."""
    for d in _chain(df):
        if isinstance(d, ShardedData):
            return True
        if type(d) not in _KEEP_POSITION:
            return False
    return False
