"""Queries of NVIDIA GPUs (names, memory, utilization) through the NVIDIA Management Library,
``libnvidia-ml.so.1``, which comes with the NVIDIA driver. Nothing is loaded until a
:class:`NVMLContext` is entered.

Example::

    with NVMLContext() as ctx:
        for device in ctx.devices():
            print(device.name(), device.memory()['used'], device.utilization()['gpu'])
"""

import ctypes
import threading

__all__ = ['NVMLContext', 'NVMLError', 'NvidiaDevice', 'LIBRARY_NAME']

LIBRARY_NAME = 'libnvidia-ml.so.1'
"""The shared library loaded by :class:`NVMLContext`."""

_SUCCESS = 0
_LIBRARY_NOT_FOUND = 12      # NVML's own code for a library that cannot be loaded
_NAME_BUFFER_SIZE = 96

_library = None
_library_lock = threading.Lock()


class NVMLError(RuntimeError):
    """An NVML call failed (or the library could not be loaded); ``code`` is NVML's return code."""

    def __init__(self, message, code):
        super().__init__(message)
        self.code = code


class _MemoryInfo(ctypes.Structure):
    _fields_ = [('total', ctypes.c_ulonglong), ('free', ctypes.c_ulonglong), ('used', ctypes.c_ulonglong)]


class _Utilization(ctypes.Structure):
    _fields_ = [('gpu', ctypes.c_uint), ('memory', ctypes.c_uint)]


def _load_library():
    """The loaded NVML library (loaded once per process)."""
    global _library
    with _library_lock:
        if _library is None:
            try:
                lib = ctypes.CDLL(LIBRARY_NAME)
            except OSError as err:
                raise NVMLError("NVMLContext: cannot load the NVIDIA Management Library '{}' ({}). It "
                                "comes with the NVIDIA driver; without an NVIDIA GPU and driver there is "
                                "nothing to query.".format(LIBRARY_NAME, err), _LIBRARY_NOT_FOUND) from err
            lib.nvmlErrorString.restype = ctypes.c_char_p
            _library = lib
        return _library


def _call(function_name, *args):
    """Call an NVML function; NVMLError naming it and NVML's explanation unless it succeeds."""
    lib = _load_library()
    try:
        function = getattr(lib, function_name)
    except AttributeError:
        raise NVMLError("NVML: the library '{}' has no function {}() (driver too old?).".format(
            LIBRARY_NAME, function_name), None)
    code = function(*args)
    if code != _SUCCESS:
        reason = lib.nvmlErrorString(code)
        raise NVMLError("NVML: {}() failed with code {}: {}".format(
            function_name, code, reason.decode('utf-8', 'replace') if reason else 'unknown error'), code)


class NvidiaDevice(object):
    """One GPU, as returned by :meth:`NVMLContext.device`; valid while the context is open."""

    def __init__(self, handle):
        self.handle = handle

    def name(self):
        """The product name, e.g. ``'Tesla V100-SXM2-16GB'``."""
        buf = ctypes.create_string_buffer(_NAME_BUFFER_SIZE)
        _call('nvmlDeviceGetName', self.handle, buf, ctypes.c_uint(_NAME_BUFFER_SIZE))
        return buf.value.decode('utf-8', 'replace')

    def memory(self):
        """Memory in bytes: ``{'total': ..., 'free': ..., 'used': ...}``."""
        info = _MemoryInfo()
        _call('nvmlDeviceGetMemoryInfo', self.handle, ctypes.byref(info))
        return {'total': info.total, 'free': info.free, 'used': info.used}

    def utilization(self):
        """Percent of the last sample period during which a kernel ran (``'gpu'``) and during
        which memory was read or written (``'memory'``)."""
        util = _Utilization()
        _call('nvmlDeviceGetUtilizationRates', self.handle, ctypes.byref(util))
        return {'gpu': util.gpu, 'memory': util.memory}


class NVMLContext(object):
    """A ``with`` block in which NVML is initialised and GPUs can be queried.

    Raises:
        NVMLError: on entering, when the library cannot be loaded or initialised (e.g. no
            NVIDIA driver), with a message saying so.
    """

    def __enter__(self):
        _call('nvmlInit_v2')
        return self

    def __exit__(self, exc_type, exc_value, traceback):
        _call('nvmlShutdown')

    def num_devices(self):
        """The number of GPUs NVML sees (it ignores ``$CUDA_VISIBLE_DEVICES``)."""
        count = ctypes.c_uint()
        _call('nvmlDeviceGetCount_v2', ctypes.byref(count))
        return count.value

    def devices(self):
        """All GPUs, as :class:`NvidiaDevice` objects, in NVML's order."""
        return [self.device(k) for k in range(self.num_devices())]

    def device(self, idx):
        """The GPU of index ``idx`` (ValueError naming the index when there is no such GPU)."""
        count = self.num_devices()
        if not 0 <= idx < count:
            raise ValueError("NVMLContext.device({}): NVML found {} GPU(s).".format(idx, count))
        handle = ctypes.c_void_p()
        _call('nvmlDeviceGetHandleByIndex_v2', ctypes.c_uint(idx), ctypes.byref(handle))
        return NvidiaDevice(handle)
