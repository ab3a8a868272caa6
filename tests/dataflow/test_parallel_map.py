"""FakeData, DataFromQueue, RandomChooseData, RandomMixData and MultiProcessMapAndBatchData:
shapes, dtypes and domains, draws under a fixed seed (checked against the documented
constructions, computed here with numpy), exhaustion, batching in worker processes, errors."""

import numpy as np
import psutil
import pytest

from tensorpack_lite.dataflow import BatchData, DataFlow, DataFlowWorkerError, DataFromList, MapData
from tensorpack_lite.dataflow.parallel_map import (MultiProcessMapAndBatchData,
                                                   MultiProcessMapAndBatchDataZMQ)
from helpers.dataflows import epoch, reset


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
