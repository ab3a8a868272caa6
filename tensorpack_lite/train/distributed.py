"""Synchronous training across processes and machines through TensorFlow's distributed
runtime (``tf.compat.v1.train.Server``, gRPC). Every process runs the same script; the
cluster and each process's task come from ``TF_CONFIG`` (see :func:`create_server` and the
launcher ``python -m tensorpack_lite.cluster.launch``).

* :class:`DistributedTrainerParameterServer` and :class:`DistributedTrainerReplicated`
  (tensorpack's): ``ps`` tasks hold the variables, ``worker`` tasks train, one tower per
  device; a ps task only serves.
* :class:`CollectiveAllReduceTrainer`: workers only; the gradients are all-reduced across
  them by TensorFlow's collective ops (a ring on CPUs, NCCL on GPUs): the TF-native
  counterpart of :class:`HorovodTrainer`.

Example (``python -m tensorpack_lite.cluster.launch --workers 2 -- python train.py``)::

    server = create_server()                 # from TF_CONFIG
    trainer = CollectiveAllReduceTrainer(['/cpu:0'], server)
    if trainer.is_chief:
        logger.set_logger_dir('train_log/run1', action='k')
    df = BatchData(RankShardData(my_dataflow, trainer.task_index, trainer.num_worker), 32)
    launch_train_with_config(AutoResumeTrainConfig(model=Model(), dataflow=df, ...), trainer)

Worker 0 is the chief: it alone runs chief-only callbacks, ``session_init`` and writes files
(logs, event files, ``stats.json``, checkpoints). The chief also decides the schedule: the
other workers take its global step, epochs and steps per epoch when training starts. A task
that never starts, or is lost during training, makes the others fail within seconds with a
:class:`LostTaskError` naming it; no step waits longer than :attr:`STEP_TIMEOUT`.
"""

import functools
import os
import sys
import threading
import time

import numpy as np

from ..callbacks.base import Callback
from ..callbacks.graph import RunOp
from ..callbacks.monitor import JSONWriter, TFEventWriter
from ..cluster.config import LostTaskError, TaskWatchdog
from ..cluster.preemption import Preempted, PreemptionNotice
from ..compat import tf, tfv1
from ..graph_builder.compression import check_compression
from ..graph_builder.distributed import (CollectiveAllReduceBuilder, DistributedParameterServerBuilder,
                                         DistributedReplicatedBuilder, check_exchange)
from ..loop.state import Schedule
from ..multiprocess.collective import cluster_group, collective_mean
from ..multiprocess.server import FinishBarrier, build_worker_done_op, serve_until_workers_finish
from ..multiprocess.stop_vote import PREEMPTED, REQUESTED, PreemptionVote
from ..multiprocess.sync_statistics import cross_rank_mean_scope
from ..profiling.step_timeline import is_communication_op
from ..tfutils.common import get_global_step_value, get_global_step_var
from ..tfutils.dependency import ops_run_by
from ..tfutils.distributed import DistributedSessionCreator, cluster_of_server
from ..tfutils.sesscreate import NewSessionCreator
from ..utils import logger
from ..utils.concurrency import DaemonCall, bound_exit, run_with_timeout
from .base import StopTraining
from .horovod_trainer import _BroadcastEveryEpoch
from .trainers import _DataParallelTrainer

__all__ = ['DistributedTrainerBase', 'DistributedTrainerParameterServer', 'DistributedTrainerReplicated',
           'CollectiveAllReduceTrainer', 'LostTaskError']


class _FinishTogether(Callback):
    """Registered after the user's callbacks. When this worker ended where every worker ends
    (it ran the whole schedule, or stopped after the step the workers agreed on when one was
    preempted), it meets the other workers at the trainer's :class:`FinishBarrier` (none
    leaves while another still trains or saves); then, unless training failed, it tells the
    parameter servers that it is done (they exit once every worker is)."""

    _chief_only = False

    def __init__(self, done_op):
        self._done_op = done_op

    def _after_train(self):
        trainer = self.trainer
        if trainer.training_failed:
            return
        if trainer.ended_together:
            trainer.finish_barrier.finish()
        if self._done_op is None:
            return
        try:
            trainer.sess.run(self._done_op, options=tfv1.RunOptions(timeout_in_ms=10000))
        except tf.errors.OpError as err:
            logger.warn("Could not tell the parameter servers that this worker finished: {}".format(
                err.message.splitlines()[0]))


class _StopWatchingAfterLastStep(tfv1.train.SessionRunHook):
    """Once the last training step has run, the other tasks may end before this one (their
    part of every step is done): the trainer stops watching them, before the callbacks act on
    that step (which may take a while), so that a peer's normal end is not taken for a loss,
    and it notes that it ran the whole schedule (see :class:`_FinishTogether`)."""

    def __init__(self, trainer):
        self._trainer = trainer

    def after_run(self, run_context, run_values):
        loop = self._trainer.loop
        if loop.is_last_epoch and loop.is_last_step_of_epoch:
            self._trainer.stop_watching()
            self._trainer.ended_together = True


class _AgreedStop:
    """When one worker is preempted (SIGTERM), or the chief asks to stop (``request_stop``), every
    worker stops after the same step: that worker proposes, after its step ``k``, to stop after
    step ``k + 2`` at the
    :class:`FinishBarrier` on the chief (see there why every worker hears of it in time). What
    the parameter-server trainers do; :class:`CollectiveAllReduceTrainer` has a cheaper way,
    a vote in its all-reduce (:class:`PreemptionVote`).

    Each worker reads the agreed stop step after every step, in a thread of its own so that no
    step waits for the chief: the read started after step ``k`` is looked at after step
    ``k + 1``, which is still in time for a proposal made after step ``k - 1`` or earlier.
    The thread is a daemon: a read left waiting for a chief behind a cut link never holds up
    the process's exit for long (see :meth:`close`).
    """

    MARGIN = 2
    """Steps that synchronize the workers between the proposal and the stop (see above: the
    read lags one step). With ``accumulate=K`` only the last step of each update synchronizes
    them: a worker may run the other K - 1 ahead of the rest, so the stop is the end of the second
    update after the proposal."""

    EXIT_TIMEOUT = 10.0
    """Seconds the interpreter's exit may take when a read was left waiting (then status 1)."""

    def __init__(self, barrier, steps_per_update=1):
        self._barrier = barrier
        self._steps_per_update = steps_per_update
        self._pending = None      # the DaemonCall of the read started after the last step
        self.proposed = {}        # why -> the step proposed

    def due(self, global_step, sigterm_received, stop_request=None):
        """Called before each step, ``global_step`` steps done: propose a stop if SIGTERM came or
        a stop was requested (``stop_request``: why); once the agreed stop step is reached,
        return it and why (:data:`PREEMPTED` or :data:`REQUESTED`), else None."""
        if sigterm_received:
            self._propose(global_step, PREEMPTED, None)
        if stop_request is not None:
            self._propose(global_step, REQUESTED, stop_request)
        # the wait is bounded by the barrier's call timeout (and a loss ends the loop anyway)
        step, why = self._pending.result() if self._pending is not None else (FinishBarrier.NEVER, None)
        self._pending = DaemonCall(self._barrier.agreed_stop, 'stop-step')
        return (step, why) if step <= global_step else None

    def _propose(self, global_step, why, reason):
        if why in self.proposed:
            return
        per_update = self._steps_per_update
        next_update = (global_step // per_update + 1) * per_update    # the next step that synchronizes
        self.proposed[why] = next_update + (self.MARGIN - 1) * per_update
        self._barrier.propose_stop(self.proposed[why], why)
        logger.info("{} proposed that every worker stop after global step {}{}.".format(
            self._barrier.cluster.task_name, self.proposed[why],
            '' if why == PREEMPTED else ' ({})'.format(reason.rstrip('.'))))

    def close(self):
        """Stop reading. A read still running is left to end on its own; the exit then waits
        for it at most :attr:`EXIT_TIMEOUT` seconds."""
        if self._pending is not None and self._pending.running:
            bound_exit(self.EXIT_TIMEOUT)
        self._pending = None


class DistributedTrainerBase(_DataParallelTrainer):
    """What the distributed trainers share: the server and its cluster, the chief, waiting
    for the cluster, one schedule for all workers, failures that name the lost task, and
    files written by the chief only.

    Args:
        gpus (int or list): this worker's towers: GPU ids or device strings such as
            ``['/cpu:0']``.
        server (tf.compat.v1.train.Server): this process's server (:func:`create_server`).
            On a ps task the trainer serves until the workers finish, then exits the process.

    Attributes:
        cluster (ClusterConfig): the cluster and this task.
        task_index (int), num_worker (int): this worker and the number of workers.
    """

    STARTUP_TIMEOUT = 300.0
    """Seconds to wait for every task of the cluster to start (and, on other workers, for
    the chief to initialize the shared variables)."""

    STEP_TIMEOUT = 600.0
    """Seconds a training step (or a start-up exchange) may take before it is an error."""

    PROBE_INTERVAL = 1.0
    """Seconds between two checks that the other tasks still accept connections."""

    CLOSE_TIMEOUT = 2.0
    """Seconds closing the session may take after training failed: closing a distributed
    session talks to every task, and one that is gone can hold it for ever."""

    FINISH_TIMEOUT = 600.0
    """Seconds a worker that ran its last step waits for the others to finish theirs (and their
    ``after_train``): then a :class:`LostTaskError` names those that did not (see
    :class:`~tensorpack_lite.tfutils.distributed.FinishBarrier`). A worker that stops accepting
    connections meanwhile is named within seconds."""

    ABORT_TIMEOUT = 5.0
    """Seconds the parameter-server trainers' abort op may take when a task is lost; then the
    session is closed instead (see :meth:`_on_lost`)."""

    EXIT_AFTER_LOSS_TIMEOUT = 30.0
    """Seconds after a task is found lost within which training must have stopped: then the
    process exits with code 1 (see :meth:`_exit_stuck`)."""

    LOSS_CONFIRM_TIMEOUT = 30.0
    """After a step fails with a connection error (a peer reset or unavailable), seconds to
    keep probing for the task that went away: a process being killed may still hold its
    listening port for a moment after its connections were reset."""

    def __init__(self, gpus, server):
        self.server = server
        self.cluster = cluster_of_server(server)
        self.job_name = self.cluster.job_name
        self.task_index = self.cluster.task_index
        self.num_worker = self.cluster.num_worker
        logger.info("Distributed training on cluster {}; this is {}.".format(
            self.cluster.cluster, self.cluster.describe(self.job_name, self.task_index)))
        if self.job_name == 'ps':
            self.join()
        super().__init__(gpus)
        self.is_chief = self.cluster.is_chief
        self._builder = self._make_builder(self.devices, server)
        self._watchdog = None
        self._abort_op = None
        self.training_failed = None
        self.ended_together = False
        self._loop_ended = threading.Event()
        self.finish_barrier = None
        self._agreed_stop = None

    @property
    def world_size(self):
        """One replica per tower of every worker."""
        return self.num_worker * len(self.devices)

    def _make_builder(self, towers, server):
        raise NotImplementedError("{} must implement _make_builder()".format(type(self).__name__))

    def join(self):
        """What a ps task does: serve the variables until every worker has finished, then
        exit the process (code 0; an error when the workers were lost; 143 after SIGTERM,
        which does not stop the serving: the workers still need the variables to stop
        together and save)."""
        logger.info("{} serves; end it with `kill {}` if needed.".format(self.cluster.task_name,
                                                                         os.getpid()))
        with PreemptionNotice("serving until the workers have stopped and saved") as notice:
            serve_until_workers_finish(self.server, startup_timeout=self.STARTUP_TIMEOUT)
        if notice.received:
            raise Preempted("preempted: {} received SIGTERM and served until the workers finished".format(
                self.cluster.task_name))
        sys.exit(0)

    # ----- graph -------------------------------------------------------------------------------

    def setup_graph(self, input_signature, input, get_cost_fn, get_opt_fn):
        """As :meth:`SingleCostTrainer.setup_graph`; the global step and the input live on
        this worker's CPU (every worker counts its own steps)."""
        with tf.device(self._builder.cpu_device):
            get_global_step_var()
            super().setup_graph(input_signature, input, get_cost_fn, get_opt_fn)

    def _build_train_op(self, grad_list, get_opt_fn):
        self._finish_together = _FinishTogether(build_worker_done_op(self.cluster))
        return self._build_sync_ops(grad_list, get_opt_fn)

    def _build_sync_ops(self, grad_list, get_opt_fn):
        """Set ``self.train_op`` and build what the start needs; return extra callbacks."""
        raise NotImplementedError("{} must implement _build_sync_ops()".format(type(self).__name__))

    # ----- only the chief writes files ----------------------------------------------------------

    def register_callback(self, cb):
        if not self.is_chief and isinstance(cb, (TFEventWriter, JSONWriter)):
            logger.info("{}: {} skipped, only the chief writes files.".format(
                self.cluster.task_name, type(cb).__name__))
            return False
        return super().register_callback(cb)

    def setup_callbacks(self, callbacks, monitors):
        if not self.is_chief:
            self._stop_writing_logs("{}: only the chief writes into the logger directory; this worker".format(
                self.cluster.task_name))
        super().setup_callbacks(list(callbacks) + [self._finish_together], monitors)

    # ----- session -----------------------------------------------------------------------------

    def initialize(self, session_creator, session_init):
        """Create the session on this worker's server once every task is up (the chief
        initializes the shared variables and runs ``session_init``), then start watching
        the other tasks. The session config comes from the server (:func:`create_server`)."""
        if not isinstance(session_creator, NewSessionCreator) or session_creator.user_provided_config:
            raise ValueError("{}: a session creator or session config cannot be given for distributed "
                             "training; pass the config to create_server() instead.".format(
                                 type(self).__name__))
        creator = DistributedSessionCreator(self.server, startup_timeout=self.STARTUP_TIMEOUT,
                                            ready_timeout=self.STARTUP_TIMEOUT,
                                            device_filters=self._session_device_filters())
        super().initialize(creator, session_init)
        self.finish_barrier = FinishBarrier(self.server, timeout=self.FINISH_TIMEOUT)
        self.finish_barrier.connect()
        if self.is_chief:
            self.finish_barrier.prepare()
        self._watchdog = TaskWatchdog(self.cluster, self.cluster.other_tasks(), self._on_lost,
                                      interval=self.PROBE_INTERVAL)
        self._watchdog.start()

    def _session_device_filters(self):
        """The tasks whose devices this worker's session uses (None: the session creator's
        default, the parameter servers and this worker)."""
        return None

    def _on_lost(self, tasks):
        """The watchdog found ``tasks`` lost: end what may be waiting for them. The
        parameter-server trainers run their abort op, which closes the step queues on the
        parameter servers (the surviving workers' steps end too). When there is none, or it
        cannot run (a parameter server is lost, or this worker is cut off), the session is
        closed, which cancels the running step (a peer that is gone but was never reset, e.g.
        behind a cut link, would hold a collective op until the connection times out, minutes
        later). What closing does not cancel (a checkpoint save reading the variables from a
        parameter server behind a cut link) ends with the process: :meth:`_exit_stuck`."""
        logger.error("{}: lost {}.".format(self.cluster.task_name,
                                           ', '.join(self.cluster.describe(*t) for t in tasks)))
        if self._abort_op is None or not self._run_abort_op():
            threading.Thread(target=self.sess.close, name='cancel-step', daemon=True).start()
        if not self._loop_ended.wait(self.EXIT_AFTER_LOSS_TIMEOUT):
            self._exit_stuck(tasks)

    def _exit_stuck(self, tasks):
        """The last resort when a task is lost: this worker's call into TensorFlow did not end
        (one to a task behind a cut link, e.g. a checkpoint save reading from a parameter
        server, is cancelled neither by the session's close nor by its own timeout). Say why
        and exit with code 1 at once: what is on disk was written atomically, so nothing is
        lost that a restart from the last checkpoint would need."""
        error = self.cluster.lost_task_error(tasks)
        logger.error("Training failed: {}: {}. This worker's call into TensorFlow did not end within {:g} s "
                     "of the loss (EXIT_AFTER_LOSS_TIMEOUT; TensorFlow cannot cancel a call to a task "
                     "behind a cut link): it exits now with code 1.".format(
                         type(error).__name__, error, self.EXIT_AFTER_LOSS_TIMEOUT))
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)

    def _run_abort_op(self):
        """Run the abort op; whether it ran within ``ABORT_TIMEOUT``. Its first run registers
        it with the parameter servers, which no run timeout bounds (behind a cut link it waits
        for ever): it runs in a thread of its own, left behind if it does not return."""
        options = tfv1.RunOptions(timeout_in_ms=int(self.ABORT_TIMEOUT * 1000))
        try:
            return run_with_timeout(lambda: self.sess.run(self._abort_op, options=options),
                                    self.ABORT_TIMEOUT, 'abort-step')
        except tf.errors.OpError:
            return False      # the queues are out of reach (a parameter server is lost, or this worker)

    def _lost_tasks(self):
        """The other tasks known to be lost (by the watchdog) or not accepting connections now."""
        return (self._watchdog.lost if self._watchdog is not None else []) or self.cluster.unreachable()

    def _run_options(self, collective_graph_key=0):
        options = tfv1.RunOptions(timeout_in_ms=int(self.STEP_TIMEOUT * 1000))
        if collective_graph_key:
            options.experimental.collective_graph_key = collective_graph_key
        return options

    def _explain(self, err):
        """The error to raise for ``err``: a :class:`LostTaskError` when a task is lost."""
        lost = self._lost_tasks()
        if not lost and isinstance(err, (tf.errors.UnavailableError, tf.errors.AbortedError)):
            deadline = time.monotonic() + self.LOSS_CONFIRM_TIMEOUT
            while not lost and time.monotonic() < deadline:
                time.sleep(0.2)
                lost = self._lost_tasks()
        if lost:
            return self.cluster.lost_task_error(lost, err)
        if isinstance(err, tf.errors.DeadlineExceededError):
            return RuntimeError("{}: a step took longer than {:g} s (STEP_TIMEOUT) although every task "
                                "answers: is a task stuck? {}".format(
                                    self.cluster.task_name, self.STEP_TIMEOUT, err.message.splitlines()[0]))
        return err

    # ----- training ----------------------------------------------------------------------------

    def main_loop(self, steps_per_epoch, starting_epoch, max_epoch, first_step=0):
        """Agree with the other workers on the start (the chief's variables and schedule),
        then run the epochs."""
        mine = Schedule(steps_per_epoch, starting_epoch, max_epoch, first_step)
        schedule = np.asarray(mine.as_vector(), np.int64)
        try:
            with self.sess.as_default():
                received = self._start_together(schedule)
        except Exception as err:
            self.stop_watching()
            self.sess.close()
            explained = self._explain(err) if isinstance(err, tf.errors.OpError) else err
            if explained is err:
                raise
            raise explained from err
        chosen = mine if received is None else Schedule.from_vector(received)
        if chosen != mine:
            logger.info("{} follows the chief's schedule: {}.".format(
                self.cluster.task_name, chosen.describe()))
        with self.sess.as_default():
            self._follow_resume_point(chosen, get_global_step_value())
        super().main_loop(*chosen.as_vector())

    @property
    def state_owner(self):
        return None if self.is_chief else 'worker-{}'.format(self.task_index)

    def _start_together(self, schedule):
        """Run the start-up exchange; returns the chief's schedule on another worker."""
        raise NotImplementedError("{} must implement _start_together()".format(type(self).__name__))

    _accumulate_runs_communicate = False

    def _accumulation_built(self, accumulate_op):
        # Whether the accumulate op of an update's first K - 1 runs holds a collective (BatchNorm's
        # synchronized statistics): then every worker runs it together, with the collective graph
        # key. Otherwise it runs without the key: it must take no step id of the key's sequence,
        # which only runs that reduce together may advance (a worker advancing it alone stalls the
        # next update's all-reduce).
        self._accumulate_runs_communicate = any(is_communication_op(op) for op in ops_run_by([accumulate_op]))

    def run_step(self):
        fetch = self._step_fetch()
        together = fetch is self.train_op or self._accumulate_runs_communicate
        self.hooked_sess.run(fetch, options=self._step_options if together else self._run_options())

    def _check_preemption(self):
        """SIGTERM on any worker stops every worker after the same step (:class:`_AgreedStop`):
        the chief writes that step's checkpoint, every worker exits with status 143. A stop the
        chief requested (:meth:`request_stop`) ends every worker after the same step as finished."""
        if self._agreed_stop is None:
            self._agreed_stop = _AgreedStop(self.finish_barrier, self.accumulate)
        agreed = self._agreed_stop.due(self.loop.global_step, self._preemption.received, self._stop_request)
        if agreed is not None:
            self._stop_together(*agreed)

    def _stop_if_requested(self):
        """Not here: every worker stops after the step they agree on (:meth:`_check_preemption`)."""

    def _stop_together(self, stop_step, why=PREEMPTED):
        """Every worker stops now, after ``stop_step``, because one was preempted (or, ``why``
        :data:`REQUESTED`, because a stop was requested: training ends as finished)."""
        self.stop_watching()       # the others end now too: that is no loss
        self.ended_together = True
        if why == PREEMPTED:
            raise Preempted.together(self._preemption.received, 'worker', stop_step)
        raise StopTraining("every worker stops after global step {}: {}".format(
            stop_step, self._stop_request or 'the chief asked to stop.'))

    def _trainer_hooks(self):
        return super()._trainer_hooks() + [_StopWatchingAfterLastStep(self)]

    @property
    def _step_options(self):
        return self._run_options()

    def _run_epochs(self):
        try:
            super()._run_epochs()
        except tf.errors.OpError as err:
            explained = self._explain(err)
            if explained is err:
                raise
            raise explained from err

    def _end_training(self, failure):
        self._loop_ended.set()
        preempted = failure is not None and isinstance(failure.error, Preempted)
        self.training_failed = failure is not None and not (preempted and self.ended_together)
        self.stop_watching()
        try:
            super()._end_training(failure)
        finally:
            if self._agreed_stop is not None:
                self._agreed_stop.close()
            if self.finish_barrier is not None:
                self._close_finish_barrier()

    def _close_finish_barrier(self):
        """Close the barrier's session to the chief within ``CLOSE_TIMEOUT``: a session that ran
        on a chief that is gone waits for it when it closes (then it is left behind)."""
        if not run_with_timeout(self.finish_barrier.close, self.CLOSE_TIMEOUT, 'close-finish-barrier'):
            logger.warn("The session to the chief's finish barrier did not close within {:g} s "
                        "(CLOSE_TIMEOUT){}. Moving on without it.".format(
                            self.CLOSE_TIMEOUT, self._close_wait_reason()))
            bound_exit(self.EXIT_TIMEOUT)

    def _close_wait_reason(self):
        lost = self._lost_tasks()
        if not lost:
            return ""
        return ": it waits for the lost {}".format(', '.join(self.cluster.describe(*t) for t in lost))

    def stop_watching(self):
        """Stop watching the other tasks (their end is no longer a loss)."""
        if self._watchdog is not None:
            self._watchdog.stop()


class _ParameterServerTrainer(DistributedTrainerBase):
    """The start of the parameter-server trainers: the chief sends its global step and
    schedule; the other workers wait for them (which also tells them the chief has
    initialized and restored the variables).

    With ``mixed_precision='fp16'`` the loss-scale state is one, on the first parameter
    server: every worker scales its step's loss by it, and the chief, applying the averaged
    gradients once, decides on them (all finite: applied, else skipped whole) and updates the
    scale before it lets the other workers go on, so every worker of a step uses the same
    scale."""

    def _loss_scale_device(self):
        return self._builder.ps_devices[0]

    def _with_loss_scale_update(self, train_op):
        return train_op   # updated in the chief's apply: see _after_apply

    def _after_apply(self):
        """What follows the chief's apply of the averaged gradients (passed to the builder)."""
        return self._loss_scale.update_after if self._loss_scale is not None else None

    def _build_sync_ops(self, grad_list, get_opt_fn):
        callbacks = self._build_ps_train_op(grad_list, get_opt_fn)
        sync = self._builder.sync
        self._schedule = tfv1.placeholder(tf.int64, [Schedule.VECTOR_LENGTH], name='schedule')
        self._start_op = sync.build_start(get_global_step_var(), self._schedule)
        self._abort_op = sync.build_abort()
        return callbacks

    def _build_ps_train_op(self, grad_list, get_opt_fn):
        raise NotImplementedError("{} must implement _build_ps_train_op()".format(type(self).__name__))

    def _start_together(self, schedule):
        options = self._run_options()
        if self.is_chief:
            self.sess.run(self._start_op, feed_dict={self._schedule: schedule}, options=options)
            return None
        return self.sess.run(self._start_op, options=options)


class DistributedTrainerParameterServer(_ParameterServerTrainer):
    """Synchronous training with the variables on the parameter servers (tensorpack's
    ``DistributedTrainerParameterServer``): each worker builds one tower per device, reading
    the variables through a cache on the worker; each step the gradients are averaged over
    the towers and the workers and applied once by the chief (see
    :class:`~tensorpack_lite.graph_builder.distributed.DistributedParameterServerBuilder`).

    Args:
        gpus (int or list): this worker's towers (GPU ids or device strings).
        server (tf.compat.v1.train.Server): this process's server.
        caching_device (str): ``'cpu'`` or ``'gpu'``: where the worker caches the variables.
    """

    def __init__(self, gpus, server, caching_device='cpu'):
        self._caching_device = caching_device
        super().__init__(gpus, server)

    def _make_builder(self, towers, server):
        return DistributedParameterServerBuilder(towers, server, self._caching_device)

    def _build_ps_train_op(self, grad_list, get_opt_fn):
        self.train_op = self._builder.build(grad_list, get_opt_fn, self._after_apply())
        return []


class DistributedTrainerReplicated(_ParameterServerTrainer):
    """Synchronous training where each tower keeps a local replica and the parameter
    servers the global variables (tensorpack's ``DistributedTrainerReplicated``): each step
    the gradients are averaged over the towers and the workers, applied once to the global
    variables by the chief, and every worker copies the result into its replicas (see
    :class:`~tensorpack_lite.graph_builder.distributed.DistributedReplicatedBuilder`).
    The global variables (named without prefix) are what checkpoints hold.

    Args:
        gpus (int or list): this worker's towers (GPU ids or device strings).
        server (tf.compat.v1.train.Server): this process's server.
    """

    def _make_builder(self, towers, server):
        return DistributedReplicatedBuilder(towers, server)

    def _setup_graph(self, input, get_cost_fn, get_opt_fn):
        with tfv1.device(self._builder.param_server_device()):
            get_opt_fn()   # its variables (e.g. the learning rate) are global, on the parameter servers
        return super()._setup_graph(input, get_cost_fn, get_opt_fn)

    def _build_ps_train_op(self, grad_list, get_opt_fn):
        self.train_op, self._initial_sync_op, model_sync_op = self._builder.build(
            grad_list, get_opt_fn, self._after_apply())
        if model_sync_op is None:
            return []
        logger.warn("The chief copies its model variables (e.g. batch-norm statistics) to the parameter "
                    "servers once per epoch: save checkpoints at epoch ends.")
        sync = RunOp(model_sync_op, run_before=False, run_as_trigger=True, verbose=True)
        sync.chief_only = True
        return [sync]

    def _start_together(self, schedule):
        received = super()._start_together(schedule)
        self.sess.run(self._initial_sync_op, options=self._run_options())
        return received

    def vs_name_for_predictor(self, device):
        return 'tower0'


class CollectiveAllReduceTrainer(DistributedTrainerBase):
    """Synchronous data-parallel training on several worker processes without parameter
    server: every tower of every worker keeps a replica of the model, and each step the
    gradients of all towers of all workers are averaged (or summed) by an all-reduce across
    the workers, so every replica makes the same update: one step of N workers
    of K towers, batch B each, makes the update of one process on the N*K*B datapoints.

    When training starts, the workers check that they built the same variables, then the
    chief's variables (initialized or restored by ``session_init``) are copied to every
    worker, and again at each epoch's end with :attr:`BROADCAST_EVERY_EPOCH`.

    Args:
        gpus (int or list): this worker's towers (GPU ids or device strings such as
            ``['/cpu:0', '/cpu:1']``); the same number on every worker.
        server (tf.compat.v1.train.Server): this worker's server, in a cluster of workers only.
        average (bool): average the gradients (else sum them).
        compression (str): None (the default: exact float32 all-reduce), ``'fp16'`` or
            ``'bf16'``: floating gradients of 32 bits or more (divided by the number of towers
            first, when averaging) travel and are summed in 16 bits, half the bytes of the exact
            all-reduce; every worker gets the same bits (see docs/distributed.md). For
            :class:`HorovodTrainer`, ``compression`` takes Horovod's compressors instead.
        exchange (str): ``'collective'`` (the default and only choice: TensorFlow's collective
            ops, see :class:`~tensorpack_lite.graph_builder.distributed.CollectiveAllReduceBuilder`
            and docs/distributed.md). The removed ``'sockets'`` and ``'queues'`` are an error
            saying what to use.
    """

    BROADCAST_EVERY_EPOCH = True
    """Copy the chief's variables to every worker at the end of every epoch too (they should
    be equal; this also brings statistics that are not trained, e.g. batch-norm's, in line)."""

    _STEP_KEY, _CHECK_KEY, _START_KEY, _BROADCAST_KEY = 101, 102, 103, 104

    def __init__(self, gpus, server, average=True, compression=None, exchange='collective'):
        self._average = bool(average)
        self._compression = check_compression(compression, type(self).__name__)
        self._exchange = check_exchange(exchange, type(self).__name__)
        self._vote = None
        super().__init__(gpus, server)

    def _setup_graph(self, input, get_cost_fn, get_opt_fn):
        # the mean over every tower of every worker, e.g. for BatchNorm(sync_statistics='horovod')
        group = cluster_group(self.num_worker * len(self.devices))
        with cross_rank_mean_scope(functools.partial(collective_mean, group=group)):
            return super()._setup_graph(input, get_cost_fn, get_opt_fn)

    def _make_builder(self, towers, server):
        return CollectiveAllReduceBuilder(towers, server, self._average, self._compression, self._exchange)

    def _build_sync_ops(self, grad_list, get_opt_fn):
        self._vote = PreemptionVote()
        dtype = grad_list[0][0][0].dtype if grad_list[0] else tf.float32
        votes = []
        for device in self._builder.raw_devices:
            with tf.device(device):
                votes.append(self._vote.tensor(dtype))
        self.train_op, self._post_init_op = self._builder.build(grad_list, get_opt_fn, reduce_along=votes)
        self._vote.set_total(self._builder.reduced_along)
        return [_BroadcastEveryEpoch()] if self.BROADCAST_EVERY_EPOCH else []

    def _trainer_hooks(self):
        return super()._trainer_hooks() + [self._vote]

    def _accumulation_built(self, accumulate_op):
        super()._accumulation_built(accumulate_op)
        self._vote.skip_runs_of(accumulate_op)    # the vote travels with the update's all-reduce

    def _check_preemption(self):
        """SIGTERM on any worker stops every worker after the same step: its vote travels with
        the next step's gradients (:class:`PreemptionVote`), so every worker sees it in the same
        step and stops after it; the chief writes that step's checkpoint, every worker exits with
        status 143."""
        why = self._vote.due(self.sess, self._preemption.received, self.cluster.task_name, self._stop_request)
        if why is not None:
            self._stop_together(self.loop.global_step, why)

    def _session_device_filters(self):
        return self._builder.session_device_filters()

    def initialize(self, session_creator, session_init):
        # built last, once every variable (also those of callbacks) exists
        self._check = self._builder.build_variable_check()
        self._broadcast_op = self._builder.build_broadcast()
        self._schedule = tfv1.placeholder(tf.int64, [Schedule.VECTOR_LENGTH], name='schedule')
        self._schedule_received = self._builder.broadcast_tensor(self._schedule)
        super().initialize(session_creator, session_init)

    @property
    def _step_options(self):
        return self._run_options(self._STEP_KEY)

    def _start_together(self, schedule):
        digest, smallest, largest = self.sess.run(self._check, options=self._run_options(self._CHECK_KEY))
        if smallest != largest:
            raise RuntimeError("{}: the workers built different global variables (digests {} .. {}, this "
                               "worker's {}). Every worker must build the same graph: callbacks that "
                               "create variables must not be chief-only.".format(
                                   self.cluster.task_name, smallest, largest, digest))
        received = self.sess.run(self._schedule_received, feed_dict={self._schedule: schedule},
                                 options=self._run_options(self._START_KEY))
        self.broadcast_variables()
        return None if self.is_chief else received

    def broadcast_variables(self):
        """Copy the chief's global variables to every worker (and into the local replicas of
        each tower). All workers must call it together."""
        if self._broadcast_op is not None:
            self.sess.run(self._broadcast_op, options=self._run_options(self._BROADCAST_KEY))
        if self._post_init_op is not None:
            self.sess.run(self._post_init_op)
