"""Callbacks that measure the training: speed, host and GPU memory, GPU utilization, and
a profiler tracing the session runs.

The trackers put their numbers into ``trainer.monitors`` once per epoch. The GPU trackers
need a GPU: without one they log a single warning and then do nothing. :class:`GraphProfiler`
writes trace files into the logger directory.

Example::

    trainer.train_with_defaults(
        callbacks=[ThroughputTracker(samples_per_step=64), PeakMemoryTracker(),
                   GPUUtilizationTracker(), HostMemoryTracker()],
        steps_per_epoch=1000, max_epoch=10)
"""

import numbers
import os
import re
import shutil
import subprocess
import threading
import time

import numpy as np
import psutil

from ..compat import tf, tfv1
from ..loop.callback import Callback
from ..utils import logger
from ..utils.concurrency import StoppableThread
from ..utils.fs import write_atomically
from ..utils.gpu import get_num_gpu

__all__ = ['ThroughputTracker', 'PeakMemoryTracker', 'GPUMemoryTracker', 'GPUUtilizationTracker',
           'HostMemoryTracker', 'GraphProfiler']


def _num_gpus():
    """How many GPUs this process can use (``$CUDA_VISIBLE_DEVICES`` or ``nvidia-smi``)."""
    return get_num_gpu()


def _num_tf_gpus():
    """How many GPUs TensorFlow sees; their indices are the ones ``'/gpu:N'`` refers to."""
    return len(tf.config.list_physical_devices('GPU'))


class ThroughputTracker(Callback):
    """Measures training speed over each epoch: steps per second, and samples per second
    when ``samples_per_step`` is known.

    Only the time from the start to the end of the epoch's steps counts, so the end-of-epoch
    work of other callbacks (evaluation, checkpoints...) does not lower the numbers.
    A step is one call of the trainer's ``run_step``.

    Puts ``'Throughput (steps/sec)'`` and, with ``samples_per_step``,
    ``'Throughput (samples/sec)'``.
    """

    _chief_only = False

    STEPS_NAME = 'Throughput (steps/sec)'
    SAMPLES_NAME = 'Throughput (samples/sec)'

    def __init__(self, samples_per_step=None):
        """
        Args:
            samples_per_step (int or None): samples in one step (e.g. the total batch size
                over all GPUs), to also report samples per second.
        """
        if samples_per_step is not None and (
                isinstance(samples_per_step, bool) or not isinstance(samples_per_step, numbers.Real)
                or not samples_per_step > 0):
            raise ValueError("ThroughputTracker: samples_per_step must be a positive number or "
                             "None, got {!r}".format(samples_per_step))
        self._samples_per_step = samples_per_step
        self._steps = 0
        self._elapsed = None

    def _before_epoch(self):
        self._steps = 0
        self._elapsed = None
        self._start = time.perf_counter()

    def _trigger_step(self):
        self._steps += 1

    def _after_epoch(self):
        self._elapsed = time.perf_counter() - self._start

    def _trigger_epoch(self):
        if not self._steps or not self._elapsed:
            return
        steps_per_sec = self._steps / self._elapsed
        self.trainer.monitors.put_scalar(self.STEPS_NAME, steps_per_sec)
        if self._samples_per_step is not None:
            self.trainer.monitors.put_scalar(self.SAMPLES_NAME, steps_per_sec * self._samples_per_step)


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
            if isinstance(dev, numbers.Integral) and not isinstance(dev, bool) and dev >= 0:
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
            self.trainer.monitors.put_scalar('PeakMemory(MB)/gpu:{}'.format(index), peak / 1e6)


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
            devices (list[int]): physical GPU ids to track. Default: those in
                ``$CUDA_VISIBLE_DEVICES``, or else every GPU.
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
            env = os.environ.get('CUDA_VISIBLE_DEVICES')
            if env is None:
                self._devices = list(range(num_gpu))
            else:
                ids = [x.strip() for x in env.split(',') if x.strip()]
                if not all(x.isdigit() for x in ids):
                    self._disable("CUDA_VISIBLE_DEVICES={!r} is not a list of GPU ids; pass "
                                  "devices=".format(env))
                    return
                self._devices = [int(x) for x in ids]
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
            self.trainer.monitors.put_scalar('GPUUtil/{}'.format(dev), float(mean))
        self._means = None

    def _after_train(self):
        self._stop_sampler()


# ----------------------------------------------------------------------------------------
# Host memory


class HostMemoryTracker(Callback):
    """Puts the RAM still available on the host, in GB, as ``'HostFreeMemory (GB)'`` at every
    trigger (by default after every epoch), and warns when it falls below
    :attr:`low_memory_fraction` of the total. The amount is also logged when the graph is set
    up and before training. Measured by ``psutil.virtual_memory().available``.
    """

    _chief_only = False

    STAT_NAME = 'HostFreeMemory (GB)'

    low_memory_fraction = 0.05
    """Warn when less than this fraction of the host's RAM is available."""

    @staticmethod
    def _memory():
        """(available, total) RAM of the host, in bytes."""
        mem = psutil.virtual_memory()
        return mem.available, mem.total

    def _log_free(self, when):
        available, _ = self._memory()
        logger.info("[HostMemoryTracker] Free RAM in {} is {:.2f} GB.".format(when, available / 1024 ** 3))

    def _setup_graph(self):
        self._log_free('setup_graph()')

    def _before_train(self):
        self._log_free('before_train()')

    def _trigger(self):
        available, total = self._memory()
        self.trainer.monitors.put_scalar(self.STAT_NAME, available / 1024 ** 3)
        if available < self.low_memory_fraction * total:
            logger.warn("[HostMemoryTracker] The host is low on memory: {:.2f} GB of {:.2f} GB "
                        "available.".format(available / 1024 ** 3, total / 1024 ** 3))


# ----------------------------------------------------------------------------------------
# Profiling


class GraphProfiler(Callback):
    """Traces every hooked session run (``RunOptions.FULL_TRACE``) and writes what the run
    recorded into the logger directory, named after the global step:

    * ``chrome-trace-<step>.json`` (``dump_tracing``): a timeline of the ops, to open in
      ``chrome://tracing`` (or Perfetto);
    * ``runmetadata-<step>.pb`` (``dump_metadata``): the serialized ``RunMetadata``, for the
      TensorFlow profiler tools;
    * an event holding the metadata, tagged ``trace-<step>`` (``dump_event``), put into the
      monitors (a :class:`TFEventWriter` writes it, for TensorBoard).

    Tracing slows every run down: schedule it on a few steps, e.g.::

        EnableCallbackIf(GraphProfiler(dump_tracing=True, dump_event=True),
                         lambda self: 20 < self.trainer.global_step < 30)
    """

    def __init__(self, dump_metadata=False, dump_tracing=True, dump_event=False):
        """
        Args:
            dump_metadata (bool): write the ``RunMetadata`` protos.
            dump_tracing (bool): write Chrome trace files.
            dump_event (bool): put the metadata into the monitors as an event.
        """
        self._dir = logger.get_logger_dir()
        if self._dir is None or not os.path.isdir(self._dir):
            raise RuntimeError("GraphProfiler writes into the logger directory, which is not set "
                               "(or does not exist): call logger.set_logger_dir() first.")
        self._dump_meta = bool(dump_metadata)
        self._dump_tracing = bool(dump_tracing)
        self._dump_event = bool(dump_event)
        self._run_args = tfv1.train.SessionRunArgs(
            fetches=None, options=tfv1.RunOptions(trace_level=tfv1.RunOptions.FULL_TRACE))

    def _before_run(self, _):
        return self._run_args

    def _after_run(self, _, run_values):
        metadata = run_values.run_metadata
        if self._dump_meta:
            self._write_metadata(metadata)
        if self._dump_tracing:
            self._write_tracing(metadata)
        if self._dump_event:
            self._put_event(metadata)

    def _path(self, pattern):
        return os.path.join(self._dir, pattern.format(self.global_step))

    def _write_metadata(self, metadata):
        data = metadata.SerializeToString()
        write_atomically(self._path('runmetadata-{}.pb'), lambda f: f.write(data), durable=False)

    def _write_tracing(self, metadata):
        from tensorflow.python.client import timeline
        trace = timeline.Timeline(step_stats=metadata.step_stats).generate_chrome_trace_format(
            show_dataflow=True, show_memory=True)
        write_atomically(self._path('chrome-trace-{}.json'), lambda f: f.write(trace), mode='w',
                         durable=False)

    def _put_event(self, metadata):
        event = tfv1.Event()
        event.tagged_run_metadata.tag = 'trace-{}'.format(self.global_step)
        event.tagged_run_metadata.run_metadata = metadata.SerializeToString()
        self.trainer.monitors.put_event(event)
