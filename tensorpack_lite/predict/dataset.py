"""Run a model over every datapoint of a :class:`DataFlow`.

* :class:`SimpleDatasetPredictor`: one :class:`OfflinePredictor` in this process.
* :class:`MultiProcessDatasetPredictor`: ``nr_proc`` worker processes, each with its own
  predictor (e.g. one per GPU).

Example::

    predictor = SimpleDatasetPredictor(config, BatchData(test_data, 64))
    for logits, in predictor.get_result():
        ...
"""

import multiprocessing as mp
import os
import pickle
import queue
import sys
import traceback
from abc import ABCMeta, abstractmethod

from ..dataflow.base import DataFlow
from ..utils import logger
from ..utils.argtools import is_int
from ..utils.concurrency import enable_death_signal, start_proc_mask_signal
from ..utils.gpu import cuda_visible_devices
from ..utils.utils import change_env, get_tqdm
from .base import OfflinePredictor
from .config import PredictConfig

__all__ = ['DatasetPredictorBase', 'SimpleDatasetPredictor', 'MultiProcessDatasetPredictor']


def _dataset_size(dataset):
    try:
        return len(dataset)
    except (NotImplementedError, TypeError):
        return None


class DatasetPredictorBase(metaclass=ABCMeta):
    """Base class of predictors that run over a whole :class:`DataFlow`.

    Subclasses implement :meth:`get_result`.
    """

    def __init__(self, config, dataset):
        """
        Args:
            config (PredictConfig): the model to run; it is called with the components of
                each datapoint as its inputs (``input_names``, in order).
            dataset (DataFlow): the datapoints.
        """
        if not isinstance(dataset, DataFlow):
            raise TypeError("{}: dataset must be a DataFlow, got {!r}".format(
                type(self).__name__, dataset))
        self._check_config(config)
        self.config = config
        self.dataset = dataset
        self._reset_done = False

    def _check_config(self, config):
        if not isinstance(config, PredictConfig):
            raise TypeError("{}: config must be a PredictConfig, got {!r}".format(
                type(self).__name__, config))

    def _reset_dataset_once(self):
        if not self._reset_done:
            self.dataset.reset_state()
            self._reset_done = True

    @abstractmethod
    def get_result(self):
        """Yield the outputs (a list with one array per output name) for every datapoint;
        ``(datapoint, outputs)`` when ``config.return_input``."""

    def get_all_result(self):
        """The list of what :meth:`get_result` yields."""
        return list(self.get_result())


class SimpleDatasetPredictor(DatasetPredictorBase):
    """Runs one :class:`OfflinePredictor` over the dataset, in this process, in order, with
    a progress bar.

    Example::

        predictor = SimpleDatasetPredictor(PredictConfig(model=MyModel(), output_names=['prob'],
                                                         input_names=['image'],
                                                         session_init=SaverRestore(path)),
                                           BatchData(images_df, 100))
        probs = [prob for prob, in predictor.get_result()]
    """

    def __init__(self, config, dataset):
        super(SimpleDatasetPredictor, self).__init__(config, dataset)
        self.predictor = OfflinePredictor(config)

    def get_result(self):
        self._reset_dataset_once()
        with get_tqdm(total=_dataset_size(self.dataset)) as bar:
            for dp in self.dataset:
                yield self.predictor(*dp)
                bar.update()


# ----- multiple processes -------------------------------------------------------------------

def _config_recipe(config):
    """What a worker needs to rebuild ``config``: a picklable tuple (a factory stays as is).
    The TowerFunc is not pickled (it records the tensors of the towers it built)."""
    if not isinstance(config, PredictConfig):
        return ('factory', config)
    return ('config', dict(
        tower_func=config.tower_func.tower_fn, input_signature=config.input_signature,
        input_names=config.input_names, output_names=config.output_names,
        session_creator=config.session_creator, session_init=config.session_init,
        return_input=config.return_input, create_graph=config.create_graph))


def _config_from_recipe(recipe):
    kind, payload = recipe
    if kind == 'config':
        return PredictConfig(**payload)
    config = payload()
    if not isinstance(config, PredictConfig):
        raise TypeError("MultiProcessDatasetPredictor: the config factory {!r} returned {!r}, not "
                        "a PredictConfig".format(payload, config))
    return config


def _worker_main(index, recipe_bytes, tasks, results):
    """A worker process: serve tasks, then leave with ``os._exit`` once its messages are
    flushed (a normal interpreter exit spends seconds tearing TensorFlow down)."""
    enable_death_signal(_warn=False)   # do not outlive a killed parent
    code = 1
    try:
        _serve(index, recipe_bytes, tasks, results)
        code = 0
    finally:
        try:
            results.close()
            results.join_thread()
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def _serve(index, recipe_bytes, tasks, results):
    """Build a predictor, then answer ``(idx, datapoint)`` tasks with ``('result', idx,
    outputs)`` until a None task. A failure is reported and ends the worker. Messages are
    pickled here, so that an unpicklable one is an error, not a lost message."""
    try:
        predictor = OfflinePredictor(_config_from_recipe(pickle.loads(recipe_bytes)))
    except BaseException:
        results.put(_dumps(('init-error', index, traceback.format_exc())))
        return
    while True:
        task = tasks.get()
        if task is None:
            return
        idx, dp = pickle.loads(task)
        try:
            message = _dumps(('result', idx, predictor(*dp)))
        except BaseException:
            results.put(_dumps(('error', idx, traceback.format_exc())))
            return
        results.put(message)


def _dumps(obj):
    return pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)


class _WorkerDied(RuntimeError):
    pass


class MultiProcessDatasetPredictor(DatasetPredictorBase):
    """Runs the dataset through ``nr_proc`` worker processes, each building its own
    :class:`OfflinePredictor`.

    How it works: every call of :meth:`get_result` starts the workers (with the ``'spawn'``
    start method: a fresh interpreter, never a fork of a process that holds TensorFlow
    state), reads the dataset in this process and sends the datapoints to the workers (at most
    ``2 * nr_proc`` in flight), and yields the outputs. The workers end when the results are
    all in, and are terminated on every other exit (an error, a worker failure, the generator
    closed or garbage-collected early, Ctrl-C); a worker also dies with its parent.

    Restrictions (because of 'spawn'):

    * ``config`` is pickled to the workers, so what it holds (the model, or the tower
      function, the session creator and initializer) must be picklable and importable by
      module path: classes at the top level of a module, no lambdas, and no
      ``session_init`` that was already set up in a graph. When that is not possible, pass
      instead a picklable function without arguments that returns the PredictConfig; each
      worker calls it.
    * A script using it needs the ``if __name__ == '__main__':`` guard (the workers import
      the main module).
    * Each worker imports TensorFlow, which takes seconds: this pays off for long runs only.

    The dataset itself stays in this process (it need not be picklable); datapoints and
    outputs travel through pipes.

    Example::

        def make_config():
            return PredictConfig(model=MyModel(), input_names=['image'], output_names=['prob'],
                                 session_init=SaverRestore('train_log/model-1000'))

        if __name__ == '__main__':
            predictor = MultiProcessDatasetPredictor(make_config, BatchData(df, 64), nr_proc=2)
            probs = predictor.get_all_result()
    """

    def __init__(self, config, dataset, nr_proc, use_gpu=True, ordered=True):
        """
        Args:
            config (PredictConfig or callable): the model (see the restrictions above), or a
                picklable function without arguments returning it.
            dataset (DataFlow): the datapoints.
            nr_proc (int): the number of worker processes.
            use_gpu (bool): give worker ``i`` the ``i``-th GPU of ``CUDA_VISIBLE_DEVICES``
                (or GPU ``i`` when it is not set); otherwise hide every GPU from the workers.
            ordered (bool): yield the outputs in the order of the dataset; otherwise in the
                order they are computed.
        """
        super(MultiProcessDatasetPredictor, self).__init__(config, dataset)
        if not is_int(nr_proc) or nr_proc < 1:
            raise ValueError("MultiProcessDatasetPredictor: nr_proc must be a positive int, got "
                             "{!r}".format(nr_proc))
        self.nr_proc = nr_proc
        self.ordered = bool(ordered)
        self._gpus = self._assign_gpus(nr_proc, use_gpu)
        try:
            self._recipe = pickle.dumps(_config_recipe(config))
        except Exception as err:
            raise TypeError("MultiProcessDatasetPredictor: the config cannot be pickled to the "
                            "worker processes ({}: {}). Define the model and session_init "
                            "classes at the top level of a module, use no lambdas, or pass a "
                            "top-level function returning the PredictConfig.".format(
                                type(err).__name__, err)) from err
        if isinstance(config, PredictConfig) and config.return_input:
            logger.warn("MultiProcessDatasetPredictor: return_input sends every datapoint back "
                        "from the workers, which costs time.")
        self._workers = []

    def _check_config(self, config):
        if isinstance(config, PredictConfig):
            return
        if not callable(config):
            raise TypeError("MultiProcessDatasetPredictor: config must be a PredictConfig or a "
                            "function returning one, got {!r}".format(config))

    @staticmethod
    def _assign_gpus(nr_proc, use_gpu):
        if not use_gpu:
            return ['-1'] * nr_proc
        gpus = cuda_visible_devices()
        if gpus is None:
            return [str(i) for i in range(nr_proc)]
        if nr_proc > len(gpus):
            raise ValueError("MultiProcessDatasetPredictor: nr_proc={} workers with use_gpu=True "
                             "need as many GPUs, but CUDA_VISIBLE_DEVICES='{}' has {}; use "
                             "use_gpu=False or fewer processes.".format(
                                 nr_proc, os.environ['CUDA_VISIBLE_DEVICES'], len(gpus)))
        return gpus[:nr_proc]

    def _start_workers(self, tasks, results):
        ctx = mp.get_context('spawn')
        self._workers = [ctx.Process(target=_worker_main, args=(i, self._recipe, tasks, results),
                                     name='DatasetPredictWorker-{}'.format(i), daemon=True)
                         for i in range(self.nr_proc)]
        for worker, gpu in zip(self._workers, self._gpus):
            with change_env('CUDA_VISIBLE_DEVICES', gpu):
                start_proc_mask_signal(worker)
        logger.info("MultiProcessDatasetPredictor: started {} workers ({}).".format(
            self.nr_proc, 'CPU' if self._gpus[0] == '-1' else 'GPUs ' + ','.join(self._gpus)))

    def _receive(self, results):
        """The next message of a worker; raises when a worker died without a word."""
        while True:
            try:
                return pickle.loads(results.get(timeout=0.5))
            except queue.Empty:
                pass
            dead = [w for w in self._workers if not w.is_alive()]
            if dead:
                try:   # its last message may still be on the way
                    return pickle.loads(results.get(timeout=0.5))
                except queue.Empty:
                    w = dead[0]
                    raise _WorkerDied("MultiProcessDatasetPredictor: worker {} (pid {}) died with "
                                      "exit code {} before returning its results.".format(
                                          w.name, w.pid, w.exitcode)) from None

    def _stop_workers(self, graceful, tasks, results):
        workers, self._workers = self._workers, []
        if graceful:
            for _ in workers:
                tasks.put(None)
            for w in workers:
                w.join(timeout=10)
        for w in workers:
            if w.is_alive():
                w.terminate()
                w.join(timeout=5)
            if w.is_alive():
                w.kill()
                w.join()
        for q in (tasks, results):
            q.cancel_join_thread()  # unread items must not block this process
            q.close()

    def get_result(self):
        """Start the workers and yield their outputs; they are stopped before this returns,
        raises, or is closed. A failure in a worker raises RuntimeError with its traceback."""
        if self._workers:
            raise RuntimeError("MultiProcessDatasetPredictor: get_result() is already running; "
                               "finish or close the previous generator first.")
        self._reset_dataset_once()
        ctx = mp.get_context('spawn')
        tasks, results = ctx.Queue(), ctx.Queue()
        finished = False
        datapoints = iter(self.dataset)
        next_idx, in_flight, exhausted = 0, 0, False
        pending, next_out = {}, 0
        try:
            self._start_workers(tasks, results)
            with get_tqdm(total=_dataset_size(self.dataset)) as bar:
                while True:
                    while not exhausted and in_flight < 2 * self.nr_proc:
                        try:
                            dp = next(datapoints)
                        except StopIteration:
                            exhausted = True
                            break
                        try:
                            task = _dumps((next_idx, dp))
                        except Exception as err:
                            raise TypeError("MultiProcessDatasetPredictor: datapoint {} cannot be "
                                            "pickled to the workers: {}".format(next_idx, err)) from err
                        tasks.put(task)
                        next_idx += 1
                        in_flight += 1
                    if in_flight == 0:
                        break
                    kind, idx, payload = self._receive(results)
                    if kind == 'init-error':
                        raise RuntimeError("MultiProcessDatasetPredictor: worker {} failed to build "
                                           "its predictor:\n{}".format(idx, payload))
                    if kind == 'error':
                        raise RuntimeError("MultiProcessDatasetPredictor: prediction failed on "
                                           "datapoint {}:\n{}".format(idx, payload))
                    in_flight -= 1
                    if not self.ordered:
                        bar.update()
                        yield payload
                        continue
                    pending[idx] = payload
                    while next_out in pending:
                        bar.update()
                        yield pending.pop(next_out)
                        next_out += 1
            finished = True
        finally:
            self._stop_workers(finished, tasks, results)
