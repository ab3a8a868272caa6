"""Moved: ``tensorpack_lite.tfutils.distributed`` is now :mod:`tensorpack_lite.multiprocess.server`
(the package of the multi-process runtime). Importing this module raises an ImportError
that says so."""

__all__ = []

raise ImportError("tensorpack_lite.tfutils.distributed moved to "
                  "tensorpack_lite.multiprocess.server: import it from there.")
