"""Tests of the pure-Python DataFlow basics (tensorpack_lite.dataflow: base, raw, common)."""

import ast
import importlib
import itertools
import os
import pickle
import threading

import numpy as np
import pytest

import tensorpack_lite.dataflow as df
from tensorpack_lite.dataflow.base import DataFlowReentrantGuard

rng_utils = importlib.import_module('tensorpack_lite.utils.utils')


# ---------------------------------------------------------------- helpers / fixtures

class Counting(df.DataFlow):
    """Yields [i] for i in range(n); counts epochs started and resets."""

    def __init__(self, n=5, with_len=True):
        self.n = n
        self.with_len = with_len
        self.epochs = 0
        self.resets = 0

    def reset_state(self):
        self.resets += 1

    def __len__(self):
        if not self.with_len:
            return super().__len__()
        return self.n

    def __iter__(self):
        self.epochs += 1
        for i in range(self.n):
            yield [i]


class UniqueIds(df.DataFlow):
    """Each pass yields n new ids: pass p yields [p*n], ..., [p*n + n - 1]."""

    def __init__(self, n):
        self.n = n
        self.passes = 0

    def __len__(self):
        return self.n

    def __iter__(self):
        base = self.passes * self.n
        self.passes += 1
        for i in range(self.n):
            yield [base + i]


def ready(flow):
    flow.reset_state()
    return flow


def values(flow):
    """The single component of each datapoint, as a list."""
    return [dp[0] for dp in flow]


@pytest.fixture
def fixed_seed(monkeypatch):
    """Fix the global RNG seed for the test; the original is restored afterwards."""
    monkeypatch.setattr(rng_utils, '_RNG_SEED', None)
    rng_utils.fix_rng_seed(1234)
    yield 1234


# ---------------------------------------------------------------- package

@pytest.mark.quick
def test_public_names():
    expected = {'DataFlow', 'RNGDataFlow', 'ProxyDataFlow', 'DataFlowTerminated', 'DataFromList',
                'DataFromGenerator', 'DataFromIterable', 'BatchData', 'BatchDataByShape', 'MapData',
                'MapDataComponent', 'RepeatedData', 'RepeatedDataPoint', 'FixedSizeData',
                'ConcatData', 'JoinData', 'LocallyShuffleData', 'SelectComponent', 'CacheData',
                'PrintData', 'TestDataSpeed',
                # parallel runners, remote data, serializers (tested in their own modules)
                'MultiProcessRunner', 'MultiProcessRunnerZMQ', 'MultiThreadRunner', 'DataFlowWorkerError',
                'PrefetchData', 'MultiProcessPrefetchData', 'PrefetchDataZMQ', 'MultiThreadPrefetchData',
                'MultiThreadMapData', 'MultiProcessMapData', 'MultiProcessMapDataZMQ',
                'send_dataflow_zmq', 'RemoteDataZMQ', 'MsgpackSerializer', 'NumpySerializer',
                'TFRecordSerializer',
                # second round: formats, extra flows, image flows (tested in their own modules)
                'DataFromQueue', 'FakeData', 'RandomChooseData', 'RandomMixData',
                'MultiProcessMapAndBatchData', 'MultiProcessMapAndBatchDataZMQ', 'LMDBSerializer',
                'HDF5Serializer', 'LMDBData',
                'LMDBDataDecoder', 'CaffeLMDB', 'HDF5Data', 'SVMLightData', 'ImageFromFile',
                'AugmentImageComponent', 'AugmentImageComponents', 'AugmentImageCoordinates',
                # sharded datasets (dataflow/shards/, tested in tests/dataflow/test_shards_*.py)
                'save_shards', 'ShardedData', 'GlobalOrder', 'ShardError'}
    modules = {'dataset', 'imgaug'}
    aliases = {'PrefetchData': 'MultiProcessRunner', 'MultiProcessPrefetchData': 'MultiProcessRunner',
               'PrefetchDataZMQ': 'MultiProcessRunnerZMQ', 'MultiThreadPrefetchData': 'MultiThreadRunner',
               'MultiProcessMapData': 'MultiProcessMapDataZMQ',
               'MultiProcessMapAndBatchData': 'MultiProcessMapAndBatchDataZMQ'}
    assert set(df.__all__) == expected | modules
    assert len(df.__all__) == len(expected | modules)
    assert df.dataset.__name__ == 'tensorpack_lite.dataflow.dataset'
    assert df.imgaug.ImageAugmentor.__module__ == 'tensorpack_lite.dataflow.imgaug.base'
    for name in expected:
        assert getattr(df, name).__name__ == aliases.get(name, name), name


def test_dataflow_modules_do_not_import_tensorflow():
    pkg_dir = os.path.dirname(df.__file__)
    for fname in ('__init__.py', 'base.py', 'common.py', 'raw.py'):
        with open(os.path.join(pkg_dir, fname)) as f:
            tree = ast.parse(f.read())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [('.' * node.level) + (node.module or '')]
            else:
                continue
            for name in names:
                assert 'tensorflow' not in name and 'compat' not in name \
                    and 'tfutils' not in name, (fname, name)


# ---------------------------------------------------------------- base

@pytest.mark.quick
def test_dataflow_is_abstract_and_len_is_optional():
    with pytest.raises(TypeError):
        df.DataFlow()
    flow = ready(Counting(3, with_len=False))
    with pytest.raises(NotImplementedError, match='Counting'):
        len(flow)
    assert bool(flow)               # truthiness does not depend on len()
    assert values(flow) == [0, 1, 2]
    assert values(flow) == [0, 1, 2]  # re-iterable: each iteration is an epoch
    # list() of a flow without length still works (also through proxies)
    assert list(df.MapData(flow, lambda dp: dp)) == [[0], [1], [2]]


def test_dataflow_terminated_is_not_an_exception_subclass():
    assert issubclass(df.DataFlowTerminated, BaseException)
    assert not issubclass(df.DataFlowTerminated, Exception)


def test_rng_dataflow_needs_reset_and_gets_fresh_rng():
    class R(df.RNGDataFlow):
        def __iter__(self):
            yield [self.rng.rand()]

    r = R()
    with pytest.raises(RuntimeError, match='reset_state'):
        list(r)
    r.reset_state()
    first = r.rng
    assert isinstance(first, np.random.RandomState)
    r.reset_state()
    assert r.rng is not first


def test_proxy_forwards_everything():
    inner = Counting(4)
    proxy = df.ProxyDataFlow(inner)
    proxy.reset_state()
    assert inner.resets == 1
    assert len(proxy) == 4
    assert values(proxy) == [0, 1, 2, 3]
    assert inner.epochs == 1


def test_reset_state_propagates_through_a_chain():
    inner = Counting(4)
    chain = df.PrintData(df.RepeatedData(df.MapData(inner, lambda dp: dp), 2), num=0)
    chain.reset_state()
    assert inner.resets == 1


def test_reentrant_guard_errors_and_pickles():
    guard = DataFlowReentrantGuard('MyFlow')
    with guard:
        with pytest.raises(threading.ThreadError, match='MyFlow is not reentrant'):
            with guard:
                pass
    with guard:  # released after the first use
        pass
    copied = pickle.loads(pickle.dumps(guard))
    with copied:
        pass


# ---------------------------------------------------------------- raw

def test_data_from_list_order_and_shuffle(fixed_seed):
    lst = [[i] for i in range(20)]
    assert values(ready(df.DataFromList(lst, shuffle=False))) == list(range(20))

    a = ready(df.DataFromList(lst))
    epoch1, epoch2 = values(a), values(a)
    assert sorted(epoch1) == list(range(20)) and sorted(epoch2) == list(range(20))
    assert epoch1 != list(range(20))
    assert epoch1 != epoch2            # a new order every epoch
    assert len(a) == 20

    b = ready(df.DataFromList(lst))    # same seed -> same sequence of orders
    assert values(b) == epoch1 and values(b) == epoch2

    expected = np.arange(20)
    np.random.RandomState(fixed_seed).shuffle(expected)
    assert epoch1 == expected.tolist()


def test_data_from_generator_function_and_size():
    def gen():
        for i in range(3):
            yield [i]

    flow = ready(df.DataFromGenerator(gen))
    assert values(flow) == [0, 1, 2]
    assert values(flow) == [0, 1, 2]
    with pytest.raises(NotImplementedError):
        len(flow)
    assert len(df.DataFromGenerator(gen, size=3)) == 3


def test_data_from_generator_object_warns_and_runs_once(log_records):
    flow = ready(df.DataFromGenerator(([i] for i in range(3))))
    assert any('only once' in m for m in log_records.messages())
    assert values(flow) == [0, 1, 2]
    assert values(flow) == []
    n_before = len(log_records)
    ready(df.DataFromGenerator(lambda: iter([[1]])))  # a function: no warning
    ready(df.DataFromGenerator([[1], [2]]))           # a re-iterable list: no warning
    assert len(log_records) == n_before


def test_repeating_an_exhausted_generator_forever_fails_instead_of_hanging():
    flow = ready(df.RepeatedData(df.DataFromGenerator(iter([[1], [2]])), -1))
    itr = iter(flow)
    assert [next(itr), next(itr)] == [[1], [2]]
    with pytest.raises(RuntimeError, match='no datapoint'):
        next(itr)


def test_data_from_iterable():
    flow = ready(df.DataFromIterable([[1], [2], [3]]))
    assert len(flow) == 3
    assert values(flow) == [1, 2, 3] and values(flow) == [1, 2, 3]
    no_len = df.DataFromIterable(([i] for i in range(2)))
    with pytest.raises(NotImplementedError):
        len(no_len)
    assert values(no_len) == [0, 1]


# ---------------------------------------------------------------- BatchData

def test_batch_data_shapes_and_dtypes():
    lst = [[np.full((2, 3), i, dtype='uint8'), i, float(i), i % 2 == 0, np.float64(i), 'ab']
           for i in range(10)]
    flow = ready(df.BatchData(df.DataFromList(lst, shuffle=False), 4))
    batches = list(flow)
    assert len(batches) == 2 == len(flow)
    img, ints, floats, bools, np_floats, strs = batches[1]
    assert img.shape == (4, 2, 3) and img.dtype == np.uint8
    assert img[:, 0, 0].tolist() == [4, 5, 6, 7]
    assert ints.dtype == np.int32 and ints.tolist() == [4, 5, 6, 7]
    assert floats.dtype == np.float32 and floats.tolist() == [4., 5., 6., 7.]
    assert bools.dtype == np.bool_ and bools.tolist() == [True, False, True, False]
    assert np_floats.dtype == np.float64
    assert strs.shape == (4,) and strs.tolist() == ['ab'] * 4


def test_batch_data_integer_promotion_and_mixed_numbers():
    big = [[2 ** 40 + i] for i in range(2)]
    out = list(ready(df.BatchData(df.DataFromList(big, shuffle=False), 2)))[0][0]
    assert out.dtype == np.int64 and out.tolist() == [2 ** 40, 2 ** 40 + 1]
    mixed = [[1], [2.5]]
    out = list(ready(df.BatchData(df.DataFromList(mixed, shuffle=False), 2)))[0][0]
    assert out.dtype == np.float32 and out.tolist() == [1.0, 2.5]


@pytest.mark.parametrize('n, bs, remainder, expected_sizes', [
    (10, 4, False, [4, 4]),
    (10, 4, True, [4, 4, 2]),
    (8, 4, False, [4, 4]),
    (8, 4, True, [4, 4]),
    (3, 3, False, [3]),
])
def test_batch_data_remainder(n, bs, remainder, expected_sizes):
    flow = ready(df.BatchData(Counting(n), bs, remainder=remainder))
    batches = list(flow)
    assert [len(b[0]) for b in batches] == expected_sizes
    assert len(flow) == len(expected_sizes)
    assert np.concatenate([b[0] for b in batches]).tolist() == list(range(sum(expected_sizes)))


def test_batch_data_argument_errors():
    with pytest.raises(ValueError, match=r'batch_size=6 is larger than len\(ds\)=5'):
        df.BatchData(Counting(5), 6)
    df.BatchData(Counting(5), 6, remainder=True)          # allowed: one smaller batch
    df.BatchData(Counting(5, with_len=False), 6)          # unknown length: cannot check
    with pytest.raises(ValueError, match='positive'):
        df.BatchData(Counting(5), 0)


def test_batch_data_dicts_and_use_list():
    lst = [{'x': np.ones(2, 'float32') * i, 'y': i} for i in range(4)]
    (batch,) = list(ready(df.BatchData(df.DataFromList(lst, shuffle=False), 4)))
    assert set(batch) == {'x', 'y'}
    assert batch['x'].shape == (4, 2) and batch['x'].dtype == np.float32
    assert batch['y'].tolist() == [0, 1, 2, 3] and batch['y'].dtype == np.int32

    ragged = [[np.zeros(i), i] for i in range(1, 4)]
    (batch,) = list(ready(df.BatchData(df.DataFromList(ragged, shuffle=False), 3, use_list=True)))
    assert isinstance(batch[0], list) and [a.shape for a in batch[0]] == [(1,), (2,), (3,)]
    assert batch[1] == [1, 2, 3]


def test_batch_data_shape_mismatch_names_component_and_shapes():
    lst = [[0, np.zeros((2, 2))], [1, np.zeros((2, 2))], [2, np.zeros((3, 2))]]
    flow = ready(df.BatchData(df.DataFromList(lst, shuffle=False), 3))
    with pytest.raises(ValueError) as e:
        list(flow)
    msg = str(e.value)
    assert 'component 1' in msg
    assert '(2, 2)' in msg and '(3, 2)' in msg
    assert 'positions [0, 1]' in msg and 'positions [2]' in msg

    lst = [{'img': np.zeros(2)}, {'img': np.zeros(3)}]
    with pytest.raises(ValueError, match="component 'img'"):
        list(ready(df.BatchData(df.DataFromList(lst, shuffle=False), 2)))


def test_batch_data_structure_errors():
    with pytest.raises(TypeError, match="component 0 of type object"):
        list(ready(df.BatchData(df.DataFromList([[object()]] * 2, shuffle=False), 2)))
    with pytest.raises(ValueError, match='batch position 1'):
        list(ready(df.BatchData(df.DataFromList([[1, 2], [1]], shuffle=False), 2)))
    with pytest.raises(TypeError, match='list, tuple or dict'):
        list(ready(df.BatchData(df.DataFromList([5, 6], shuffle=False), 2)))


def test_batch_data_by_shape():
    lst = [[np.zeros(2), 0], [np.zeros(3), 1], [np.zeros(2), 2], [np.zeros(3), 3],
           [np.zeros(5), 4]]
    flow = ready(df.BatchDataByShape(df.DataFromList(lst, shuffle=False), 2, idx=0))
    batches = list(flow)
    assert [(b[0].shape, b[1].tolist()) for b in batches] == [((2, 2), [0, 2]), ((2, 3), [1, 3])]


# ---------------------------------------------------------------- mapping

def test_map_data_filters_and_copies():
    lst = [[i, 'keep'] for i in range(5)]
    originals = [list(dp) for dp in lst]

    def func(dp):
        if dp[0] % 2:
            return None
        dp[0] = dp[0] * 10   # modifies the (shallow) copy only
        return dp

    flow = ready(df.MapData(df.DataFromList(lst, shuffle=False), func))
    assert list(flow) == [[0, 'keep'], [20, 'keep'], [40, 'keep']]
    assert lst == originals
    assert len(flow) == 5  # the length of ds: unreliable after filtering, as documented


def test_map_data_component_lists_tuples_dicts():
    lst = [[i, i * 2] for i in range(4)]
    flow = ready(df.MapDataComponent(df.DataFromList(lst, shuffle=False),
                                     lambda v: None if v == 4 else v + 100, index=1))
    assert list(flow) == [[0, 100], [1, 102], [3, 106]]
    assert lst == [[0, 0], [1, 2], [2, 4], [3, 6]]

    tuples = [(1, 2)]
    out = list(ready(df.MapDataComponent(df.DataFromList(tuples, shuffle=False), str)))
    assert out == [['1', 2]] and tuples == [(1, 2)]

    dicts = [{'a': 1, 'b': 2}]
    out = list(ready(df.MapDataComponent(df.DataFromList(dicts, shuffle=False),
                                         lambda v: -v, index='b')))
    assert out == [{'a': 1, 'b': -2}] and dicts == [{'a': 1, 'b': 2}]

    with pytest.raises(ValueError, match="no component 'c'"):
        list(ready(df.MapDataComponent(df.DataFromList(dicts, shuffle=False), str, index='c')))


def test_select_component():
    lst = [[1, 2, 3]]
    assert list(ready(df.SelectComponent(df.DataFromList(lst, shuffle=False), [2, 0]))) == [[3, 1]]
    dicts = [{'a': 1, 'b': 2}]
    assert list(ready(df.SelectComponent(df.DataFromList(dicts, shuffle=False), ['b']))) == [[2]]
    with pytest.raises(ValueError, match='no component 5'):
        list(ready(df.SelectComponent(df.DataFromList(lst, shuffle=False), [0, 5])))


# ---------------------------------------------------------------- repeating / sizing

def test_repeated_data():
    flow = ready(df.RepeatedData(Counting(3), 2))
    assert values(flow) == [0, 1, 2, 0, 1, 2]
    assert len(flow) == 6

    forever = ready(df.RepeatedData(Counting(3), -1))
    with pytest.raises(NotImplementedError, match='infinite'):
        len(forever)
    assert [dp[0] for dp in itertools.islice(forever, 8)] == [0, 1, 2, 0, 1, 2, 0, 1]
    with pytest.raises(ValueError):
        df.RepeatedData(Counting(3), -2)


def test_repeated_datapoint():
    flow = ready(df.RepeatedDataPoint(Counting(3), 2))
    assert values(flow) == [0, 0, 1, 1, 2, 2]
    assert len(flow) == 6
    with pytest.raises(ValueError):
        df.RepeatedDataPoint(Counting(3), 0)


@pytest.mark.parametrize('size, keep, epochs', [
    (3, True, [[0, 1, 2], [3, 4, 0], [1, 2, 3]]),
    (3, False, [[0, 1, 2], [0, 1, 2], [0, 1, 2]]),
    (6, False, [[0, 1, 2, 3, 4, 0], [0, 1, 2, 3, 4, 0]]),
])
def test_fixed_size_data(size, keep, epochs):
    flow = ready(df.FixedSizeData(Counting(5), size, keep_state=keep))
    assert len(flow) == size
    assert [values(flow) for _ in epochs] == epochs


def test_fixed_size_data_is_not_reentrant():
    flow = ready(df.FixedSizeData(Counting(5), 3))
    first = iter(flow)
    next(first)
    with pytest.raises(RuntimeError, match='FixedSizeData is not reentrant'):
        next(iter(flow))
    assert [dp[0] for dp in first] == [1, 2]
    assert values(flow) == [3, 4, 0]   # works again once the first iteration ended


# ---------------------------------------------------------------- combining

def test_concat_data():
    a, b = Counting(2), Counting(3)
    flow = ready(df.ConcatData([a, b]))
    assert a.resets == 1 and b.resets == 1
    assert len(flow) == 5
    assert values(flow) == [0, 1, 0, 1, 2]


def test_join_data_lists(log_records):
    a = df.DataFromList([[i, -i] for i in range(3)], shuffle=False)
    b = df.DataFromList([['x%d' % i] for i in range(3)], shuffle=False)
    flow = ready(df.JoinData([a, b]))
    assert list(flow) == [[0, 0, 'x0'], [1, -1, 'x1'], [2, -2, 'x2']]
    assert len(flow) == 3
    assert not any('different lengths' in m for m in log_records.messages())

    short = df.DataFromList([['s']], shuffle=False)
    flow = ready(df.JoinData([a, short]))
    assert any('different lengths [3, 1]' in m for m in log_records.messages())
    assert list(flow) == [[0, 0, 's']]
    assert len(flow) == 1


def test_join_data_dicts_and_errors():
    a = df.DataFromList([{'a': i} for i in range(2)], shuffle=False)
    b = df.DataFromList([{'b': i * 10} for i in range(2)], shuffle=False)
    assert list(ready(df.JoinData([a, b]))) == [{'a': 0, 'b': 0}, {'a': 1, 'b': 10}]
    with pytest.raises(ValueError, match="key 'a' is produced by both dataflow #0 and dataflow #1"):
        list(ready(df.JoinData([a, a])))
    lists = df.DataFromList([[1], [2]], shuffle=False)
    with pytest.raises(TypeError, match='dataflow #1'):
        list(ready(df.JoinData([lists, a])))


def test_join_data_resets_a_shared_dataflow_once():
    shared = Counting(2)
    flow = df.JoinData([shared, shared])
    flow.reset_state()
    assert shared.resets == 1
    assert list(flow) == [[0, 0], [1, 1]]


# ---------------------------------------------------------------- shuffling / caching

def test_locally_shuffle_data_is_a_delayed_permutation(fixed_seed):
    n, buffer_size, taken = 10, 6, 40
    flow = ready(df.LocallyShuffleData(UniqueIds(n), buffer_size, shuffle_interval=2))
    assert len(flow) == n
    out = [dp[0] for dp in itertools.islice(flow, taken)]
    # Each input after the first `buffer_size` pushes one output out; the input that pushed
    # the last output is not in the buffer yet.  So the outputs are `taken` distinct ids,
    # and outputs + buffer are exactly the first taken + buffer_size - 1 inputs.
    consumed = taken + buffer_size - 1
    assert len(set(out)) == taken
    assert set(out) <= set(range(consumed))
    buffered = sorted(dp[0] for dp in flow.q)
    assert sorted(out + buffered) == list(range(consumed))
    assert out != sorted(out)

    again = ready(df.LocallyShuffleData(UniqueIds(n), buffer_size, shuffle_interval=2))
    assert [dp[0] for dp in itertools.islice(again, taken)] == out


def test_locally_shuffle_data_reuse_and_reentrancy(fixed_seed):
    flow = ready(df.LocallyShuffleData(UniqueIds(5), 4, num_reuse=2))
    assert len(flow) == 10
    out = [dp[0] for dp in itertools.islice(flow, 30)]
    counts = {v: out.count(v) for v in out}
    assert max(counts.values()) == 2
    # inputs 0, 1 fill the buffer; inputs 2..16 push out 2 entries each; the second copy
    # of input 16 is not appended yet
    assert sorted(out + [dp[0] for dp in flow.q]) == sorted(list(range(16)) * 2 + [16])

    first = iter(flow)
    next(first)
    with pytest.raises(RuntimeError, match='LocallyShuffleData is not reentrant'):
        next(iter(flow))


def test_cache_data_reads_underlying_flow_once():
    inner = Counting(4)
    flow = ready(df.CacheData(inner))
    assert [values(flow) for _ in range(3)] == [[0, 1, 2, 3]] * 3
    assert inner.epochs == 1
    assert len(flow) == 4


def test_cache_data_caches_only_a_complete_epoch():
    inner = Counting(4)
    flow = ready(df.CacheData(inner))
    itr = iter(flow)
    next(itr)
    itr.close()                       # the first epoch was abandoned
    assert values(flow) == [0, 1, 2, 3]
    assert values(flow) == [0, 1, 2, 3]
    assert inner.epochs == 2
    flow.reset_state()                # reset empties the cache
    assert values(flow) == [0, 1, 2, 3]
    assert inner.epochs == 3


def test_cache_data_shuffle(fixed_seed):
    inner = Counting(20)
    flow = ready(df.CacheData(inner, shuffle=True))
    assert values(flow) == list(range(20))   # the first epoch comes from ds, in its order
    second = values(flow)
    assert sorted(second) == list(range(20)) and second != list(range(20))
    assert inner.epochs == 1


# ---------------------------------------------------------------- debugging helpers

def test_print_data_logs_a_summary(log_records):
    lst = [[np.arange(6, dtype='float32').reshape(2, 3), 7, [1, 2, 3, 4, 5]],
           [np.zeros((2, 3), 'float32'), 8, []]]
    flow = ready(df.PrintData(df.DataFromList(lst, shuffle=False), num=1, name='train',
                              max_list=2))
    out = list(flow)
    assert len(out) == 2 and all(o is e for o, e in zip(out, lst))   # passed through as is
    text = '\n'.join(log_records.messages())
    assert 'Contents of DataFlow (train)' in text
    assert 'datapoint 0/1 with 3 components' in text
    assert 'ndarray:float32 of shape (2, 3) in range [0.0, 5.0]' in text
    assert 'int with value 7' in text
    assert 'list of len 5' in text and '...' in text
    assert 'datapoint 1/1' not in text and 'value 8' not in text   # only num=1 datapoint
    list(flow)
    assert 'value 8' not in '\n'.join(log_records.messages())   # not again next epoch
    flow.reset_state()
    n_before = len(log_records)
    list(flow)
    assert len(log_records) > n_before   # reset restarts the count


def test_test_data_speed(log_records):
    speed = df.TestDataSpeed(df.DataFromList([[i] for i in range(300)]), size=200,
                             warmup=10).start()
    assert isinstance(speed, float) and speed > 0
    assert any('200 datapoints' in m and 'datapoints/s' in m for m in log_records.messages())

    short = df.TestDataSpeed(Counting(5), size=50)
    short.start()
    assert any('ended after 5 of the 50' in m for m in log_records.messages())
    assert values(short) == [0, 1, 2, 3, 4]   # iterating runs the test, then produces data
