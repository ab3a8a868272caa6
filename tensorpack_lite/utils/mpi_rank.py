"""Moved: ``tensorpack_lite.utils.mpi_rank`` is now :mod:`tensorpack_lite.cluster.mpi_rank` (the
package of processes and clusters). Importing this module, or running it with ``python -m``,
raises an ImportError that says so."""

__all__ = []

raise ImportError("tensorpack_lite.utils.mpi_rank moved to tensorpack_lite.cluster.mpi_rank:"
                  " import it from there (and run it as `python -m tensorpack_lite.cluster.mpi_rank`).")
