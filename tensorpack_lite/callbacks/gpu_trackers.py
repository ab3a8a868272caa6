"""Callbacks that measure the GPUs during training: peak and current memory
(:class:`PeakMemoryTracker`, :class:`GPUMemoryTracker`) and utilization
(:class:`GPUUtilizationTracker`). They put their numbers into ``trainer.monitors`` once per
epoch; without a GPU they log a single warning and then do nothing."""

import numbers
import os
import re
import shutil
import subprocess
import threading

import numpy as np

from ..compat import tf
from ..loop.callback import Callback
from ..utils import logger
from ..utils.argtools import is_int
from ..utils.concurrency import StoppableThread
from ..utils.gpu import cuda_visible_devices, get_num_gpu, num_tensorflow_gpus

__all__ = ['PeakMemoryTracker', 'GPUMemoryTracker', 'GPUUtilizationTracker']


def _num_gpus():
    """How many GPUs this process can use (``$CUDA_VISIBLE_DEVICES`` or ``nvidia-smi``)."""
    return get_num_gpu()


def _num_tf_gpus():
    """How many GPUs TensorFlow sees; their indices are the ones ``'/gpu:N'`` refers to."""
    return num_tensorflow_gpus()


class _GPUTracker(Callback):
    """Shared by the GPU trackers: checks for GPUs once and disables itself, with one
    warning, when there is none (or when measuring fails)."""

    _chief_only = False
    _disabled = False

    def _disable(self, reason):
        self._disabled = True
        logger.warn("{} is disabled: {}.".format(self, reason))

    def _count_gpus(self):
        return _num_gpus()

    def _setup_graph(self):
        self._disabled = False
        num_gpu = self._count_gpus()
        if num_gpu == 0:
            self._disable("no GPU is available")
            return
        self._setup_gpus(num_gpu)

    def _setup_gpus(self, num_gpu):
        """Prepare to track; called only when ``num_gpu`` > 0."""

    def _tracked(self):
        """The devices tracked, as named in the statistics (known after setup)."""
        raise NotImplementedError("{} must implement _tracked()".format(type(self).__name__))

    def _stat_name(self, device):
        """The statistic put for ``device``."""
        raise NotImplementedError("{} must implement _stat_name()".format(type(self).__name__))

    def _stat_names(self):
        if self._disabled:
            return []  # no GPU: nothing is put
        return [self._stat_name(device) for device in self._tracked() or []]


# ----------------------------------------------------------------------------------------
# Peak memory

_GPU_DEVICE = re.compile(r'^/?(?:device:)?gpu:(\d+)$', re.IGNORECASE)


def _read_peak_memory(index):
    """Peak bytes allocated by TensorFlow on GPU ``index`` since the last reset."""
    return tf.config.experimental.get_memory_info('GPU:{}'.format(index))['peak']


def _reset_peak_memory(index):
    tf.config.experimental.reset_memory_stats('GPU:{}'.format(index))


class PeakMemoryTracker(_GPUTracker):
    """Puts the peak GPU memory TensorFlow allocated during each epoch, in MB, as
    ``'PeakMemory(MB)/gpu:N'`` for each device.

    It reads TensorFlow's allocator statistics (``tf.config.experimental.get_memory_info``;
    the process-wide GPU allocator is shared by sessions and the eager context). Without a GPU
    it logs one warning and does nothing.
    """

    def __init__(self, devices=('/gpu:0',)):
        """
        Args:
            devices (list): GPUs to track, as ``'/gpu:N'`` strings or integers ``N``, where
                ``N`` is TensorFlow's index (counted within ``$CUDA_VISIBLE_DEVICES``).
        """
        if isinstance(devices, (str, numbers.Integral)):
            devices = [devices]
        self._indices = []
        for dev in devices:
            if is_int(dev) and dev >= 0:
                self._indices.append(int(dev))
                continue
            match = _GPU_DEVICE.match(dev) if isinstance(dev, str) else None
            if match is None:
                raise ValueError("{}: device {!r} is not a GPU; use '/gpu:N' or an integer "
                                 "N".format(type(self).__name__, dev))
            self._indices.append(int(match.group(1)))
        if not self._indices:
            raise ValueError("{}: no device given".format(type(self).__name__))
        self._peaks = None

    def _count_gpus(self):
        return _num_tf_gpus()

    def _setup_gpus(self, num_gpu):
        missing = [i for i in self._indices if i >= num_gpu]
        if missing:
            raise ValueError("{}: GPU(s) {} requested, but only {} GPU(s) are visible".format(
                type(self).__name__, missing, num_gpu))

    def _before_epoch(self):
        if self._disabled:
            return
        self._peaks = None
        for index in self._indices:
            try:
                _reset_peak_memory(index)
            except Exception as err:  # then the peak is the peak since the start
                logger.debug("PeakMemoryTracker: cannot reset the statistics of GPU {}: {}"
                             .format(index, err))

    def _after_epoch(self):
        if self._disabled:
            return
        try:
            self._peaks = [_read_peak_memory(index) for index in self._indices]
        except Exception as err:
            self._disable("reading the GPU memory failed ({}: {})".format(type(err).__name__, err))

    def _trigger_epoch(self):
        if self._disabled or self._peaks is None:
            return
        for index, peak in zip(self._indices, self._peaks):
            self.trainer.monitors.put_scalar(self._stat_name(index), peak / 1e6)

    def _tracked(self):
        return self._indices

    def _stat_name(self, device):
        return 'PeakMemory(MB)/gpu:{}'.format(device)


class GPUMemoryTracker(PeakMemoryTracker):
    """tensorpack's other name of :class:`PeakMemoryTracker`, tracking GPU 0 by default.

    Example::

        GPUMemoryTracker(devices=[0, 1])   # 'PeakMemory(MB)/gpu:0' and 'PeakMemory(MB)/gpu:1'
    """

    def __init__(self, devices=(0,)):
        """
        Args:
            devices (list): GPU indices, or ``'/gpu:N'`` strings.
        """
        super().__init__(devices)


# ----------------------------------------------------------------------------------------
# Utilization


def _query_gpu_utilization(ids):
    """Current utilization (percent) of each physical GPU in ``ids``, by pynvml when it is
    installed, else by ``nvidia-smi``."""
    try:
        import pynvml
    except ImportError:
        pynvml = None
    if pynvml is not None:
        pynvml.nvmlInit()
        try:
            return [float(pynvml.nvmlDeviceGetUtilizationRates(
                pynvml.nvmlDeviceGetHandleByIndex(int(i))).gpu) for i in ids]
        finally:
            pynvml.nvmlShutdown()
    if shutil.which('nvidia-smi') is None:
        raise RuntimeError("neither pynvml nor nvidia-smi is available")
    out = subprocess.run(['nvidia-smi', '--query-gpu=index,utilization.gpu',
                          '--format=csv,noheader,nounits'],
                         capture_output=True, text=True, timeout=10, check=True).stdout
    util = {}
    for line in out.strip().splitlines():
        index, value = [x.strip() for x in line.split(',')]
        util[int(index)] = float(value)
    missing = [i for i in ids if int(i) not in util]
    if missing:
        raise RuntimeError("nvidia-smi does not list GPU(s) {}".format(missing))
    return [util[int(i)] for i in ids]


class _UtilizationSampler(StoppableThread):
    """Samples the utilization right away and then every ``interval`` seconds until stopped.
    Keeps the samples, or the error that ended sampling."""

    def __init__(self, ids, interval):
        self._wakeup = threading.Event()
        super().__init__(evt=self._wakeup, name='GPUUtilizationSampler', daemon=True)
        self._ids = ids
        self._interval = interval
        self.samples = []
        self.error = None

    def run(self):
        while True:
            try:
                self.samples.append(_query_gpu_utilization(self._ids))
            except Exception as err:
                self.error = err
                return
            if self._wakeup.wait(self._interval):
                return


class GPUUtilizationTracker(_GPUTracker):
    """Puts the mean utilization (percent) of each GPU during each epoch, as
    ``'GPUUtil/N'``, sampled by a background thread through pynvml or ``nvidia-smi``.

    Without a GPU, or when neither tool works, it logs one warning and does nothing.
    """

    sample_interval = 1.0
    """Seconds between two samples."""

    def __init__(self, devices=None):
        """
        Args:
            devices (list[int]): physical GPU ids to track. Default: those
                ``$CUDA_VISIBLE_DEVICES`` exposes (:func:`~tensorpack_lite.utils.gpu.cuda_visible_devices`),
                or else every GPU.
        """
        if devices is not None:
            devices = [devices] if isinstance(devices, (str, numbers.Integral)) else list(devices)
            for dev in devices:
                if not str(dev).strip().isdigit():
                    raise ValueError("GPUUtilizationTracker: device {!r} is not a GPU id".format(dev))
            devices = [int(str(d).strip()) for d in devices]
        self._devices = devices
        self._sampler = None
        self._means = None

    def _setup_gpus(self, num_gpu):
        if self._devices is None:
            visible = cuda_visible_devices()
            if visible is None:
                self._devices = list(range(num_gpu))
            elif not all(x.isdigit() for x in visible):
                self._disable("CUDA_VISIBLE_DEVICES={!r} names GPUs by UUID, and utilization is read by "
                              "index; pass devices=".format(os.environ['CUDA_VISIBLE_DEVICES']))
                return
            else:
                self._devices = [int(x) for x in visible]
        if not self._devices:
            self._disable("no GPU to track")

    def _stop_sampler(self):
        sampler, self._sampler = self._sampler, None
        if sampler is not None:
            sampler.stop()
            sampler.join(timeout=15)
        return sampler

    def _before_epoch(self):
        if self._disabled:
            return
        self._means = None
        self._stop_sampler()
        self._sampler = _UtilizationSampler(self._devices, self.sample_interval)
        self._sampler.start()

    def _after_epoch(self):
        sampler = self._stop_sampler()
        if self._disabled or sampler is None:
            return
        if sampler.samples:
            self._means = np.mean(np.asarray(sampler.samples, dtype=np.float64), axis=0)
        if sampler.error is not None:
            self._disable("querying the GPU utilization failed ({}: {})".format(
                type(sampler.error).__name__, sampler.error))

    def _trigger_epoch(self):
        if self._means is None:
            return
        for dev, mean in zip(self._devices, self._means):
            self.trainer.monitors.put_scalar(self._stat_name(dev), float(mean))
        self._means = None

    def _tracked(self):
        return self._devices

    def _stat_name(self, device):
        return 'GPUUtil/{}'.format(device)

    def _after_train(self):
        self._stop_sampler()
