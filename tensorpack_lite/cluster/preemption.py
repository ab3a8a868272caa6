"""SIGTERM as a preemption notice: Slurm (``scancel``, a preempting job, the time limit),
Kubernetes and spot machines send SIGTERM, then SIGKILL a grace period later (Slurm's
``KillWait``, 30 s by default). While training runs, :class:`PreemptionNotice` takes the
signal instead of letting it end the process at once: the trainer ends the step it is in,
ends training as after Ctrl-C (the callbacks' ``after_train``: ``ModelSaver`` writes a
checkpoint) and exits with :data:`PREEMPTED_EXIT_CODE`.

Example (what ``Trainer.main_loop`` does)::

    with PreemptionNotice() as notice:
        for step in steps:
            notice.check()      # raises Preempted once SIGTERM came
            run_step()
"""

import os
import signal
import threading

from ..utils import logger

__all__ = ['Preempted', 'PreemptionNotice', 'PREEMPTED_EXIT_CODE']

PREEMPTED_EXIT_CODE = 128 + signal.SIGTERM
"""The exit status of a preempted training process: 143, as a process that SIGTERM ended."""


class Preempted(SystemExit):
    """Training stopped because the process received SIGTERM. A ``SystemExit`` with
    :data:`PREEMPTED_EXIT_CODE`: the program exits with that status (no traceback), and
    ``except Exception`` in user code does not swallow it."""

    def __init__(self, message):
        super().__init__(PREEMPTED_EXIT_CODE)
        self.message = message

    def __str__(self):
        return self.message

    @classmethod
    def together(cls, received_here, peer, step):
        """Every ``peer`` of a job (``'worker'``, ``'rank'``) stops after global step ``step``
        because one received SIGTERM: this one (``received_here``) or another."""
        cause = "{} {}".format('this' if received_here else 'another', peer)
        return cls("preempted: {} received SIGTERM; every {} stops after global step {}".format(
            cause, peer, step))


class PreemptionNotice:
    """Within the block, SIGTERM is recorded (:attr:`received`) instead of ending the process,
    and :meth:`check` raises :class:`Preempted`. Only in the main thread (elsewhere a signal
    handler cannot be set), and only when SIGTERM has its default action (a handler the
    program set itself is left alone); otherwise the block takes nothing and says why in one
    warning. The block should hold the end of training too: a second SIGTERM while it ends
    changes nothing (the grace period's SIGKILL is the bound). On leaving it, SIGTERM's action
    is restored. A process forked inside the block (a DataFlow worker, ``StartProcOrThread``)
    inherits the handler,
    which then ends it as SIGTERM's default action would.

    Args:
        reaction (str): what the process does about the signal, for the warning it logs.
    """

    def __init__(self, reaction="training stops after the current step"):
        self.reaction = reaction
        self.received = False
        self._previous = None
        self._pid = None

    def _on_sigterm(self, signum, frame):
        if os.getpid() != self._pid:    # a process forked while training runs: SIGTERM ends it
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)
            return
        if not self.received:
            logger.warn("Received SIGTERM (preemption): {}.".format(self.reaction))
        self.received = True

    def __enter__(self):
        thread = threading.current_thread()
        handler = signal.getsignal(signal.SIGTERM)
        if thread is not threading.main_thread():
            self._say_unhandled("this runs in thread {!r}, and Python runs signal handlers in the main "
                                "thread only".format(thread.name), "ends the process at once")
        elif handler not in (signal.SIG_DFL, None):
            self._say_unhandled("the program set SIGTERM's action itself ({!r}), which is left alone".format(
                handler), "does what that action does")
        else:
            self._pid = os.getpid()
            self._previous = signal.signal(signal.SIGTERM, self._on_sigterm)
        return self

    def _say_unhandled(self, why, outcome):
        logger.warn("SIGTERM (preemption) is not taken here, so it does not mean '{}': {}. A preemption "
                    "(Slurm, Kubernetes, a spot machine) {}, without a checkpoint of its own; run training "
                    "in the main thread with SIGTERM's default action to have one.".format(
                        self.reaction, why, outcome))

    def check(self):
        """Raise :class:`Preempted` if SIGTERM came."""
        if self.received:
            raise Preempted("preempted: the process received SIGTERM")

    def __exit__(self, *exc):
        if self._previous is not None:
            signal.signal(signal.SIGTERM, self._previous)
            self._previous = None
