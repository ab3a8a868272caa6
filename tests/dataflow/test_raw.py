"""FakeData, DataFromQueue, RandomChooseData, RandomMixData and MultiProcessMapAndBatchData:
shapes, dtypes and domains, draws under a fixed seed (checked against the documented
constructions, computed here with numpy), exhaustion, batching in worker processes, errors."""

import queue

import numpy as np
import pytest

from tensorpack_lite.dataflow.raw import DataFromQueue, FakeData
from helpers.dataflows import SEED, epoch, reset


def test_fakedata_shapes_dtypes_and_domains(dataflow_seed):
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


def test_fakedata_values_follow_the_documented_formula(dataflow_seed):
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
