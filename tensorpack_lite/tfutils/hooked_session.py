"""Moved: ``tensorpack_lite.tfutils.hooked_session`` is now :mod:`tensorpack_lite.session.hooked_session`
(the package of the hooked session). Importing this module raises an ImportError
that says so."""

__all__ = []

raise ImportError("tensorpack_lite.tfutils.hooked_session moved to "
                  "tensorpack_lite.session.hooked_session: import it from there.")
