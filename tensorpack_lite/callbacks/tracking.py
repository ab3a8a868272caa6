"""What the experiment trackers share, at its documented path: the names of
:mod:`tensorpack_lite.callbacks.monitors.tracking` (their home), the same objects."""

from .monitors.tracking import (FAILED, FINISHED, KILLED, TrackerRecord, last_checkpoint, run_outcome,
                                run_parameters)

__all__ = ['run_parameters', 'run_outcome', 'last_checkpoint', 'TrackerRecord',
           'FINISHED', 'FAILED', 'KILLED']
