"""utils.cpu: the flags and frequency of a /proc/cpuinfo (a fake one of two CPUs, as Linux writes
it), the CPUs this process may use and the physical cores, and what each says where the system
does not tell."""

import os
import sys
import types

from tensorpack_lite.utils.cpu import (CpuInfo, cpu_flags, physical_cores, read_cpuinfo, reported_mhz,
                                       usable_cpus)

CPUINFO = """processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) CPU @ 2.60GHz
cpu MHz\t\t: 2599.998
flags\t\t: fpu sse2 avx fma avx2 avx512f
vmx flags\t: vnmi ept
bugs\t\t: spectre_v1

processor\t: 1
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) CPU @ 2.60GHz
cpu MHz\t\t: 3100.250
flags\t\t: fpu sse2 avx fma avx2 avx512f avx512_bf16
vmx flags\t: vnmi ept
bugs\t\t: spectre_v1

"""


def fake_psutil(monkeypatch, physical=None, freq=None):
    """psutil as seen by utils.cpu: ``physical`` cores, ``freq`` a (current, min, max) or None."""
    module = types.ModuleType('psutil')
    module.cpu_count = lambda logical=True: physical
    module.cpu_freq = lambda: None if freq is None else types.SimpleNamespace(
        current=freq[0], min=freq[1], max=freq[2])
    monkeypatch.setitem(sys.modules, 'psutil', module)


def test_flags_of_every_cpu_and_the_highest_frequency(tmp_path):
    path = tmp_path / 'cpuinfo'
    path.write_text(CPUINFO)
    info = read_cpuinfo(str(path))
    assert info == CpuInfo({'fpu', 'sse2', 'avx', 'fma', 'avx2', 'avx512f', 'avx512_bf16'}, 3100.25)
    assert cpu_flags(str(path)) == info.flags and 'ept' not in info.flags     # not the 'vmx flags'


def test_a_file_without_frequency_or_that_cannot_be_read(tmp_path):
    path = tmp_path / 'cpuinfo'
    path.write_text("processor\t: 0\ncpu MHz\t\t: unknown\nflags\t\t: fpu sse2\n")
    assert read_cpuinfo(str(path)) == CpuInfo({'fpu', 'sse2'}, None)
    assert read_cpuinfo(str(tmp_path / 'missing')) == CpuInfo(set(), None)
    assert cpu_flags(str(tmp_path / 'missing')) == set()


def test_usable_cpus_are_those_of_the_affinity_else_the_count(monkeypatch):
    assert usable_cpus() == len(os.sched_getaffinity(0))
    monkeypatch.setattr(os, 'sched_getaffinity', lambda pid: {0, 2, 5})
    monkeypatch.setattr(os, 'cpu_count', lambda: 8)
    assert usable_cpus() == 3
    monkeypatch.delattr(os, 'sched_getaffinity')
    assert usable_cpus() == 8
    monkeypatch.setattr(os, 'cpu_count', lambda: None)
    assert usable_cpus() == 1


def test_physical_cores_and_frequency_from_psutil(monkeypatch):
    fake_psutil(monkeypatch, physical=2, freq=(1800.0, 800.0, 3500.0))
    assert physical_cores() == 2 and reported_mhz() == 3500.0
    fake_psutil(monkeypatch, physical=None, freq=(1800.0, 0.0, 0.0))    # a VM: no maximum
    assert physical_cores() is None and reported_mhz() == 1800.0
    fake_psutil(monkeypatch, freq=None)
    assert reported_mhz() is None
    monkeypatch.setitem(sys.modules, 'psutil', None)                     # not installed
    assert physical_cores() is None and reported_mhz() is None
