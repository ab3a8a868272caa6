"""Common DataFlow transformations: batching, mapping, repeating, joining, shuffling,
caching, plus two debugging helpers (:class:`PrintData`, :class:`TestDataSpeed`)."""

import itertools
import time
from collections import defaultdict, deque
from collections.abc import Mapping
from copy import copy

import numpy as np

from ..utils import logger
from ..utils.utils import get_rng, get_tqdm
from .base import DataFlow, DataFlowReentrantGuard, ProxyDataFlow, RNGDataFlow
from .epochs import repeat_epochs
from .state import get_dataflow_state, set_dataflow_state

__all__ = ['TestDataSpeed', 'PrintData', 'BatchData', 'BatchDataByShape', 'FixedSizeData',
           'MapData', 'MapDataComponent', 'RepeatedData', 'RepeatedDataPoint', 'RandomChooseData',
           'RandomMixData', 'ConcatData', 'JoinData', 'SelectComponent', 'LocallyShuffleData',
           'CacheData']

_INT32_MIN, _INT32_MAX = np.iinfo(np.int32).min, np.iinfo(np.int32).max


def _component_name(key):
    return "component {!r}".format(key)


class TestDataSpeed(ProxyDataFlow):
    """Measure how fast a DataFlow produces datapoints, with a progress bar.

    Call :meth:`start` to run the test; iterating this dataflow runs the test first and
    then produces the datapoints of ``ds`` as usual.

    Args:
        ds (DataFlow): the dataflow to measure.
        size (int): how many datapoints to fetch.
        warmup (int): how many datapoints to fetch (and not time) before measuring.

    Example::

        TestDataSpeed(my_dataflow, size=1000).start()   # returns datapoints per second
    """

    __test__ = False  # not a pytest test class, despite its name

    def __init__(self, ds, size=5000, warmup=0):
        super(TestDataSpeed, self).__init__(ds)
        self.test_size = int(size)
        self.warmup = int(warmup)
        self._reset_called = False

    def reset_state(self):
        self._reset_called = True
        super(TestDataSpeed, self).reset_state()

    def __iter__(self):
        self.start()
        yield from self.ds

    def start(self):
        """Run the test: fetch ``warmup + size`` datapoints and report the speed.

        Calls :meth:`reset_state` if it was not called yet.

        Returns:
            float: datapoints per second over the timed part.
        """
        if not self._reset_called:
            self.reset_state()
        itr = iter(self.ds)
        try:
            if self.warmup:
                for _ in get_tqdm(range(self.warmup), desc='Warmup'):
                    next(itr)
            count = 0
            start_time = time.perf_counter()
            with get_tqdm(total=self.test_size, leave=True, smoothing=0.2) as pbar:
                for _ in itr:
                    count += 1
                    pbar.update()
                    if count == self.test_size:
                        break
            elapsed = time.perf_counter() - start_time
        except StopIteration:
            raise ValueError("TestDataSpeed: the dataflow ended during the {} warmup datapoints."
                             .format(self.warmup)) from None
        finally:
            if hasattr(itr, 'close'):
                itr.close()
        speed = count / elapsed if elapsed > 0 else float('inf')
        if count < self.test_size:
            logger.warn("TestDataSpeed: the dataflow ended after {} of the {} datapoints asked for."
                        .format(count, self.test_size))
        logger.info("TestDataSpeed: {} datapoints in {:.3f} seconds, {:.2f} datapoints/s.".format(
            count, elapsed, speed))
        return speed


class BatchData(ProxyDataFlow):
    """Stack ``batch_size`` consecutive datapoints into one batch.

    A batch has the same structure (list or dict) as the datapoints; each component gets
    a new leading dimension of size ``batch_size``.  By default each component becomes a
    numpy array:

    * python ``bool`` -> ``bool``; python ``int`` -> ``int32`` (``int64`` when a value does not
      fit); python ``float`` (possibly mixed with ints) -> ``float32``;
    * numpy arrays and numpy scalars keep the dtype of the first datapoint; their shapes
      must all be equal;
    * ``str``/``bytes`` -> a numpy string array.

    Args:
        ds (DataFlow): produces lists/tuples or dicts.
        batch_size (int): datapoints per batch.
        remainder (bool): also produce the last, smaller batch made of the datapoints left
            at the end of an epoch.  When False every batch has exactly ``batch_size``
            datapoints and leftovers are dropped.
        use_list (bool): make each component a python list of the original values instead
            of a numpy array.

    Example::

        df = BatchData(DataFromList([[np.zeros((2, 2)), 1]] * 10, shuffle=False), 4)
        # 2 batches: [float64 array of shape (4, 2, 2), int32 array of shape (4,)]
    """

    def __init__(self, ds, batch_size, remainder=False, use_list=False):
        super(BatchData, self).__init__(ds)
        self.batch_size = int(batch_size)
        if self.batch_size <= 0:
            raise ValueError("BatchData: batch_size must be positive, got {}".format(batch_size))
        if not remainder:
            try:
                ds_len = len(ds)
            except NotImplementedError:
                ds_len = None
            if ds_len is not None and self.batch_size > ds_len:
                raise ValueError(
                    "BatchData: batch_size={} is larger than len(ds)={}, so with remainder=False "
                    "no batch would ever be produced.".format(self.batch_size, ds_len))
        self.remainder = remainder
        self.use_list = use_list
        self._holder = []
        self._resume_holder = None

    def __len__(self):
        ds_len = len(self.ds)
        div, rem = divmod(ds_len, self.batch_size)
        if rem and self.remainder:
            return div + 1
        return div

    def __iter__(self):
        self._holder, self._resume_holder = list(self._resume_holder or []), None
        for dp in self.ds:
            self._holder.append(dp)
            if len(self._holder) == self.batch_size:
                batch, self._holder = self._holder, []
                yield BatchData.aggregate_batch(batch, self.use_list)
        if self.remainder and self._holder:
            batch, self._holder = self._holder, []
            yield BatchData.aggregate_batch(batch, self.use_list)

    def get_state(self):
        """The wrapped DataFlow's state and the datapoints of an unfinished batch (none
        between two batches)."""
        return {'ds': get_dataflow_state(self.ds), 'holder': list(self._holder)}

    def set_state(self, state):
        set_dataflow_state(self.ds, state['ds'])
        self._resume_holder = list(state['holder'])

    @staticmethod
    def _batch_numpy(values, key):
        """Stack the values of one component (``key`` names it in errors) into an array."""
        first = values[0]
        if isinstance(first, (bool, int, float)) and not isinstance(first, np.generic):
            return BatchData._batch_python_numbers(values, key)
        if isinstance(first, (str, bytes)):
            try:
                return np.asarray(values)
            except Exception as e:
                raise ValueError("BatchData: cannot batch the strings of {}: {}".format(
                    _component_name(key), e)) from e
        if not hasattr(first, 'dtype'):
            raise TypeError(
                "BatchData: cannot batch {} of type {}: components must be numbers, strings or "
                "numpy arrays (pass use_list=True to batch other objects into lists).".format(
                    _component_name(key), type(first).__name__))
        shapes = [np.shape(v) for v in values]
        if any(s != shapes[0] for s in shapes):
            positions = defaultdict(list)
            for pos, shape in enumerate(shapes):
                positions[shape].append(pos)
            detail = '; '.join('shape {} at batch positions {}'.format(s, p)
                               for s, p in positions.items())
            raise ValueError("BatchData: cannot batch {}: its values have different shapes: {}. "
                             "Use BatchDataByShape, or use_list=True.".format(
                                 _component_name(key), detail))
        try:
            return np.asarray(values, dtype=first.dtype)
        except Exception as e:
            raise ValueError("BatchData: cannot batch {} into a {} array of shape {}: {}".format(
                _component_name(key), first.dtype, (len(values),) + shapes[0], e)) from e

    @staticmethod
    def _batch_python_numbers(values, key):
        kinds = set()
        for pos, v in enumerate(values):
            if isinstance(v, (bool, np.bool_)):
                kinds.add(bool)
            elif isinstance(v, (int, np.integer)):
                kinds.add(int)
            elif isinstance(v, (float, np.floating)):
                kinds.add(float)
            else:
                raise TypeError("BatchData: cannot batch {}: batch position 0 holds a {} but "
                                "batch position {} holds a {}.".format(
                                    _component_name(key), type(values[0]).__name__,
                                    pos, type(v).__name__))
        if kinds == {bool}:
            dtype = np.bool_
        elif float in kinds:
            dtype = np.float32
        else:
            ints = [int(v) for v in values]
            dtype = np.int32 if _INT32_MIN <= min(ints) and max(ints) <= _INT32_MAX else np.int64
        try:
            return np.asarray(values, dtype=dtype)
        except OverflowError as e:
            raise ValueError("BatchData: cannot batch {}: {}".format(_component_name(key), e)) from e

    @staticmethod
    def aggregate_batch(data_holder, use_list=False):
        """Turn a list of datapoints into one batched datapoint.

        Args:
            data_holder (list): datapoints, all lists/tuples of the same length or all dicts
                with the same keys.
            use_list (bool): batch each component into a list instead of a numpy array.

        Returns:
            list or dict: the batched datapoint (a list for list/tuple datapoints).
        """
        first = data_holder[0]
        if isinstance(first, (list, tuple)):
            keys = range(len(first))
            for pos, dp in enumerate(data_holder):
                if not isinstance(dp, (list, tuple)) or len(dp) != len(first):
                    raise ValueError(
                        "BatchData: datapoint at batch position {} is {} but the first one is a "
                        "{} of {} components.".format(pos, _describe_structure(dp),
                                                      type(first).__name__, len(first)))
        elif isinstance(first, Mapping):
            keys = list(first.keys())
            for pos, dp in enumerate(data_holder):
                if not isinstance(dp, Mapping) or set(dp.keys()) != set(keys):
                    raise ValueError(
                        "BatchData: datapoint at batch position {} is {} but the first one is a "
                        "dict with keys {}.".format(pos, _describe_structure(dp), sorted(map(str, keys))))
        else:
            raise TypeError("BatchData: a datapoint must be a list, tuple or dict, got a {}."
                            .format(type(first).__name__))

        def batch(key):
            column = [dp[key] for dp in data_holder]
            return column if use_list else BatchData._batch_numpy(column, key)

        if isinstance(first, Mapping):
            return {k: batch(k) for k in keys}
        return [batch(k) for k in keys]


def _describe_structure(dp):
    if isinstance(dp, Mapping):
        return "a dict with keys {}".format(sorted(map(str, dp.keys())))
    if isinstance(dp, (list, tuple)):
        return "a {} of {} components".format(type(dp).__name__, len(dp))
    return "a {}".format(type(dp).__name__)


class BatchDataByShape(BatchData):
    """Batch together datapoints whose component ``idx`` has the same shape.

    The input may mix shapes; one batch is formed per shape once ``batch_size`` datapoints
    of that shape have arrived.  Datapoints waiting for a rare shape may never be produced
    (they stay buffered, also across epochs), so ``len()`` is only an upper bound.

    Args:
        ds (DataFlow): its ``dp[idx]`` must be a numpy array.
        batch_size (int): datapoints per batch.
        idx (int or str): index (or dict key) of the component whose shape groups datapoints.
            Other components must be batchable as in :class:`BatchData`.
    """

    def __init__(self, ds, batch_size, idx):
        super(BatchDataByShape, self).__init__(ds, batch_size, remainder=False)
        self.idx = idx
        self.holder = defaultdict(list)
        self._guard = DataFlowReentrantGuard('BatchDataByShape')

    def reset_state(self):
        super(BatchDataByShape, self).reset_state()
        self.holder = defaultdict(list)

    def __iter__(self):
        with self._guard:
            for dp in self.ds:
                try:
                    shape = dp[self.idx].shape
                except AttributeError:
                    raise TypeError("BatchDataByShape: component {!r} must be a numpy array, got a "
                                    "{}.".format(self.idx, type(dp[self.idx]).__name__)) from None
                holder = self.holder[shape]
                holder.append(dp)
                if len(holder) == self.batch_size:
                    yield BatchData.aggregate_batch(holder, self.use_list)
                    del holder[:]


class FixedSizeData(ProxyDataFlow):
    """Produce exactly ``size`` datapoints per epoch from ``ds``, restarting ``ds`` when needed.

    Args:
        ds (DataFlow): input dataflow.
        size (int): datapoints per epoch.
        keep_state (bool): continue where the previous epoch stopped in ``ds`` instead of
            starting a new pass over ``ds`` every epoch.

    Example (``ds`` produces 1, 2, 3, 4, 5 each pass)::

        FixedSizeData(ds, 3, keep_state=True):  1, 2, 3; 4, 5, 1; 2, 3, 4; ...
        FixedSizeData(ds, 3, keep_state=False): 1, 2, 3; 1, 2, 3; ...
        FixedSizeData(ds, 6, keep_state=False): 1, 2, 3, 4, 5, 1; 1, 2, 3, 4, 5, 1; ...
    """

    def __init__(self, ds, size, keep_state=True):
        super(FixedSizeData, self).__init__(ds)
        self._size = int(size)
        self._keep = keep_state
        self.itr = None
        self._guard = DataFlowReentrantGuard('FixedSizeData')

    def __len__(self):
        return self._size

    def reset_state(self):
        super(FixedSizeData, self).reset_state()
        self.itr = None

    def __iter__(self):
        with self._guard:
            if self.itr is None:
                self.itr = repeat_epochs(self.ds, 'FixedSizeData')
            for _ in range(self._size):
                yield next(self.itr)
            if not self._keep:
                self.itr = None


class MapData(ProxyDataFlow):
    """Apply ``func`` to every datapoint; a ``None`` result drops the datapoint.

    ``func`` receives a shallow copy of the datapoint, so it may replace components
    (``dp[0] = ...``) but should not modify the components themselves in place.
    When datapoints are dropped, ``len()`` (that of ``ds``) overestimates.

    Args:
        ds (DataFlow): input dataflow.
        func (datapoint -> datapoint or None): the mapping.

    Example::

        df = MapData(df, lambda dp: [dp[0] * 2, dp[1]] if dp[1] >= 0 else None)
    """

    def __init__(self, ds, func):
        super(MapData, self).__init__(ds)
        self.func = func

    def __iter__(self):
        for dp in self.ds:
            ret = self.func(copy(dp))
            if ret is not None:
                yield ret

    def get_state(self):
        """The wrapped DataFlow's state: ``func`` is taken to draw no random numbers of its
        own (subclasses whose function does, such as the augmenting ones, add them)."""
        return {'ds': get_dataflow_state(self.ds)}

    def set_state(self, state):
        set_dataflow_state(self.ds, state['ds'])


class MapDataComponent(MapData):
    """Apply ``func`` to one component of every datapoint; a ``None`` result drops the datapoint.

    The datapoint produced is a new list (or dict): the input datapoint is not modified.
    When datapoints are dropped, ``len()`` overestimates.

    Args:
        ds (DataFlow): produces lists/tuples or dicts.
        func (component -> component or None): the mapping.
        index (int or str): index or dict key of the component.

    Example::

        df = MapDataComponent(df, lambda img: img.astype('float32') / 255., index=0)
    """

    def __init__(self, ds, func, index=0):
        self._func = func
        self._index = index
        super(MapDataComponent, self).__init__(ds, self._mapper)

    def _mapper(self, dp):
        try:
            value = dp[self._index]
        except (IndexError, KeyError, TypeError):
            raise ValueError("MapDataComponent: the datapoint has no component {!r}; it is {}."
                             .format(self._index, _describe_structure(dp))) from None
        ret = self._func(value)
        if ret is None:
            return None
        if isinstance(dp, tuple):  # MapData passes a shallow copy, so lists/dicts can be modified
            dp = list(dp)
        dp[self._index] = ret
        return dp


class RepeatedData(ProxyDataFlow):
    """Iterate over ``ds`` ``num`` times in one epoch: dp1, ..., dpn, dp1, ..., dpn, ...

    Args:
        ds (DataFlow): input dataflow.
        num (int): number of passes; -1 repeats forever (then ``len()`` raises).
    """

    def __init__(self, ds, num):
        num = int(num)
        if num < -1:
            raise ValueError("RepeatedData: num must be -1 (forever) or >= 0, got {}".format(num))
        self.num = num
        super(RepeatedData, self).__init__(ds)

    def __len__(self):
        if self.num == -1:
            raise NotImplementedError("RepeatedData(num=-1) is infinite and has no length.")
        return len(self.ds) * self.num

    def __iter__(self):
        if self.num == -1:
            self._resume_pass = None
            yield from repeat_epochs(self.ds, 'RepeatedData(num=-1)')
            return
        first, self._resume_pass = self._resume_pass or 0, None
        for self._pass in range(first, self.num):
            yield from self.ds
        self._pass = None

    _pass = None            # the pass over ``ds`` in progress (finite ``num``)
    _resume_pass = None

    def get_state(self):
        return {'ds': get_dataflow_state(self.ds), 'pass': self._pass}

    def set_state(self, state):
        set_dataflow_state(self.ds, state['ds'])
        self._resume_pass = state['pass']


class RepeatedDataPoint(ProxyDataFlow):
    """Produce each datapoint of ``ds`` ``num`` times in a row: dp1, dp1, ..., dp2, dp2, ...

    Args:
        ds (DataFlow): input dataflow.
        num (int): times each datapoint is repeated (>= 1).
    """

    def __init__(self, ds, num):
        self.num = int(num)
        if self.num < 1:
            raise ValueError("RepeatedDataPoint: num must be >= 1, got {}".format(num))
        super(RepeatedDataPoint, self).__init__(ds)

    def __len__(self):
        return len(self.ds) * self.num

    def __iter__(self):
        for dp in self.ds:
            for _ in range(self.num):
                yield dp


def _reset_each_once(dataflows):
    seen = set()
    for df in dataflows:
        if id(df) not in seen:
            seen.add(id(df))
            df.reset_state()


def _check_dataflows(df_lists, owner):
    df_lists = list(df_lists)
    if not df_lists:
        raise ValueError("{}: df_lists is empty".format(owner))
    for k, df in enumerate(df_lists):
        if not isinstance(df, DataFlow):
            raise TypeError("{}: entry #{} of df_lists is a {}, not a DataFlow".format(
                owner, k, type(df).__name__))
    return df_lists


class RandomChooseData(RNGDataFlow):
    """Produce each datapoint from one of several dataflows, drawn at random with given
    probabilities (one ``self.rng.choice`` per datapoint). It stops as soon as the dataflow
    drawn is exhausted, so it has no length.

    Args:
        df_lists (list): dataflows (chosen with equal probabilities), or ``(dataflow,
            probability)`` pairs whose probabilities sum to 1.

    Example::

        df = RandomChooseData([(real_images, 0.7), (synthetic_images, 0.3)])
    """

    def __init__(self, df_lists):
        super(RandomChooseData, self).__init__()
        df_lists = list(df_lists)
        pairs = [isinstance(entry, (tuple, list)) for entry in df_lists]
        if df_lists and all(pairs):
            if any(len(entry) != 2 for entry in df_lists):
                raise ValueError("RandomChooseData: each entry of df_lists must be a DataFlow or a "
                                 "(DataFlow, probability) pair, got {!r}".format(df_lists))
            dataflows = _check_dataflows([df for df, _ in df_lists], 'RandomChooseData')
            probs = [float(p) for _, p in df_lists]
            if min(probs) < 0 or not np.isclose(sum(probs), 1.0):
                raise ValueError("RandomChooseData: the probabilities {} must be >= 0 and sum to 1".format(
                    probs))
        elif any(pairs):
            raise ValueError("RandomChooseData: df_lists mixes dataflows and (dataflow, probability) pairs")
        else:
            dataflows = _check_dataflows(df_lists, 'RandomChooseData')
            probs = [1.0 / len(dataflows)] * len(dataflows)
        self.df_lists = list(zip(dataflows, probs))

    def reset_state(self):
        super(RandomChooseData, self).reset_state()
        _reset_each_once(df for df, _ in self.df_lists)

    def __iter__(self):
        itrs = [iter(df) for df, _ in self.df_lists]
        probs = np.array([p for _, p in self.df_lists])
        probs /= probs.sum()
        while True:
            k = self.rng.choice(len(itrs), p=probs)
            try:
                dp = next(itrs[k])
            except StopIteration:
                return
            yield dp


class RandomMixData(RNGDataFlow):
    """Produce all datapoints of several dataflows, interleaved at random: every epoch is a
    random order of ``len(df_1)`` datapoints of the first dataflow, ``len(df_2)`` of the
    second, ... (each dataflow's own datapoints keep their order).

    Args:
        df_lists (list[DataFlow]): dataflows with a length.
    """

    def __init__(self, df_lists):
        super(RandomMixData, self).__init__()
        self.df_lists = _check_dataflows(df_lists, 'RandomMixData')
        without_length = [k for k, df in enumerate(self.df_lists) if not _has_length(df)]
        if without_length:
            raise ValueError("RandomMixData: every dataflow needs a length; dataflow(s) #{} have none".format(
                without_length))
        self.sizes = [len(df) for df in self.df_lists]

    def reset_state(self):
        super(RandomMixData, self).reset_state()
        _reset_each_once(self.df_lists)

    def __len__(self):
        return sum(self.sizes)

    def __iter__(self):
        order = np.arange(len(self))
        self.rng.shuffle(order)
        sources = np.searchsorted(np.cumsum(self.sizes), order, side='right')
        itrs = [iter(df) for df in self.df_lists]
        for k in sources:
            try:
                dp = next(itrs[k])
            except StopIteration:
                raise RuntimeError("RandomMixData: dataflow #{} ended before producing the {} datapoints "
                                   "its len() promised".format(k, self.sizes[k])) from None
            yield dp


def _has_length(df):
    try:
        len(df)
    except NotImplementedError:
        return False
    return True


class ConcatData(DataFlow):
    """Produce all datapoints of the first dataflow, then of the second, and so on.

    Args:
        df_lists (list[DataFlow]): the dataflows.
    """

    def __init__(self, df_lists):
        self.df_lists = list(df_lists)

    def reset_state(self):
        _reset_each_once(self.df_lists)

    def __len__(self):
        return sum(len(df) for df in self.df_lists)

    def __iter__(self):
        for df in self.df_lists:
            yield from df


class JoinData(DataFlow):
    """Zip several dataflows and join the components of their datapoints.

    Lists are concatenated, dicts are merged (keys must not collide); lists cannot be
    joined with dicts.  It stops when any dataflow is exhausted, and warns at construction
    when their lengths differ.

    Example::

        df1 produces [c1, c2], df2 produces [c3]:          joined [c1, c2, c3]
        df1 produces {'a': c1}, df2 produces {'b': c2}:    joined {'a': c1, 'b': c2}

    Args:
        df_lists (list[DataFlow]): the dataflows.  The same instance may appear more than
            once; it is then iterated once per appearance (and reset once).
    """

    def __init__(self, df_lists):
        self.df_lists = list(df_lists)
        if not self.df_lists:
            raise ValueError("JoinData: df_lists is empty.")
        try:
            lengths = [len(df) for df in self.df_lists]
        except NotImplementedError:
            lengths = None
        if lengths is not None and len(set(lengths)) > 1:
            logger.warn("JoinData: the dataflows to join have different lengths {}; it stops when "
                        "the shortest is exhausted.".format(lengths))

    def reset_state(self):
        _reset_each_once(self.df_lists)

    def __len__(self):
        return min(len(df) for df in self.df_lists)

    def __iter__(self):
        itrs = [iter(df) for df in self.df_lists]
        while True:
            dps = []
            for itr in itrs:
                try:
                    dps.append(next(itr))
                except StopIteration:
                    return
            yield self._join(dps)

    @staticmethod
    def _join(dps):
        if isinstance(dps[0], (list, tuple)):
            for k, dp in enumerate(dps):
                if not isinstance(dp, (list, tuple)):
                    raise TypeError("JoinData: dataflow #0 produces lists but dataflow #{} produced "
                                    "{}.".format(k, _describe_structure(dp)))
            return list(itertools.chain(*dps))
        joined = {}
        owner = {}
        for k, dp in enumerate(dps):
            if not isinstance(dp, Mapping):
                raise TypeError("JoinData: dataflow #0 produces dicts but dataflow #{} produced "
                                "{}.".format(k, _describe_structure(dp)))
            for key, value in dp.items():
                if key in joined:
                    raise ValueError("JoinData: key {!r} is produced by both dataflow #{} and "
                                     "dataflow #{}.".format(key, owner[key], k))
                joined[key] = value
                owner[key] = k
        return joined


class SelectComponent(MapData):
    """Select and reorder components: the new datapoint is ``[dp[i] for i in idxs]``.

    Args:
        ds (DataFlow): input dataflow (lists, or dicts with ``idxs`` as keys).
        idxs (list[int] or list[str]): indices or keys of the components to keep.

    Example::

        dp [c1, c2, c3] with idxs [2, 1] becomes [c3, c2]
    """

    def __init__(self, ds, idxs):
        self.idxs = list(idxs)
        super(SelectComponent, self).__init__(ds, self._select)

    def _select(self, dp):
        try:
            return [dp[i] for i in self.idxs]
        except (IndexError, KeyError, TypeError):
            missing = [i for i in self.idxs if not _has_component(dp, i)]
            raise ValueError("SelectComponent: the datapoint has no component {}; it is {}."
                             .format(', '.join(map(repr, missing)) or self.idxs,
                                     _describe_structure(dp))) from None


def _has_component(dp, key):
    try:
        dp[key]
    except (IndexError, KeyError, TypeError):
        return False
    return True


class LocallyShuffleData(ProxyDataFlow, RNGDataFlow):
    """Shuffle a stream through a buffer, when a full shuffle is too expensive or impossible.

    How it works:

    1. Datapoints of ``ds`` (repeated forever) enter a FIFO buffer of ``buffer_size``
       entries, each one ``num_reuse`` times.
    2. Once the buffer is full, every new entry pushes out the oldest one, which is produced.
    3. The buffer is shuffled every ``shuffle_interval`` datapoints taken from ``ds``.

    Datapoints of one pass over ``ds`` mix with those of the next, so the iterator never
    ends; ``len()`` (``len(ds) * num_reuse``) is the natural epoch size.  Not reentrant.

    Args:
        ds (DataFlow): input dataflow.
        buffer_size (int): entries in the buffer.
        num_reuse (int): how many times each datapoint enters the buffer (faster, but
            duplicates may hurt training).
        shuffle_interval (int): shuffle the buffer after this many datapoints of ``ds``;
            defaults to ``buffer_size // 3``.
    """

    def __init__(self, ds, buffer_size, num_reuse=1, shuffle_interval=None):
        ProxyDataFlow.__init__(self, ds)
        self.buffer_size = int(buffer_size)
        if self.buffer_size < 1:
            raise ValueError("LocallyShuffleData: buffer_size must be >= 1, got {}".format(buffer_size))
        if shuffle_interval is None:
            shuffle_interval = max(1, self.buffer_size // 3)
        self.shuffle_interval = int(shuffle_interval)
        if self.shuffle_interval < 1:
            raise ValueError("LocallyShuffleData: shuffle_interval must be >= 1, got {}".format(
                shuffle_interval))
        self.num_reuse = int(num_reuse)
        if self.num_reuse < 1:
            raise ValueError("LocallyShuffleData: num_reuse must be >= 1, got {}".format(num_reuse))
        self.q = deque(maxlen=self.buffer_size)
        self._inf_ds = RepeatedData(ds, -1)
        self._inf_iter = None
        self._iter_cnt = 0
        self._guard = DataFlowReentrantGuard('LocallyShuffleData')

    def reset_state(self):
        ProxyDataFlow.reset_state(self)
        RNGDataFlow.reset_state(self)
        self.q.clear()
        self._iter_cnt = 0
        self._inf_iter = iter(self._inf_ds)

    def __len__(self):
        return len(self.ds) * self.num_reuse

    def _shuffle_buffer(self):
        items = list(self.q)
        self.rng.shuffle(items)
        self.q.clear()
        self.q.extend(items)

    def __iter__(self):
        if self._inf_iter is None:
            raise RuntimeError("LocallyShuffleData: call reset_state() once before iterating.")
        with self._guard:
            for dp in self._inf_iter:
                self._iter_cnt = (self._iter_cnt + 1) % self.shuffle_interval
                if self._iter_cnt == 0:
                    self._shuffle_buffer()
                for _ in range(self.num_reuse):
                    if len(self.q) == self.q.maxlen:
                        yield self.q.popleft()
                    self.q.append(dp)


class CacheData(ProxyDataFlow):
    """Cache the first complete epoch of ``ds`` in memory and replay it afterwards.

    The first epoch reads ``ds`` (producing its datapoints as they come); once it has run to
    the end, later epochs replay the cache without touching ``ds``.  An epoch stopped early
    is not cached.  :meth:`reset_state` empties the cache.  Not reentrant.

    Args:
        ds (DataFlow): input dataflow.
        shuffle (bool): replay the cache in a new random order every epoch.
    """

    def __init__(self, ds, shuffle=False):
        self.shuffle = shuffle
        super(CacheData, self).__init__(ds)
        self.buffer = None
        self._guard = DataFlowReentrantGuard('CacheData')

    def reset_state(self):
        super(CacheData, self).reset_state()
        if self.shuffle:
            self.rng = get_rng(self)
        self.buffer = None

    def __len__(self):
        if self.buffer is not None:
            return len(self.buffer)
        return len(self.ds)

    def __iter__(self):
        with self._guard:
            if self.buffer is not None:
                if self.shuffle:
                    self.rng.shuffle(self.buffer)
                yield from self.buffer
                return
            pending = []
            for dp in self.ds:
                pending.append(dp)
                yield dp
            self.buffer = pending


class PrintData(ProxyDataFlow):
    """An identity proxy that logs a summary of its first ``num`` datapoints (for debugging).

    For each component it shows the type, and as relevant the dtype, shape, value range,
    value or length; lists, tuples and dicts are expanded.  Example of the log::

        Contents of DataFlow (train):
        datapoint 0/1 with 3 components consists of
          0: ndarray:float32 of shape (28, 28) in range [0.0, 1.0]
          1: int with value 7
          2: list of len 5
            0: float with value 0.5
            ...

    Args:
        ds (DataFlow): input dataflow.
        num (int): how many datapoints to log (counted since the last :meth:`reset_state`).
        name (str): a label for the log.
        max_depth (int): how deeply nested lists/dicts are expanded (components are depth 1).
        max_list (int): how many elements of a list/dict are shown.
    """

    def __init__(self, ds, num=1, name=None, max_depth=3, max_list=3):
        super(PrintData, self).__init__(ds)
        self.num = num
        self.name = name
        self.max_depth = max_depth
        self.max_list = max_list
        self.cnt = 0

    def reset_state(self):
        super(PrintData, self).reset_state()
        self.cnt = 0

    def _describe(self, value, pos, depth):
        """Lines describing ``value`` (at index/key ``pos``) indented for ``depth``."""
        indent = '  ' * depth
        head = '{}{}: {}'.format(indent, pos, type(value).__name__)
        lines = []
        if isinstance(value, np.ndarray):
            head += ':{} of shape {}'.format(value.dtype, value.shape)
            if value.size and (np.issubdtype(value.dtype, np.number) or value.dtype == np.bool_):
                head += ' in range [{}, {}]'.format(value.min(), value.max())
        elif isinstance(value, (bool, int, float, complex, np.generic)):
            head += ' with value {}'.format(value)
        elif isinstance(value, (str, bytes)):
            text = repr(value)
            head += ' of len {} with value {}'.format(
                len(value), text if len(text) <= 40 else text[:37] + '...')
        elif isinstance(value, (list, tuple, Mapping)):
            head += ' of len {}'.format(len(value))
            items = value.items() if isinstance(value, Mapping) else enumerate(value)
            if depth < self.max_depth:
                for k, (sub_pos, sub_value) in enumerate(items):
                    if k >= self.max_list:
                        lines.append(indent + '  ...')
                        break
                    lines.extend(self._describe(sub_value, sub_pos, depth + 1))
            elif len(value):
                lines.append(indent + '  ...')
        return [head] + lines

    def _get_msg(self, dp):
        if isinstance(dp, Mapping):
            items = list(dp.items())
        elif isinstance(dp, (list, tuple)):
            items = list(enumerate(dp))
        else:
            items = [(0, dp)]
        lines = ["datapoint {}/{} with {} components consists of".format(
            self.cnt, self.num, len(items))]
        for pos, value in items:
            lines.extend(self._describe(value, pos, 1))
        return '\n'.join(lines)

    def __iter__(self):
        for dp in self.ds:
            if self.cnt < self.num:
                if self.cnt == 0:
                    label = ' ({})'.format(self.name) if self.name is not None else ''
                    logger.info("Contents of DataFlow{}:".format(label))
                logger.info(self._get_msg(dp))
                self.cnt += 1
            yield dp
