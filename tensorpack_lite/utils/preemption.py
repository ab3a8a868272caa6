"""Moved: ``tensorpack_lite.utils.preemption`` is now :mod:`tensorpack_lite.cluster.preemption` (the
package of processes and clusters). Importing this module, or running it with ``python -m``,
raises an ImportError that says so."""

__all__ = []

raise ImportError("tensorpack_lite.utils.preemption moved to tensorpack_lite.cluster.preemption:"
                  " import it from there.")
