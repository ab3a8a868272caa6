"""The callbacks and monitors every training gets unless told otherwise (used by
:meth:`Trainer.train_with_defaults` and :class:`TrainConfig`)."""

from ..callbacks.graph import RunUpdateOps
from ..callbacks.monitor import JSONWriter, ScalarPrinter, TFEventWriter
from ..callbacks.step_monitor import StepTimeMonitor
from ..callbacks.steps import ProgressBar
from ..callbacks.summary import MergeAllSummaries, MovingAverageSummary

__all__ = ['DEFAULT_CALLBACKS', 'DEFAULT_MONITORS']


def DEFAULT_CALLBACKS(step_monitor=True):
    """The callbacks every training gets unless told otherwise: moving-average summaries,
    a progress bar, summaries merged at each epoch's end, and the UPDATE_OPS run each step
    (each does nothing when there is nothing for it), then a :class:`StepTimeMonitor` (what
    bounds the step, after each epoch), unless ``step_monitor=False``::

        TrainConfig(..., extra_callbacks=DEFAULT_CALLBACKS(step_monitor=False))
    """
    callbacks = [MovingAverageSummary(), ProgressBar(), MergeAllSummaries(), RunUpdateOps()]
    if step_monitor:
        callbacks.append(StepTimeMonitor())
    return callbacks


def DEFAULT_MONITORS():
    """The monitors every training gets unless told otherwise: TensorBoard event files,
    stats.json and a table of scalars printed after each epoch (the first two only when a
    logger directory is set)."""
    return [TFEventWriter(), JSONWriter(), ScalarPrinter()]
