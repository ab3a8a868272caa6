"""Callbacks that run ops of the graph or fetch its tensors.

* :class:`RunOp` runs an op before training, when triggered and/or with every step.
* :class:`RunUpdateOps` runs the ``UPDATE_OPS`` collection (e.g. batch-norm statistics)
  with every step.
* :class:`ProcessTensors` fetches tensors with every step and hands their values to a function.
* :class:`CheckNumerics` fails training as soon as a trainable variable holds NaN or Inf.

The dump callbacks (``DumpTensors``, ``DumpTensor``, ``DumpTensorAsImage``,
``DumpParamAsImage``) live in :mod:`.debug`; they are importable from here too, tensorpack's path.
"""

from ..compat import tf, tfv1
from ..loop.callback import Callback
from ..tfutils.common import check_tensor_names, get_op_or_tensor_by_name
from ..utils import logger
from .debug import DumpParamAsImage, DumpTensor, DumpTensorAsImage, DumpTensors  # tensorpack's path

__all__ = ['RunOp', 'RunUpdateOps', 'ProcessTensors', 'CheckNumerics',
           'DumpTensors', 'DumpTensor', 'DumpTensorAsImage', 'DumpParamAsImage', 'as_operation']


_VARIABLE_OP_TYPES = ('VarHandleOp', 'VariableV2', 'Variable')


def as_operation(thing, owner):
    """The ``tf.Operation`` to run for ``thing``: an op, a tensor (its op), what ``assign*`` on a
    resource variable returns in graph mode (its assign op), or the name of an op/tensor."""
    if isinstance(thing, str):
        thing = get_op_or_tensor_by_name(thing)
    if isinstance(thing, tf.Operation):
        return thing
    op = getattr(thing, 'op', None)
    if isinstance(op, tf.Operation) and op.type not in _VARIABLE_OP_TYPES:
        return op
    raise TypeError("{}: expected a tf.Operation, a tf.Tensor or the name of one, got {!r} of "
                    "type {}".format(owner, thing, type(thing).__name__))


class RunOp(Callback):
    """Run an op before training, at every :meth:`trigger` (by default the end of every epoch)
    and/or along with every ``hooked_sess.run``.

    Args:
        op: a ``tf.Operation`` or ``tf.Tensor`` (its op is run), its name, or a function
            returning one of these. A function is called in :meth:`setup_graph`, when the
            model's graph exists.
        run_before (bool): run the op once before training.
        run_as_trigger (bool): run the op at every :meth:`trigger`.
        run_step (bool): run the op along with every ``hooked_sess.run`` (every step).
        verbose (bool): log every time the op is run.

    Example::

        # copy the online network into the target network every epoch (DQN)
        RunOp(lambda: tf.group(*[t.assign(s) for t, s in zip(target_vars, online_vars)]),
              run_before=True, run_as_trigger=True)
    """

    _chief_only = False

    def __init__(self, op, run_before=True, run_as_trigger=True, run_step=False, verbose=False):
        if callable(op) and not isinstance(op, str):
            self.setup_func = op
        else:
            if not isinstance(op, str):
                as_operation(op, 'RunOp')  # a clear error now rather than at setup_graph
            self.setup_func = lambda: op
        self.run_before = bool(run_before)
        self.run_as_trigger = bool(run_as_trigger)
        self.run_step = bool(run_step)
        self.verbose = bool(verbose)

    def _build_op(self):
        """The op to run, built in :meth:`setup_graph`. A subclass may return None, meaning
        there is nothing to run; a user's function returning None is an error."""
        op = self.setup_func()
        if op is None:
            raise ValueError("{}: the function {!r} returned None instead of an op.".format(
                self, self.setup_func))
        return op

    def _setup_graph(self):
        op = self._build_op()
        self._op = None if op is None else as_operation(op, str(self))
        self._fetch = None
        if self.run_step and self._op is not None:
            self._fetch = tfv1.train.SessionRunArgs(fetches=self._op)

    def _run_now(self):
        if self._op is None:
            return
        self._log_run()
        self.trainer.sess.run(self._op)

    def _before_train(self):
        if self.run_before:
            self._run_now()

    def _trigger(self):
        if self.run_as_trigger:
            self._run_now()

    def _before_run(self, _):
        if self._fetch is not None:
            self._log_run()
            return self._fetch
        return None

    def _log_run(self):
        if self.verbose:
            logger.info("Running Op {} ...".format(self._op.name))

    def __str__(self):
        op = getattr(self, '_op', None)
        return "RunOp({})".format(op.name) if op is not None else type(self).__name__


class RunUpdateOps(RunOp):
    """Run the ops of a collection (by default ``tf.compat.v1.GraphKeys.UPDATE_OPS``, where
    e.g. batch normalization puts its moving-average updates) along with every
    ``hooked_sess.run``, grouped into one op. An empty collection is logged and ignored.

    When the trainer has towers (a ``towers`` attribute, as tower trainers do), only the
    updates of the main training tower and those built outside towers run: the ops created
    inside the other training towers (names starting with ``'<their ns_name>/'``) are
    skipped, and how many were is logged.

    Careful with models made of several sub-networks: not every update may be meant to run
    with every step. Subclasses choose the ops by overriding :meth:`_get_update_ops`.

    Example::

        RunUpdateOps()   # one of the default callbacks
    """

    def __init__(self, collection=None):
        if collection is None:
            collection = tfv1.GraphKeys.UPDATE_OPS
        if not isinstance(collection, str):
            raise TypeError("RunUpdateOps: collection must be a collection name (str), got {!r}".format(
                collection))
        self._collection = collection
        super().__init__(self._build_op, run_before=False, run_as_trigger=False, run_step=True)

    @property
    def _collection_display_name(self):
        return 'UPDATE_OPS' if self._collection == tfv1.GraphKeys.UPDATE_OPS else self._collection

    def _get_update_ops(self):
        """The ops (or tensors) to run with every step: the items of the collection, except
        those built in training towers other than the first."""
        ops = tfv1.get_collection(self._collection)
        prefixes = self._other_training_tower_prefixes()
        if not prefixes or not ops:
            return ops
        kept = [op for op in ops
                if not as_operation(op, str(self)).name.startswith(prefixes)]
        if len(kept) < len(ops):
            logger.info("RunUpdateOps: skipped {} op(s) of collection {} built in training towers "
                        "other than the first ({}).".format(
                            len(ops) - len(kept), self._collection_display_name,
                            ', '.join(p[:-1] for p in prefixes)))
        return kept

    def _other_training_tower_prefixes(self):
        """``('tower1/', ...)``: the name scopes of the training towers after the first."""
        try:
            towers = getattr(self.trainer, 'towers', None)
        except RuntimeError:   # a tower trainer whose tower function is not set
            towers = None
        if towers is None:
            return ()
        training = list(towers.training())
        return tuple(h.ns_name + '/' for h in training[1:] if h.ns_name)

    def _build_op(self):
        ops = self._get_update_ops()
        if not ops:
            logger.info("RunUpdateOps: collection {} is empty, nothing to run.".format(
                self._collection_display_name))
            return None
        logger.info("Applying collection {} of {} ops.".format(self._collection_display_name, len(ops)))
        return tf.group(*ops, name='update_ops')

    def __str__(self):
        return "RunUpdateOps({})".format(self._collection_display_name)


class ProcessTensors(Callback):
    """Fetch some tensors along with every ``hooked_sess.run`` and call ``fn(*values)``.

    Args:
        names (list[str]): tensor names; a name not in the graph is looked up in the first
            training tower.
        fn: a function taking one value per name.

    Example::

        ProcessTensors(['cost1', 'cost2'], lambda c1, c2: print(c1, c2, c1 + c2))
    """

    def __init__(self, names, fn):
        names = check_tensor_names(names, 'ProcessTensors')
        if not callable(fn):
            raise TypeError("ProcessTensors: fn must be callable, got {!r}".format(fn))
        self._names = list(names)
        self._fn = fn

    def _setup_graph(self):
        tensors = self.get_tensors_maybe_in_tower(self._names)
        self._fetch = tfv1.train.SessionRunArgs(fetches=tensors)

    def _before_run(self, _):
        return self._fetch

    def _after_run(self, _, run_values):
        self._fn(*run_values.results)

    def _stat_names(self):
        return None  # ``fn`` may put anything


class CheckNumerics(RunOp):
    """Check every trainable variable for NaN and Inf: before training, at every trigger
    (by default the end of every epoch) and, with ``run_step``, along with every step.

    A bad value fails training with ``tf.errors.InvalidArgumentError``, whose message names
    the variable: ``CheckNumerics['fc0/W'] : Tensor had NaN values``. Checked along with a
    step, a variable may be read before or after that step's update (so the problem may show
    one step later).

    Args:
        run_as_trigger (bool): check at every :meth:`trigger`.
        run_step (bool): check along with every ``hooked_sess.run``.

    Example::

        CheckNumerics(run_step=True)   # stop at the first step that produced a NaN
    """

    _chief_only = True

    def __init__(self, run_as_trigger=True, run_step=False):
        super().__init__(self._build_check, run_as_trigger=run_as_trigger, run_step=run_step)

    def _build_check(self):
        variables = tfv1.trainable_variables()
        if not variables:
            logger.warn("CheckNumerics: the graph has no trainable variable to check.")
            return tf.no_op(name='CheckAllNumerics')
        checks = [tf.debugging.check_numerics(v, "CheckNumerics['{}']".format(v.op.name)).op
                  for v in variables]
        return tf.group(*checks, name='CheckAllNumerics')

    def __str__(self):
        return 'CheckNumerics'
