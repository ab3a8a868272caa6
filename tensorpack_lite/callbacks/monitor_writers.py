"""Moved: ``tensorpack_lite.callbacks.monitor_writers`` is now
:mod:`tensorpack_lite.callbacks.monitors.writers` (the package of the
monitors). Importing this module raises an ImportError that says so."""

__all__ = []

raise ImportError("tensorpack_lite.callbacks.monitor_writers moved to "
                  "tensorpack_lite.callbacks.monitors.writers: import it from there.")
