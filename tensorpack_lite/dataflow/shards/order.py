"""The global sample order of a sharded dataset, one per (seed, epoch), whatever the number of
workers, and each worker's share of it.

The order of an epoch is built in three steps, all drawn from ``numpy.random.default_rng([seed,
epoch])``:

1. the shards are put in a random order, and their samples laid end to end in it;
2. that sequence is cut into ``lanes`` contiguous lanes of equal length (the first ``total %
   lanes`` one sample longer), and each lane is shuffled within consecutive windows of
   ``window`` samples;
3. the global order takes one sample of each lane in turn: sample ``t`` of lane ``l`` is at
   place ``t * lanes + l``. Even lanes are read from their start, odd ones from their end, so
   that a shard two neighbouring lanes share is read by both at about the same time (it is
   then held in a cache only for a while, not for the whole epoch).

``world`` workers consume the order ``world`` samples at a step: at a step that starts at place
``c``, worker ``k`` takes the sample at place ``c + k``. When ``world`` divides ``lanes``, place
``c + k + j * world`` is always in a lane ``l`` with ``l % world == (c + k) % world``: a worker
reads ``lanes / world`` lanes, contiguous runs of its shards, and the shards no other worker
reads but at the lanes' ends. Otherwise it reads ``lanes / gcd(lanes, world)`` lanes: still
correct, with more shards read by several workers.

The position in an epoch is the number of places consumed: a resumed job, with as many workers
or not, goes on from there. An epoch ends when fewer than ``world`` places are left; those are
dropped (every worker takes the same number of samples per epoch: each step is collective).
"""

import math

import numpy as np

__all__ = ['GlobalOrder', 'share_length']


def share_length(total, consumed, world):
    """Samples each of ``world`` workers takes from an epoch of ``total`` places when
    ``consumed`` of them are consumed already."""
    return max(total - consumed, 0) // world


class GlobalOrder(object):
    """The sample order of the shards of ``counts`` (samples per shard, in index order); a
    sample is named by its number in index order (shard 0's first, ...)."""

    def __init__(self, counts, seed=0, shuffle=True, window=1024, lanes=48):
        self.counts = np.asarray(counts, dtype=np.int64)
        self.starts = np.concatenate([[0], np.cumsum(self.counts)])
        self.total = int(self.starts[-1])
        self.seed, self.shuffle, self.window, self.lanes = int(seed), bool(shuffle), int(window), int(lanes)
        if self.seed < 0 or self.window < 1 or self.lanes < 1:
            raise ValueError("GlobalOrder: seed must be >= 0, window and lanes >= 1 (got {}, {}, {})".format(
                seed, window, lanes))
        self._cached = (None, None)

    def describe(self):
        """What fixes the order, as a list of numbers: ``[seed, shuffle, window, lanes, total]``."""
        return [self.seed, int(self.shuffle), self.window, self.lanes, self.total]

    def epoch(self, epoch):
        """The global order of ``epoch``: an array of ``total`` sample numbers (a permutation)."""
        if self._cached[0] == epoch:
            return self._cached[1]
        rng = np.random.default_rng([self.seed, int(epoch)])
        n, lanes = self.total, self.lanes
        shard_order = rng.permutation(len(self.counts)) if self.shuffle else np.arange(len(self.counts))
        lengths = self.counts[shard_order]
        laid = np.repeat(self.starts[shard_order] - (np.cumsum(lengths) - lengths), lengths) + np.arange(n)
        m, r = divmod(n, lanes)
        lane_starts = np.arange(lanes) * m + np.minimum(np.arange(lanes), r)
        places = np.arange(n)
        lane = np.searchsorted(lane_starts, places, side='right') - 1
        t = places - lane_starts[lane]
        if self.shuffle:
            block = lane * (m // self.window + 2) + t // self.window
            laid = laid[np.lexsort((rng.random(n), block))]
        lane_lengths = m + (lane < r)
        t = np.where(lane % 2 == 0, t, lane_lengths - 1 - t)   # odd lanes are read backwards
        order = np.empty(n, dtype=np.int64)
        order[np.where(t < m, t * lanes + lane, lanes * m + lane)] = laid
        self._cached = (epoch, order)
        return order

    def share(self, epoch, consumed, rank, world):
        """The samples worker ``rank`` of ``world`` takes in ``epoch`` from place ``consumed``
        on, in the order it takes them."""
        if not 0 <= rank < world:
            raise ValueError("GlobalOrder.share: rank {} is not in [0, {})".format(rank, world))
        count = share_length(self.total, consumed, world)
        start = consumed + rank
        return self.epoch(epoch)[start:start + count * world:world]

    def locate(self, samples):
        """``(shards, records)``: the shard number and the record number in it of each of
        ``samples`` (arrays)."""
        shards = np.searchsorted(self.starts, samples, side='right') - 1
        return shards, samples - self.starts[shards]

    def lanes_read(self, world):
        """Lanes each of ``world`` workers reads."""
        return self.lanes // math.gcd(self.lanes, world)
