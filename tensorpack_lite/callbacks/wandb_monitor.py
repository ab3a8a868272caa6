"""Moved: ``tensorpack_lite.callbacks.wandb_monitor`` is now
:mod:`tensorpack_lite.callbacks.monitors.wandb` (the package of the
monitors). Importing this module raises an ImportError that says so."""

__all__ = []

raise ImportError("tensorpack_lite.callbacks.wandb_monitor moved to "
                  "tensorpack_lite.callbacks.monitors.wandb: import it from there.")
