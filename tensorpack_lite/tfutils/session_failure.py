"""Moved: ``tensorpack_lite.tfutils.session_failure`` is now :mod:`tensorpack_lite.session.failure`
(the package of the hooked session). Importing this module raises an ImportError
that says so."""

__all__ = []

raise ImportError("tensorpack_lite.tfutils.session_failure moved to "
                  "tensorpack_lite.session.failure: import it from there.")
