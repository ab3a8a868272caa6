"""DataFlows that wrap plain Python data (a list, a generator, an iterable, a queue) or
make up random data (:class:`FakeData`)."""

from collections.abc import Sequence
from copy import copy

import numpy as np

from ..utils import logger
from .base import DataFlow, LengthUnavailable, RNGDataFlow
from .state import IterationCursor, rng_state, set_rng_state, unsupported_position, without_position

__all__ = ['FakeData', 'DataFromQueue', 'DataFromList', 'DataFromGenerator', 'DataFromIterable',
           'IndexedData']


def _per_component(value, count, name, is_single):
    """``value`` repeated ``count`` times if ``is_single(value)``, else the list ``value``
    (which must have ``count`` entries)."""
    if is_single(value):
        return [value] * count
    values = list(value)
    if len(values) != count:
        raise ValueError("FakeData: {} has {} entries but there are {} shapes".format(
            name, len(values), count))
    return values


def _is_domain(value):
    return (isinstance(value, (tuple, list)) and len(value) == 2
            and all(isinstance(x, (int, float, np.number)) for x in value))


class FakeData(RNGDataFlow):
    """Random datapoints of given shapes and dtypes, e.g. to measure the speed of a model
    without reading data.

    Values are uniform in ``[low, high)``: floats (and complex numbers, real part only) are
    ``self.rng.rand(*shape) * (high - low) + low``, integers come from ``self.rng.randint``
    (tensorpack truncates floats instead), bools are fair coin flips.

    Args:
        shapes (list): the shape of each component, e.g. ``[[28, 28], [1]]``.
        size (int): datapoints per epoch.
        random (bool): draw new values for every datapoint; otherwise draw one datapoint at
            the first epoch after :meth:`reset_state` and produce (shallow copies of) it
            every time.
        dtype (str or list): the dtype of every component, or one per component.
        domain (tuple or list): ``(low, high)`` for every component, or one pair per component.

    Example::

        df = FakeData([[64, 224, 224, 3], [64]], size=1000, dtype=['float32', 'int32'],
                      domain=[(0, 255), (0, 1000)])
    """

    def __init__(self, shapes, size=1000, random=True, dtype='float32', domain=(0, 1)):
        super(FakeData, self).__init__()
        self.shapes = [tuple(int(d) for d in shape) for shape in shapes]
        self._size = int(size)
        self.random = random
        count = len(self.shapes)
        self.dtype = [np.dtype(d) for d in _per_component(
            dtype, count, 'dtype', lambda d: isinstance(d, (str, type, np.dtype)))]
        self.domain = _per_component(domain, count, 'domain', _is_domain)
        for k, (low, high) in enumerate(self.domain):
            if not low < high:
                raise ValueError("FakeData: the domain of component {} is ({}, {}), it needs low < high"
                                 .format(k, low, high))
        self._fixed = None
        self._fixed_rng = None     # the RNG's state before the fixed datapoint was drawn
        self._cursor = IterationCursor()

    def __len__(self):
        return self._size

    def reset_state(self):
        super(FakeData, self).reset_state()
        self._fixed = None

    def _draw(self, shape, dtype, low, high):
        if dtype == np.bool_:
            return self.rng.randint(0, 2, size=shape).astype(np.bool_)
        if dtype.kind in 'iu':
            return self.rng.randint(int(np.ceil(low)), int(np.ceil(high)), size=shape).astype(dtype)
        return (self.rng.rand(*shape) * (high - low) + low).astype(dtype)

    def _datapoint(self):
        return [self._draw(shape, dtype, low, high)
                for shape, dtype, (low, high) in zip(self.shapes, self.dtype, self.domain)]

    def __iter__(self):
        if self.random:
            return (self._datapoint() for _ in self._cursor.follow(range(self._size)))
        return self._copies_of_fixed(self._cursor.follow(range(self._size)))

    def _copies_of_fixed(self, positions):
        if self._fixed is None:
            self._fixed_rng = rng_state(self.rng)
            self._fixed = self._datapoint()
        for _ in positions:
            yield copy(self._fixed)

    def get_state(self):
        """How many datapoints the iteration in progress produced and the RNG's state (a 2.5 kB
        copy per call with ``random``; without it, the state before the fixed datapoint's draw,
        which is drawn again on restore)."""
        state = self._cursor.state()
        if self.random or self._fixed is None:
            state['rng'] = rng_state(self.rng)
        else:
            state.update(rng=self._fixed_rng, fixed=True)
        return state

    def set_state(self, state):
        self._cursor.restore(state)
        set_rng_state(self.rng, state['rng'])
        if state.get('fixed'):
            self._fixed_rng = state['rng']
            self._fixed = self._datapoint()


class DataFromQueue(DataFlow):
    """Produce what ``queue.get()`` returns, forever (no length).

    Args:
        queue: anything with a blocking ``get()``, e.g. a ``queue.Queue`` or a
            ``multiprocessing.Queue`` fed by another thread or process.
    """

    def __init__(self, queue):
        self.queue = queue

    def __iter__(self):
        while True:
            yield self.queue.get()

    get_state, set_state = without_position("what a queue gave cannot be put back",
                                            "the datapoints are the next ones the queue gives")


class IndexedData(RNGDataFlow):
    """Template of the DataFlows whose datapoints are read by index: ``_datapoint_at(k)`` for
    ``k < len(self)``, in order, or in a new random order every iteration when ``self.shuffle``
    (drawn from ``self.rng``). Its state is an :class:`IterationCursor`'s: how many datapoints
    the iteration in progress produced, and the RNG's state before its shuffle."""

    shuffle = False

    def _datapoint_at(self, k):
        raise NotImplementedError("{} must implement _datapoint_at()".format(type(self).__name__))

    def _num_indexed(self):
        """How many datapoints an iteration reads (``len(self)`` unless a subclass says otherwise)."""
        return len(self)

    @property
    def _cursor(self):
        # made on first use: subclasses need not call this class's __init__
        cursor = self.__dict__.get('_iteration_cursor')
        if cursor is None:
            cursor = self.__dict__['_iteration_cursor'] = IterationCursor()
        return cursor

    def _order_rng(self):
        return self.rng if self.shuffle else None

    def __iter__(self):
        positions = self._cursor.follow(self._cursor.order(self._num_indexed(), self._order_rng()))
        return (self._datapoint_at(int(k)) for k in positions)

    def get_state(self):
        """How many datapoints the iteration in progress produced; with ``shuffle``, the RNG's
        state that draws its order (a 2.5 kB copy, taken once per iteration), not the order."""
        return self._cursor.state(self._order_rng())

    def set_state(self, state):
        self._cursor.restore(state, self._order_rng())


class DataFromList(IndexedData):
    """Produce the elements of a list, each one a datapoint.

    Args:
        lst (list): the datapoints.
        shuffle (bool): produce them in a new random order every epoch (drawn from
            ``self.rng``, so :func:`fix_rng_seed` makes it reproducible).

    Example::

        df = DataFromList([[1, 'a'], [2, 'b']], shuffle=False)
        df.reset_state()
        list(df)  # [[1, 'a'], [2, 'b']]
    """

    def __init__(self, lst, shuffle=True):
        super(DataFromList, self).__init__()
        self.lst = lst
        self.shuffle = shuffle

    def __len__(self):
        return len(self.lst)

    def _num_indexed(self):  # the whole list, whatever a subclass's len() says
        return len(self.lst)

    def _datapoint_at(self, k):
        return self.lst[k]


class DataFromGenerator(DataFlow):
    """Produce the datapoints of a generator.

    Args:
        gen: a callable returning an iterable (e.g. a generator function), called once
            per epoch; or an iterable.  A generator object is exhausted after one epoch,
            so later epochs are empty (a warning says so at construction).
        size (int): the value of ``len()``, if you know it.  Without it the dataflow has
            no length.

    Example::

        def gen():
            for i in range(3):
                yield [i]
        df = DataFromGenerator(gen)     # every epoch yields [0], [1], [2]
    """

    def __init__(self, gen, size=None):
        if callable(gen):
            self._gen = gen
        else:
            if iter(gen) is gen:   # a generator or another one-shot iterator
                logger.warn("DataFromGenerator was given a {} object rather than a function "
                            "returning one: it can be iterated only once, so every epoch after "
                            "the first will be empty.".format(type(gen).__name__))
            self._gen = lambda: gen
        self._size = None if size is None else int(size)

    def __len__(self):
        if self._size is None:
            raise LengthUnavailable("DataFromGenerator has no length; pass size= if you know it.")
        return self._size

    def __iter__(self):
        yield from self._gen()

    get_state, set_state = without_position(
        "a generator cannot be put back mid-way",
        "the datapoints are the same only if the function gives the same sequence at every call")


class DataFromIterable(DataFlow):
    """Produce the elements of an iterable (re-iterated every epoch).

    ``len()`` is the iterable's length when it has one. Its position can be saved when the
    iterable is a sequence (a list, a tuple, a ``range``, a numpy array): the state is how many
    elements the iteration in progress produced.

    Args:
        iterable: e.g. a list, a tuple, a ``range``, or any container.
    """

    def __init__(self, iterable):
        self._itr = iterable
        try:
            self._len = len(iterable)
        except TypeError:
            self._len = None
        self._cursor = IterationCursor()

    def __len__(self):
        if self._len is None:
            raise LengthUnavailable("DataFromIterable: the wrapped {} has no length.".format(
                type(self._itr).__name__))
        return self._len

    def __iter__(self):
        return self._cursor.follow(iter(self._itr))

    def _check_sequence(self):
        if not isinstance(self._itr, (Sequence, np.ndarray)):
            raise unsupported_position(
                self, "the {} it wraps is not a sequence, so another process may iterate it in "
                "another order".format(type(self._itr).__name__),
                "the datapoints are the same only if it iterates in the same order there")

    def get_state(self):
        self._check_sequence()
        return self._cursor.state()

    def set_state(self, state):
        self._check_sequence()
        self._cursor.restore(state)
