"""What the parallel DataFlows share: closing their workers (:class:`Closable`), and for those
with worker processes, starting once, failing for good and watching idle workers
(:class:`ParallelBase`)."""

import contextlib
import itertools
import multiprocessing.util
import traceback

from ..utils import logger
from .base import DataFlow, DataFlowReentrantGuard
from .idle_watch import IdleWatch
from .workers import DataFlowWorkerError

__all__ = ['Closable', 'ParallelBase', 'thread_error', 'len_or_minus_one']


class Closable(object):
    """A parallel DataFlow whose workers, once started, are ended by a finalizer."""

    _finalizer = None

    def close(self):
        """Stop the workers and release what they use (idempotent). Also happens
        automatically when the dataflow is garbage-collected or the program exits."""
        if self._finalizer is not None:
            self._finalizer()


def thread_error(name, err):
    """The :class:`DataFlowWorkerError` for ``err`` raised in the thread ``name``."""
    error = DataFlowWorkerError("{} raised {}: {}\n--- traceback in the thread ---\n{}".format(
        name, type(err).__name__, err, ''.join(traceback.format_exception(err))))
    error.__cause__ = err
    return error


class ParallelBase(Closable, DataFlow):
    """What the process runners share: reset once, fail for good after a worker failure,
    release everything (workers, sockets, ipc directory) on :meth:`close`, at garbage
    collection or at exit, and report workers that leave the parent waiting.

    Example::

        df = MultiProcessRunnerZMQ(ds, num_proc=4)
        df.idle_timeout = 600   # fail if the workers send nothing for 10 minutes
    """

    idle_warning = 60.0
    """Seconds of waiting with nothing arriving from the workers after which a warning names
    them (index, pid, how long each has been silent); repeated every such period. None:
    no warning."""

    idle_timeout = None
    """Seconds of waiting with nothing arriving after which reading raises
    :class:`DataFlowWorkerError` naming the silent workers (and closes the dataflow). None:
    wait forever (as tensorpack)."""

    opencv_threads = 1
    """Threads OpenCV may use in each worker process (``cv2.setNumThreads`` when the worker
    starts, if OpenCV is imported by then). 1 (default): the workers are the parallelism,
    and OpenCV's own threads in every worker would only compete for the same cores. None:
    leave OpenCV's setting alone."""

    def __init__(self):
        self._reset_done = False
        self._failure = None
        self._guard = DataFlowReentrantGuard(type(self).__name__)

    @contextlib.contextmanager
    def _starting(self):
        """Around the start of the workers, in :meth:`reset_state`: once only; if anything
        fails, what was made so far (registered with :meth:`_on_close`) is released."""
        if self._reset_done:
            raise RuntimeError("{}.reset_state() was called twice: it starts the worker "
                               "processes, so call it once".format(type(self).__name__))
        self._reset_done = True
        self._cleanups = []
        self._finalizer = multiprocessing.util.Finalize(self, _run_all, args=(self._cleanups,),
                                                        exitpriority=10)
        try:
            yield
        except BaseException:
            self.close()
            raise

    def _on_close(self, action):
        """Run ``action`` (a callable not holding ``self``) once: at :meth:`close`, when this
        object is garbage-collected, or when the process exits -- also a process started by
        ``multiprocessing``, which would otherwise wait for our workers before exiting.
        Actions run in the reverse order of registration (the last made is released first)."""
        self._cleanups.insert(0, action)

    def _idle_watch(self, workers, watched=None):
        return IdleWatch(type(self).__name__, workers, self.idle_warning, self.idle_timeout, watched)

    def _from_workers(self, get):
        """``get()``; after a worker failure (this one or an earlier one), everything is
        closed and the failure raised, now and at every later call."""
        if not self._reset_done:
            raise RuntimeError("{}: call reset_state() before iterating".format(type(self).__name__))
        if self._failure is None and not self._finalizer.still_active():
            raise RuntimeError("{} was closed".format(type(self).__name__))
        if self._failure is None:
            try:
                return get()
            except DataFlowWorkerError as err:
                self._failure = err
                self.close()
        raise self._failure

    def _iterate(self, get_one, size):
        with self._guard:
            for k in itertools.count():
                if size > 0 and k >= size:
                    return
                yield self._from_workers(get_one)


def _run_all(actions):
    for action in actions:
        try:
            action()
        except Exception:
            logger.exception("Error while cleaning up a parallel DataFlow:")


def len_or_minus_one(ds):
    """``len(ds)``, or -1 when ``ds`` has no length."""
    try:
        return len(ds)
    except NotImplementedError:
        return -1
