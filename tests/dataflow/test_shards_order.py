import numpy as np
import pytest

from tensorpack_lite.dataflow.shards.order import GlobalOrder, share_length

pytestmark = pytest.mark.quick

COUNTS = [97, 100, 103] * 20 + [41]     # 6041 samples in 61 shards


def steps(order, epoch, consumed, world):
    """The samples ``world`` workers take from place ``consumed`` on, step by step (worker 0's
    first), and each worker's share."""
    shares = [order.share(epoch, consumed, k, world) for k in range(world)]
    assert len({len(s) for s in shares}) == 1, "every worker takes as many samples"
    return np.stack(shares, axis=1).ravel(), shares


def test_an_epoch_is_a_permutation_drawn_from_the_seed_and_the_epoch():
    order = GlobalOrder(COUNTS, seed=5, window=64, lanes=12)
    first = order.epoch(0)
    assert sorted(first.tolist()) == list(range(6041))
    again = GlobalOrder(COUNTS, seed=5, window=64, lanes=12)
    assert np.array_equal(again.epoch(0), first)
    assert np.array_equal(again.epoch(3), order.epoch(3))
    others = [order.epoch(1), order.epoch(2), GlobalOrder(COUNTS, seed=6, window=64, lanes=12).epoch(0)]
    for other in others:
        assert sorted(other.tolist()) == list(range(6041))
        assert np.mean(other == first) < 0.01


def test_without_shuffle_and_one_lane_the_order_is_the_index_order():
    assert GlobalOrder(COUNTS, shuffle=False, lanes=1).epoch(4).tolist() == list(range(6041))


@pytest.mark.parametrize('world', [1, 2, 3, 4, 5, 6, 7, 12])
def test_the_global_order_does_not_depend_on_the_number_of_workers(world):
    order = GlobalOrder(COUNTS, seed=1, window=64, lanes=12)
    taken, shares = steps(order, 2, 0, world)
    assert len(shares[0]) == 6041 // world == share_length(6041, 0, world)
    assert np.array_equal(taken, order.epoch(2)[:len(taken)])


@pytest.mark.parametrize('world', [1, 2, 3, 4, 6, 12])
def test_a_worker_reads_about_its_part_of_the_shards(world):
    # world divides lanes: a worker reads lanes / world lanes, each a contiguous run of shards;
    # only the shards at the ends of the lanes are read by two workers.
    order = GlobalOrder(COUNTS, seed=2, window=64, lanes=12)
    for epoch in range(3):
        _, shares = steps(order, epoch, 0, world)
        read = [set(order.locate(s)[0].tolist()) for s in shares]
        lanes = 12 // world
        assert max(len(r) for r in read) <= 61 // world + lanes + 1, [len(r) for r in read]
        assert sum(len(r) for r in read) <= 61 + 12
        assert set().union(*read) == set(range(61))


def test_a_resize_mid_epoch_goes_on_with_the_same_order():
    order = GlobalOrder(COUNTS, seed=3, window=64, lanes=12)
    two, _ = steps(order, 0, 0, 2)
    consumed = 2 * 1000
    three, shares = steps(order, 0, consumed, 3)
    assert len(shares[0]) == (6041 - 2000) // 3
    seen = np.concatenate([two[:consumed], three])
    assert np.array_equal(seen, order.epoch(0)[:len(seen)])
    assert len(seen) == 6041 - (6041 - 2000) % 3


def test_what_fixes_the_order_and_bad_arguments():
    assert GlobalOrder(COUNTS, seed=3, window=64, lanes=12).describe() == [3, 1, 64, 12, 6041]
    with pytest.raises(ValueError, match='seed must be >= 0'):
        GlobalOrder(COUNTS, seed=-1)
    with pytest.raises(ValueError, match='rank 2 is not in'):
        GlobalOrder(COUNTS).share(0, 0, 2, 2)


def test_fewer_samples_than_lanes():
    order = GlobalOrder([2, 3], seed=0, window=4, lanes=8)
    assert sorted(order.epoch(0).tolist()) == [0, 1, 2, 3, 4]
    assert steps(order, 0, 0, 2)[0].tolist() == order.epoch(0)[:4].tolist()
