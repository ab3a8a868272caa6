"""The DataFlow protocol and its three base classes.

A DataFlow is a re-iterable source of *datapoints* (usually a list or a dict of
components).  The contract, as in tensorpack:

1. Call :meth:`DataFlow.reset_state` once before iterating (in the process that iterates).
   Proxies reset the dataflows they wrap; dataflows with randomness get a fresh RNG.
2. Each ``iter(df)`` is one epoch; a DataFlow can be iterated many times.
3. ``len(df)`` is the number of datapoints in one epoch when it is known;
   otherwise it raises :class:`NotImplementedError`.

Example::

    class Squares(DataFlow):
        def __iter__(self):
            for i in range(10):
                yield [i, i * i]

        def __len__(self):
            return 10

    df = Squares()
    df.reset_state()
    for x, y in df:
        ...
"""

import threading
from abc import ABCMeta, abstractmethod

from ..utils.utils import get_rng
from .state import DataFlowStateUnsupported, get_dataflow_state, set_dataflow_state

__all__ = ['DataFlow', 'RNGDataFlow', 'ProxyDataFlow', 'DataFlowTerminated',
           'DataFlowReentrantGuard', 'DataFlowMeta', 'LengthUnavailable']


class DataFlowTerminated(BaseException):
    """Raised when a DataFlow cannot produce data any more (e.g. its worker processes died).

    Most dataflows never raise it.  It derives from ``BaseException`` so that a generic
    ``except Exception`` in user code does not swallow it.
    """


class LengthUnavailable(NotImplementedError, TypeError):
    """``len()`` of a DataFlow without a known length.

    It is a :class:`NotImplementedError` as tensorpack documents, and also a ``TypeError``
    so that ``list(df)`` (which asks ``len()`` for a size hint and ignores only TypeError)
    still works on such dataflows.
    """


class DataFlowReentrantGuard(object):
    """Forbids two iterations of a stateful DataFlow from running at the same time.

    Use it around the body of ``__iter__``::

        def __iter__(self):
            with self._guard:
                ...

    Entering it while another iteration is alive (another thread, or an unfinished
    iterator still referenced) raises ``threading.ThreadError`` (a RuntimeError).

    Args:
        name (str): how to call the guarded dataflow in the error message.
    """

    def __init__(self, name=None):
        self._name = name
        self._lock = threading.Lock()

    def __enter__(self):
        if not self._lock.acquire(False):
            raise threading.ThreadError(
                "{} is not reentrant: it is already being iterated (by another thread, or by an "
                "unfinished iterator that is still alive). Finish or delete the first iterator "
                "before starting another one.".format(self._name or "This DataFlow"))
        return self

    def __exit__(self, exc_type, exc_val, exc_tb):
        self._lock.release()
        return False

    # A lock cannot be pickled; a copy of a dataflow gets its own, released, lock.
    def __getstate__(self):
        return {'_name': self._name}

    def __setstate__(self, state):
        self._name = state['_name']
        self._lock = threading.Lock()


class DataFlowMeta(ABCMeta):
    """Metaclass of :class:`DataFlow`: keeps DataFlows written against the old protocol working.

    A class that defines ``get_data()`` but not ``__iter__`` is iterable through it, and one
    that defines ``size()`` but not ``__len__`` has a ``len()`` through it (tensorpack renamed
    them; code written for the old names still runs).
    """

    _OLD_NAMES = (('__iter__', 'get_data'), ('__len__', 'size'))

    def __new__(mcls, name, bases, namespace, **kwargs):
        for protocol_name, old_name in mcls._OLD_NAMES:
            if old_name in namespace and protocol_name not in namespace:
                namespace[protocol_name] = _forward_to(old_name)
        return super().__new__(mcls, name, bases, namespace, **kwargs)


def _forward_to(method_name):
    def forward(self):
        return getattr(self, method_name)()
    forward.__doc__ = "Calls ``self.{}()``.".format(method_name)
    return forward


class DataFlow(object, metaclass=DataFlowMeta):
    """Base class of all dataflows: implement ``__iter__`` (and ``__len__`` when known).

    ``get_data()`` and ``size()`` are the old names of ``iter()`` and ``len()``, kept as in
    tensorpack: ``df.size()`` is ``len(df)``.
    """

    @abstractmethod
    def __iter__(self):
        """Yield the datapoints of one epoch.

        Calling it again starts a new epoch.  Stateful dataflows may refuse to be
        iterated from two places at once (see :class:`DataFlowReentrantGuard`).
        """

    def __len__(self):
        """Number of datapoints in one epoch.

        It may be approximate (e.g. after a filter).

        Raises:
            NotImplementedError: when the length is unknown.
        """
        raise LengthUnavailable("{} has no known length.".format(type(self).__name__))

    def get_data(self):
        """The old name of ``iter(self)``."""
        return self.__iter__()

    def size(self):
        """The old name of ``len(self)``."""
        return self.__len__()

    def __bool__(self):
        # A dataflow is an object, not a container: `if df:` must not call __len__
        # (which may raise, or be 0 for a flow that only knows no better).
        return True

    def reset_state(self):
        """Prepare the dataflow for iteration; call it once before iterating.

        It runs in the process that will iterate (e.g. after a fork), so it is the place
        to create RNGs, open files or start workers.  The base implementation does nothing.
        """

    def get_state(self):
        """The position of the iteration in progress (or of the next one), to be given to
        :meth:`set_state`, maybe in another process. Optional: see
        :mod:`tensorpack_lite.dataflow.state` for the protocol. The base implementation raises
        :class:`~tensorpack_lite.dataflow.state.DataFlowStateUnsupported`."""
        raise DataFlowStateUnsupported(
            "{} cannot save the position of its iteration (it does not implement get_state(); see "
            "tensorpack_lite.dataflow.state).".format(type(self).__name__))

    def set_state(self, state):
        """Go back to a position :meth:`get_state` gave: the next ``iter()`` produces the rest of
        that iteration. Called after :meth:`reset_state`. The base implementation raises
        :class:`~tensorpack_lite.dataflow.state.DataFlowStateUnsupported`."""
        raise DataFlowStateUnsupported(
            "{} cannot restore the position of an iteration (it does not implement set_state(); see "
            "tensorpack_lite.dataflow.state).".format(type(self).__name__))


class RNGDataFlow(DataFlow):
    """A DataFlow with a random generator ``self.rng``, renewed by every :meth:`reset_state`.

    Forked copies therefore draw different numbers, while :func:`fix_rng_seed` makes
    runs reproducible.
    """

    def reset_state(self):
        """Create a fresh ``self.rng`` with :func:`get_rng`."""
        self.rng = get_rng(self)

    @property
    def rng(self):
        try:
            return self.__dict__['_rng']
        except KeyError:
            raise RuntimeError(
                "{}.rng is used before reset_state() was called: call reset_state() once before "
                "iterating a DataFlow.".format(type(self).__name__)) from None

    @rng.setter
    def rng(self, value):
        self.__dict__['_rng'] = value


class ProxyDataFlow(DataFlow):
    """A DataFlow that wraps another one, ``self.ds``.

    ``reset_state``, ``__len__`` and ``__iter__`` are forwarded to ``self.ds``;
    subclasses override what they change.

    Args:
        ds (DataFlow): the dataflow to wrap.
    """

    def __init__(self, ds):
        self.ds = ds

    def reset_state(self):
        self.ds.reset_state()

    def __len__(self):
        return len(self.ds)

    def __iter__(self):
        return self.ds.__iter__()

    def get_state(self):
        """The wrapped DataFlow's state (``{'ds': ...}``): a subclass that changes the iteration
        defines its own (see :mod:`tensorpack_lite.dataflow.state`)."""
        return {'ds': get_dataflow_state(self.ds)}

    def set_state(self, state):
        set_dataflow_state(self.ds, state['ds'])
