"""Validation during training: run :class:`~tensorpack_lite.callbacks.inference.Inferencer`\\ s
over a whole data set every time the callback triggers (after every epoch by default).

Example::

    callbacks = [
        InferenceRunner(BatchData(test_df, 64, remainder=True),
                        [ScalarStats('cost'), ClassificationError('incorrect_vector')]),
        # or every 5 epochs:
        # PeriodicTrigger(InferenceRunner(...), every_k_epochs=5),
    ]
"""

import contextlib

from ..compat import tf, tfv1
from ..dataflow.base import DataFlow
from ..graph_builder.devices import check_session_devices, interpret_towers, tower_device
from ..input_source.input_source import FeedInput, QueueInput, StagingInput
from ..input_source.input_source_base import InputSource
from ..loop.callback import Callback, name_culprit
from ..loop.dispatch import Callbacks
from ..session.hooked_session import HookedSession
from ..tfutils.inference_tower import build_predict_tower
from ..tfutils.tower_func import TowerFunc
from ..utils import logger
from ..utils.argtools import is_int
from ..utils.utils import get_tqdm
from .inference import Inferencer
from .weight_average import AveragesApplied

__all__ = ['InferenceRunnerBase', 'InferenceRunner', 'DataParallelInferenceRunner']


class _InferencerToHook(tfv1.train.SessionRunHook):
    """Fetches an inferencer's tensors with every run and gives it their values."""

    def __init__(self, inf, fetches):
        self._inf = inf
        self._fetches = fetches

    def before_run(self, _):
        return tfv1.train.SessionRunArgs(fetches=self._fetches)

    def after_run(self, _, run_values):
        try:
            self._inf.on_fetches(run_values.results)
        except Exception as err:
            name_culprit(err, self._inf, 'on_fetches')
            raise


class InferenceRunnerBase(Callback):
    """Runs inferencers over one pass of an InputSource each time it is triggered, and puts
    the statistics they return into ``trainer.monitors``.

    A pass is ``input.size()`` runs of a hooked session of the runner's own, whose hooks
    are the inferencers' fetches and the InputSource's callbacks (e.g. the one feeding
    placeholders); the input is reset before every pass. In ``setup_graph`` the input is set
    up with the signature of the tower function (``tower_func``, else the trainer's); then
    subclasses build their towers in :meth:`_build_towers`, which registers one hook per
    inferencer (:meth:`register_hook`).

    Args:
        input (InputSource): the data; its ``size()`` (steps in one pass) must be known.
        infs (Inferencer or list[Inferencer]): what to compute.
        averaged (bool): evaluate the weight averages of a
            :class:`~tensorpack_lite.callbacks.WeightAverage` callback: they are put into the
            variables for the pass, then the weights back, exactly.
    """

    _tower_func = None

    def __init__(self, input, infs, averaged=False):
        if not isinstance(input, InputSource):
            raise TypeError("{} takes an InputSource, got {!r}".format(type(self).__name__, input))
        self._input_source = input
        infs = list(infs) if isinstance(infs, (list, tuple)) else [infs]
        if not infs:
            raise ValueError("{} needs at least one Inferencer".format(type(self).__name__))
        for index, inf in enumerate(infs):
            if not isinstance(inf, Inferencer):
                raise TypeError("{}: infs[{}] is not an Inferencer: {!r}".format(
                    type(self).__name__, index, inf))
            inf._runner = self  # marks it as driven by a runner (see Inferencer.setup_graph)
        self.infs = infs
        self._averaged = bool(averaged)
        self._averages = None
        self._size = self._get_size(input)
        self._hooks = []
        self._input_callbacks = None
        self._hooked_sess = None

    @classmethod
    def _check_tower_args(cls, tower_name, tower_func):
        if not isinstance(tower_name, str) or not tower_name:
            raise ValueError("{}: tower_name must be a non-empty str, got {!r}".format(
                cls.__name__, tower_name))
        if tower_func is not None and not isinstance(tower_func, TowerFunc):
            raise TypeError("{}: tower_func must be a TowerFunc, got {!r}".format(cls.__name__, tower_func))

    def _get_size(self, input):
        owner = type(self).__name__
        what = type(input.ds).__name__ if isinstance(input, FeedInput) else type(input).__name__
        try:
            size = input.size()
        except NotImplementedError:
            raise ValueError(
                "{} needs to know how many steps make one pass over its input, but the size of {} "
                "is not known; give the DataFlow a __len__ (or the InputSource a size)".format(
                    owner, what)) from None
        size = int(size)
        if size <= 0:
            raise ValueError("{}: its input ({}) is empty (size {})".format(owner, what, size))
        return size

    def register_hook(self, hook):
        """Add a ``tf.compat.v1.train.SessionRunHook`` to the inference session (before
        training starts)."""
        if self._hooked_sess is not None:
            raise RuntimeError("{}.register_hook() must be called before training".format(self))
        self._hooks.append(hook)

    def _setup_graph(self):
        tower_func = self._tower_func
        if tower_func is None:
            tower_func = getattr(self.trainer, 'tower_func', None)
            if tower_func is None:
                raise RuntimeError("{} needs a tower function: the trainer {} has no tower_func (use a "
                                   "TowerTrainer or give tower_func=)".format(
                                       type(self).__name__, type(self.trainer).__name__))
        if self._input_source.setup_done():
            raise RuntimeError("{}: its InputSource {} is already set up (an InputSource feeds one "
                               "trainer or runner)".format(type(self).__name__,
                                                           type(self._input_source).__name__))
        input_callbacks = self._input_source.setup(tower_func.input_signature)
        self._build_towers(tower_func)
        for inf in self.infs:
            inf.setup_graph(self.trainer)
        # The input's callbacks run in this runner's own session (only their setup_graph,
        # before_train, before_run/after_run and after_train are used).
        self._input_callbacks = Callbacks(input_callbacks)
        self._input_callbacks.setup_graph(self.trainer)
        for hook in self._input_callbacks.get_hooks():
            self._register_input_hook(hook)

    def _build_towers(self, tower_func):
        """Build the inference tower(s) on the input's tensors and register the inferencers'
        hooks."""
        raise NotImplementedError("{} must implement _build_towers()".format(type(self).__name__))

    def _register_input_hook(self, hook):
        self.register_hook(hook)

    def _lookup_fetches(self, inf, handle):
        """The tensors ``inf`` fetches, in the tower ``handle``."""
        tensors = []
        for name in inf.get_fetches():
            try:
                tensors.append(handle.get_tensor(name))
            except KeyError:
                tower = handle.ns_name
                raise KeyError("{}: {} fetches tensor '{}', which is not in the inference tower '{}' (the "
                               "graph has no '{}/{}')".format(
                                   type(self).__name__, inf, name, tower, tower, name)) from None
        return tensors

    def _before_train(self):
        self._hooked_sess = HookedSession(self.trainer.sess, self._hooks)
        if self._input_callbacks is not None:
            self._input_callbacks.before_train()
        for inf in self.infs:
            inf.before_train()
        if self._averaged:
            self._averages = AveragesApplied(self.trainer, str(self))
        logger.info("[{}] Will run {} steps per inference pass{}.".format(
            self, self._size, " with the averaged weights" if self._averaged else ""))

    def _trigger(self):
        for inf in self.infs:
            inf.before_inference()
        self._reset_input()
        with self._averages.applied() if self._averages is not None else contextlib.nullcontext():
            self._run_pass()
        self._report()

    def _reset_input(self):
        """Make the input start a new pass."""
        self._input_source.reset_state()

    def _report(self):
        """Put the statistics of every inferencer into the trainer's monitors."""
        for inf in self.infs:
            try:
                stats = inf.after_inference()
            except Exception as err:
                name_culprit(err, inf, 'after_inference')
                raise
            for name, value in stats.items():
                self.trainer.monitors.put_scalar(name, value)

    def _run_pass(self):
        self._steps_done = 0
        try:
            with get_tqdm(total=self._size, desc=str(self)) as pbar:
                self._run_steps(pbar)
        except (StopIteration, tf.errors.OutOfRangeError, tf.errors.CancelledError) as err:
            # Not left to propagate: the trainer takes OutOfRangeError as the end of training.
            reason = type(err).__name__ + (': {}'.format(err) if str(err) else '')
            raise RuntimeError(
                "{}: the input ran out after {} of the {} steps of a pass ({}); the size of its "
                "input is wrong, or the input cannot be restarted by reset_state()".format(
                    self, self._steps_done, self._size, reason)) from err

    def _run_steps(self, pbar):
        """The runs of one pass; ``self._steps_done`` counts the datapoints consumed."""
        for _ in range(self._size):
            self._hooked_sess.run(fetches=[])
            self._steps_done += 1
            pbar.update()

    def _stat_names(self):
        names = [inf.stat_names() for inf in self.infs]
        if any(n is None for n in names):
            return None  # an inferencer that cannot tell
        return [name for inf_names in names for name in inf_names]

    def _after_train(self):
        try:
            for inf in self.infs:
                inf.after_train()
        finally:
            if self._input_callbacks is not None:
                self._input_callbacks.after_train()


class InferenceRunner(InferenceRunnerBase):
    """Validation on a DataFlow or an InputSource, through an inference tower of its own.

    In ``setup_graph`` it builds the tower ``tower_name`` with the trainer's tower function
    (or ``tower_func``), in a :class:`PredictTowerContext` that reuses the training
    variables, on the input's tensors; each inferencer's tensors are looked up by name in
    that tower. Each trigger (after every epoch; wrap it in a ``PeriodicTrigger`` for other
    schedules) runs one pass over the input.

    Args:
        input (DataFlow or InputSource): a DataFlow is fed through
            ``FeedInput(ds, infinite=False)``. Its size gives the steps of a pass. Not a
            StagingInput.
        infs (Inferencer or list[Inferencer]): what to compute.
        tower_name (str): the name scope of the tower; use a different one for every
            InferenceRunner of the trainer.
        tower_func (TowerFunc): builds the tower; ``trainer.tower_func`` by default.
        device (int): GPU to build the tower on; -1 for the CPU.
        averaged (bool): evaluate the weight averages of a
            :class:`~tensorpack_lite.callbacks.WeightAverage` callback (docs/callbacks.md,
            "Weight averaging").

    Example::

        InferenceRunner(BatchData(test_df, 128, remainder=True),
                        [ScalarStats('cost'), ClassificationError('incorrect_vector')])
    """

    def __init__(self, input, infs, tower_name='InferenceTower', tower_func=None, device=0, averaged=False):
        if isinstance(input, DataFlow):
            input = FeedInput(input, infinite=False)
        elif not isinstance(input, InputSource):
            raise TypeError("InferenceRunner takes a DataFlow or an InputSource, got {!r}".format(input))
        if isinstance(input, StagingInput):
            raise TypeError("InferenceRunner cannot use a StagingInput (it only stages for "
                            "training steps); give it the wrapped InputSource")
        self._check_tower_args(tower_name, tower_func)
        if not is_int(device):
            raise TypeError("InferenceRunner: device must be an int (-1 for the CPU), got {!r}".format(
                device))
        self._tower_name = tower_name
        self._tower_func = tower_func
        self._device_id = device
        self._tower_handle = None
        super().__init__(input, infs, averaged)

    @property
    def tower_handle(self):
        """The :class:`TowerTensorHandle` of the inference tower (after ``setup_graph``)."""
        return self._tower_handle

    def _build_towers(self, tower_func):
        vs_for_predictor = getattr(self.trainer, 'vs_name_for_predictor', None)
        vs_name = vs_for_predictor(self._device_id) if vs_for_predictor is not None else ''
        self._tower_handle = build_predict_tower(tower_func, self._input_source.get_input_tensors(),
                                                 self._tower_name, self._device_id, vs_name)
        for inf in self.infs:
            self.register_hook(_InferencerToHook(inf, self._lookup_fetches(inf, self._tower_handle)))

    def __str__(self):
        return "InferenceRunner({})".format(self._tower_name)


class _InferencerToParallelHook(_InferencerToHook):
    """Fetches an inferencer's tensors in every tower and gives it one tower's values at a
    time, in tower order."""

    def __init__(self, inf, fetches_per_tower):
        super().__init__(inf, [t for fetches in fetches_per_tower for t in fetches])
        self._per_tower = len(fetches_per_tower[0])

    def after_run(self, ctx, run_values):
        results = run_values.results
        for start in range(0, len(results), self._per_tower):
            super().after_run(ctx, tfv1.train.SessionRunValues(
                results=results[start:start + self._per_tower], options=run_values.options,
                run_metadata=run_values.run_metadata))


class DataParallelInferenceRunner(InferenceRunnerBase):
    """Validation with one inference tower per device: each run of a pass gives one
    datapoint (batch) to every tower, so k towers go through the data k batches at a time;
    the datapoints left over (fewer than k) run on the first tower. Inferencers receive the
    batches in the order of the data, as with :class:`InferenceRunner`.

    Args:
        input (DataFlow or QueueInput): a DataFlow is wrapped in a :class:`QueueInput`; its
            size gives the batches of a pass. Each pass restarts the data from its beginning.
        infs (Inferencer or list[Inferencer]): what to compute.
        gpus (int or list): the towers: a number of GPUs, GPU ids, or device strings such as
            ``['/cpu:0', '/cpu:1']``.
        tower_name (str): the prefix of the towers' names (``InferenceTower0``, ...).
        tower_func (TowerFunc): builds the towers; ``trainer.tower_func`` by default.
        averaged (bool): evaluate the weight averages of a
            :class:`~tensorpack_lite.callbacks.WeightAverage` callback.

    Example::

        DataParallelInferenceRunner(BatchData(test_df, 64, remainder=True),
                                    [ScalarStats('cost')], gpus=['/cpu:0', '/cpu:1'])
    """

    def __init__(self, input, infs, gpus, tower_name='InferenceTower', tower_func=None, averaged=False):
        if isinstance(input, DataFlow):
            input = QueueInput(input)
        if not isinstance(input, QueueInput):
            raise TypeError("DataParallelInferenceRunner takes a DataFlow or a QueueInput, got {!r}".format(
                input))
        self._check_tower_args(tower_name, tower_func)
        self._towers = interpret_towers(gpus, 'DataParallelInferenceRunner')
        self._devices = [tower_device(t) for t in self._towers]
        self._tower_names = ['{}{}'.format(tower_name, k) for k in range(len(self._towers))]
        self._tower_func = tower_func
        self._parallel_hooks = []
        self._parallel_sess = None
        self._handles = []
        super().__init__(input, infs, averaged)

    @property
    def tower_handles(self):
        """The :class:`TowerTensorHandle` of every tower (after ``setup_graph``)."""
        return list(self._handles)

    def _build_towers(self, tower_func):
        vs_for_predictor = getattr(self.trainer, 'vs_name_for_predictor', lambda index: '')
        for index, (name, device) in enumerate(zip(self._tower_names, self._devices)):
            self._handles.append(build_predict_tower(tower_func, self._input_source.get_input_tensors(), name,
                                                     device, vs_for_predictor(index)))
        for inf in self.infs:
            fetches = [self._lookup_fetches(inf, handle) for handle in self._handles]
            self.register_hook(_InferencerToHook(inf, fetches[0]))
            self._parallel_hooks.append(_InferencerToParallelHook(inf, fetches))

    def _register_input_hook(self, hook):
        self.register_hook(hook)
        self._parallel_hooks.append(hook)

    def _before_train(self):
        check_session_devices(self.trainer.sess, self._devices, str(self))
        super()._before_train()
        self._parallel_sess = HookedSession(self.trainer.sess, self._parallel_hooks)

    def _reset_input(self):
        super()._reset_input()
        self._input_source.refill_queue()   # drop what the last pass left in the queue

    def _run_steps(self, pbar):
        num_tower = len(self._handles)
        while self._size - self._steps_done >= num_tower:
            self._parallel_sess.run(fetches=[])
            self._steps_done += num_tower
            pbar.update(num_tower)
        while self._steps_done < self._size:
            self._hooked_sess.run(fetches=[])
            self._steps_done += 1
            pbar.update()

    def __str__(self):
        return "DataParallelInferenceRunner({})".format(', '.join(self._tower_names))
