"""Moved: ``tensorpack_lite.callbacks.monitor_services`` is now
:mod:`tensorpack_lite.callbacks.monitors.services` (the package of the
monitors). Importing this module raises an ImportError that says so."""

__all__ = []

raise ImportError("tensorpack_lite.callbacks.monitor_services moved to "
                  "tensorpack_lite.callbacks.monitors.services: import it from there.")
