"""The multi-process protocol on TensorFlow's distributed runtime (``tf.compat.v1.train.Server``,
gRPC): what the collective and parameter-server trainers agree through. A worker's session on
its server, watched tasks (a lost one is named within seconds, :class:`LostTaskError`), a
bound on every step, the chief's finish barrier at which the workers end together, and, for a
parameter server, serving until the workers finish.
"""

import os
import sys
import threading
import time

import numpy as np

from ..cluster.config import TaskWatchdog
from ..cluster.preemption import Preempted, PreemptionNotice
from ..compat import tf, tfv1
from ..loop.callback import Callback
from ..loop.state import Schedule
from ..multiprocess.server import FinishBarrier, build_worker_done_op, serve_until_workers_finish
from ..multiprocess.stop_vote import BarrierStopVote
from ..tfutils.distributed import DistributedSessionCreator, cluster_of_server
from ..tfutils.sesscreate import NewSessionCreator
from ..utils import logger
from ..utils.concurrency import bound_exit, run_with_timeout
from .protocol import MultiProcessProtocol

__all__ = ['TFRuntimeProtocol', 'FinishTogether', 'StopWatchingAfterLastStep']


class FinishTogether(Callback):
    """Registered after the user's callbacks. When this worker ended where every worker ends
    (it ran the whole schedule, or stopped after the step the workers agreed on when one was
    preempted), it meets the other workers at the protocol's :class:`FinishBarrier` (none
    leaves while another still trains or saves); then, unless training failed, it tells the
    parameter servers that it is done (they exit once every worker is)."""

    _chief_only = False

    def __init__(self, protocol, done_op):
        self._protocol = protocol
        self._done_op = done_op

    def _after_train(self):
        protocol = self._protocol
        if protocol.training_failed:
            return
        if protocol.ended_together:
            protocol.finish_barrier.finish()
        if self._done_op is None:
            return
        try:
            self.trainer.sess.run(self._done_op, options=tfv1.RunOptions(timeout_in_ms=10000))
        except tf.errors.OpError as err:
            logger.warn("Could not tell the parameter servers that this worker finished: {}".format(
                err.message.splitlines()[0]))


class StopWatchingAfterLastStep(tfv1.train.SessionRunHook):
    """Once the last training step has run, the other tasks may end before this one (their
    part of every step is done): the protocol stops watching them, before the callbacks act on
    that step (which may take a while), so that a peer's normal end is not taken for a loss,
    and it notes that this worker ran the whole schedule (see :class:`FinishTogether`)."""

    def __init__(self, protocol, loop):
        self._protocol = protocol
        self._loop = loop

    def after_run(self, run_context, run_values):
        if self._loop.is_last_epoch and self._loop.is_last_step_of_epoch:
            self._protocol.stop_watching()
            self._protocol.ended_together = True


class TFRuntimeProtocol(MultiProcessProtocol):
    """The protocol of a worker (or parameter server) of a cluster of TensorFlow servers.

    The bounds are the trainer's (``STARTUP_TIMEOUT``, ``STEP_TIMEOUT``, ``PROBE_INTERVAL``,
    ``PROBE_MISSES``, ``CLOSE_TIMEOUT``, ``FINISH_TIMEOUT``, ``ABORT_TIMEOUT``, ``EXIT_AFTER_LOSS_TIMEOUT``,
    ``LOSS_CONFIRM_TIMEOUT``: see ``DistributedTrainerBase``), read when they are used.

    Args:
        trainer: the trainer that composes it (its bounds, session and loop).
        server (tf.compat.v1.train.Server): this process's server.
        start_exchange (callable): ``schedule`` (int64 vector) -> the chief's schedule vector
            on the other workers (None on the chief): the trainer's start-up exchange, run in
            its session (the chief's variables and schedule).

    Attributes:
        cluster (ClusterConfig): the cluster and this task.
        device_filters (list): the tasks whose devices the session uses (None: the parameter
            servers and this worker).
        abort_op: the parameter-server trainers' op that ends the steps of every worker when a
            task is lost (None: the session is closed instead).
        broadcast_key (int): the collective graph key of the broadcast (0: none).
    """

    KIND = 'worker'

    def __init__(self, trainer, server, start_exchange):
        cluster = cluster_of_server(server)
        super().__init__(cluster.task_index, cluster.num_worker, cluster.task_name, cluster.is_chief)
        self.server, self.cluster = server, cluster
        self._trainer = trainer
        self._start_exchange = start_exchange
        self.device_filters = None
        self.abort_op = None
        self.broadcast_key = 0
        self.finish_barrier = None
        self.training_failed = None
        self.ended_together = False
        self._watchdog = None
        self._finish_together = None
        self._loop_ended = threading.Event()

    def serve(self):
        """What a ps task does: serve the variables until every worker has finished, then
        exit the process (code 0; an error when the workers were lost; 143 after SIGTERM,
        which does not stop the serving: the workers still need the variables to stop
        together and save)."""
        logger.info("{} serves; end it with `kill {}` if needed.".format(self.cluster.task_name, os.getpid()))
        with PreemptionNotice("serving until the workers have stopped and saved") as notice:
            serve_until_workers_finish(self.server, startup_timeout=self._trainer.STARTUP_TIMEOUT)
        if notice.received:
            raise Preempted("preempted: {} received SIGTERM and served until the workers finished".format(
                self.cluster.task_name))
        sys.exit(0)

    def run_options(self, collective_graph_key=0):
        """The ``RunOptions`` of a run that talks to other tasks: bounded by ``STEP_TIMEOUT``,
        with ``collective_graph_key`` (0: none)."""
        options = tfv1.RunOptions(timeout_in_ms=int(self._trainer.STEP_TIMEOUT * 1000))
        if collective_graph_key:
            options.experimental.collective_graph_key = collective_graph_key
        return options

    def _broadcast_options(self):
        return self.run_options(self.broadcast_key)

    # ----- graph -------------------------------------------------------------------------------

    def build_done_op(self):
        """Build the op by which this worker tells the parameter servers that it is done
        (with :class:`FinishTogether`, registered after the user's callbacks)."""
        self._finish_together = FinishTogether(self, build_worker_done_op(self.cluster))

    def callbacks_at_end(self):
        return [self._finish_together]

    def hooks(self):
        return [StopWatchingAfterLastStep(self, self._trainer.loop)] + super().hooks()

    # ----- start -------------------------------------------------------------------------------

    def session_creator(self, session_creator):
        """The session on this worker's server, once every task is up (the chief initializes the
        shared variables and runs ``session_init``); its config comes from the server."""
        if not isinstance(session_creator, NewSessionCreator) or session_creator.user_provided_config:
            raise ValueError("{}: a session creator or session config cannot be given for distributed "
                             "training; pass the config to create_server() instead.".format(
                                 type(self._trainer).__name__))
        startup = self._trainer.STARTUP_TIMEOUT
        return DistributedSessionCreator(self.server, startup_timeout=startup, ready_timeout=startup,
                                         device_filters=self.device_filters)

    def session_created(self, sess):
        """Meet at the chief's finish barrier, then start watching the other tasks. Without a
        vote in the graph, the workers agree to stop there (:class:`BarrierStopVote`)."""
        self.finish_barrier = FinishBarrier(self.server, timeout=self._trainer.FINISH_TIMEOUT)
        self.finish_barrier.connect()
        if self.is_chief:
            self.finish_barrier.prepare()
        if self.vote is None:
            self.vote = BarrierStopVote(self.finish_barrier, self._trainer.accumulate)
        self._watchdog = TaskWatchdog(self.cluster, self.cluster.other_tasks(), self._on_lost,
                                      interval=self._trainer.PROBE_INTERVAL,
                                      misses=self._trainer.PROBE_MISSES)
        self._watchdog.start()

    def _exchange_schedule(self, sess, mine):
        try:
            with sess.as_default():
                received = self._start_exchange(np.asarray(mine.as_vector(), np.int64))
        except Exception as err:
            self.stop_watching()
            sess.close()
            explained = self.explain(err) if isinstance(err, tf.errors.OpError) else err
            if explained is err:
                raise
            raise explained from err
        return mine if received is None else Schedule.from_vector(received)

    # ----- a lost task -------------------------------------------------------------------------

    def _on_lost(self, tasks):
        """The watchdog found ``tasks`` lost: end what may be waiting for them. The
        parameter-server trainers' abort op closes the step queues on the parameter servers
        (the surviving workers' steps end too). When there is none, or it cannot run (a
        parameter server is lost, or this worker is cut off), the session is closed, which
        cancels the running step (a peer that is gone but was never reset, e.g. behind a cut
        link, would hold a collective op until the connection times out, minutes later). What
        closing does not cancel (a checkpoint save reading the variables from a parameter
        server behind a cut link) ends with the process: :meth:`_exit_stuck`."""
        logger.error("{}: lost {}.".format(self.cluster.task_name,
                                           ', '.join(self.cluster.describe(*t) for t in tasks)))
        if self.abort_op is None or not self._run_abort_op():
            threading.Thread(target=self._trainer.sess.close, name='cancel-step', daemon=True).start()
        if not self._loop_ended.wait(self._trainer.EXIT_AFTER_LOSS_TIMEOUT):
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
                         type(error).__name__, error, self._trainer.EXIT_AFTER_LOSS_TIMEOUT))
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)

    def _run_abort_op(self):
        """Run the abort op; whether it ran within ``ABORT_TIMEOUT``. Its first run registers
        it with the parameter servers, which no run timeout bounds (behind a cut link it waits
        for ever): it runs in a thread of its own, left behind if it does not return."""
        timeout = self._trainer.ABORT_TIMEOUT
        options = tfv1.RunOptions(timeout_in_ms=int(timeout * 1000))
        try:
            return run_with_timeout(lambda: self._trainer.sess.run(self.abort_op, options=options),
                                    timeout, 'abort-step')
        except tf.errors.OpError:
            return False      # the queues are out of reach (a parameter server is lost, or this worker)

    def lost_tasks(self):
        """The other tasks known to be lost (by the watchdog) or not accepting connections now."""
        return (self._watchdog.lost if self._watchdog is not None else []) or self.cluster.unreachable()

    def explain(self, err):
        """A :class:`LostTaskError` when a task is lost (after a connection error, the lost task
        is looked for during ``LOSS_CONFIRM_TIMEOUT``: a process being killed may still hold its
        port for a moment), a step past ``STEP_TIMEOUT`` said so, else ``err``."""
        lost = self.lost_tasks()
        if not lost and isinstance(err, (tf.errors.UnavailableError, tf.errors.AbortedError)):
            deadline = time.monotonic() + self._trainer.LOSS_CONFIRM_TIMEOUT
            while not lost and time.monotonic() < deadline:
                time.sleep(0.2)
                lost = self.lost_tasks()
        if lost:
            return self.cluster.lost_task_error(lost, err)
        if isinstance(err, tf.errors.DeadlineExceededError):
            return RuntimeError("{}: a step took longer than {:g} s (STEP_TIMEOUT) although every task "
                                "answers: is a task stuck? {}".format(
                                    self.cluster.task_name, self._trainer.STEP_TIMEOUT,
                                    err.message.splitlines()[0]))
        return err

    def stop_watching(self):
        """Stop watching the other tasks (their end is no longer a loss)."""
        if self._watchdog is not None:
            self._watchdog.stop()

    # ----- end ---------------------------------------------------------------------------------

    def _stopping_together(self):
        self.stop_watching()       # the others end now too: that is no loss
        self.ended_together = True

    def ending(self, failure):
        self._loop_ended.set()
        preempted = failure is not None and isinstance(failure.error, Preempted)
        self.training_failed = failure is not None and not (preempted and self.ended_together)
        self.stop_watching()

    def close(self):
        super().close()
        if self.finish_barrier is not None:
            self._close_finish_barrier()

    def _close_finish_barrier(self):
        """Close the barrier's session to the chief within ``CLOSE_TIMEOUT``: a session that ran
        on a chief that is gone waits for it when it closes (then it is left behind)."""
        timeout = self._trainer.CLOSE_TIMEOUT
        if not run_with_timeout(self.finish_barrier.close, timeout, 'close-finish-barrier'):
            logger.warn("The session to the chief's finish barrier did not close within {:g} s "
                        "(CLOSE_TIMEOUT){}. Moving on without it.".format(timeout, self.close_wait_reason()))
            bound_exit(self._trainer.EXIT_TIMEOUT)

    def close_wait_reason(self):
        lost = self.lost_tasks()
        if not lost:
            return ""
        return ": it waits for the lost {}".format(', '.join(self.cluster.describe(*t) for t in lost))
