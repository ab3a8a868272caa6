"""Moved: ``tensorpack_lite.tfutils.caller_thread`` is now :mod:`tensorpack_lite.session.caller_thread`
(the package of the hooked session). Importing this module raises an ImportError
that says so."""

__all__ = []

raise ImportError("tensorpack_lite.tfutils.caller_thread moved to "
                  "tensorpack_lite.session.caller_thread: import it from there.")
