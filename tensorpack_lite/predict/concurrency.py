"""MultiThreadAsyncPredictor: predictors serving tasks from worker threads, batching them."""

import queue
from concurrent.futures import Future

import numpy as np

from ..compat import tfv1
from ..utils.argtools import is_int
from ..utils.concurrency import ShareSessionThread, StoppableThread
from .base import AsyncPredictorBase, OnlinePredictor

__all__ = ['MultiThreadAsyncPredictor']


class _PredictorWorker(ShareSessionThread, StoppableThread):
    """Takes up to ``batch_size`` waiting tasks at a time (without waiting for more), stacks
    each input of their datapoints into a batch, runs its predictor once and gives each task
    its row of every output. A batch that fails is run again task by task."""

    def __init__(self, tasks, predictor, index, batch_size):
        super().__init__(name='PredictorWorkerThread-{}'.format(index), daemon=True)
        self._tasks = tasks
        self._predictor = predictor
        self._batch_size = batch_size

    def run(self):
        if self._predictor.sess is None:
            with self.default_sess():
                self._serve()
        else:
            self._serve()

    def _serve(self):
        while not self.stopped():
            tasks = self._next_tasks()
            if tasks is None:
                return
            self._run(tasks)

    def _next_tasks(self):
        first = self.queue_get_stoppable(self._tasks)
        if first is None:
            return None
        tasks = [first]
        while len(tasks) < self._batch_size:
            try:
                tasks.append(self._tasks.get_nowait())
            except queue.Empty:
                break
        return tasks

    def _run(self, tasks):
        tasks = [(dp, future) for dp, future in tasks if future.set_running_or_notify_cancel()]
        if not tasks:
            return
        try:
            results = self._predict([dp for dp, _ in tasks])
        except Exception as err:
            if len(tasks) == 1:
                tasks[0][1].set_exception(err)
                return
            # the error reaches only the tasks that cause it
            for dp, future in tasks:
                try:
                    result, = self._predict([dp])
                except Exception as task_err:
                    future.set_exception(task_err)
                else:
                    future.set_result(result)
            return
        for (_, future), result in zip(tasks, results):
            future.set_result(result)

    def _predict(self, datapoints):
        """The outputs of each datapoint, computed as one batch."""
        batch = [np.stack([np.asarray(dp[k]) for dp in datapoints]) for k in range(len(datapoints[0]))]
        outputs = self._predictor(*batch)
        return [[output[row] for output in outputs] for row in range(len(datapoints))]


class MultiThreadAsyncPredictor(AsyncPredictorBase):
    """Serves tasks with several :class:`OnlinePredictor` s, one worker thread each.

    A task is one datapoint without batch dimension; a worker takes up to ``batch_size``
    tasks that are waiting, stacks them into a batch for its predictor (whose inputs and
    outputs have a batch dimension) and gives each task its rows of the outputs. An error
    (e.g. a datapoint of the wrong shape) goes to the futures of the tasks that cause it.
    Tasks put before :meth:`start` wait for it.

    Example::

        predictors = [trainer.get_predictor(['state'], ['policy', 'value'], device=k)
                      for k in range(2)]
        async_pred = MultiThreadAsyncPredictor(predictors, batch_size=16)
        async_pred.start()
        future = async_pred.put_task([state], callback=lambda f: act(f.result()))
        policy, value = future.result()
    """

    def __init__(self, predictors, batch_size=5):
        """
        Args:
            predictors (list[OnlinePredictor]): the predictors, one per worker thread; those
                without a session run in the default session of the time :meth:`start` is
                called. ``return_input`` is not supported.
            batch_size (int): the largest batch a worker makes.
        """
        if not isinstance(predictors, (list, tuple)) or not predictors:
            raise ValueError("MultiThreadAsyncPredictor needs a non-empty list of OnlinePredictor, got "
                             "{!r}".format(predictors))
        for index, predictor in enumerate(predictors):
            if not isinstance(predictor, OnlinePredictor):
                raise TypeError("MultiThreadAsyncPredictor: predictors[{}] is not an OnlinePredictor: "
                                "{!r}".format(index, predictor))
            if predictor.return_input:
                raise ValueError("MultiThreadAsyncPredictor: predictors[{}] has return_input=True, which "
                                 "is not supported".format(index))
        if not is_int(batch_size) or batch_size < 1:
            raise ValueError("MultiThreadAsyncPredictor: batch_size must be a positive int, got {!r}".format(
                batch_size))
        self._num_inputs_per_task = predictors[0]._num_inputs()
        self._need_default_sess = any(p.sess is None for p in predictors)
        self.input_queue = queue.Queue(maxsize=len(predictors) * 100)
        self.threads = [_PredictorWorker(self.input_queue, predictor, index, batch_size)
                        for index, predictor in enumerate(predictors)]
        self._stopped = False

    def _num_inputs(self):
        return self._num_inputs_per_task

    def start(self):
        """Start the worker threads."""
        if self._need_default_sess and tfv1.get_default_session() is None:
            raise RuntimeError("MultiThreadAsyncPredictor: some predictors have no session; call start() "
                               "under `with sess.as_default():`")
        for thread in self.threads:
            thread.start()

    def put_task(self, dp, callback=None):
        """
        Args:
            dp (list): one datapoint: one array per input, without batch dimension.
            callback: called with the ``Future`` once it is done.

        Returns:
            concurrent.futures.Future: the outputs of the datapoint, one array per output.
        """
        if self._stopped:
            raise RuntimeError("MultiThreadAsyncPredictor: put_task() after stop()")
        if not isinstance(dp, (list, tuple)) or len(dp) != self._num_inputs_per_task:
            raise ValueError("MultiThreadAsyncPredictor: a task is a list of {} inputs, got {!r}".format(
                self._num_inputs_per_task, dp))
        future = Future()
        if callback is not None:
            future.add_done_callback(callback)
        self.input_queue.put((list(dp), future))
        return future

    def stop(self, timeout=10):
        """Stop the worker threads once their current batch is done, and cancel the tasks still
        waiting."""
        self._stopped = True
        for thread in self.threads:
            thread.stop()
        for thread in self.threads:
            if thread.is_alive():
                thread.join(timeout)
        while True:
            try:
                _, future = self.input_queue.get_nowait()
            except queue.Empty:
                break
            future.cancel()
