"""Callbacks that run background processes or threads alongside training."""

import multiprocessing as mp

from ..loop.callback import Callback
from ..utils import logger
from ..utils.concurrency import start_proc_mask_signal

__all__ = ['StartProcOrThread']


class StartProcOrThread(Callback):
    """Starts processes or threads (anything with ``start()``) right before training and,
    with ``stop_at_last``, stops them when training ends, however it ends.

    Stopping means ``stop()`` for objects that have it (e.g. a ``StoppableThread``), else
    ``terminate()`` for processes; each is then joined for a few seconds. A plain thread
    without ``stop()`` cannot be stopped: it is left running, with a warning.
    Processes are started with SIGINT ignored, so that Ctrl-C reaches the trainer only.

    Example::

        feeder = multiprocessing.Process(target=produce_data, daemon=True)
        trainer.train_with_defaults(callbacks=[StartProcOrThread(feeder)], ...)
    """

    _chief_only = False

    join_timeout = 5.0
    """Seconds to wait for each process or thread to end after stopping it (a process still
    alive then is killed)."""

    def __init__(self, startable, stop_at_last=True):
        """
        Args:
            startable: a process, a thread or any object with ``start()``, or a list of them.
            stop_at_last (bool): stop them after training.
        """
        if not isinstance(startable, (list, tuple)):
            startable = [startable]
        for index, obj in enumerate(startable):
            if not callable(getattr(obj, 'start', None)):
                raise TypeError("StartProcOrThread: item {} ({!r}) has no start() method".format(
                    index, obj))
        self._procs_threads = list(startable)
        self._stop_at_last = bool(stop_at_last)

    @staticmethod
    def _name(obj):
        return getattr(obj, 'name', None) or type(obj).__name__

    def _before_train(self):
        logger.info("Starting {} ...".format(', '.join(self._name(k) for k in self._procs_threads)))
        procs = [k for k in self._procs_threads if isinstance(k, mp.process.BaseProcess)]
        start_proc_mask_signal(procs)
        for k in self._procs_threads:
            if not isinstance(k, mp.process.BaseProcess):
                k.start()

    def _after_train(self):
        if not self._stop_at_last:
            return
        for k in self._procs_threads:
            is_alive = getattr(k, 'is_alive', None)
            if is_alive is not None and not is_alive():
                continue
            name = self._name(k)
            if callable(getattr(k, 'stop', None)):
                logger.info("Stopping {} ...".format(name))
                k.stop()
            elif isinstance(k, mp.process.BaseProcess):
                logger.info("Terminating {} ...".format(name))
                k.terminate()
            else:
                logger.warn("StartProcOrThread: cannot stop {}, which has neither stop() nor "
                            "terminate(); it keeps running.".format(name))
                continue
            if callable(getattr(k, 'join', None)):
                k.join(self.join_timeout)
                if is_alive is not None and is_alive():
                    self._still_alive(k, name)

    def _still_alive(self, k, name):
        """``k`` did not end within :attr:`join_timeout` of being stopped: a process is killed
        (SIGKILL: one that ignores SIGTERM, or a forked copy stuck on a lock another thread held
        at the fork, would otherwise outlive training); a thread cannot be, and is left."""
        if isinstance(k, mp.process.BaseProcess):
            logger.error("StartProcOrThread: {} is still alive {} sec after SIGTERM: killed with "
                         "SIGKILL.".format(name, self.join_timeout))
            k.kill()
            k.join(self.join_timeout)
        else:
            logger.error("StartProcOrThread: {} is still alive {} sec after being "
                         "stopped.".format(name, self.join_timeout))
