"""Moved: ``tensorpack_lite.tfutils.preemption_vote`` is now :mod:`tensorpack_lite.multiprocess.stop_vote`
(the package of the multi-process runtime). Importing this module raises an ImportError
that says so."""

__all__ = []

raise ImportError("tensorpack_lite.tfutils.preemption_vote moved to "
                  "tensorpack_lite.multiprocess.stop_vote: import it from there.")
