"""Callbacks that maintain and collect summaries.

* :class:`MovingAverageSummary` runs the ops that maintain moving averages of summarized
  tensors (collection :data:`MOVING_SUMMARY_OPS_KEY`) with every step.
* :func:`MergeAllSummaries` evaluates the graph's summaries once per epoch (or more often)
  and puts them into ``trainer.monitors``.
* :class:`SimpleMovingAverage` averages tensors over a sliding window of steps in Python.
"""

from collections import deque

import numpy as np

from ..compat import tf, tfv1
from ..loop.callback import Callback
from ..tfutils.common import get_op_tensor_name
from ..utils import logger
from ..utils.argtools import is_int
from ..utils.naming import MOVING_SUMMARY_OPS_KEY
from .graph import as_operation
from .monitors.group import summary_scalar_name

__all__ = ['MOVING_SUMMARY_OPS_KEY', 'MovingAverageSummary', 'MergeAllSummaries',
           'MergeAllSummaries_RunAlone', 'MergeAllSummaries_RunWithOp', 'SimpleMovingAverage']


class MovingAverageSummary(Callback):
    """Run the ops of ``collection`` (by default those that maintain the moving averages of
    summarized tensors) with every step. It only keeps the averages up to date; other
    callbacks (e.g. :func:`MergeAllSummaries`) write the summaries.

    Args:
        collection (str): the collection of update ops (or tensors).
        train_op (tf.Operation, tf.Tensor or str): if given, the update ops become control
            dependencies of this op (by object or name) and run whenever it runs, instead of
            being added to every ``hooked_sess.run``.

    An empty collection is logged and ignored.
    """

    def __init__(self, collection=MOVING_SUMMARY_OPS_KEY, train_op=None):
        if not isinstance(collection, str):
            raise TypeError("MovingAverageSummary: collection must be a collection name (str), got "
                            "{!r}".format(collection))
        if train_op is not None and not isinstance(train_op, (tf.Operation, tf.Tensor, str)):
            raise TypeError("MovingAverageSummary: train_op must be a tf.Operation, a tf.Tensor or "
                            "an op name, got {!r}".format(train_op))
        self._collection = collection
        self._train_op = train_op
        self._fetch = None

    def _setup_graph(self):
        owner = "MovingAverageSummary(collection='{}')".format(self._collection)
        ops = [as_operation(k, owner) for k in tfv1.get_collection(self._collection)]
        if not ops:
            logger.info("[MovingAverageSummary] Collection '{}' is empty, nothing to maintain.".format(
                self._collection))
            return
        if self._train_op is None:
            logger.info("[MovingAverageSummary] {} operations in collection '{}' will be run with "
                        "session hooks.".format(len(ops), self._collection))
            self.ema_op = tf.group(*ops, name='maintain_moving_average_summary')
            self._fetch = tfv1.train.SessionRunArgs(fetches=self.ema_op)
        else:
            train_op = as_operation(self._train_op, "MovingAverageSummary(train_op=...)")
            train_op._add_control_inputs(ops)
            logger.info("[MovingAverageSummary] {} operations in collection '{}' will be run "
                        "together with operation '{}'.".format(len(ops), self._collection, train_op.name))

    def _before_run(self, _):
        return self._fetch


def _summary_op(key):
    size = len(tfv1.get_collection(key))
    logger.info("Summarizing collection '{}' of size {}.".format(key, size))
    return tfv1.summary.merge_all(key)


def _scalar_names_of(summary_op):
    """The names under which ``trainer.monitors.put_summary`` puts the scalars that
    ``summary_op`` (a merged summary) evaluates, or None when a tag is not a constant."""
    if summary_op is None:
        return []
    names = []
    pending = [summary_op.op if isinstance(summary_op, tf.Tensor) else summary_op]
    while pending:
        op = pending.pop(0)
        if op.type == 'MergeSummary':
            pending.extend(t.op for t in op.inputs)
        elif op.type == 'ScalarSummary':
            tag = tf.get_static_value(op.inputs[0])
            if tag is None or np.ndim(tag) != 0:
                return None
            tag = np.asarray(tag).item()
            names.append(summary_scalar_name(tag.decode() if isinstance(tag, bytes) else str(tag)))
    return names


class MergeAllSummaries_RunAlone(Callback):
    """:func:`MergeAllSummaries` with ``run_alone=True``: the summaries are evaluated in a
    ``sess.run`` of their own, at every :meth:`trigger` (end of epoch) and every ``period``
    steps of an epoch."""

    def __init__(self, period, key):
        self._period = period
        self._key = key

    def _setup_graph(self):
        self.summary_op = _summary_op(self._key)

    def _trigger_step(self):
        if self._period and (self.local_step + 1) % self._period == 0:
            self._trigger()

    def _trigger(self):
        if self.summary_op is not None:
            self.trainer.monitors.put_summary(self.trainer.sess.run(self.summary_op))

    def _stat_names(self):
        return _scalar_names_of(self.summary_op)


class MergeAllSummaries_RunWithOp(Callback):
    """:func:`MergeAllSummaries` with ``run_alone=False``: the summaries are fetched along with
    the last step of every epoch and every ``period``-th step of an epoch."""

    def __init__(self, period, key):
        self._period = period
        self._key = key

    def _setup_graph(self):
        self.summary_op = _summary_op(self._key)
        self._fetches = None
        if self.summary_op is not None:
            self._fetches = tfv1.train.SessionRunArgs(self.summary_op)

    def _need_run(self):
        if self.trainer.loop.is_last_step_of_epoch:
            return True
        return bool(self._period) and (self.local_step + 1) % self._period == 0

    def _before_run(self, _):
        if self._fetches is not None and self._need_run():
            return self._fetches
        return None

    def _after_run(self, _, run_values):
        if run_values.results is not None:
            self.trainer.monitors.put_summary(run_values.results)

    def _stat_names(self):
        return _scalar_names_of(self.summary_op)


def MergeAllSummaries(period=0, run_alone=False, key=None):
    """Evaluate ``tf.compat.v1.summary.merge_all(key)`` and put the result into
    ``trainer.monitors``. Nothing happens when the collection holds no summary.

    Args:
        period (int): 0 summarizes once at the end of every epoch; k > 0 additionally
            summarizes after every k-th step of an epoch.
        run_alone (bool): if False, the summaries are fetched along with a training step (the
            last one of the epoch), so that summaries depending on the step's input work. If
            True, they are evaluated by a separate ``sess.run`` after the epoch.
        key (str): the summary collection; defaults to ``tf.compat.v1.GraphKeys.SUMMARIES``.

    Returns:
        a Callback.

    Example::

        MergeAllSummaries(period=100)   # every 100 steps and at the end of each epoch
    """
    if key is None:
        key = tfv1.GraphKeys.SUMMARIES
    if not is_int(period) or period < 0:
        raise ValueError("MergeAllSummaries: period must be a non-negative integer, got {!r}".format(period))
    if not isinstance(key, str):
        raise TypeError("MergeAllSummaries: key must be a collection name (str), got {!r}".format(key))
    period = int(period)
    if run_alone:
        return MergeAllSummaries_RunAlone(period, key)
    return MergeAllSummaries_RunWithOp(period, key)


class SimpleMovingAverage(Callback):
    """The simple moving average (the mean over the last ``window_size`` steps) of some
    scalar tensors, computed in Python from values fetched with every step.

    Every ``window_size`` global steps the averages are put into ``trainer.monitors`` as
    scalars named ``<op name>/SMA``.

    Args:
        tensors (str or list[str]): names of scalar tensors; a name not in the graph is
            looked up in the first training tower.
        window_size (int): the number of most recent steps averaged.

    Example::

        SimpleMovingAverage(['loss'], 100)   # puts 'loss/SMA' every 100 steps
    """

    def __init__(self, tensors, window_size):
        if isinstance(tensors, str):
            tensors = [tensors]
        if not isinstance(tensors, (list, tuple)) or not all(isinstance(t, str) for t in tensors):
            raise TypeError("SimpleMovingAverage: tensors must be a tensor name or a list of them, got "
                            "{!r}".format(tensors))
        if not is_int(window_size) or window_size <= 0:
            raise ValueError("SimpleMovingAverage: window_size must be a positive integer, got "
                             "{!r}".format(window_size))
        self._tensor_names = [get_op_tensor_name(t)[1] for t in tensors]
        self._display_names = [get_op_tensor_name(t)[0] for t in tensors]
        self._window = int(window_size)
        self._queue = deque(maxlen=self._window)

    def _setup_graph(self):
        tensors = self.get_tensors_maybe_in_tower(self._tensor_names)
        for tensor in tensors:
            if tensor.shape.ndims != 0:
                raise ValueError("SimpleMovingAverage averages scalars only; tensor '{}' has shape "
                                 "{}".format(tensor.name, tensor.shape))
        self._fetch = tfv1.train.SessionRunArgs(fetches=tensors)

    def _before_run(self, _):
        return self._fetch

    def _after_run(self, _, run_values):
        self._queue.append(run_values.results)

    def _trigger_step(self):
        if self._queue and self.global_step % self._window == 0:
            averages = np.asarray(self._queue, dtype=np.float64).mean(axis=0)
            for name, average in zip(self._display_names, averages):
                self.trainer.monitors.put_scalar(name + '/SMA', average)

    def _stat_names(self):
        return [name + '/SMA' for name in self._display_names]
