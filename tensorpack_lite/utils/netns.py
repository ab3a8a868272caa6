"""Moved: ``tensorpack_lite.utils.netns`` is now :mod:`tensorpack_lite.cluster.netns` (the
package of processes and clusters). Importing this module, or running it with ``python -m``,
raises an ImportError that says so."""

__all__ = []

raise ImportError("tensorpack_lite.utils.netns moved to tensorpack_lite.cluster.netns:"
                  " import it from there.")
