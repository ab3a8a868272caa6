"""Sources fed from Python through placeholders: :class:`PlaceholderInput` (fed by the
caller) and :class:`FeedInput` (fed with the datapoints of a DataFlow, one per hooked run)."""

from time import perf_counter

from ..compat import tfv1
from ..dataflow.base import DataFlow
from ..loop.callback import Callback
from .data_position import DataPosition
from .datapoints import DatapointChecker, close_iterator
from .input_source_base import InputSource, build_or_reuse_placeholder

__all__ = ['PlaceholderInput', 'FeedInput']

_SessionRunArgs = tfv1.train.SessionRunArgs  # looked up once: used at every step


class PlaceholderInput(InputSource):
    """Plain placeholders, one per input; nothing feeds them (the caller does)."""

    def _setup(self, input_signature):
        self._placeholders = [build_or_reuse_placeholder(spec) for spec in input_signature]

    def _get_input_tensors(self):
        return self._placeholders


class FeedInput(InputSource):
    """Feed the datapoints of a DataFlow into placeholders, one datapoint per hooked step.

    Args:
        ds (DataFlow): produces datapoints as lists, one component per input.
        infinite (bool): repeat ``ds`` forever; when False, the step after the last datapoint
            raises ``StopIteration``.

    Example::

        source = FeedInput(BatchData(DataFromList(data, shuffle=True), 32))
    """

    class _FeedCallback(Callback):
        """Adds the next datapoint as the ``feed_dict`` of every hooked run (and fetches nothing).
        In training, the time taken to produce it is recorded as the loop's ``'input'`` wait
        (``TrainLoop.record_wait``); not when an evaluation runs the source (no ``before_train``)."""

        _loop = None

        def __init__(self, source):
            self._source = source

        def _before_train(self):
            self._loop = getattr(self.trainer, 'loop', None)

        def _before_run(self, _):
            start = perf_counter()
            feeds = self._source._next_feed()
            if self._loop is not None:
                self._loop.record_wait('input', perf_counter() - start)
            return _SessionRunArgs(fetches=None, feed_dict=feeds)

    def __init__(self, ds, infinite=True):
        if not isinstance(ds, DataFlow):
            raise TypeError("FeedInput takes a DataFlow, got {!r}".format(ds))
        self.ds = ds
        self._position = DataPosition(ds, 'FeedInput', infinite=infinite)   # fed as produced: no history
        self._itr = None
        self._ds_was_reset = False

    def _size(self):
        return len(self.ds)

    def _setup(self, input_signature):
        self._placeholders = [build_or_reuse_placeholder(spec) for spec in input_signature]
        self._checker = DatapointChecker('FeedInput', self._placeholders)
        self._cb = FeedInput._FeedCallback(self)

    def _get_input_tensors(self):
        return self._placeholders

    def _get_callbacks(self):
        return [self._cb]

    def _reset_state(self):
        if not self._ds_was_reset:  # a DataFlow is reset once; each reset starts a new pass
            self.ds.reset_state()
            self._ds_was_reset = True
        if self._itr is not None:
            close_iterator(self._itr)
        self._itr = self._position.datapoints()

    def _get_state(self, held_back):
        # Each datapoint is produced when a run takes it: all produced were consumed.
        return self._position.state_after(self._position.produced - held_back)

    def _set_state(self, state):
        self._position.restore(state)

    def _next_feed(self):
        if self._itr is None:
            raise RuntimeError("FeedInput was not reset before its first step: register the "
                               "callbacks returned by setup(), or call reset_state().")
        return self._checker.feeds(next(self._itr))
