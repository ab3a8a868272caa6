"""What bounds a training step: where each epoch's time went, and one line naming the bound.

:class:`StepTimeMonitor` is one of the default callbacks. After each epoch it puts into
``trainer.monitors`` (TensorBoard, ``stats.json``, the trackers, the printed table) the
samples and steps per second, the time of a step split into input wait, compute,
communication beyond compute, callbacks and checkpoint stall, the input queue's fill and the
FLOP utilisation, and logs one line such as::

    [StepTimeMonitor] epoch 3: input-bound: the input queue was empty at 92 % of the sampled
    steps and input took 81 % of the time (...); see docs/efficiency.md#input-bound: ...

How each number is found is in the class's text; ``docs/efficiency.md#what-bounds-a-step``
has the advice for each bound.
"""

import statistics
from time import perf_counter

from ..compat import tf, tfv1
from ..loop.callback import Callback
from ..profiling.flops import count_flops
from ..profiling.peak_flops import cpu_peak_flops
from ..profiling.step_timeline import StepTimeline, is_communication_op
from ..tfutils.dependency import ops_run_by
from ..utils import logger
from ..utils.argtools import is_int, is_real
from ..utils.gpu import num_tensorflow_gpus

__all__ = ['StepTimeMonitor', 'BOUNDS']

BOUNDS = ('input', 'compute', 'communication', 'callbacks', 'checkpoint')
"""The parts a step's time is split into, in the order of the statistics."""

_BOUND_WORDS = {'input': 'input-bound', 'compute': 'compute-bound', 'communication': 'communication-bound',
                'callbacks': 'callback-bound', 'checkpoint': 'checkpoint-bound'}

_ADVICE = {
    'input': "prefetch (QueueInput), run the DataFlow in parallel (MultiProcessRunnerZMQ) or make it "
             "cheaper",
    'compute': "the model itself: a larger batch, mixed precision, XLA, or more devices",
    'communication': "fewer all-reduces (accumulate=K), compressed gradients, or a faster link",
    'callbacks': "run per-step callbacks every k steps (PeriodicTrigger) and evaluate less often",
    'checkpoint': "save less often (PeriodicTrigger(ModelSaver(), every_k_epochs=...)), in the background",
}

_DEQUEUE_OP_TYPES = frozenset(['QueueDequeueV2', 'QueueDequeueManyV2', 'QueueDequeueUpToV2',
                               'QueueDequeue', 'QueueDequeueMany', 'QueueDequeueUpTo'])
_UNSTAGE_OP_TYPES = frozenset(['Unstage'])
_INPUT_WAIT_OP_TYPES = _DEQUEUE_OP_TYPES | _UNSTAGE_OP_TYPES | frozenset(['IteratorGetNext'])

DOCS = 'docs/efficiency.md'


class _Totals:
    """The loop's running totals at one moment (differences of two make a cycle)."""

    __slots__ = ('wall', 'steps', 'between', 'input', 'checkpoint', 'runs')

    def __init__(self, loop, wall):
        self.wall = wall
        self.steps = loop.step_seconds
        self.between = loop.between_steps_seconds
        self.input = loop.waited('input')
        self.checkpoint = loop.waited('checkpoint')
        self.runs = loop.global_step


class StepTimeMonitor(Callback):
    """Splits the time of each epoch's steps and names what bounds them (one of the default
    callbacks; see docs/callbacks.md#the-step-time-monitor).

    Each report covers the time from the previous report (the run's second step for the first)
    to this epoch's end, so the previous epoch's end (evaluation, checkpoint) counts in it;
    the run's first two runs, which build TensorFlow's executors, are left out. Every part is in
    milliseconds per step and the parts add up to ``StepTime/step_ms``:

    * **input**: the seconds the loop's thread spent producing datapoints (``FeedInput``
      records them), plus the share of the session's time its input ops (a queue's dequeue, a
      staging area's unstage) waited in the latest traced step;
    * **communication**: the share of the session's time collectives ran after the last
      gradient was ready, in the latest traced step
      (:class:`~tensorpack_lite.profiling.step_timeline.StepTimeline`);
    * **compute**: the rest of the session's time. The session's time a run is measured every
      ``sample_every`` runs, from this callback's ``before_run`` (after the other default
      callbacks') to the session's return (``TrainLoop.last_run_end``);
    * **checkpoint**: the seconds ``ModelSaver`` and ``MinSaver`` held the loop's thread;
    * **callbacks**: everything else: the callbacks' ``before_run``/``after_run`` inside a step,
      their ``trigger_step``, and the epoch's end (evaluation, statistics) but for checkpoints.

    Statistics (``StepTime/...``): ``steps_per_sec``, ``samples_per_sec`` (when the trainer
    knows its batch: ``trainer.global_batch``, the first tower's batch dimension read in each
    epoch's first step, times ``world_size``), ``step_ms`` and ``<part>_ms`` for each part of
    :data:`BOUNDS`; with an input queue, ``queue_fill`` (its mean size over its capacity) and
    ``queue_empty`` (the fraction of sampled runs that found it empty); with a countable graph,
    ``gflops_per_sec`` (the FLOPs of ``trainer.train_op``'s run, see
    :func:`~tensorpack_lite.profiling.flops.count_flops`, per second of wall time) and, where the
    peak is known, ``flop_utilization`` (of :func:`~tensorpack_lite.profiling.peak_flops.cpu_peak_flops`
    on a machine without GPU; unknown with one). The bound is the largest part.

    What it costs a step: three ``time.perf_counter()`` reads in the loop (``TrainLoop``: a
    step's start and end, a run's end), two in ``FeedInput`` (and a ``record_wait``), and this
    callback's ``before_run`` (a countdown; on one run in ``sample_every``, a perf_counter read).
    Only when the step dequeues from a queue or staging area or runs collectives is its
    ``after_run`` called too: with an input queue, the queue's size is one more fetch of every
    run (read in the sampled ones: runs that fetch the same are compiled once), and one run
    every ``trace_every_seconds`` is traced (``RunOptions.SOFTWARE_TRACE``, ``FULL_TRACE`` with
    GPUs) to split the session's time; the first traced run builds TensorFlow's executors of
    the step once more (seconds for a ResNet-50), each later one costs about one more step.

    Turn it off with ``TrainConfig(extra_callbacks=DEFAULT_CALLBACKS(step_monitor=False))``.

    Args:
        sample_every (int): runs between two samples of the session's time and the queue.
        trace_every_seconds (float): the least time between two traced runs (the first is the
            run's second; a traced run goes through ``sess.run`` and costs a few plain ones).
        peak_flops (float): this machine's peak FLOP/s, when known better than the estimate
            from the CPU; None: the estimate.
    """

    _chief_only = False

    PREFIX = 'StepTime/'

    def __init__(self, sample_every=10, trace_every_seconds=60.0, peak_flops=None):
        if not is_int(sample_every) or sample_every < 1:
            raise ValueError("StepTimeMonitor: sample_every must be a positive integer, got {!r}".format(
                sample_every))
        if not is_real(trace_every_seconds) or trace_every_seconds < 0:
            raise ValueError("StepTimeMonitor: trace_every_seconds must be a number >= 0, got {!r}".format(
                trace_every_seconds))
        if peak_flops is not None and (not is_real(peak_flops) or not peak_flops > 0):
            raise ValueError("StepTimeMonitor: peak_flops must be a positive number or None, got "
                             "{!r}".format(peak_flops))
        self._sample_every = int(sample_every)
        self._trace_every = float(trace_every_seconds)
        self._peak_given = peak_flops
        self.last_report = None
        """The latest epoch's numbers: a dict of the statistics (without the prefix), ``'bound'``
        and ``'line'`` (the logged line)."""

    # ----- set up --------------------------------------------------------------------------------

    def _setup_graph(self):
        self._train_op = getattr(self.trainer, 'train_op', None)
        step_ops = list(ops_run_by([self._train_op])) if self._train_op is not None else []
        queues = self._input_queues(step_ops)
        self._capacity = sum(capacity for _, capacity in queues) if queues else None
        self._queue_size = (tf.add_n([tf.cast(size, tf.int64) for size, _ in queues], name='input_queue_size')
                            if queues else None)
        self._has_input_ops = any(op.type in _INPUT_WAIT_OP_TYPES for op in step_ops)
        self._has_collectives = any(is_communication_op(op) for op in step_ops)
        sample_fetches = [self._queue_size] if queues else None
        # Fetched by every run, read in the sampled ones: a run whose fetches differ from the
        # others' is compiled anew (grappler and an executor: seconds for a ResNet-50).
        self._sample_args = tfv1.train.SessionRunArgs(sample_fetches) if queues else None
        # the ops' times; a GPU's kernels need FULL_TRACE, which without GPU only adds TensorFlow's
        # warning that it collected no GPU trace
        level = tfv1.RunOptions.FULL_TRACE if num_tensorflow_gpus() else tfv1.RunOptions.SOFTWARE_TRACE
        self._traced_args = tfv1.train.SessionRunArgs(sample_fetches,
                                                      options=tfv1.RunOptions(trace_level=level))
        if queues or self._has_input_ops or self._has_collectives:
            # Something to read after a run (a queue's size, a trace): only then does the group
            # call this callback's after_run (it looks at the instance too), so the plain path
            # (FeedInput on one device) pays for no after_run.
            self._after_run = self._read_run
        self._flops_by_batch = {}
        self._peak = self._find_peak()
        self._countdown = 3            # the first two runs (executors are built) are left out
        self._run_start = None         # perf_counter() at the sampled run's start, until it is read
        self._tracing = False
        self._reading = False          # whether the next after_run belongs to a sampled run
        self._last_trace = None
        self._input_share = 0.0        # of the session's time, from the latest trace
        self._communication_share = 0.0
        self._mark = None              # the _Totals where the current cycle began
        self._first_step = 0
        self._session_times = []
        self._queue_sizes = []

    def _input_queues(self, step_ops):
        """``[(size tensor, capacity)]`` of the queues the step dequeues from, directly or through
        the staging areas it unstages (whose stage ops are found by the areas' names)."""
        dequeues = [op for op in step_ops if op.type in _DEQUEUE_OP_TYPES]
        areas = {op.get_attr('shared_name') for op in step_ops if op.type in _UNSTAGE_OP_TYPES}
        if areas:
            stages = [op for op in self.graph.get_operations()
                      if op.type == 'Stage' and op.get_attr('shared_name') in areas]
            dequeues += [op for op in ops_run_by(stages) if op.type in _DEQUEUE_OP_TYPES]
        found = {}
        for op in dequeues:
            queue = op.inputs[0].op
            if queue.name in found:
                continue
            try:
                capacity = queue.get_attr('capacity')
            except ValueError:
                capacity = -1
            if capacity is None or capacity <= 0:   # unbounded: no fill to speak of
                continue
            resource = op.inputs[0].dtype == tf.resource
            size_op = tfv1.raw_ops.QueueSizeV2 if resource else tfv1.raw_ops.QueueSize
            found[queue.name] = (size_op(handle=op.inputs[0], name='queue_size'), capacity)
        return [found[name] for name in sorted(found)]

    def _find_peak(self):
        if self._peak_given is not None:
            return float(self._peak_given), "as given"
        if num_tensorflow_gpus():
            return None, "unknown (GPU)"
        peak = cpu_peak_flops()
        if peak is None:
            return None, "unknown"
        return peak.flops, peak.describe()

    # ----- every run -----------------------------------------------------------------------------

    def _before_run(self, _):
        if self._run_start is not None:   # the run before was sampled: the loop has its end
            self._take_session_time()
        self._countdown -= 1
        if self._countdown:
            return self._sample_args   # every run asks the same: one compiled run, not two
        self._countdown = self._sample_every
        now = perf_counter()
        if self._mark is None:      # the run's third run: the first cycle begins
            self._mark = _Totals(self.trainer.loop, now)
            self._first_step = self.trainer.loop.local_step
        args = self._sample_args
        if ((self._has_input_ops or self._has_collectives) and self._trace_every is not None
                and (self._last_trace is None or now - self._last_trace >= self._trace_every)):
            self._last_trace, self._tracing = now, True
            args = self._traced_args
        self._reading = True
        self._run_start = perf_counter()
        return args

    def _take_session_time(self):
        """The session's time of the sampled run, from its start to the loop's end of the run
        (``TrainLoop.last_run_end``, read here rather than in an ``after_run``)."""
        start, self._run_start = self._run_start, None
        if start is not None and not self._tracing:
            end = self.trainer.loop.last_run_end
            if end is not None and end > start:
                self._session_times.append(end - start)
        self._tracing = False

    def _read_run(self, _, run_values):
        """After every run when there is a queue or a trace to read (see ``_setup_graph``)."""
        if not self._reading:
            return
        self._reading = False
        if run_values.results is not None:
            self._queue_sizes.append(int(run_values.results[0]))
        if self._tracing:
            self._read_trace(run_values.run_metadata)

    def _read_trace(self, metadata):
        try:
            timeline = StepTimeline(self.graph, metadata.step_stats)
        except ValueError as err:   # nothing traced: keep the shares of the previous trace
            logger.warn("StepTimeMonitor: the traced run could not be read ({}); tracing stops.".format(err))
            self._trace_every = None
            return
        duration = timeline.duration
        if duration <= 0:
            return
        waits = sorted((s.start, s.end) for s in timeline.spans if s.type in _INPUT_WAIT_OP_TYPES)
        waited, reach = 0.0, None
        for start, end in waits:   # their union
            if reach is None or start > reach:
                waited, reach = waited + end - start, end
            elif end > reach:
                waited, reach = waited + end - reach, end
        summary = timeline.summary()
        communication = summary['after_compute'] if summary['pieces'] else 0.0
        self._input_share = min(waited / duration, 1.0)
        self._communication_share = min(max(communication, 0.0) / duration, 1.0 - self._input_share)

    # ----- every epoch ---------------------------------------------------------------------------

    def _trigger_epoch(self):
        if self._mark is None:
            return
        loop = self.trainer.loop
        now = _Totals(loop, perf_counter())
        self._take_session_time()
        steps = loop.steps_done - self._first_step
        report = self._report(self._mark, now, steps) if steps > 0 else None
        self._mark, self._first_step = now, 0
        self._session_times, self._queue_sizes = [], []
        if report is None:
            return
        for name in report['stats']:
            self.trainer.monitors.put_scalar(self.PREFIX + name, report['stats'][name])
        logger.info(report['line'])
        self.last_report = dict(report['stats'], bound=report['bound'], line=report['line'])

    def _report(self, before, after, steps):
        wall = after.wall - before.wall
        if wall <= 0:
            return None
        in_steps = after.steps - before.steps
        produced = after.input - before.input
        checkpoint = after.checkpoint - before.checkpoint
        runs = after.runs - before.runs
        if self._session_times:
            session = min(statistics.median(self._session_times) * runs, max(in_steps - produced, 0.0))
        else:
            session = max(in_steps - produced, 0.0)
        input_wait = produced + self._input_share * session
        communication = self._communication_share * session
        parts = {
            'input': input_wait,
            'compute': max(session - self._input_share * session - communication, 0.0),
            'communication': communication,
            'checkpoint': checkpoint,
        }
        parts['callbacks'] = max(wall - sum(parts.values()), 0.0)
        stats = {'steps_per_sec': steps / wall, 'step_ms': wall / steps * 1e3}
        batch = self.trainer.global_batch
        if batch:
            stats['samples_per_sec'] = steps * batch / wall
        for name in BOUNDS:
            stats[name + '_ms'] = parts[name] / steps * 1e3
        queue = None
        if self._queue_sizes and self._capacity:
            queue = (sum(1 for size in self._queue_sizes if size == 0) / len(self._queue_sizes),
                     statistics.mean(self._queue_sizes) / self._capacity)
            stats['queue_empty'], stats['queue_fill'] = queue
        flops = self._step_flops()
        utilization = None
        if flops:
            stats['gflops_per_sec'] = flops * steps / wall / 1e9
            if self._peak[0]:
                utilization = flops * steps / wall / self._peak[0]
                stats['flop_utilization'] = utilization
        bound = max(BOUNDS, key=lambda name: parts[name])
        line = self._line(bound, parts, wall, stats, queue, utilization)
        return {'stats': stats, 'bound': _BOUND_WORDS[bound], 'line': line}

    def _step_flops(self):
        """FLOPs of one run of the train op with this epoch's batch, or None."""
        if self._train_op is None:
            return None
        batch = self.trainer.global_batch
        replica = batch // self.trainer.world_size if batch else None
        if replica not in self._flops_by_batch:
            self._flops_by_batch[replica] = count_flops([self._train_op], replica)
        return self._flops_by_batch[replica]

    def _line(self, bound, parts, wall, stats, queue, utilization):
        share = parts[bound] / wall * 100
        if bound == 'input' and queue is not None:
            why = ("the input queue was empty at {:.0f} % of the sampled steps and input took {:.0f} % of "
                   "the time".format(queue[0] * 100, share))
        elif bound == 'input':
            why = "producing the datapoints took {:.0f} % of the time".format(share)
        elif bound == 'compute':
            why = "the graph's computation took {:.0f} % of the time".format(share)
        elif bound == 'communication':
            why = "communication after the last gradient took {:.0f} % of the time".format(share)
        elif bound == 'callbacks':
            why = "callbacks took {:.0f} % of the time".format(share)
        else:
            why = "writing checkpoints held the loop {:.0f} % of the time".format(share)
        details = ["{:.3g} ms a step".format(stats['step_ms'])]
        if 'samples_per_sec' in stats:
            details.append("{:.0f} samples/s".format(stats['samples_per_sec']))
        else:
            details.append("{:.1f} steps/s".format(stats['steps_per_sec']))
        details.append(', '.join('{} {:.0f} %'.format(name, parts[name] / wall * 100) for name in BOUNDS))
        if utilization is not None:
            details.append("{:.2g} % of the peak FLOP/s ({})".format(utilization * 100, self._peak[1]))
        elif 'gflops_per_sec' in stats:
            details.append("{:.3g} GFLOP/s, peak {}".format(stats['gflops_per_sec'], self._peak[1]))
        return "[StepTimeMonitor] epoch {}: {}: {} ({}); see {}#{}: {}.".format(
            self.epoch_num, _BOUND_WORDS[bound], why, '; '.join(details), DOCS, _BOUND_WORDS[bound],
            _ADVICE[bound])

    def _stat_names(self):
        names = ['steps_per_sec', 'step_ms', 'samples_per_sec'] + [name + '_ms' for name in BOUNDS]
        if self._capacity:
            names += ['queue_empty', 'queue_fill']
        if self._train_op is not None:
            names += ['gflops_per_sec'] + (['flop_utilization'] if self._peak[0] else [])
        return [self.PREFIX + name for name in names]
