"""The position of a DataFlow's iteration, saved and restored: the state protocol.

A DataFlow that implements it can say where it is in its stream and be put back there in a
new process, so that a training run resumed from a checkpoint sees the data it would have
seen had it never stopped (see docs/dataflow.md, "Saving the position").

The protocol has two methods, both optional (a DataFlow without them is resumed by
re-iterating and dropping what was consumed, see
:class:`~tensorpack_lite.input_source.data_position.DataPosition`):

``df.get_state()``
    Called after :meth:`~DataFlow.reset_state`, between two datapoints of an iteration (the
    iterator suspended after a ``yield``), or between iterations. It returns a value made of
    dicts with ``str`` keys, lists, tuples, numbers, ``str``, ``bytes``, None and numpy
    arrays (what :func:`~tensorpack_lite.utils.serialize.dumps` stores; tuples come back as
    lists). It must not change the DataFlow, and must be cheap: it is taken after every
    datapoint a trainer prefetches. A value it returns must stay valid when the DataFlow goes on
    (copy what later iteration mutates, e.g. a buffer; arrays that are replaced, never written
    to, can be shared).

``df.set_state(state)``
    Called after :meth:`~DataFlow.reset_state` and before the next ``iter(df)``, with a value
    ``get_state()`` returned (maybe in another process). The next ``iter(df)`` then produces the
    rest of the iteration that was in progress when the state was taken (possibly nothing), and
    the iterations after it are those that would have followed.

Whether a DataFlow implements it is decided by its class, not by a flag: the class that
defines the DataFlow's ``__iter__`` (or ``get_data``) must also define ``get_state`` and
``set_state``, itself or in a subclass of it (:func:`has_state`). So a user's subclass that
changes ``__iter__`` without saying how its position is saved is never taken for one that
does. A proxy's state holds the state of the DataFlow it wraps; when that one has none, the
proxy raises :class:`DataFlowStateUnsupported` too.

Example::

    class Counter(DataFlow):
        def __init__(self, n):
            self.n = n
            self._done = None      # datapoints produced by the iteration in progress
            self._resume = None

        def __iter__(self):
            start, self._resume = self._resume or 0, None
            for i in range(start, self.n):
                self._done = i + 1   # before the yield: get_state() runs while it waits there
                yield [i]
            self._done = None

        def get_state(self):
            return {'done': self._done}

        def set_state(self, state):
            self._resume = state['done']
"""

import numpy as np

__all__ = ['DataFlowStateUnsupported', 'has_state', 'get_dataflow_state', 'set_dataflow_state',
           'rng_state', 'set_rng_state']


class DataFlowStateUnsupported(NotImplementedError):
    """A DataFlow (named in the message) cannot save or restore the position of its iteration."""


def _defining_class(cls, names):
    """The first class in ``cls``'s MRO that defines one of ``names`` (None if none does)."""
    for klass in cls.__mro__:
        if any(name in vars(klass) for name in names):
            return klass
    return None


def has_state(df):
    """Whether the class of ``df`` implements the state protocol for the iteration it has: the
    class defining its ``__iter__`` (or ``get_data``) also defines ``get_state`` and
    ``set_state``, itself or through a subclass of it. A proxy may still raise
    :class:`DataFlowStateUnsupported` from ``get_state`` when the DataFlow it wraps has no state.
    """
    cls = type(df)
    iterates = _defining_class(cls, ('__iter__', 'get_data'))
    gets = _defining_class(cls, ('get_state',))
    sets = _defining_class(cls, ('set_state',))
    if iterates is None or gets is None or sets is None:
        return False
    return issubclass(gets, iterates) and issubclass(sets, iterates)


def _unsupported(df):
    return DataFlowStateUnsupported(
        "{} cannot save the position of its iteration: its class defines __iter__ without "
        "get_state()/set_state() (see tensorpack_lite.dataflow.state).".format(type(df).__name__))


def get_dataflow_state(df):
    """``df.get_state()``; :class:`DataFlowStateUnsupported` naming ``df``'s class when the class
    that iterates does not implement the protocol (:func:`has_state`)."""
    if not has_state(df):
        raise _unsupported(df)
    return df.get_state()


def set_dataflow_state(df, state):
    """``df.set_state(state)``, with the check of :func:`get_dataflow_state`."""
    if not has_state(df):
        raise _unsupported(df)
    df.set_state(state)


def rng_state(rng):
    """The state of a ``np.random.RandomState`` as a dict of plain values (a copy)."""
    kind, keys, pos, has_gauss, cached = rng.get_state(legacy=True)
    return {'kind': kind, 'keys': np.array(keys, copy=True), 'pos': int(pos),
            'has_gauss': int(has_gauss), 'cached_gaussian': float(cached)}


def set_rng_state(rng, state):
    """Put ``rng`` (a ``np.random.RandomState``) into ``state``, a value of :func:`rng_state`."""
    try:
        rng.set_state((str(state['kind']), np.asarray(state['keys'], dtype=np.uint32),
                       int(state['pos']), int(state['has_gauss']), float(state['cached_gaussian'])))
    except (KeyError, TypeError, ValueError) as err:
        raise ValueError("Not the state of a random generator (from rng_state()): {}".format(err)) from err
