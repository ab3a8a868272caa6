"""Callbacks that act on every step: the step counter, a progress bar, a run timeout and a
tensor printer."""


from ..compat import tfv1
from ..loop.callback import Callback
from ..tfutils.common import check_tensor_names, get_global_step_var, get_op_tensor_name
from ..utils import logger
from ..utils.argtools import is_int
from ..utils.naming import GLOBAL_STEP_INCR_OP_NAME
from ..utils.utils import get_tqdm, get_tqdm_kwargs

__all__ = ['MaintainStepCounter', 'ProgressBar', 'SessionRunTimeout', 'TensorPrinter']


class MaintainStepCounter(Callback):
    """Increments the global step variable on every ``hooked_sess.run`` (the trainer's loop
    counts the same runs on the Python side).

    Every trainer registers it first. The increment rides along with the step's own
    ``sess.run``, so it costs no extra call.
    """

    _chief_only = False

    def _setup_graph(self):
        step_var = get_global_step_var()
        with tfv1.name_scope(None):
            self.increment_op = tfv1.assign_add(step_var, 1, name=GLOBAL_STEP_INCR_OP_NAME).op
        self._fetches = tfv1.train.SessionRunArgs(self.increment_op)

    def _before_train(self):
        if self.global_step != 0:
            logger.info("Start training with global_step={}".format(self.global_step))

    def _before_run(self, _):
        return self._fetches


class ProgressBar(Callback):
    """A tqdm progress bar for each epoch, optionally showing the latest values of some
    scalar tensors (fetched along with the first ``hooked_sess.run`` of each step).

    Args:
        names (list[str]): names of scalar tensors to show, e.g. ``['loss']``; a name not in
            the graph is looked up in the first training tower.
        tqdm_kwargs: passed on to tqdm, overriding the defaults of
            :func:`~tensorpack_lite.utils.utils.get_tqdm_kwargs` (e.g. ``file=...``).

    Example::

        ProgressBar(['loss', 'accuracy'])
    """

    _chief_only = False

    def __init__(self, names=(), **tqdm_kwargs):
        names = check_tensor_names(names, 'ProgressBar')
        self._names = [get_op_tensor_name(n)[1] for n in names]
        self._tags = [get_op_tensor_name(n)[0].split('/')[-1] for n in names]
        self._extra_tqdm_kwargs = tqdm_kwargs
        self._bar = None
        self._fetches = None

    def _setup_graph(self):
        tensors = self.get_tensors_maybe_in_tower(self._names)
        for tensor in tensors:
            if tensor.shape.ndims not in (None, 0):
                raise ValueError("ProgressBar shows scalars only; tensor '{}' has shape {}".format(
                    tensor.name, tensor.shape))
        if tensors:
            self._fetches = tfv1.train.SessionRunArgs(fetches=tensors)

    def _before_train(self):
        self._total = self.trainer.loop.steps_per_epoch
        kwargs = dict(leave=True)
        kwargs.update(self._extra_tqdm_kwargs)
        self._tqdm_kwargs = get_tqdm_kwargs(**kwargs)
        if self._fetches is not None and 'bar_format' not in self._extra_tqdm_kwargs:
            self._tqdm_kwargs['bar_format'] += '{postfix} '

    def _before_epoch(self):
        self._close_bar()
        self._bar = get_tqdm(total=self._total, **self._tqdm_kwargs)

    def _before_run(self, _):
        # Fetch once per step, even when a step calls hooked_sess.run several times.
        if self._bar is None or self._fetches is None or not self.trainer.loop.is_first_run_of_step:
            return None
        return self._fetches

    def _after_run(self, _, run_values):
        if self._bar is not None and run_values.results:
            self._bar.set_postfix(zip(self._tags, run_values.results), refresh=False)

    def _trigger_step(self):
        if self._bar is not None:
            self._bar.update()

    def _after_epoch(self):
        self._close_bar()

    def _after_train(self):
        self._close_bar()  # training may have ended in the middle of an epoch

    def _close_bar(self):
        if self._bar is not None:
            self._bar.close()
            self._bar = None


class SessionRunTimeout(Callback):
    """Give every ``hooked_sess.run`` a deadline: a step that takes longer than
    ``timeout_in_ms`` milliseconds is cancelled with ``tf.errors.DeadlineExceededError``
    (e.g. a step blocked on an empty queue).

    Example::

        SessionRunTimeout(60 * 1000)   # no step may take more than a minute
    """

    def __init__(self, timeout_in_ms):
        if not is_int(timeout_in_ms) or timeout_in_ms <= 0:
            raise ValueError("SessionRunTimeout: timeout_in_ms must be a positive integer, got "
                             "{!r}".format(timeout_in_ms))
        self._timeout = int(timeout_in_ms)
        self._run_args = tfv1.train.SessionRunArgs(
            fetches=None, options=tfv1.RunOptions(timeout_in_ms=self._timeout))

    def _before_run(self, _):
        return self._run_args

    def __str__(self):
        return "SessionRunTimeout({}ms)".format(self._timeout)


class TensorPrinter(Callback):
    """Log the values of some tensors at every ``hooked_sess.run``, as ``name: value``.

    It fetches the tensors along with the step; printing inside the graph
    (``tf.print``) is cheaper when speed matters.

    Example::

        TensorPrinter(['loss', 'learning_rate'])
    """

    def __init__(self, names):
        names = check_tensor_names(names, 'TensorPrinter')
        self._names = [get_op_tensor_name(n)[1] for n in names]

    def _setup_graph(self):
        self._fetches = tfv1.train.SessionRunArgs(
            fetches=self.get_tensors_maybe_in_tower(self._names))

    def _before_run(self, _):
        return self._fetches

    def _after_run(self, _, run_values):
        for name, value in zip(self._names, run_values.results):
            logger.info("{}: {}".format(name, value))
