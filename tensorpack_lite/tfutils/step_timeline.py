"""Moved: ``tensorpack_lite.tfutils.step_timeline`` is now :mod:`tensorpack_lite.profiling.step_timeline`
(the profiling package). Importing this module raises an ImportError
that says so."""

__all__ = []

raise ImportError("tensorpack_lite.tfutils.step_timeline moved to "
                  "tensorpack_lite.profiling.step_timeline: import it from there.")
