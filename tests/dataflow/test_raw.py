"""FakeData, DataFromQueue, RandomChooseData, RandomMixData and MultiProcessMapAndBatchData:
shapes, dtypes and domains, draws under a fixed seed (checked against the documented
constructions, computed here with numpy), exhaustion, batching in worker processes, errors."""

import queue

import numpy as np
import psutil
import pytest

from tensorpack_lite.dataflow import BatchData, DataFlow, DataFlowWorkerError, DataFromList, MapData
from tensorpack_lite.dataflow.common import RandomChooseData, RandomMixData
from tensorpack_lite.dataflow.parallel_map import (MultiProcessMapAndBatchData,
                                                   MultiProcessMapAndBatchDataZMQ)
from tensorpack_lite.dataflow.raw import DataFromQueue, FakeData
from tensorpack_lite.utils import utils as rng_utils

SEED = 123


@pytest.fixture
def fixed_seed(monkeypatch):
    """fix_rng_seed(SEED) for this test only."""
    monkeypatch.setattr(rng_utils, '_RNG_SEED', None)
    rng_utils.fix_rng_seed(SEED)


def epoch(df):
    return list(df)


def reset(df):
    df.reset_state()
    return df


class Tagged(DataFlow):
    """``[tag, i]`` for ``i < n``; counts its resets."""

    def __init__(self, tag, n):
        self.tag, self.n, self.resets = tag, n, 0

    def reset_state(self):
        self.resets += 1

    def __len__(self):
        return self.n

    def __iter__(self):
        for i in range(self.n):
            yield [self.tag, i]


# ----- FakeData ---------------------------------------------------------------------------------

def test_fakedata_shapes_dtypes_and_domains(fixed_seed):
    df = reset(FakeData([[2, 3], [4], []], size=50, dtype=['float32', 'int32', 'bool'],
                        domain=[(-2, 3), (10, 20), (0, 1)]))
    assert len(df) == 50
    dps = epoch(df)
    assert len(dps) == 50
    floats, ints, flags = (np.stack([dp[k] for dp in dps]) for k in range(3))
    assert floats.shape == (50, 2, 3) and floats.dtype == np.float32
    assert ints.shape == (50, 4) and ints.dtype == np.int32
    assert flags.shape == (50,) and flags.dtype == np.bool_
    assert -2 <= floats.min() and floats.max() < 3 and floats.min() < -1.5 and floats.max() > 2.5
    assert set(ints.ravel().tolist()) == set(range(10, 20))  # 200 draws cover the 10 values
    assert 10 < flags.sum() < 40


def test_fakedata_values_follow_the_documented_formula(fixed_seed):
    df = reset(FakeData([[2, 3]], size=2, domain=(-1, 3)))  # float32 by default
    rng = np.random.RandomState(SEED)
    expected = [(rng.rand(2, 3) * 4 - 1).astype(np.float32) for _ in range(2)]
    got = epoch(df)
    for (value,), exp in zip(got, expected):
        np.testing.assert_array_equal(value, exp)
    df.reset_state()  # a reset with the same fixed seed: the same data
    np.testing.assert_array_equal(epoch(df)[0][0], expected[0])


def test_fakedata_not_random_repeats_one_datapoint():
    df = reset(FakeData([[3], [1]], size=4, random=False, dtype='float64'))
    first, second = epoch(df), epoch(df)
    assert len(first) == 4
    for dp in first + second:
        np.testing.assert_array_equal(dp[0], first[0][0])
        np.testing.assert_array_equal(dp[1], first[0][1])
    assert first[0] is not first[1]  # shallow copies: replacing a component affects one datapoint
    assert first[0][0].dtype == np.float64


def test_fakedata_errors():
    with pytest.raises(ValueError, match='dtype has 1 entries but there are 2 shapes'):
        FakeData([[1], [2]], dtype=['float32'])
    with pytest.raises(ValueError, match=r'domain of component 1 is \(5, 5\)'):
        FakeData([[1], [2]], domain=[(0, 1), (5, 5)])


# ----- DataFromQueue ----------------------------------------------------------------------------

def test_datafromqueue_produces_what_the_queue_gets():
    q = queue.Queue()
    for i in range(3):
        q.put([i])
    df = reset(DataFromQueue(q))
    itr = iter(df)
    assert [next(itr) for _ in range(3)] == [[0], [1], [2]]
    q.put(['later'])
    assert next(itr) == ['later']
    with pytest.raises(NotImplementedError):
        len(df)


# ----- RandomChooseData -------------------------------------------------------------------------

def expected_choices(probs, sizes):
    """Sources drawn by one RandomState(SEED).choice(n, p=probs) per datapoint, until a source
    is drawn once more than its size (then the dataflow stops)."""
    rng = np.random.RandomState(SEED)
    taken = [0] * len(sizes)
    sources = []
    while True:
        k = rng.choice(len(sizes), p=probs)
        if taken[k] == sizes[k]:
            return sources
        taken[k] += 1
        sources.append(k)


def test_randomchoosedata_follows_the_probabilities(fixed_seed):
    a, b = Tagged('a', 1000), Tagged('b', 1000)
    df = reset(RandomChooseData([(a, 0.8), (b, 0.2)]))
    out = epoch(df)
    sources = expected_choices([0.8, 0.2], [1000, 1000])
    assert [dp[0] for dp in out] == ['ab'[k] for k in sources]
    # 'a' is exhausted first; the 'b's drawn meanwhile follow a negative binomial law:
    # mean 1000 * .2 / .8 = 250, standard deviation sqrt(1000 * .2) / .8 < 18
    count_a = sum(dp[0] == 'a' for dp in out)
    assert count_a == 1000 and abs(len(out) - count_a - 250) < 4 * 18
    assert [dp[1] for dp in out if dp[0] == 'a'] == list(range(1000))  # each source keeps its order


def test_randomchoosedata_equal_probabilities_and_stop_at_exhaustion(fixed_seed):
    short, long_ = Tagged('s', 3), Tagged('l', 100)
    df = reset(RandomChooseData([short, long_]))
    out = epoch(df)
    sources = expected_choices([0.5, 0.5], [3, 100])
    assert [dp[0] for dp in out] == ['sl'[k] for k in sources]
    assert sum(dp[0] == 's' for dp in out) == 3


def test_randomchoosedata_resets_each_dataflow_once_and_checks_its_input():
    a = Tagged('a', 2)
    reset(RandomChooseData([(a, 0.5), (a, 0.5)]))
    assert a.resets == 1
    with pytest.raises(ValueError, match=r'probabilities \[0.5, 0.6\] must be >= 0 and sum to 1'):
        RandomChooseData([(a, 0.5), (Tagged('b', 2), 0.6)])
    with pytest.raises(ValueError, match='mixes dataflows and'):
        RandomChooseData([(a, 0.5), Tagged('b', 2)])
    with pytest.raises(TypeError, match='entry #1 of df_lists is a str, not a DataFlow'):
        RandomChooseData([a, 'not a dataflow'])


# ----- RandomMixData ----------------------------------------------------------------------------

def test_randommixdata_mixes_all_datapoints(fixed_seed):
    sizes = [3, 5, 2]
    df = reset(RandomMixData([Tagged(tag, n) for tag, n in zip('xyz', sizes)]))
    assert len(df) == 10
    out = epoch(df)
    # tensorpack's construction: a random permutation of 0..9, each number mapped to the
    # dataflow whose range [sum of the sizes before, + size) holds it
    permutation = np.random.RandomState(SEED).permutation(10)
    owners = [0, 0, 0, 1, 1, 1, 1, 1, 2, 2]
    assert [dp[0] for dp in out] == ['xyz'[owners[p]] for p in permutation]
    for tag, n in zip('xyz', sizes):
        assert [dp[1] for dp in out if dp[0] == tag] == list(range(n))
    assert [dp[0] for dp in epoch(df)] != [dp[0] for dp in out]  # a new mix every epoch


def test_randommixdata_errors():
    class NoLength(DataFlow):
        def __iter__(self):
            yield [1]
    with pytest.raises(ValueError, match=r'dataflow\(s\) #\[1\] have none'):
        RandomMixData([Tagged('a', 1), NoLength()])

    class Liar(Tagged):
        def __len__(self):
            return self.n + 2
    df = reset(RandomMixData([Liar('a', 1)]))
    with pytest.raises(RuntimeError, match=r'dataflow #0 ended before producing the 3 datapoints'):
        epoch(df)


# ----- MultiProcessMapAndBatchData --------------------------------------------------------------

def numbered(n):
    return DataFromList([[np.full((2, 3), i, np.float32), i] for i in range(n)], shuffle=False)


def double(dp):
    return [dp[0] * 2, dp[1] * 10]


def drop_multiples_of_three(dp):
    return None if dp[1] % 3 == 0 else double(dp)


def fail_on_five(dp):
    if dp[1] == 5:
        raise ValueError('cannot map datapoint five')
    return dp


class FailingAfterTwo(DataFlow):
    def __len__(self):
        return 8

    def __iter__(self):
        yield [0]
        yield [1]
        raise IOError('dataset file vanished')


@pytest.fixture
def closing():
    dataflows = []
    yield dataflows.append
    for df in dataflows:
        df.close()


def test_one_worker_batches_like_batchdata_of_mapdata(closing):
    df = MultiProcessMapAndBatchData(numbered(12), num_proc=1, map_func=double, batch_size=4)
    closing(df)
    assert MultiProcessMapAndBatchData is MultiProcessMapAndBatchDataZMQ
    assert len(df) == 3
    df.reset_state()
    reference = reset(BatchData(MapData(numbered(12), double), 4))
    for _ in range(2):  # two epochs
        got, expected = epoch(df), epoch(reference)
        assert len(got) == 3
        for g, e in zip(got, expected):
            assert g[0].dtype == np.float32 and g[0].shape == (4, 2, 3)
            np.testing.assert_array_equal(g[0], e[0])
            np.testing.assert_array_equal(g[1], e[1])


def test_two_workers_drop_and_batch(closing):
    df = MultiProcessMapAndBatchData(numbered(12), num_proc=2, map_func=drop_multiples_of_three,
                                     batch_size=3, buffer_size=6)
    closing(df)
    df.reset_state()
    batches = epoch(df)
    assert len(batches) == 4
    kept = {i * 10 for i in range(12) if i % 3}
    for images, labels in batches:
        assert images.shape == (3, 2, 3) and labels.shape == (3,)
        assert set(labels.tolist()) <= kept
        for image, label in zip(images, labels):
            assert (image == label / 5).all()  # image 2 * i, label 10 * i


def test_worker_and_dispatcher_failures_are_reported(closing):
    df = MultiProcessMapAndBatchData(numbered(12), num_proc=2, map_func=fail_on_five, batch_size=2)
    closing(df)
    df.reset_state()
    with pytest.raises(DataFlowWorkerError,
                       match=r'worker #\d .* raised ValueError: cannot map datapoint five'):
        epoch(df)
    dispatcher_fails = MultiProcessMapAndBatchData(FailingAfterTwo(), num_proc=1, map_func=list, batch_size=4)
    closing(dispatcher_fails)
    dispatcher_fails.reset_state()
    with pytest.raises(DataFlowWorkerError, match=r'dispatcher .* raised OSError: dataset file vanished'):
        epoch(dispatcher_fails)


def test_processes_end_at_close():
    me = psutil.Process()
    before = {p.pid for p in me.children()}
    df = MultiProcessMapAndBatchData(numbered(4), num_proc=2, map_func=double, batch_size=2)
    df.reset_state()
    started = {p.pid for p in me.children()} - before
    assert len(started) == 3  # two workers and the dispatcher
    df.close()
    assert not started & {p.pid for p in me.children()}


def test_map_and_batch_argument_errors():
    with pytest.raises(ValueError, match=r'buffer_size \(4\) must be larger than batch_size \(4\)'):
        MultiProcessMapAndBatchData(numbered(12), 1, double, 4, buffer_size=4)
    with pytest.raises(ValueError, match='batch_size=5 is larger than len'):
        MultiProcessMapAndBatchData(numbered(4), 1, double, 5)
    with pytest.raises(ValueError, match='num_proc >= 1'):
        MultiProcessMapAndBatchData(numbered(4), 0, double, 2)
