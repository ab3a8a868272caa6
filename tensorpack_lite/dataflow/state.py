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
    the iterations after it are those that would have followed. ``iter(df)`` claims that rest at
    once (``__iter__`` is then a plain method returning a generator, and makes the iterators of
    the DataFlows it wraps at once too): an iteration made and dropped before its first
    datapoint, as a :class:`JoinData` drops its others when one ends, uses the rest up, as the
    saved iteration, abandoned there, did.

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

        def __iter__(self):        # claims the restored position now, not at the first next()
            start, self._resume = self._resume or 0, None
            return self._count(start)

        def _count(self, start):
            try:
                for i in range(start, self.n):
                    self._done = i + 1   # before the yield: get_state() runs while it waits there
                    yield [i]
            finally:               # also when the iteration is abandoned
                self._done = None

        def get_state(self):
            return {'done': self._done if self._done is not None else self._resume}

        def set_state(self, state):
            self._resume = state['done']

:class:`IterationCursor` keeps such a count (and the RNG state of a shuffled order) for you.
"""

import functools
import itertools

import numpy as np

__all__ = ['DataFlowStateUnsupported', 'has_state', 'get_dataflow_state', 'set_dataflow_state',
           'rng_state', 'set_rng_state', 'state_or_error', 'unsupported_position', 'without_position',
           'IterationCursor']


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
    :class:`DataFlowStateUnsupported` from ``get_state`` when the DataFlow it wraps has no state,
    and so does a DataFlow whose order is not reproducible (a parallel runner): its message then
    says what a resumed training gets instead (:func:`unsupported_position`).
    """
    return _class_has_state(type(df))


@functools.lru_cache(maxsize=4096)  # asked for every state taken: answered once per class
def _class_has_state(cls):
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


def state_or_error(df):
    """:func:`get_dataflow_state` of ``df``, or the :class:`DataFlowStateUnsupported` it raised
    (returned, not raised): for a DataFlow that takes its input's state on the way, for users
    who may never ask for its own."""
    try:
        return get_dataflow_state(df)
    except DataFlowStateUnsupported as err:
        return err


def unsupported_position(df, reason, instead):
    """The :class:`DataFlowStateUnsupported` of a DataFlow whose stream cannot be put back
    (``reason``), saying in one line what a resumed training gets: the epoch in progress
    re-iterated without the datapoints already consumed, ``instead`` of the same datapoints."""
    return DataFlowStateUnsupported(
        "{} cannot save its position: {}. A resumed training re-iterates it and drops the datapoints "
        "consumed in the epoch in progress (the epoch keeps its length), but {}.".format(
            type(df).__name__, reason, instead))


def without_position(reason, instead):
    """``get_state`` and ``set_state`` methods that both raise :func:`unsupported_position`, for
    a DataFlow class whose order is not reproducible::

        get_state, set_state = without_position("a queue cannot be put back",
                                                "the datapoints are the next ones of the queue")
    """
    def get_state(self):
        raise unsupported_position(self, reason, instead)

    def set_state(self, state):
        raise unsupported_position(self, reason, instead)
    get_state.__doc__ = set_state.__doc__ = "Raises DataFlowStateUnsupported: {}.".format(reason)
    return get_state, set_state


class IterationCursor(object):
    """How far the iteration in progress got, for a DataFlow that produces the items of a
    sequence (or of a stream read in order) from the first, in order or in a new random order
    every iteration. Its state is ``{'done': items produced by the iteration in progress (None
    between iterations), 'rng': the RNG's state before the iteration's shuffle (None in order)}``:
    the RNG's state is copied once per iteration, never per item.

    Example::

        def __iter__(self):
            positions = self._cursor.follow(self._cursor.order(len(self), self.rng))
            return (self._datapoint_at(k) for k in positions)
    """

    def __init__(self):
        self.done = None            # items produced by the iteration in progress
        self._shuffle_rng = None    # the RNG's state before this iteration's shuffle
        self._resume = None         # items to skip at the start of the next iteration

    def order(self, size, rng=None):
        """``0 .. size - 1``, or a permutation of them drawn from ``rng``."""
        if rng is None:
            return range(size)
        self._shuffle_rng = rng_state(rng)
        order = np.arange(size)
        rng.shuffle(order)
        return order

    @property
    def resuming(self):
        """Whether :meth:`restore` put back an iteration in progress, which the next
        :meth:`follow` continues."""
        return self._resume is not None

    def follow(self, items):
        """The items of an iteration, counted; after :meth:`restore`, the first ones (those the
        saved iteration had produced) are read and dropped. The position to resume from is
        claimed at once, not at the first item; an iteration closed before its end (abandoned)
        counts as ended."""
        start, self._resume = self._resume or 0, None
        return self._counted(items, start)

    def _counted(self, items, start):
        try:
            for done, item in enumerate(itertools.islice(items, start, None), start + 1):
                self.done = done
                yield item
        finally:
            self.done = None

    def state(self, rng=None):
        """The state; ``rng`` is the generator that draws the order (None: in order)."""
        if self.done is not None:
            return {'done': self.done, 'rng': None if rng is None else self._shuffle_rng}
        return {'done': self._resume, 'rng': None if rng is None else rng_state(rng)}

    def restore(self, state, rng=None):
        """Go back to ``state``: the next :meth:`follow` skips what was done."""
        if rng is not None:
            set_rng_state(rng, state['rng'])
        self.done, self._resume = None, state['done']
