"""Weight averaging: an exponential moving average of the trainable variables,
:class:`WeightAverage`, and :class:`AveragesApplied`, which evaluates with it."""

import contextlib

from ..compat import tf, tfv1
from ..loop.callback import Callback
from ..tfutils.varmanip import SessionUpdate
from ..tfutils.weight_average import COUNTER_NAME, average_name, average_pairs, model_weights
from ..utils import logger
from ..utils.argtools import is_int, is_real

__all__ = ['WeightAverage', 'AveragesApplied']


def _on_parameter_server(var):
    return '/job:ps' in (var.device or '')


class WeightAverage(Callback):
    """Keeps an exponential moving average of the trainable variables, in graph variables
    (``WeightAverage/<name>``, and the count of updates ``WeightAverage/num_updates``): every
    checkpoint holds it, and a resumed run goes on with it exactly.

    After each step whose global step is a multiple of ``every_k_steps``, the update
    ``average = average * d + weight * (1 - d)`` runs in the step's own ``sess.run`` (after the
    step's update of the weights), with, for the update numbered ``t`` from 0:

    * ``d = 0`` for ``t = 0``: the first update copies the weights;
    * ``d = min(decay, (1 + t) / (10 + t))`` after it with ``warmup=True`` (TensorFlow's
      ``ExponentialMovingAverage(num_updates=t)``), so that early averages do not hold on to
      the first weights; ``d = decay`` with ``warmup=False``.

    The averaged variables are the model's trainable ones: with several towers, the first
    tower's (the replicas are equal to them); with several processes (collective, Horovod),
    every process keeps the same average of its equal variables, and checkpoints are the
    chief's. Where the variables live on parameter servers, the chief alone keeps it.
    BatchNorm's statistics are not trained and not averaged.

    Evaluate, predict or export with the averages through one switch, ``averaged=True``:
    ``InferenceRunner(..., averaged=True)`` during training, ``SmartInit(checkpoint,
    averaged=True)`` as the ``session_init`` of a ``PredictConfig`` (predictors,
    ``ModelExporter``) or of a ``TrainConfig`` (fine-tuning from the averages).

    Args:
        decay (float): in [0, 1).
        warmup (bool): use ``min(decay, (1 + t) / (10 + t))``.
        every_k_steps (int): update after every k-th step (global steps k, 2k, ...); with
            ``accumulate=K``, after every k-th update of the weights (global steps kK, 2kK, ...).

    Example::

        callbacks=[WeightAverage(decay=0.999),
                   InferenceRunner(test, ScalarStats('cost'), averaged=True), ModelSaver()]
        # later: OfflinePredictor(PredictConfig(..., session_init=SmartInit('train_log/run', averaged=True)))
    """

    _chief_only = False   # every process builds the same variables (collective trainers check it)

    def __init__(self, decay=0.999, warmup=True, every_k_steps=1):
        if not is_real(decay) or not 0 <= decay < 1:
            raise ValueError("WeightAverage: decay must be a number in [0, 1), got {!r}".format(decay))
        if not is_int(every_k_steps) or every_k_steps < 1:
            raise ValueError("WeightAverage: every_k_steps must be a positive int, got {!r}".format(
                every_k_steps))
        self.decay = float(decay)
        self.warmup = bool(warmup)
        self.every_k_steps = int(every_k_steps)
        self._fetch = None

    def __str__(self):
        return "WeightAverage(decay={:g})".format(self.decay)

    def _setup_graph(self):
        train_op = getattr(self.trainer, 'train_op', None)
        if train_op is None:
            raise RuntimeError("{} updates after the op each step runs, trainer.train_op; {} has none".format(
                self, type(self.trainer).__name__))
        weights = model_weights()
        if not weights:
            raise ValueError("{}: the graph has no trainable variable to average".format(self))
        if not self.trainer.is_chief and any(_on_parameter_server(v) for v in weights):
            logger.info("{}: the variables live on parameter servers: the chief keeps the average.".format(
                self))
            return
        self._train_op = train_op
        self._fetch = tfv1.train.SessionRunArgs(fetches=self._build_update(train_op, weights))

    def _build_update(self, train_op, weights):
        taken = {v.op.name for v in tfv1.global_variables()}
        clash = sorted(name for name in [COUNTER_NAME] + [average_name(v.op.name) for v in weights]
                       if name in taken)
        if clash:
            raise ValueError("{}: the graph already has variables named {}".format(self, ', '.join(clash)))
        with tfv1.variable_scope(tfv1.VariableScope(False, name='')):
            counter = tfv1.get_variable(COUNTER_NAME, dtype=tf.int64, initializer=tf.constant(0, tf.int64),
                                        trainable=False, collections=[tfv1.GraphKeys.GLOBAL_VARIABLES])
            averages = []
            for var in weights:
                with tfv1.colocate_with(var.op, ignore_existing=True):
                    averages.append(tfv1.get_variable(
                        average_name(var.op.name), shape=var.shape, dtype=var.dtype.base_dtype,
                        initializer=tfv1.zeros_initializer(), trainable=False,
                        collections=[tfv1.GraphKeys.GLOBAL_VARIABLES]))
        with tf.name_scope('update'):
            with tf.control_dependencies([train_op]):    # the weights after the step's update
                count = counter.read_value()
                values = [var.read_value() for var in weights]
            t = tf.cast(count, tf.float32)
            decay = tf.minimum(tf.constant(self.decay, tf.float32), (1.0 + t) / (10.0 + t)) if self.warmup \
                else tf.constant(self.decay, tf.float32)
            decay = tf.where(tf.equal(count, 0), tf.constant(0.0, tf.float32), decay, name='decay')
            assigns = []
            for var, value, average in zip(weights, values, averages):
                d = tf.cast(decay, var.dtype.base_dtype)
                assigns.append(average.assign(average.read_value() * d + value * (1 - d)).op)
            with tf.control_dependencies(assigns):
                return counter.assign_add(1).op

    def _before_run(self, ctx):
        period = self.every_k_steps * getattr(self.trainer, 'accumulate', 1)   # updates, not micro-batches
        if self._fetch is None or (self.trainer.loop.global_step + 1) % period:
            return None
        fetches = ctx.original_args.fetches
        if fetches is self._train_op or (isinstance(fetches, (list, tuple)) and any(
                f is self._train_op for f in fetches)):
            return self._fetch
        return None

    def _stat_names(self):
        return []


class AveragesApplied:
    """Puts the weight averages a :class:`WeightAverage` keeps into the model's variables for the
    time of a block, then the weights back, exactly (through the host: a copy of the weights
    there meanwhile). Before the first update of the averages, the weights stay (once logged).
    What ``InferenceRunner(..., averaged=True)`` evaluates with.

    Args:
        trainer: the trainer (its session, once it exists).
        owner (str): who asks, for the messages.

    Example::

        with AveragesApplied(self.trainer, str(self)).applied():
            ...   # runs in trainer.sess see the averaged weights
    """

    def __init__(self, trainer, owner):
        self._sess = trainer.sess
        self._owner = owner
        self._models, self._averages, self._counter = average_pairs(self._sess.graph)
        if not self._models:
            raise ValueError("{}: averaged=True, but the graph has no weight averages: add a WeightAverage "
                             "callback.".format(owner))
        if any(_on_parameter_server(v) for v in self._models):
            raise ValueError("{}: averaged=True cannot put the averages into variables shared with other "
                             "processes (parameter servers); evaluate a checkpoint with SmartInit(..., "
                             "averaged=True) instead.".format(owner))
        self._update = SessionUpdate(self._sess, self._models)
        self._said_none_yet = False

    @contextlib.contextmanager
    def applied(self):
        """Inside, the variables hold the averages."""
        if self._counter is not None and self._sess.run(self._counter) == 0:
            if not self._said_none_yet:
                logger.info("{}: the weights are not averaged yet: evaluating them as they are.".format(
                    self._owner))
                self._said_none_yet = True
            yield
            return
        weights = self._sess.run(self._models)
        averages = self._sess.run(self._averages)
        self._update.update({v.name: value for v, value in zip(self._models, averages)})
        try:
            yield
        finally:
            self._update.update({v.name: value for v, value in zip(self._models, weights)})
