"""Common DataFlow transformations: batching, mapping, repeating, joining, shuffling,
caching, plus two debugging helpers (:class:`PrintData`, :class:`TestDataSpeed`)."""

import itertools
import math
import time
from collections import defaultdict, deque
from collections.abc import Mapping
from copy import copy

import numpy as np

from ..utils import logger
from ..utils.serialize import dumps
from ..utils.utils import get_rng, get_tqdm, humanize_time_delta
from .base import DataFlow, DataFlowReentrantGuard, ProxyDataFlow, RNGDataFlow
from .epochs import repeat_epochs
from .state import (DataFlowStateUnsupported, IterationCursor, get_dataflow_state, rng_state,
                    set_dataflow_state, set_rng_state, state_or_error)

__all__ = ['TestDataSpeed', 'PrintData', 'BatchData', 'BatchDataByShape', 'FixedSizeData',
           'MapData', 'MapDataComponent', 'RepeatedData', 'RepeatedDataPoint', 'RandomChooseData',
           'RandomMixData', 'ConcatData', 'JoinData', 'SelectComponent', 'LocallyShuffleData',
           'CacheData']

_INT32_MIN, _INT32_MAX = np.iinfo(np.int32).min, np.iinfo(np.int32).max
_END = object()


def _component_name(key):
    return "component {!r}".format(key)


def _size_text(value):
    """The serialized size of ``value`` (datapoints a state holds), for a log line."""
    try:
        size = len(dumps(value))
    except (TypeError, ValueError):
        return "not serializable"
    return "{:.1f} kB".format(size / 1e3) if size < 1e6 else "{:.1f} MB".format(size / 1e6)


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
        self._tested = False          # the iteration in progress ran its test
        self._resume_tested = False

    def reset_state(self):
        self._reset_called = True
        super(TestDataSpeed, self).reset_state()

    def __iter__(self):
        tested, self._resume_tested = self._resume_tested, False
        if not tested:
            self.start()
        return self._after_test(iter(self.ds))

    def _after_test(self, source):
        self._tested = True
        try:
            yield from source
        finally:
            self._tested = False

    def get_state(self):
        """The wrapped DataFlow's state, and whether the iteration in progress ran its test."""
        return {'ds': get_dataflow_state(self.ds), 'tested': self._tested or self._resume_tested}

    def set_state(self, state):
        set_dataflow_state(self.ds, state['ds'])
        self._resume_tested = bool(state['tested'])

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
        self._at_remainder = False    # producing the last, smaller batch: ds's iteration has ended
        self._resume_ended = False

    def __len__(self):
        ds_len = len(self.ds)
        div, rem = divmod(ds_len, self.batch_size)
        if rem and self.remainder:
            return div + 1
        return div

    def __iter__(self):
        holder, self._resume_holder = list(self._resume_holder or []), None
        ended, self._resume_ended = self._resume_ended, False
        if ended:  # restored at the last, smaller batch: nothing is left
            return iter(())
        return self._batches(iter(self.ds), holder)

    def _batches(self, source, holder):
        self._holder = holder
        try:
            for dp in source:
                self._holder.append(dp)
                if len(self._holder) == self.batch_size:
                    batch, self._holder = self._holder, []
                    yield BatchData.aggregate_batch(batch, self.use_list)
            if self.remainder and self._holder:
                batch, self._holder = self._holder, []
                self._at_remainder = True
                yield BatchData.aggregate_batch(batch, self.use_list)
        finally:  # what is left of an iteration that ended is dropped
            self._holder, self._at_remainder = [], False

    def get_state(self):
        """The wrapped DataFlow's state, the datapoints of an unfinished batch (none between two
        batches), and whether the iteration is at its last, smaller batch."""
        return {'ds': get_dataflow_state(self.ds), 'holder': list(self._holder),
                'ended': self._at_remainder or self._resume_ended}

    def set_state(self, state):
        set_dataflow_state(self.ds, state['ds'])
        self._resume_holder = list(state['holder'])
        self._resume_ended = bool(state['ended'])

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
        self._data_noted = False

    def reset_state(self):
        super(BatchDataByShape, self).reset_state()
        self.holder = defaultdict(list)

    def __iter__(self):
        return self._batches_by_shape(iter(self.ds))

    def _batches_by_shape(self, source):
        with self._guard:
            for dp in source:
                try:
                    shape = dp[self.idx].shape
                except AttributeError:
                    raise TypeError("BatchDataByShape: component {!r} must be a numpy array, got a "
                                    "{}.".format(self.idx, type(dp[self.idx]).__name__)) from None
                holder = self.holder[shape]
                holder.append(dp)
                if len(holder) == self.batch_size:
                    batch = BatchData.aggregate_batch(holder, self.use_list)
                    del holder[:]
                    yield batch

    def get_state(self):
        """The wrapped DataFlow's state and the datapoints waiting in each shape's holder (copies
        of those lists: at most ``batch_size - 1`` datapoints per shape). They cannot be read again
        from ``ds`` at a bounded cost, so the state holds them: one log line says so, with their size,
        the first time."""
        holders = [[list(shape), list(dps)] for shape, dps in self.holder.items() if dps]
        if holders and not self._data_noted:
            self._data_noted = True
            waiting = [dp for _, dps in holders for dp in dps]
            logger.info("BatchDataByShape: its state holds the {} datapoint(s) waiting for a batch of their "
                        "shape ({}; at most batch_size - 1 = {} per shape).".format(
                            len(waiting), _size_text(waiting), self.batch_size - 1))
        return {'ds': get_dataflow_state(self.ds), 'holders': holders}

    def set_state(self, state):
        set_dataflow_state(self.ds, state['ds'])
        self.holder = defaultdict(list)
        for shape, dps in state['holders']:
            self.holder[tuple(shape)] = list(dps)


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
        self._cursor = IterationCursor()
        self._guard = DataFlowReentrantGuard('FixedSizeData')

    def __len__(self):
        return self._size

    def reset_state(self):
        super(FixedSizeData, self).reset_state()
        self.itr = None

    def __iter__(self):
        return self._datapoints(self._cursor.follow(range(self._size)))

    def _datapoints(self, positions):
        with self._guard:
            if self.itr is None:
                self.itr = repeat_epochs(self.ds, 'FixedSizeData')
            for _ in positions:
                dp = next(self.itr)
                if self._cursor.done == self._size and not self._keep:
                    self._end_pass()  # before the last yield, so that a state taken there says so
                yield dp

    def _end_pass(self):
        """Abandon the pass over ``ds`` in progress: the next one starts a new iteration."""
        if self.itr is not None:
            self.itr.close()
            self.itr = None

    def get_state(self):
        """The wrapped DataFlow's state and how many datapoints the iteration in progress produced."""
        return {'ds': get_dataflow_state(self.ds), 'done': self._cursor.state()['done']}

    def set_state(self, state):
        self._end_pass()
        set_dataflow_state(self.ds, state['ds'])
        self._cursor.restore(state)


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
        return self._mapped(iter(self.ds))

    def _mapped(self, source):
        for dp in source:
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
        first, self._resume_pass = self._resume_pass or 0, None
        if self.num == -1:
            return repeat_epochs(self.ds, 'RepeatedData(num=-1)', first=iter(self.ds))
        if first >= self.num:
            return iter(())
        return self._passes(first, iter(self.ds))

    def _passes(self, first, source):
        try:
            self._pass = first
            yield from source
            for self._pass in range(first + 1, self.num):
                yield from self.ds
        finally:
            self._pass = None

    _pass = None            # the pass over ``ds`` in progress (finite ``num``)
    _resume_pass = None

    def get_state(self):
        """The wrapped DataFlow's state and the pass in progress."""
        current = self._pass if self._pass is not None else self._resume_pass
        return {'ds': get_dataflow_state(self.ds), 'pass': current}

    def set_state(self, state):
        set_dataflow_state(self.ds, state['ds'])
        self._resume_pass = state['pass']


class RepeatedDataPoint(ProxyDataFlow):
    """Produce each datapoint of ``ds`` ``num`` times in a row: dp1, dp1, ..., dp2, dp2, ...

    Its state is ``ds``'s state before the datapoint being repeated (taken once per datapoint
    of ``ds``) and the repeats left: a restored iteration reads that datapoint again.

    Args:
        ds (DataFlow): input dataflow.
        num (int): times each datapoint is repeated (>= 1).
    """

    def __init__(self, ds, num):
        self.num = int(num)
        if self.num < 1:
            raise ValueError("RepeatedDataPoint: num must be >= 1, got {}".format(num))
        super(RepeatedDataPoint, self).__init__(ds)
        self._current = None      # (datapoint, repeats left after the one produced, ds's state before it)
        self._resume_left = None  # after set_state: repeats left of the first datapoint read
        self._resume_held = None  # after set_state of a state holding it: (datapoint, repeats left)

    def __len__(self):
        return len(self.ds) * self.num

    def __iter__(self):
        left, self._resume_left = self._resume_left, None
        held, self._resume_held = self._resume_held, None
        before = state_or_error(self.ds)   # before iter(): the position of the datapoint read first
        return self._repeated(held, left, before, iter(self.ds))

    def _repeated(self, held, left, before, source):
        try:
            if held is not None:
                yield from self._repeat(held[0], held[1], None)
            for dp in source:
                yield from self._repeat(dp, self.num if left is None else left, before)
                left = None
                if not isinstance(before, DataFlowStateUnsupported):
                    before = state_or_error(self.ds)
        finally:
            self._current = None

    def _repeat(self, dp, times, before):
        for left in range(times - 1, -1, -1):
            self._current = (dp, left, before)
            yield dp

    def get_state(self):
        """The repeats left of the datapoint being repeated, and ``ds``'s state before it (after
        it when none is left)."""
        dp, left, before = self._current or (None, 0, None)
        if self._current is None and self._resume_held is not None:
            (dp, left), before = self._resume_held, None
        elif self._current is None and self._resume_left:
            left, before = self._resume_left, get_dataflow_state(self.ds)
        if not left:
            return {'ds': get_dataflow_state(self.ds), 'left': 0}
        if before is None:   # the datapoint of a state that held it (written by an earlier version)
            return {'ds': get_dataflow_state(self.ds), 'dp': dp, 'left': left}
        if isinstance(before, DataFlowStateUnsupported):
            raise before
        return {'ds': before, 'left': left}

    def set_state(self, state):
        set_dataflow_state(self.ds, state['ds'])
        left = int(state['left'])
        self._resume_left = left if left and 'dp' not in state else None
        self._resume_held = (state['dp'], left) if left and 'dp' in state else None


def _reset_each_once(dataflows):
    seen = set()
    for df in dataflows:
        if id(df) not in seen:
            seen.add(id(df))
            df.reset_state()


def _states(dataflows, side_by_side_in=None):
    """The states of ``dataflows``. ``side_by_side_in`` names who iterates them side by side: one
    that appears twice there has two iterations sharing one position, which cannot be saved."""
    if side_by_side_in is not None and len({id(df) for df in dataflows}) < len(dataflows):
        raise DataFlowStateUnsupported(
            "{}: the same DataFlow appears twice in df_lists; its two iterations, side by side, share "
            "one position, which cannot be saved.".format(side_by_side_in))
    return [get_dataflow_state(df) for df in dataflows]


def _set_states(dataflows, states):
    for df, state in zip(dataflows, states):
        set_dataflow_state(df, state)


class _DrawnIterations(object):
    """The iterations of several dataflows that a DataFlow draws from in turn (``owner``), each
    one made when first drawn from, and dropped (abandoned) when the owner's iteration ends. Its
    state says which had started in the iteration in progress: after :meth:`restore`, the next
    iteration makes theirs at once, so that they continue there, or are abandoned with it."""

    def __init__(self, dataflows, owner):
        self.dataflows, self.owner = dataflows, owner
        self._itrs = [None] * len(dataflows)   # the iteration of each in the iteration in progress
        self._resumed = []                     # those started in the restored iteration

    def begin(self):
        """The iterations of a new iteration (the restored one, after :meth:`restore`)."""
        itrs = [None] * len(self.dataflows)
        for k in self._resumed:
            itrs[k] = iter(self.dataflows[k])
        self._itrs, self._resumed = itrs, []
        return itrs

    def next(self, itrs, k):
        """The next datapoint of dataflow ``k`` (StopIteration at the end of its iteration)."""
        if itrs[k] is None:
            itrs[k] = iter(self.dataflows[k])
        return next(itrs[k])

    def end(self, itrs):
        """Drop the iterations of the iteration that ends."""
        itrs[:] = [None] * len(itrs)

    def state(self):
        """Which dataflows the iteration in progress started, and every dataflow's state."""
        started = sorted({k for k, itr in enumerate(self._itrs) if itr is not None} | set(self._resumed))
        return {'started': started, 'dfs': _states(self.dataflows, self.owner)}

    def restore(self, state):
        """Put the dataflows back; the next iteration continues those that had started."""
        _set_states(self.dataflows, state['dfs'])
        self._resumed = list(state['started'])


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
        self._drawn = _DrawnIterations(dataflows, 'RandomChooseData')

    def reset_state(self):
        super(RandomChooseData, self).reset_state()
        _reset_each_once(df for df, _ in self.df_lists)

    def __iter__(self):
        return self._chosen(self._drawn.begin())

    def _chosen(self, itrs):
        probs = np.array([p for _, p in self.df_lists])
        probs /= probs.sum()
        try:
            while True:
                k = self.rng.choice(len(probs), p=probs)
                try:
                    dp = self._drawn.next(itrs, k)
                except StopIteration:
                    return
                yield dp
        finally:
            self._drawn.end(itrs)

    def get_state(self):
        """The RNG's state (a 2.5 kB copy per call: it draws for every datapoint), which dataflows
        the iteration in progress started, and each dataflow's state."""
        return dict(self._drawn.state(), rng=rng_state(self.rng))

    def set_state(self, state):
        set_rng_state(self.rng, state['rng'])
        self._drawn.restore(state)


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
        self._cursor = IterationCursor()
        self._drawn = _DrawnIterations(self.df_lists, 'RandomMixData')

    def reset_state(self):
        super(RandomMixData, self).reset_state()
        _reset_each_once(self.df_lists)

    def __len__(self):
        return sum(self.sizes)

    def __iter__(self):
        order = self._cursor.order(len(self), self.rng)
        sources = np.searchsorted(np.cumsum(self.sizes), order, side='right')
        return self._mixed(self._cursor.follow(sources), self._drawn.begin())

    def _mixed(self, sources, itrs):
        try:
            for k in sources:
                try:
                    dp = self._drawn.next(itrs, k)
                except StopIteration:
                    raise RuntimeError("RandomMixData: dataflow #{} ended before producing the {} datapoints "
                                       "its len() promised".format(k, self.sizes[k])) from None
                yield dp
        finally:
            self._drawn.end(itrs)

    def get_state(self):
        """How many datapoints the iteration in progress produced, the RNG's state that drew its
        order (copied once per iteration), which dataflows it started, and each one's state."""
        return dict(self._drawn.state(), order=self._cursor.state(self.rng))

    def set_state(self, state):
        self._cursor.restore(state['order'], self.rng)
        self._drawn.restore(state)


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
        self._current = None        # the index of the dataflow being iterated
        self._resume_current = None

    def reset_state(self):
        _reset_each_once(self.df_lists)

    def __len__(self):
        return sum(len(df) for df in self.df_lists)

    def __iter__(self):
        first, self._resume_current = self._resume_current or 0, None
        if first >= len(self.df_lists):
            return iter(())
        return self._concatenated(first, iter(self.df_lists[first]))

    def _concatenated(self, first, source):
        try:
            self._current = first
            yield from source
            for self._current in range(first + 1, len(self.df_lists)):
                yield from self.df_lists[self._current]
        finally:
            self._current = None

    def get_state(self):
        """The index of the dataflow being iterated and every dataflow's state."""
        current = self._current if self._current is not None else self._resume_current
        return {'current': current, 'dfs': _states(self.df_lists)}

    def set_state(self, state):
        _set_states(self.df_lists, state['dfs'])
        self._resume_current = state['current']


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
        return self._joined([iter(df) for df in self.df_lists])

    def _joined(self, itrs):
        while True:
            dps = []
            for itr in itrs:
                try:
                    dps.append(next(itr))
                except StopIteration:
                    return
            yield self._join(dps)

    def get_state(self):
        """Each dataflow's state."""
        return {'dfs': _states(self.df_lists, 'JoinData')}

    def set_state(self, state):
        _set_states(self.df_lists, state['dfs'])

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

    Its state is a few kB whatever the datapoints and the buffer: not the buffer, but an
    *anchor*, a point of the stream older than every entry of the buffer (``ds``'s state there,
    the RNG's, the counts), from which :meth:`set_state` reads ``ds`` again to refill the buffer
    exactly. Anchors are taken every ``buffer_size / num_reuse / 4`` datapoints read (one
    ``ds.get_state()`` and one RNG copy each) and dropped once the buffer holds no entry read
    after them, so ``get_state`` copies nothing. A resume reads about ``buffer_size /
    num_reuse * ln(buffer_size)`` datapoints again (the age of the oldest entry), and at most
    ``replay_limit`` plus one anchor interval: an entry older than ``replay_limit`` (rare:
    about one in e^8 states) is kept in the state as it is, said in one log line.

    Args:
        ds (DataFlow): input dataflow.
        buffer_size (int): entries in the buffer.
        num_reuse (int): how many times each datapoint enters the buffer (faster, but
            duplicates may hurt training).
        shuffle_interval (int): shuffle the buffer after this many datapoints of ``ds``;
            defaults to ``buffer_size // 3``.
        replay_limit (int): the most datapoints a resume reads again (rounded up to anchors);
            defaults to ``buffer_size / num_reuse * (ln(buffer_size) + 8)``.
    """

    def __init__(self, ds, buffer_size, num_reuse=1, shuffle_interval=None, replay_limit=None):
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
        turnover = self.buffer_size / self.num_reuse   # datapoints read while the buffer is renewed once
        self._stride = max(1, int(math.ceil(turnover / 4)))   # datapoints read from one anchor to the next
        if replay_limit is None:
            replay_limit = turnover * (math.log(self.buffer_size) + 8)
        if replay_limit < 0:
            raise ValueError("LocallyShuffleData: replay_limit must be >= 0, got {}".format(replay_limit))
        self.replay_limit = int(math.ceil(replay_limit / self._stride)) * self._stride
        self._inf_ds = RepeatedData(ds, -1)
        self._inf_iter = None
        self._reset_done = False
        self._kept_noted = False
        self._guard = DataFlowReentrantGuard('LocallyShuffleData')
        self._start_stream()

    def _start_stream(self):
        """Forget the stream: nothing read, nothing buffered."""
        if self._inf_iter is not None:
            self._inf_iter.close()
        self._inf_iter = None
        self._buffer = deque()      # (index of the datapoint in the stream, datapoint), oldest first
        self._read = 0              # datapoints read from the stream
        self._produced = 0          # datapoints produced; the entry at offset j is at slot produced + j
        self._count = 0             # datapoints read since the last shuffle
        self._entering = None       # (index, datapoint, times it still enters) while one waits for room
        self._anchors = deque()     # the points a resume can start from, oldest first (never changed)
        self._live = {}             # an anchor's 'read' -> buffer entries read from it to the next anchor
        self._kept = deque()        # slots of the entries read before the oldest anchor, in order
        self._unsupported = None    # why ds has no state, once known

    def reset_state(self):
        ProxyDataFlow.reset_state(self)
        RNGDataFlow.reset_state(self)
        self._start_stream()
        self._reset_done = True

    def __len__(self):
        return len(self.ds) * self.num_reuse

    @property
    def q(self):
        """The datapoints in the buffer, oldest first (a list)."""
        return [dp for _, dp in self._buffer]

    def __iter__(self):
        if not self._reset_done:
            raise RuntimeError("LocallyShuffleData: call reset_state() once before iterating.")
        with self._guard:
            yield from self._shuffled()

    def _shuffled(self):
        waiting, self._entering = self._entering, None
        if waiting is not None:  # a datapoint that had made room for itself
            index, dp, times = waiting
            self._append(index, dp)
            yield from self._enter(index, dp, times - 1)
        while True:
            index, dp = self._next_input()
            if dp is _END:
                return
            self._count = (self._count + 1) % self.shuffle_interval
            if self._count == 0:
                self._shuffle_buffer()
            yield from self._enter(index, dp, self.num_reuse)

    def _next_input(self):
        """(index, datapoint) of the stream's next datapoint; an anchor is taken before it when due."""
        if self._read % self._stride == 0 and not (self._anchors and self._anchors[-1]['read'] == self._read):
            self._add_anchor()
        if self._inf_iter is None:   # made here, after the first anchor took ds's state
            self._inf_iter = iter(self._inf_ds)
        dp = next(self._inf_iter, _END)
        self._read += 1
        return self._read - 1, dp

    def _enter(self, index, dp, times):
        """Append ``dp`` ``times`` times to the buffer, producing its oldest entry whenever it is full."""
        for times_left in range(times, 0, -1):
            if len(self._buffer) == self.buffer_size:
                self._entering = (index, dp, times_left)
                yield self._pop()
                self._entering = None
            self._append(index, dp)

    def _shuffle_buffer(self):
        items = list(self._buffer)
        self.rng.shuffle(items)
        self._buffer = deque(items)
        if self._kept:
            self._locate_kept()

    # ---- the anchors: which entries a replay from the oldest one rebuilds, which it cannot

    def _segment(self, index):
        return index - index % self._stride   # the 'read' of the anchor taken before it

    def _append(self, index, dp):
        self._buffer.append((index, dp))
        if self._anchors:
            self._live[self._segment(index)] += 1

    def _pop(self):
        index, dp = self._buffer.popleft()
        if self._anchors:
            if index < self._anchors[0]['read']:
                self._kept.popleft()
            else:
                self._live[self._segment(index)] -= 1
                while len(self._anchors) > 1 and not self._live[self._anchors[0]['read']]:
                    del self._live[self._anchors.popleft()['read']]
        self._produced += 1
        return dp

    def _add_anchor(self):
        if self._unsupported is not None:
            return
        ds_state = state_or_error(self._inf_ds)
        if isinstance(ds_state, DataFlowStateUnsupported):
            self._unsupported = ds_state
            self._anchors.clear()
            return
        first = not self._anchors
        self._anchors.append({'read': self._read, 'ds': ds_state, 'rng': rng_state(self.rng),
                              'count': self._count, 'produced': self._produced, 'size': len(self._buffer)})
        self._live[self._read] = 0
        dropped = 0
        while len(self._anchors) > 1 and self._anchors[0]['read'] < self._read - self.replay_limit:
            dropped += self._live.pop(self._anchors.popleft()['read'])
        if dropped or (first and self._buffer):   # entries older than every anchor: kept as they are
            self._locate_kept()

    def _locate_kept(self):
        oldest = self._anchors[0]['read']
        self._kept = deque(self._produced + offset for offset, (index, _) in enumerate(self._buffer)
                           if index < oldest)

    # ---- the state

    def _config(self):
        return [self.buffer_size, self.num_reuse, self.shuffle_interval]

    def get_state(self):
        """The oldest anchor (``ds``'s state, the RNG's and the counts at a point older than every
        entry of the buffer; shared, not copied), how many datapoints were read and produced since
        :meth:`reset_state`, and the entries older than every anchor (``kept``; almost always none)."""
        if self._unsupported is not None:
            raise self._unsupported
        if self._anchors:
            anchor = self._anchors[0]
        elif not self._buffer and self._entering is None:   # nothing read yet
            anchor = {'read': self._read, 'ds': get_dataflow_state(self._inf_ds), 'rng': rng_state(self.rng),
                      'count': self._count, 'produced': self._produced, 'size': 0}
        else:   # restored from a state of a version that kept the buffer, and not iterated since
            return self._buffer_state()
        kept = [[slot - self._produced] + list(self._buffer[slot - self._produced]) for slot in self._kept]
        if kept and not self._kept_noted:
            self._kept_noted = True
            logger.info("LocallyShuffleData: its state holds {} of its buffer's entries as they are ({}; "
                        "at most buffer_size={}): they entered more than replay_limit={} datapoints ago "
                        "(rare), or before a restore of a state that held the buffer.".format(
                            len(kept), _size_text([dp for _, _, dp in kept]), self.buffer_size,
                            self.replay_limit))
        return {'config': self._config(), 'anchor': anchor, 'read': self._read, 'produced': self._produced,
                'kept': kept}

    def _buffer_state(self):
        index, dp, times = self._entering or (None, None, 0)
        return {'ds': get_dataflow_state(self._inf_ds), 'buffer': self.q, 'rng': rng_state(self.rng),
                'count': self._count, 'entering': dp, 'times': times}

    def set_state(self, state):
        """Go back to ``state``: read ``ds`` again from the anchor, refilling the buffer as it was
        (one log line says how many datapoints, and how long it took)."""
        if 'buffer' in state:
            return self._set_buffer_state(state)
        if list(state['config']) != self._config():
            raise ValueError("LocallyShuffleData: a state of [buffer_size, num_reuse, shuffle_interval] {} "
                             "given to one of {}".format(list(state['config']), self._config()))
        anchor = state['anchor']
        self._start_stream()
        set_dataflow_state(self._inf_ds, anchor['ds'])
        set_rng_state(self.rng, anchor['rng'])
        self._read, self._produced = int(anchor['read']), int(anchor['produced'])
        self._count = int(anchor['count'])
        # the entries read before the anchor: only their number matters until the last replayed step
        self._buffer = deque([(-1, None)] * int(anchor['size']))
        self._anchors.append(anchor)
        self._live[self._read] = 0
        self._kept = deque(range(self._produced, self._produced + len(self._buffer)))
        start, again = time.perf_counter(), int(state['read']) - self._read
        steps = int(state['produced']) - self._produced
        if steps:
            replay = self._shuffled()
            try:
                for _ in range(steps):
                    next(replay)
            except StopIteration:
                raise ValueError("LocallyShuffleData: the state is not one of this DataFlow: {} ended before "
                                 "its position".format(type(self.ds).__name__)) from None
            finally:
                replay.close()
        offsets = [slot - self._produced for slot in self._kept]
        if self._read != int(state['read']) or offsets != sorted(int(entry[0]) for entry in state['kept']):
            raise ValueError("LocallyShuffleData: the state is not one of this DataFlow (the replay read {} "
                             "datapoints, not {})".format(self._read - int(anchor['read']), again))
        for offset, index, dp in state['kept']:
            self._buffer[int(offset)] = (int(index), dp)
        if again:
            took = humanize_time_delta(time.perf_counter() - start)
            logger.info("LocallyShuffleData: refilled its buffer by reading {} datapoints of {} again, in {}."
                        .format(again, type(self.ds).__name__, took))

    def _set_buffer_state(self, state):
        """A state that holds the buffer (written before the anchors): its entries are kept as
        they are until they leave the buffer."""
        self._start_stream()
        set_dataflow_state(self._inf_ds, state['ds'])
        set_rng_state(self.rng, state['rng'])
        self._buffer = deque((-1, dp) for dp in state['buffer'])
        self._count = int(state['count'])
        self._entering = (-1, state['entering'], int(state['times'])) if state['times'] else None


class CacheData(ProxyDataFlow):
    """Cache the first complete epoch of ``ds`` in memory and replay it afterwards.

    The first epoch reads ``ds`` (producing its datapoints as they come); once it has run to
    the end, later epochs replay the cache without touching ``ds``.  An epoch stopped early
    is not cached.  :meth:`reset_state` empties the cache.  Not reentrant.

    Its state holds ``ds``'s state at the start of the epoch read from it (taken once per such
    epoch), not the cache: :meth:`set_state` reads that epoch from ``ds`` again (and replays the
    shuffles of the cache since).

    Args:
        ds (DataFlow): input dataflow.
        shuffle (bool): replay the cache in a new random order every epoch.
    """

    def __init__(self, ds, shuffle=False):
        self.shuffle = shuffle
        super(CacheData, self).__init__(ds)
        self.buffer = None
        self._guard = DataFlowReentrantGuard('CacheData')
        self._epoch_start = None    # ds's state (or why it has none) when the epoch read from it began
        self._read_count = None     # datapoints that epoch produced so far (while in progress)
        self._resume_read = None    # after set_state: datapoints to read again, not to produce
        self._cache_rng = None      # the RNG's state when the cache was filled
        self._replays = 0           # replays of the cache begun (each one shuffles it)
        self._cursor = IterationCursor()  # the replay in progress

    def reset_state(self):
        super(CacheData, self).reset_state()
        if self.shuffle:
            self.rng = get_rng(self)
        self.buffer = None
        self._replays = 0
        self._resume_read = None
        self._cursor = IterationCursor()

    def __len__(self):
        if self.buffer is not None:
            return len(self.buffer)
        return len(self.ds)

    def __iter__(self):
        if self.buffer is not None:
            return self._replay(not self._cursor.resuming, self._cursor.follow(self.buffer))
        return self._read_and_cache(*self._reading())

    def _replay(self, new_replay, datapoints):
        with self._guard:
            if new_replay:
                if self.shuffle:
                    self.rng.shuffle(self.buffer)
                self._replays += 1
            yield from datapoints

    def _reading(self):
        """An iteration of ds and what it read already: after set_state, the datapoints the saved
        iteration had produced, read again here."""
        skip, self._resume_read = self._resume_read, None
        if skip is None:
            self._epoch_start = state_or_error(self.ds)
            self._cache_rng = self._rng_state()  # the RNG is used from the first replay on
        source = iter(self.ds)
        return source, list(itertools.islice(source, skip or 0))

    def _rng_state(self):
        return rng_state(self.rng) if self.shuffle else None

    def _read_and_cache(self, source, pending):
        with self._guard:
            try:
                for dp in source:
                    pending.append(dp)
                    self._read_count = len(pending)
                    yield dp
            finally:
                self._read_count = None
            self.buffer = pending

    def _start_state(self):
        if isinstance(self._epoch_start, DataFlowStateUnsupported):
            raise self._epoch_start
        return self._epoch_start

    def get_state(self):
        """``ds``'s state at the start of the epoch read from it, the RNG's state then (copied
        once per such epoch) and how far the iteration got: datapoints read, or replays begun and
        datapoints produced by the one in progress."""
        if self.buffer is not None:
            return {'start': self._start_state(), 'rng': self._cache_rng, 'cached': True,
                    'replays': self._replays, 'done': self._cursor.state()['done']}
        read = self._read_count if self._read_count is not None else self._resume_read
        if read is not None:
            return {'start': self._start_state(), 'rng': self._cache_rng, 'cached': False, 'read': read}
        return {'start': get_dataflow_state(self.ds), 'rng': self._rng_state(), 'cached': False, 'read': 0}

    def set_state(self, state):
        set_dataflow_state(self.ds, state['start'])
        self._epoch_start, self._cache_rng = state['start'], state['rng']
        if self.shuffle:
            set_rng_state(self.rng, state['rng'])
        if not state['cached']:
            self.buffer, self._resume_read = None, int(state['read'])
            return
        self.buffer, self._resume_read = list(self.ds), None
        self._replays = int(state['replays'])
        for _ in range(self._replays if self.shuffle else 0):
            self.rng.shuffle(self.buffer)
        self._cursor.restore({'done': state['done']})


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

    # an identity proxy: its position is the wrapped DataFlow's (what it logged is not kept)
    get_state = ProxyDataFlow.get_state
    set_state = ProxyDataFlow.set_state

    def __iter__(self):
        return self._printed(iter(self.ds))

    def _printed(self, source):
        for dp in source:
            if self.cnt < self.num:
                if self.cnt == 0:
                    label = ' ({})'.format(self.name) if self.name is not None else ''
                    logger.info("Contents of DataFlow{}:".format(label))
                logger.info(self._get_msg(dp))
                self.cnt += 1
            yield dp
