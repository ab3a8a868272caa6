"""Moved: ``tensorpack_lite.utils.cluster`` is now :mod:`tensorpack_lite.cluster.config` (the
package of processes and clusters). Importing this module, or running it with ``python -m``,
raises an ImportError that says so."""

__all__ = []

raise ImportError("tensorpack_lite.utils.cluster moved to tensorpack_lite.cluster.config:"
                  " import it from there.")
