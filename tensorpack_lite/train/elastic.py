"""Elastic training: what a run does when it resumes with another number of model replicas
(``trainer.world_size``: towers times processes) than the epoch it resumes from.

A requeued job gets whatever is free: ``sbatch --nodes=2-4``, a Kubernetes job scaled down,
``mpiexec -n`` with fewer ranks. ``stats.json`` records, at each epoch's end, the world size,
the global batch and the steps per epoch that trained it (:class:`RunShape`);
:class:`~tensorpack_lite.train.config.AutoResumeTrainConfig` reads them back and the policy
given as ``TrainConfig(elastic=...)`` decides what changes:

- :class:`NoAdjustment` (the default): nothing; each replica keeps its batch, so the global
  batch changes with the world size. Said in one warning.
- :class:`KeepGlobalBatch`: the global batch stays, each replica takes ``global / N`` (the
  script builds its DataFlow with :meth:`KeepGlobalBatch.per_replica_batch`); a size that
  does not divide it is refused. Steps per epoch and the learning rate stay; with the same
  data, the updates are the ones the original world size would have made.
- :class:`ScaleLearningRate`: each replica keeps its batch, the optimizer's learning rate is
  scaled by ``N / reference_world_size`` (Goyal et al., 2017) and an epoch keeps its amount of
  data (the steps per epoch scale by ``old / new``).

Example::

    policy = KeepGlobalBatch(256)
    trainer = CollectiveAllReduceTrainer(['/gpu:0'], create_server())
    df = BatchData(RankShardData(dataset, trainer.task_index, trainer.num_worker),
                   policy.per_replica_batch(trainer))
    launch_train_with_config(AutoResumeTrainConfig(model=Model(), dataflow=df, elastic=policy,
                                                   callbacks=[ModelSaver()], max_epoch=90), trainer)
"""

from fractions import Fraction

from ..checkpoint.resume_point import RunShape
from ..cluster.resize import ResizeChannel
from ..compat import tf, tfv1
from ..loop.callback import Callback
from ..utils import logger
from ..utils.argtools import is_int

__all__ = ['RunShape', 'ElasticPolicy', 'NoAdjustment', 'KeepGlobalBatch', 'ScaleLearningRate',
           'StopToResize']


def _whole(name, value, minimum=1):
    if not is_int(value) or value < minimum:
        raise ValueError("{} must be an integer >= {}, got {!r}".format(name, minimum, value))
    return int(value)


class ElasticPolicy:
    """What a resumed run changes when its world size differs from that of the epoch it
    resumes from (and, with the same world size, keeps: that epoch's steps per epoch).
    :func:`launch_train_with_config` calls :meth:`apply` before the graph is built,
    :meth:`optimizer_func` on the model's optimizer function and registers :meth:`callbacks`.

    Subclasses implement :meth:`_adjust`, and may override :meth:`_check`,
    :meth:`optimizer_func` and :meth:`_callbacks`."""

    keeps_global_batch = False
    """Whether a step takes as many datapoints in all whatever the world size (then a data
    position that holds for any world size, a ShardedData's, is resumed in the middle of an
    epoch)."""

    def apply(self, config, trainer):
        """Check the policy against ``trainer`` and, when ``config`` resumes a run, set
        ``config.steps_per_epoch`` as the policy says; when the world size changed, log what
        changes."""
        self._check(trainer.world_size)
        before = config.resumed_run
        if before is None or before.world_size is None:
            return
        steps_per_epoch, what = self._adjust(before, trainer.world_size, config.steps_per_epoch)
        if before.world_size != trainer.world_size:
            logger.warn("Resuming at epoch {} with {} model replicas (towers x processes), where epoch {} "
                        "ended with {}: {}".format(config.starting_epoch, trainer.world_size,
                                                   config.starting_epoch - 1, before.world_size, what))
        elif steps_per_epoch != config.steps_per_epoch:
            logger.info("{!r}: an epoch stays {} steps, as the epoch resumed from (the config says "
                        "{}).".format(self, steps_per_epoch, config.steps_per_epoch))
        config.steps_per_epoch = steps_per_epoch

    def _check(self, world_size):
        """Raise a ValueError when the policy cannot train with ``world_size`` replicas."""

    def _adjust(self, before, world_size, steps_per_epoch):
        """``(steps_per_epoch, text)``: the steps per epoch of the resumed run and what the
        policy does, for the log line (``before``: the :class:`RunShape` resumed from)."""
        raise NotImplementedError("{} must implement _adjust()".format(type(self).__name__))

    def optimizer_func(self, get_opt_fn, trainer):
        """The optimizer function the trainer gets in place of ``get_opt_fn``."""
        return get_opt_fn

    def callbacks(self, trainer):
        """Callbacks the policy adds to the run: the subclass's (:meth:`_callbacks`) and, when the
        engine that started the job may grow it (:mod:`~tensorpack_lite.cluster.resize`), the
        chief's stop after the epoch in which the engine asked for it."""
        channel = ResizeChannel.from_environ()
        return self._callbacks(trainer) + ([StopToResize(channel)] if channel is not None else [])

    def _callbacks(self, trainer):
        """Callbacks of the policy itself."""
        return []

    def __repr__(self):
        return '{}()'.format(type(self).__name__)


class NoAdjustment(ElasticPolicy):
    """Changes nothing (tensorpack's behaviour): each replica keeps its batch, so the global
    batch, and with it what a step and an epoch mean, follows the world size. A resize is
    reported in one warning."""

    def _adjust(self, before, world_size, steps_per_epoch):
        return steps_per_epoch, (
            "each replica keeps its batch, so a step now takes {}/{} times the data (the global batch "
            "changed from {} x B to {} x B), with the same learning rate and steps per epoch. Nothing is "
            "adjusted for it (TrainConfig(elastic=KeepGlobalBatch(...) or ScaleLearningRate(...)) "
            "would).".format(world_size, before.world_size, before.world_size, world_size))


def _multiples_around(number, divisor):
    """The multiples of ``divisor`` nearest to ``number`` (below, if positive, and above)."""
    below = number - number % divisor
    return [b for b in (below, below + divisor) if b > 0]


def _epoch_steps(data_per_epoch, per_step, unit, what):
    """``data_per_epoch / per_step`` (both in ``unit``) as a whole number of steps, or a ValueError."""
    steps = Fraction(data_per_epoch, per_step)
    if steps.denominator != 1:
        raise ValueError("{}: an epoch of {} {} would be {:.4g} steps of {}, not a whole number. Resume with "
                         "a world size that divides it, or give TrainConfig(elastic=NoAdjustment()).".format(
                             what, data_per_epoch, unit, float(steps), per_step))
    return int(steps)


class KeepGlobalBatch(ElasticPolicy):
    """Keep ``global_batch`` datapoints per step whatever the world size: each of ``N``
    replicas takes ``global_batch / N`` (build the DataFlow with :meth:`per_replica_batch`).
    A world size that does not divide ``global_batch`` is refused before anything is built;
    the first step checks that the input gave that many (``trainer.global_batch``). Steps per
    epoch and the learning rate stay as they were.

    Example::

        policy = KeepGlobalBatch(240)     # divides among 1..6, 8, 10, 12... replicas
        df = BatchData(RankShardData(ds, rank, size), policy.per_replica_batch(trainer))
    """

    keeps_global_batch = True

    def __init__(self, global_batch):
        self.global_batch = _whole('KeepGlobalBatch(global_batch)', global_batch)

    def per_replica_batch(self, trainer_or_world_size):
        """The batch of each replica: ``global_batch / world_size`` (of a trainer, or a number)."""
        world_size = getattr(trainer_or_world_size, 'world_size', trainer_or_world_size)
        self._check(world_size)
        return self.global_batch // world_size

    def _check(self, world_size):
        if self.global_batch % world_size:
            raise ValueError(
                "{!r}: a global batch of {} does not divide among {} model replicas (towers x processes). "
                "Choose a global batch that every world size you run with divides ({} replicas divide {}), "
                "or TrainConfig(elastic=ScaleLearningRate(...)) to keep the per-replica batch.".format(
                    self, self.global_batch, world_size, world_size, ' and '.join(
                        str(b) for b in _multiples_around(self.global_batch, world_size))))

    def _adjust(self, before, world_size, steps_per_epoch):
        steps = steps_per_epoch
        if before.global_batch is not None and before.steps_per_epoch is not None:
            steps = _epoch_steps(before.global_batch * before.steps_per_epoch, self.global_batch,
                                 'datapoints', repr(self))
        was = '' if before.global_batch is None else ', was {} per replica'.format(
            before.global_batch // before.world_size)
        return steps, ("{!r} keeps the global batch at {} ({} per replica{}); an epoch stays {} steps and "
                       "the learning rate is unchanged.".format(
                           self, self.global_batch, self.global_batch // world_size, was, steps))

    def _callbacks(self, trainer):
        return [_CheckGlobalBatch(self)]

    def __repr__(self):
        return 'KeepGlobalBatch({})'.format(self.global_batch)


class _CheckGlobalBatch(Callback):
    """After the run's first step: the trainer's measured global batch must be the policy's."""

    _chief_only = False

    def __init__(self, policy):
        self._policy = policy
        self._checked = False

    def _trigger_step(self):
        if self._checked:
            return
        self._checked = True
        measured = self.trainer.global_batch
        if measured is None:
            raise ValueError(
                "{!r}: {} did not measure the datapoints of its first step (trainer.global_batch is "
                "None), so the global batch it keeps cannot be checked. Use a trainer that builds its "
                "model through towers (SingleCostTrainer and its subclasses measure it), or the "
                "elastic policy ScaleLearningRate or NoAdjustment, which need no measured batch.".format(
                    self._policy, type(self.trainer).__name__))
        if measured != self._policy.global_batch:
            raise ValueError(
                "{!r}: the first step took {} datapoints ({} model replicas x {}), not {}. Build the "
                "DataFlow's batch with policy.per_replica_batch(trainer) ({}).".format(
                    self._policy, measured, self.trainer.world_size, measured // self.trainer.world_size,
                    self._policy.global_batch, self._policy.per_replica_batch(self.trainer)))


class StopToResize(Callback):
    """On the chief: at the end of an epoch after which training goes on, if the engine that
    started the job asked to resize it (``channel``, a
    :class:`~tensorpack_lite.cluster.resize.ResizeChannel`), answer that training stops after this
    epoch and end it on every worker (``trainer.request_stop``: the workers agree on a step one
    or two steps into the next epoch). The engine starts the job again with another size, which
    resumes from this epoch's end (the steps of the next epoch run so far are trained again).
    Every policy registers it where ``$TENSORPACK_LITE_RESIZE_REQUEST`` is set."""

    def __init__(self, channel):
        self._channel = channel
        self._asked = False

    def _trigger_epoch(self):
        if self._asked or self.epoch_num >= self.trainer.loop.max_epoch:
            return
        why = self._channel.requested()
        if why is None:
            return
        self._asked = True
        self._channel.acknowledge(self.epoch_num)
        self.trainer.request_stop("the job is resized after epoch {} ({})".format(self.epoch_num, why))


class ScaleLearningRate(ElasticPolicy):
    """Keep the per-replica batch and scale the learning rate linearly with the world size
    (Goyal et al., 2017): the optimizer uses the variable ``variable`` times
    ``world_size / reference_world_size``. The variable itself (what hyper-parameter setters
    set and log, and what checkpoints hold) keeps the reference rate. An epoch keeps its
    amount of data: resumed with another world size, the steps per epoch become
    ``old_steps * old_size / new_size`` (a ValueError when that is not whole).

    The model's ``optimizer()`` must create the rate with ``tf.compat.v1.get_variable``, as
    tensorpack's examples do::

        lr = tf.compat.v1.get_variable('learning_rate', initializer=0.1, trainable=False)
        return tf.compat.v1.train.MomentumOptimizer(lr, 0.9)

    Args:
        reference_world_size (int): the number of replicas the model's learning rate (and its
            schedule) is meant for.
        variable (str): the name of the learning-rate variable.
    """

    def __init__(self, reference_world_size, variable='learning_rate'):
        self.reference_world_size = _whole('ScaleLearningRate(reference_world_size)', reference_world_size)
        self.variable = variable

    def factor(self, world_size):
        """The learning rate's multiplier with ``world_size`` replicas."""
        return Fraction(world_size, self.reference_world_size)

    def _adjust(self, before, world_size, steps_per_epoch):
        steps = steps_per_epoch
        if before.steps_per_epoch is not None:
            steps = _epoch_steps(before.steps_per_epoch * before.world_size, world_size, 'replica batches',
                                 repr(self))
        return steps, ("{!r} keeps each replica's batch; the learning rate is '{}' x {} (was x {}) and an "
                       "epoch is {} steps (was {}), the same data.".format(
                           self, self.variable, self.factor(world_size), self.factor(before.world_size),
                           steps, before.steps_per_epoch))

    def optimizer_func(self, get_opt_fn, trainer):
        factor = self.factor(trainer.world_size)
        variable = self.variable
        found = []      # the rate variables the optimizer function created

        def scaled_rate(getter, name, *args, **kwargs):
            var = getter(name, *args, **kwargs)
            if name != variable and not name.endswith('/' + variable):
                return var
            found.append(var)
            return var if factor == 1 else tf.multiply(var, float(factor), name=variable + '_scaled')

        def get_opt():
            with tfv1.variable_scope(tfv1.get_variable_scope(), custom_getter=scaled_rate):
                opt = get_opt_fn()
            if not found:
                raise ValueError(
                    "{!r}: the model's optimizer() created no variable '{}' with "
                    "tf.compat.v1.get_variable(), so there is no learning rate to scale. Create it so: "
                    "lr = tf.compat.v1.get_variable('{}', initializer=0.1, trainable=False).".format(
                        self, variable, variable))
            return opt

        if factor != 1:
            logger.info("{!r}: {} model replicas, so the optimizer's learning rate is '{}' x {}.".format(
                self, trainer.world_size, variable, factor))
        return get_opt

    def __repr__(self):
        return 'ScaleLearningRate({})'.format(self.reference_world_size)
