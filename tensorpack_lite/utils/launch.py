"""Moved: ``tensorpack_lite.utils.launch`` is now :mod:`tensorpack_lite.cluster.launch` (the
package of processes and clusters). Importing this module, or running it with ``python -m``,
raises an ImportError that says so."""

__all__ = []

raise ImportError("tensorpack_lite.utils.launch moved to tensorpack_lite.cluster.launch:"
                  " import it from there (and run it as `python -m tensorpack_lite.cluster.launch`).")
