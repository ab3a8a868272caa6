"""Callbacks that measure the training: speed, host and GPU memory, GPU utilization, and
a profiler tracing the session runs and the timeline of gradient communication it gives (the
GPU trackers live in :mod:`.gpu_trackers`).

The trackers put their numbers into ``trainer.monitors`` once per epoch. The GPU trackers
need a GPU: without one they log a single warning and then do nothing. :class:`GraphProfiler`
and :class:`CommunicationTimeline` write trace files into the logger directory.

Example::

    trainer.train_with_defaults(
        callbacks=[ThroughputTracker(samples_per_step=64), PeakMemoryTracker(),
                   GPUUtilizationTracker(), HostMemoryTracker()],
        steps_per_epoch=1000, max_epoch=10)
"""

import json
import os
import time

import psutil

from ..compat import tf_internal, tfv1
from ..loop.callback import Callback
from ..profiling.step_timeline import StepTimeline
from ..utils import logger
from ..utils.argtools import is_real
from ..utils.fs import write_atomically
from .gpu_trackers import GPUMemoryTracker, GPUUtilizationTracker, PeakMemoryTracker

__all__ = ['ThroughputTracker', 'PeakMemoryTracker', 'GPUMemoryTracker', 'GPUUtilizationTracker',
           'HostMemoryTracker', 'GraphProfiler', 'CommunicationTimeline']


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
        if samples_per_step is not None and (not is_real(samples_per_step) or not samples_per_step > 0):
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

    def _stat_names(self):
        if self._samples_per_step is None:
            return [self.STEPS_NAME]
        return [self.STEPS_NAME, self.SAMPLES_NAME]


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

    def _stat_names(self):
        return [self.STAT_NAME]


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
        self._dir = None
        self._dump_meta = bool(dump_metadata)
        self._dump_tracing = bool(dump_tracing)
        self._dump_event = bool(dump_event)
        self._run_args = tfv1.train.SessionRunArgs(
            fetches=None, options=tfv1.RunOptions(trace_level=tfv1.RunOptions.FULL_TRACE))

    def _setup_graph(self):
        # the run's directory, read when training sets up (not when the callback is made): a
        # profiler created before set_logger_dir() of its run writes into that run's directory
        self._dir = logger.get_logger_dir()
        if self._dir is None or not os.path.isdir(self._dir):
            raise RuntimeError("GraphProfiler writes into the logger directory, which is not set "
                               "(or does not exist): call logger.set_logger_dir() before training.")

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
        timeline = tf_internal('python.client.timeline')
        trace = timeline.Timeline(step_stats=metadata.step_stats).generate_chrome_trace_format(
            show_dataflow=True, show_memory=True)
        write_atomically(self._path('chrome-trace-{}.json'), lambda f: f.write(trace), mode='w',
                         durable=False)

    def _put_event(self, metadata):
        event = tfv1.Event()
        event.tagged_run_metadata.tag = 'trace-{}'.format(self.global_step)
        event.tagged_run_metadata.run_metadata = metadata.SerializeToString()
        self.trainer.monitors.put_event(event)


class CommunicationTimeline(GraphProfiler):
    """A :class:`GraphProfiler` that also shows when the gradients' all-reduces ran against when
    backprop produced the gradients, from each traced step's stats (see
    :class:`~tensorpack_lite.profiling.step_timeline.StepTimeline`):

    * ``timeline-<step>.svg``: a row of ops per thread, the gradients' ready times and a row per
      communication piece (waiting: light, running: dark), to open in a browser;
    * ``timeline-<step>.json``: the same pieces and the summary, as numbers (seconds, bytes);
    * ``chrome-trace-<step>.json`` (``dump_tracing``), as :class:`GraphProfiler`;
    * a log line: the step, the seconds of communication, how many of them ran before the last
      gradient was ready (hidden behind backprop), and how long the communication went on after.

    Example: the chief's timeline of step 12 of a distributed run::

        EnableCallbackIf(CommunicationTimeline(), lambda self: self.trainer.global_step == 12)
    """

    def __init__(self, dump_tracing=True):
        """
        Args:
            dump_tracing (bool): also write the Chrome trace files.
        """
        super().__init__(dump_tracing=dump_tracing)

    def _after_run(self, run_context, run_values):
        super()._after_run(run_context, run_values)
        timeline = StepTimeline(self.graph, run_values.run_metadata.step_stats)
        title = 'step {}'.format(self.global_step)
        picture = timeline.to_svg(title=title)
        write_atomically(self._path('timeline-{}.svg'), lambda f: f.write(picture), mode='w', durable=False)
        numbers = timeline.to_dict()
        text = json.dumps(numbers, indent=1)
        write_atomically(self._path('timeline-{}.json'), lambda f: f.write(text), mode='w', durable=False)
        summary = numbers['summary']
        if not summary['pieces']:
            logger.info("CommunicationTimeline: {} took {:.1f} ms and communicated nothing.".format(
                title, summary['step'] * 1e3))
            return
        logger.info(
            "CommunicationTimeline: {} took {:.1f} ms; {} pieces ({:.2f} MB) ran {:.1f} ms, {:.1f} ms of it "
            "before the last gradient was ready ({:.1f} ms into the step), then {:.1f} ms more: {}".format(
                title, summary['step'] * 1e3, summary['pieces'], summary['bytes'] / 1e6,
                summary['communication'] * 1e3, summary['overlapped'] * 1e3, summary['last_ready'] * 1e3,
                summary['after_compute'] * 1e3, self._path('timeline-{}.svg')))
