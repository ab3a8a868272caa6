"""The DataFlow that streams a sharded dataset (:class:`ShardedData`)."""

import os
import shutil
import tempfile
import weakref

import numpy as np

from ...utils.serialize import loads
from ..base import DataFlow
from .cache import ShardCache
from .format import INDEX_NAME, ShardError, parse_index
from .order import GlobalOrder, share_length
from .store import ShardStore

__all__ = ['ShardedData']


def _read_index(store):
    where = store.where(INDEX_NAME)
    try:
        data = store.read(INDEX_NAME)
    except FileNotFoundError:
        raise ShardError("{}: missing: not a sharded dataset, or its writing did not finish (the index "
                         "is written last)".format(where)) from None
    return parse_index(data, where)


def _uses(shards, sizes):
    """For the shards read in the order of ``shards`` (an array): the shards in the order of their
    first use, the place of each one's last use, and the most bytes of the shards opened and not
    yet done with at one time (``sizes``: bytes of each shard)."""
    unique, first = np.unique(shards, return_index=True)
    _, from_end = np.unique(shards[::-1], return_index=True)
    last = len(shards) - 1 - from_end
    held = np.zeros(len(shards) + 1, dtype=np.int64)
    np.add.at(held, first, sizes[unique])
    np.add.at(held, last + 1, -sizes[unique])
    peak = int(np.cumsum(held).max()) if len(shards) else 0
    return unique[np.argsort(first)].tolist(), dict(zip(unique.tolist(), last.tolist())), peak


class ShardedData(DataFlow):
    """The share of worker ``rank`` of ``world`` of the sharded dataset at ``url`` (a directory,
    ``s3://`` or ``gs://``, written by :func:`save_shards`),
    one epoch per iteration, in the global order of
    :class:`~tensorpack_lite.dataflow.shards.order.GlobalOrder` (``seed``, ``shuffle``,
    ``window``, ``lanes``): the same for every ``world``.

    Shards are fetched ahead into ``cache_dir`` (a new temporary directory when None), at most
    ``cache_bytes`` of them at a time, checked against their sha256, and removed once read (see
    :class:`~tensorpack_lite.dataflow.shards.cache.ShardCache`). Every worker yields ``len(df)``
    datapoints per epoch, ``total // world``: the last ``total % world`` places of an epoch are
    not read.

    Without ``rank`` and ``world`` it is the whole dataset (0 of 1) until
    :func:`~tensorpack_lite.train.interface.launch_train_with_config` gives it the share of the
    process of a multi-process trainer (its rank, or task index, and the number of processes):
    ``len()`` is then that share's, so give ``TrainConfig`` its ``steps_per_epoch``.

    Its state (``get_state()``) is ``{'epoch', 'consumed': places of the epoch's global order
    consumed by all workers, 'order': what fixes the order}``: restored into a ``ShardedData`` of
    the same dataset and order with any ``world`` (and any cache), it goes on with the next
    places, reading no datapoint before them.
    """

    def __init__(self, url, rank=None, world=None, seed=0, shuffle=True, window=1024, lanes=48,
                 cache_dir=None, cache_bytes=1 << 30, storage_options=None, retry_seconds=120.0):
        if (rank is None) != (world is None):
            raise ValueError("ShardedData: give both rank and world, or neither (the trainer's), got "
                             "rank={}, world={}".format(rank, world))
        self.share_from_trainer = rank is None
        """Whether the share is the trainer's (made without ``rank`` and ``world``: see
        :func:`~tensorpack_lite.dataflow.shards.share.deal_shares`)."""
        self.set_share(0 if rank is None else rank, 1 if world is None else world)
        self.store = ShardStore(url, storage_options)
        self.index = _read_index(self.store)
        self.order = GlobalOrder([e['count'] for e in self.index['shards']], seed=seed, shuffle=shuffle,
                                 window=window, lanes=lanes)
        self._sizes = np.array([e['bytes'] for e in self.index['shards']], dtype=np.int64)
        self.cache_dir, self.cache_bytes, self.retry_seconds = cache_dir, int(cache_bytes), retry_seconds
        self._epoch, self._resume = 0, None
        self._position = None   # (epoch, consumed at the start, datapoints produced) while iterating
        self._live = None       # a weak reference to the generator of the iteration in progress
        self._directory = None
        self._fetched, self._cache = 0, None

    def set_share(self, rank, world):
        """Make this the share of worker ``rank`` of ``world`` from the next iteration on."""
        if not 0 <= int(rank) < int(world):
            raise ValueError("ShardedData: rank {} is not in [0, world={})".format(rank, world))
        self.rank, self.world = int(rank), int(world)

    def __len__(self):
        return share_length(self.order.total, 0, self.world)

    def reset_state(self):
        if self.cache_dir is not None:
            self._directory = os.fspath(self.cache_dir)
        elif self._directory is None:
            self._directory = tempfile.mkdtemp(prefix='tensorpack_lite-shards-')
            weakref.finalize(self, shutil.rmtree, self._directory, True)

    def __iter__(self):
        if self._directory is None:
            raise RuntimeError("ShardedData: call reset_state() before iterating")
        left_open = self._live and self._live()
        if left_open is not None:     # an iteration left open ends here, its cache with it
            left_open.close()
        epoch, start = self._epoch, self._resume or 0
        # the position is claimed now: an iteration dropped before its first datapoint uses it up
        self._epoch, self._resume, self._position = epoch + 1, None, (epoch, start, 0)
        samples = self.order.share(epoch, start, self.rank, self.world)
        cache = self._cache = ShardCache(self.store, self.index, self._directory, self.cache_bytes,
                                         self.retry_seconds)
        iteration = self._produce(epoch, start, samples, cache)
        self._live = weakref.ref(iteration)
        return iteration

    def _produce(self, epoch, start, samples, cache):
        shards, records = self.order.locate(samples)
        opened = {}
        try:
            order, last, peak = _uses(shards, self._sizes)
            if peak > self.cache_bytes:
                raise ValueError(
                    "ShardedData: cache_bytes={} is less than the {} bytes of the shards worker {} of {} "
                    "reads at one time in epoch {} (about 2 per lane it reads, {} lanes): raise it".format(
                        self.cache_bytes, peak, self.rank, self.world, epoch,
                        self.order.lanes_read(self.world)))
            cache.start(order)
            for done, (shard, record) in enumerate(zip(shards.tolist(), records.tolist()), 1):
                if shard not in opened:
                    opened[shard] = cache.open(shard)
                dp = loads(opened[shard].record(record))
                if last[shard] == done - 1:
                    opened.pop(shard).close()
                    cache.release(shard)
                self._position = (epoch, start, done)
                yield dp
        finally:
            for f in opened.values():
                f.close()
            cache.stop()
            self._fetched += cache.fetched_bytes
            self._position = self._live = self._cache = None

    @property
    def fetched_bytes(self):
        """Bytes this DataFlow read from the dataset's shards so far (all its iterations)."""
        return self._fetched + (self._cache.fetched_bytes if self._cache is not None else 0)

    def get_state(self):
        if self._position is not None and self._live() is not None:   # an iteration in progress
            epoch, start, done = self._position
            consumed = start + done * self.world
        else:
            epoch, consumed = self._epoch, self._resume or 0
        return {'epoch': epoch, 'consumed': consumed, 'order': self.order.describe()}

    def set_state(self, state):
        if list(state['order']) != self.order.describe():
            raise ValueError("ShardedData.set_state: the state is of another order ([seed, shuffle, window, "
                             "lanes, total] = {}, this one's {})".format(
                                 list(state['order']), self.order.describe()))
        self._epoch, self._resume = int(state['epoch']), int(state['consumed'])
