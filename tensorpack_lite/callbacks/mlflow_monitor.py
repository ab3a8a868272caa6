"""Moved: ``tensorpack_lite.callbacks.mlflow_monitor`` is now
:mod:`tensorpack_lite.callbacks.monitors.mlflow` (the package of the
monitors). Importing this module raises an ImportError that says so."""

__all__ = []

raise ImportError("tensorpack_lite.callbacks.mlflow_monitor moved to "
                  "tensorpack_lite.callbacks.monitors.mlflow: import it from there.")
