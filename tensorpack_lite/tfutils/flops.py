"""Moved: ``tensorpack_lite.tfutils.flops`` is now :mod:`tensorpack_lite.profiling.flops`
(the profiling package). Importing this module raises an ImportError
that says so."""

__all__ = []

raise ImportError("tensorpack_lite.tfutils.flops moved to "
                  "tensorpack_lite.profiling.flops: import it from there.")
