"""Moved: ``tensorpack_lite.utils.peak_flops`` is now :mod:`tensorpack_lite.profiling.peak_flops`
(the profiling package). Importing this module raises an ImportError
that says so."""

__all__ = []

raise ImportError("tensorpack_lite.utils.peak_flops moved to "
                  "tensorpack_lite.profiling.peak_flops: import it from there.")
