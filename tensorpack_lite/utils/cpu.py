"""What this machine's CPUs are, as Linux and psutil tell: the one place that reads
``/proc/cpuinfo`` (the CPU flags, the frequency) and counts the CPUs this process may use and
the physical cores. No TensorFlow.

Example::

    info = read_cpuinfo()
    'avx512f' in info.flags, info.mhz     # (True, 2600.0)
    usable_cpus(), physical_cores()        # (4, 2): a process pinned to 4 hyper-threads of 2 cores
"""

import collections
import os

__all__ = ['CPUINFO', 'CpuInfo', 'read_cpuinfo', 'cpu_flags', 'reported_mhz', 'usable_cpus', 'physical_cores']

CPUINFO = '/proc/cpuinfo'
"""Where Linux describes the CPUs."""


class CpuInfo(collections.namedtuple('CpuInfo', 'flags mhz')):
    """What ``/proc/cpuinfo`` says: ``flags``, the set of flags any CPU lists; ``mhz``, the
    highest ``cpu MHz`` of a CPU (a float), or None where none is listed."""

    __slots__ = ()


def read_cpuinfo(cpuinfo=CPUINFO):
    """The :class:`CpuInfo` of the file ``cpuinfo`` (``CpuInfo(set(), None)`` when it cannot be
    read)."""
    flags, mhz = set(), None
    try:
        with open(cpuinfo) as f:
            lines = f.read().splitlines()
    except OSError:
        return CpuInfo(flags, mhz)
    for line in lines:
        key, _, value = line.partition(':')
        key = key.strip()
        if key == 'flags':
            flags.update(value.split())
        elif key == 'cpu MHz':
            try:
                mhz = max(mhz or 0.0, float(value))
            except ValueError:
                pass
    return CpuInfo(flags, mhz)


def cpu_flags(cpuinfo=CPUINFO):
    """The CPU flags the file ``cpuinfo`` lists (a set; empty when it cannot be read)."""
    return read_cpuinfo(cpuinfo).flags


def reported_mhz():
    """The CPU frequency in MHz that psutil reports (its maximum, else the current one), or None
    where psutil is not installed or the system does not tell."""
    try:
        import psutil
        freq = psutil.cpu_freq()
    except (ImportError, NotImplementedError, OSError):
        return None
    return (freq.max or freq.current or None) if freq else None


def usable_cpus():
    """How many CPUs this process may run on (``os.sched_getaffinity``; where it does not exist,
    ``os.cpu_count()``); at least 1."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def physical_cores():
    """How many physical cores the machine has (psutil; hyper-threads of one core count once),
    or None where psutil is not installed or cannot tell."""
    try:
        import psutil
    except ImportError:
        return None
    return psutil.cpu_count(logical=False) or None
