"""Epoch after epoch of a DataFlow: the one rule for epochs that produce nothing.

A DataFlow may buffer across epochs (:class:`BatchDataByShape` keeps its incomplete
batches), so one of its epochs can produce nothing while a later one produces batches:
every loop that repeats epochs (the parallel runners, ``RepeatedData(num=-1)``,
``FixedSizeData``, ``send_dataflow_zmq``) goes on after an empty epoch. A DataFlow that can
never produce anything would make such a loop spin silently forever, so
:attr:`EmptyEpochs.fail_after` empty epochs in a row end it with an error naming the
DataFlow and the count; :attr:`EmptyEpochs.warn_after` of them in a row log a warning first.
"""

from ..utils import logger

__all__ = ['EmptyEpochs', 'repeat_epochs']


class EmptyEpochs(object):
    """Counts the epochs in a row of ``ds`` that produced nothing, for the loop ``owner``."""

    warn_after = 100
    """Empty epochs in a row after which a warning is logged (once per run of empty epochs)."""

    fail_after = 10000
    """Empty epochs in a row after which :meth:`epoch_ended` raises ``RuntimeError``."""

    def __init__(self, ds, owner):
        self.ds, self.owner = ds, owner
        self.in_a_row = 0

    def epoch_ended(self, count):
        """Record an epoch of ``count`` datapoints; raise if too many in a row were empty."""
        if count:
            self.in_a_row = 0
            return
        self.in_a_row += 1
        name = type(self.ds).__name__
        if self.in_a_row >= self.fail_after:
            raise RuntimeError(
                "{}: {} epochs in a row of {} produced no datapoint; it seems unable to produce any "
                "(an empty source, or every datapoint filtered out).".format(self.owner, self.in_a_row, name))
        if self.in_a_row == self.warn_after:
            logger.warn("{}: {} epochs in a row of {} produced no datapoint (an error after {}); "
                        "fine if it buffers across epochs, as BatchDataByShape does.".format(
                            self.owner, self.in_a_row, name, self.fail_after))


def repeat_epochs(ds, owner, first=None):
    """The datapoints of ``ds``, epoch after epoch, forever (see :class:`EmptyEpochs`); ``first``
    is the iterator of the first epoch when it is made already."""
    empty = EmptyEpochs(ds, owner)
    epoch = first
    while True:
        count = 0
        for count, dp in enumerate(iter(ds) if epoch is None else epoch, 1):
            yield dp
        empty.epoch_ended(count)
        epoch = None
