"""An estimate of this machine's peak float32 FLOP/s on its CPUs, from what Linux tells.

``peak = cores x frequency x FLOPs per cycle and core``, where

* cores: the CPUs this process may run on, at most the physical cores (two hyper-threads
  share one core's vector units);
* frequency: the highest ``cpu MHz`` in ``/proc/cpuinfo`` (else psutil's); the turbo
  frequency is not known, so a core above it beats the "peak";
* FLOPs per cycle, from the CPU flags in ``/proc/cpuinfo``: two fused multiply-add units of the
  widest vectors (AVX-512: 2 x 16 lanes x 2 = 64; AVX2 with FMA: 32; AVX: 16 (no FMA: one
  add and one multiply unit of 8); SSE2: 8). CPUs with one AVX-512 unit (some Xeon Silver,
  AMD Zen 4) reach half of it.

It is an upper bound for the utilisation that :class:`~tensorpack_lite.callbacks.StepTimeMonitor`
reports, not a measurement; None where it cannot be worked out (not Linux, unknown flags). The
CPUs are read by :mod:`tensorpack_lite.utils.cpu`.

Example::

    peak = cpu_peak_flops()
    if peak is not None:
        print(peak.flops / 1e9, peak.describe())   # 332.3 'GFLOP/s: 2 cores x 2.60 GHz x 64 (avx512f)'
"""

import collections

from ..utils.cpu import CPUINFO, physical_cores, read_cpuinfo, reported_mhz, usable_cpus

__all__ = ['PeakFlops', 'cpu_peak_flops', 'FLOPS_PER_CYCLE']

FLOPS_PER_CYCLE = (('avx512f', 64), ('fma', 32), ('avx', 16), ('sse2', 8))
"""float32 FLOPs per cycle and core by the widest vector flag the CPU has (first match)."""


class PeakFlops(collections.namedtuple('PeakFlops', 'flops cores hz per_cycle flag')):
    """A peak estimate: ``flops`` per second = ``cores`` x ``hz`` x ``per_cycle`` (from ``flag``)."""

    __slots__ = ()

    def describe(self):
        return "{} cores x {:.2f} GHz x {} FLOPs/cycle ({})".format(
            self.cores, self.hz / 1e9, self.per_cycle, self.flag)


def cpu_peak_flops(cpuinfo=CPUINFO):
    """The :class:`PeakFlops` of this machine's CPUs available to this process, or None when
    the frequency or the vector flags are not known (see the module's text)."""
    flags, mhz = read_cpuinfo(cpuinfo)
    mhz = mhz or reported_mhz()
    cores, physical = usable_cpus(), physical_cores()
    if physical:
        cores = min(cores, physical)
    match = next(((flag, n) for flag, n in FLOPS_PER_CYCLE if flag in flags), None)
    if not mhz or match is None:
        return None
    flag, per_cycle = match
    hz = mhz * 1e6
    return PeakFlops(cores * hz * per_cycle, cores, hz, per_cycle, flag)
