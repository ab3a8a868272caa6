"""Moved: ``tensorpack_lite.callbacks.monitor_group`` is now
:mod:`tensorpack_lite.callbacks.monitors.group` (the package of the
monitors). Importing this module raises an ImportError that says so."""

__all__ = []

raise ImportError("tensorpack_lite.callbacks.monitor_group moved to "
                  "tensorpack_lite.callbacks.monitors.group: import it from there.")
