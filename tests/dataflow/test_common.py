"""FakeData, DataFromQueue, RandomChooseData, RandomMixData and MultiProcessMapAndBatchData:
shapes, dtypes and domains, draws under a fixed seed (checked against the documented
constructions, computed here with numpy), exhaustion, batching in worker processes, errors."""

import numpy as np
import pytest

from tensorpack_lite.dataflow import DataFlow
from tensorpack_lite.dataflow.common import RandomChooseData, RandomMixData
from helpers.dataflows import SEED, epoch, reset


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


def test_randomchoosedata_follows_the_probabilities(dataflow_seed):
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


def test_randomchoosedata_equal_probabilities_and_stop_at_exhaustion(dataflow_seed):
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


def test_randommixdata_mixes_all_datapoints(dataflow_seed):
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
