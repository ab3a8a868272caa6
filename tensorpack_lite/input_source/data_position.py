"""Where an input source is in its DataFlow's stream, counted in what training consumed.

An input source produces datapoints ahead of training (a queue's thread, a staging area),
so the DataFlow's own position is ahead of the data the model has seen. A
:class:`DataPosition` iterates the DataFlow for the source, takes the DataFlow's state after
every datapoint it produces (see :mod:`tensorpack_lite.dataflow.state`; a few microseconds
for the library's DataFlows), and answers the state after the ``n``-th datapoint: the
source says how many training consumed, the position gives the matching state.

A DataFlow without the state protocol is resumed by re-iterating the epoch in progress
and dropping what was consumed of it (one log line says so, and how long it took); its
random draws then start from its seed again.

Example::

    position = DataPosition(df, 'QueueInput', history=100)
    position.restore(saved)               # before iterating; saved = position.state_after(n)
    for dp in position.datapoints():      # forever: epoch after epoch
        ...
"""

import collections
import threading
import time

from ..dataflow.base import DataFlow
from ..dataflow.epochs import EmptyEpochs
from ..dataflow.state import DataFlowStateUnsupported, get_dataflow_state, has_state, set_dataflow_state
from ..utils import logger
from ..utils.utils import humanize_time_delta

__all__ = ['DataPosition']


class DataPosition:
    """The datapoints of ``ds``, epoch after epoch, and the state after each of them.

    Args:
        ds (DataFlow): the source's DataFlow (reset by the source, not here).
        owner (str): the input source, for messages.
        history (int): how many of the latest states are kept: at least the datapoints that can
            be produced but not yet consumed (a queue's capacity plus what is staged). 0: the
            source consumes what it produces at once (FeedInput), so no state is taken per
            datapoint; :meth:`state_after` takes the latest one when asked, in the iterating thread.
        infinite (bool): repeat the epochs forever; when False, one epoch.
    """

    def __init__(self, ds, owner, history=0, infinite=True):
        if not isinstance(ds, DataFlow):
            raise TypeError("{} takes a DataFlow, got {!r}".format(owner, ds))
        self.ds = ds
        self.owner = owner
        self.infinite = infinite
        self._states = collections.deque(maxlen=int(history) + 1 if history else 0)
        self._epoch_done = 0             # datapoints produced by the epoch in progress
        self._lock = threading.Lock()
        self._pending = None             # a state to go back to before iterating
        self._produced = 0               # datapoints produced by this process
        self._unsupported = None         # why ds has no state, once known
        self._start = None               # the state before the first datapoint of this process

    def restore(self, state):
        """Go back to ``state`` (from :meth:`state_after`, maybe in another process) when
        :meth:`datapoints` starts."""
        self._pending = state

    def state_after(self, count):
        """The state after the first ``count`` datapoints this process produced (0: the state
        it started from). ValueError when that state is no longer kept (``history`` too small)
        or not produced yet."""
        with self._lock:
            if count == 0:
                return self._start
            if not self._states.maxlen and count == self._produced:
                return self._snapshot(self._epoch_done)
            for index, state in reversed(self._states):
                if index == count:
                    return state
            kept = [index for index, _ in self._states]
        raise ValueError("{}: the state after datapoint {} is not kept (kept: {}); the history of {} "
                         "states is shorter than what is produced ahead of training".format(
                             self.owner, count, "{}..{}".format(kept[0], kept[-1]) if kept else "none",
                             self._states.maxlen))

    def datapoints(self):
        """Iterate: first what restores the pending state, then the stream, recording states."""
        epoch = self._resume()
        empty = EmptyEpochs(self.ds, self.owner)
        while True:
            count = epoch.done
            for dp in epoch.iterator:
                count += 1
                self._record(count)
                yield dp
            empty.epoch_ended(count - epoch.done)
            if not self.infinite:
                return
            epoch = _Epoch(iter(self.ds), 0)

    def _resume(self):
        """The epoch to start with: a fresh one, the rest of a restored one, or a re-iterated
        one with the consumed datapoints dropped."""
        state, self._pending = self._pending, None
        self._check_state_support()
        if state is None:
            self._start = self._snapshot(0)
            return _Epoch(iter(self.ds), 0)
        done = int(state['epoch_datapoints'])
        if state.get('dataflow') is not None and self._unsupported is None:
            set_dataflow_state(self.ds, state['dataflow'])
            self._start = state
            return _Epoch(iter(self.ds), done)
        self._start = {'dataflow': None, 'epoch_datapoints': done}
        return _Epoch(self._skip(done), done)

    def _check_state_support(self):
        if not has_state(self.ds):
            self._unsupported = "{} does not implement get_state()/set_state()".format(type(self.ds).__name__)
            return
        try:
            get_dataflow_state(self.ds)
        except DataFlowStateUnsupported as err:
            self._unsupported = str(err)

    def _skip(self, count):
        """A new iteration of ``ds`` with its first ``count`` datapoints dropped (logged)."""
        iterator = iter(self.ds)
        start = time.perf_counter()
        dropped = 0
        for dropped in range(1, count + 1):
            if next(iterator, _END) is _END:
                dropped -= 1
                break
        logger.info("{}: resumed without the DataFlow's state ({}): re-iterated the epoch in progress and "
                    "dropped the {} datapoint(s) training had consumed of it, in {}.".format(
                        self.owner, self._unsupported, dropped,
                        humanize_time_delta(time.perf_counter() - start)))
        return iterator

    def _snapshot(self, done):
        if self._unsupported is not None:
            return {'dataflow': None, 'epoch_datapoints': done}
        return {'dataflow': get_dataflow_state(self.ds), 'epoch_datapoints': done}

    def _record(self, done):
        state = self._snapshot(done) if self._states.maxlen else None
        with self._lock:
            self._produced += 1
            self._epoch_done = done
            if state is not None:
                self._states.append((self._produced, state))

    def discard_after(self, count):
        """The datapoints produced after the first ``count`` were thrown away (a queue emptied
        before a new iteration): the next one produced is number ``count + 1``."""
        with self._lock:
            while self._states and self._states[-1][0] > count:
                self._states.pop()
            self._produced = count

    @property
    def produced(self):
        """The datapoints produced by this process so far."""
        return self._produced


_END = object()


class _Epoch:
    """An iteration of the DataFlow and how many of its datapoints came before it."""

    __slots__ = ('iterator', 'done')

    def __init__(self, iterator, done):
        self.iterator, self.done = iterator, done
