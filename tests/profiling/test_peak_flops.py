"""profiling/peak_flops.py: the peak estimated from a fake /proc/cpuinfo's flags and frequency."""

import pytest

from tensorpack_lite.profiling.peak_flops import cpu_peak_flops

pytestmark = pytest.mark.quick


def test_peak_from_the_cpu_flags_and_frequency(tmp_path):
    cpuinfo = tmp_path / 'cpuinfo'
    cpuinfo.write_text("processor : 0\ncpu MHz : 1000.000\nflags : fpu sse2 avx fma avx2\n\n"
                       "processor : 1\ncpu MHz : 2000.000\nflags : fpu sse2 avx fma avx2\n")
    peak = cpu_peak_flops(str(cpuinfo))
    assert (peak.hz, peak.per_cycle, peak.flag) == (2e9, 32, 'fma')
    assert peak.cores >= 1 and peak.flops == peak.cores * 2e9 * 32
    cpuinfo.write_text("processor : 0\ncpu MHz : 2000.000\nflags : fpu\n")
    assert cpu_peak_flops(str(cpuinfo)) is None         # no vector flag it knows
