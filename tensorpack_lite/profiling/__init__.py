"""Profiling: what a training step runs and what it costs, read from the graph, a traced run and
the machine, without changing anything.

- :mod:`~tensorpack_lite.profiling.graph_walk`: every op that running some fetches runs
  (:func:`ops_run_by`), the one walk of a graph back from fetches.
- :mod:`~tensorpack_lite.profiling.flops`: the FLOPs of a step's matrix products and
  convolutions (:func:`count_flops`).
- :mod:`~tensorpack_lite.profiling.step_timeline`: when a traced step's gradients became ready
  and when the collectives carrying them ran (:class:`StepTimeline`).
- :mod:`~tensorpack_lite.profiling.peak_flops`: this machine's peak FLOP/s, estimated from its
  CPUs (:func:`cpu_peak_flops`).

``StepTimeMonitor``, ``GraphProfiler`` and ``CommunicationTimeline`` (in ``callbacks``) report
them while training; the package sits below ``tfutils``, whose rule for running a session's ops
in the caller's thread asks how many FLOPs a run counts.

Example::

    flops = count_flops([train_op], batch_size=64)
    peak = cpu_peak_flops()
"""

from . import flops, graph_walk, peak_flops, step_timeline
from .flops import count_flops
from .graph_walk import ops_run_by
from .peak_flops import PeakFlops, cpu_peak_flops
from .step_timeline import StepTimeline, is_communication_op

__all__ = ['ops_run_by', 'count_flops', 'StepTimeline', 'is_communication_op', 'PeakFlops', 'cpu_peak_flops',
           'flops', 'graph_walk', 'peak_flops', 'step_timeline']
