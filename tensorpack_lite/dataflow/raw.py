"""DataFlows that wrap plain Python data: a list, a generator, an iterable."""

import numpy as np

from ..utils import logger
from .base import DataFlow, RNGDataFlow, _LengthUnavailable

__all__ = ['DataFromList', 'DataFromGenerator', 'DataFromIterable']


class DataFromList(RNGDataFlow):
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

    def __iter__(self):
        if not self.shuffle:
            yield from self.lst
            return
        order = np.arange(len(self.lst))
        self.rng.shuffle(order)
        for k in order:
            yield self.lst[k]


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
            raise _LengthUnavailable("DataFromGenerator has no length; pass size= if you know it.")
        return self._size

    def __iter__(self):
        yield from self._gen()


class DataFromIterable(DataFlow):
    """Produce the elements of an iterable (re-iterated every epoch).

    ``len()`` is the iterable's length when it has one.

    Args:
        iterable: e.g. a list, a tuple, a ``range``, or any container.
    """

    def __init__(self, iterable):
        self._itr = iterable
        try:
            self._len = len(iterable)
        except TypeError:
            self._len = None

    def __len__(self):
        if self._len is None:
            raise _LengthUnavailable("DataFromIterable: the wrapped {} has no length.".format(
                type(self._itr).__name__))
        return self._len

    def __iter__(self):
        yield from self._itr
