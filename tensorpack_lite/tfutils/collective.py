"""Moved: ``tensorpack_lite.tfutils.collective`` is now :mod:`tensorpack_lite.multiprocess.collective`
(the package of the multi-process runtime). Importing this module raises an ImportError
that says so."""

__all__ = []

raise ImportError("tensorpack_lite.tfutils.collective moved to "
                  "tensorpack_lite.multiprocess.collective: import it from there.")
