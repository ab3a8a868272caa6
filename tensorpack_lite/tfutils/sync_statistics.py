"""Moved: ``tensorpack_lite.tfutils.sync_statistics`` is now
:mod:`tensorpack_lite.multiprocess.sync_statistics` (the package of the multi-process runtime).
Importing this module raises an ImportError that says so."""

__all__ = []

raise ImportError("tensorpack_lite.tfutils.sync_statistics moved to "
                  "tensorpack_lite.multiprocess.sync_statistics: import it from there.")
