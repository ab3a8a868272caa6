"""Moved: ``tensorpack_lite.utils.slurm`` is now :mod:`tensorpack_lite.cluster.slurm` (the
package of processes and clusters). Importing this module, or running it with ``python -m``,
raises an ImportError that says so."""

__all__ = []

raise ImportError("tensorpack_lite.utils.slurm moved to tensorpack_lite.cluster.slurm:"
                  " import it from there.")
