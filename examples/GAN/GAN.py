"""What the GAN examples share: a model description with the usual GAN losses, and trainers
that alternate the discriminator's and the generator's updates.

A GAN model builds, in ``build_graph``, a generator under the variable scope ``gen`` and a
discriminator under ``discrim``; it calls :meth:`GANModelDesc.build_losses` with the
discriminator's logits on real and on generated images (or sets ``self.d_loss`` and
``self.g_loss`` itself), and :meth:`GANModelDesc.collect_variables`. The trainers take it
with an InputSource::

    GANTrainer(QueueInput(df), Model()).train_with_defaults(steps_per_epoch=100, max_epoch=10)
"""

import numbers

from tensorpack_lite import Callback, FeedfreeInput, ModelDescBase, StagingInput, TowerTrainer, logger
from tensorpack_lite import tfv1 as tf
from tensorpack_lite.graph_builder import (
    DataParallelBuilder, LeastLoadedDeviceSetter, check_session_devices, interpret_towers, tower_device)
from tensorpack_lite.precision.loss_scale import LossScaleOptimizer
from tensorpack_lite.tfutils.summary import add_moving_summary
from tensorpack_lite.tfutils.tower import TowerContext, TowerFunc
from tensorpack_lite.utils.argtools import memoized_method

__all__ = ['GANModelDesc', 'GANTrainer', 'SeparateGANTrainer', 'MultiGPUGANTrainer']


class GANModelDesc(ModelDescBase):
    """A ModelDescBase whose ``build_graph`` sets four attributes instead of returning a cost:
    ``d_loss``, ``g_loss`` (scalar tensors) and ``d_vars``, ``g_vars`` (lists of variables)."""

    def collect_variables(self, g_scope='gen', d_scope='discrim'):
        """Set ``self.g_vars`` and ``self.d_vars`` to the trainable variables under the
        generator's and the discriminator's variable scopes."""
        self.g_vars = self._trainable_under(g_scope, 'generator')
        self.d_vars = self._trainable_under(d_scope, 'discriminator')

    @staticmethod
    def _trainable_under(scope, role):
        found = tf.get_collection(tf.GraphKeys.TRAINABLE_VARIABLES, scope + '/')
        if not found:
            raise ValueError("The {} has no trainable variable under the variable scope '{}/': build "
                             "it under tf.variable_scope('{}') or pass its scope to "
                             "collect_variables().".format(role, scope, scope))
        return found

    def build_losses(self, logits_real, logits_fake):
        """The losses of the standard GAN (the non-saturating generator loss).

        Sets ``self.d_loss`` (mean of the cross-entropies on real and on fake images) and
        ``self.g_loss``, and adds moving summaries of both losses and accuracies:
        ``GAN_loss/discrim/loss``, ``GAN_loss/discrim/accuracy`` (how often the
        discriminator is right, over real and fake), ``GAN_loss/gen/loss`` and
        ``GAN_loss/gen/accuracy`` (how often a fake is taken for real).

        Args:
            logits_real, logits_fake (tf.Tensor): the discriminator's logits (before the
                sigmoid) on a batch of real and a batch of generated images.
        """
        def sigmoid_xent(logits, target):
            labels = tf.fill(tf.shape(logits), float(target))
            return tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(logits=logits, labels=labels))

        def fraction(condition, name):
            return tf.reduce_mean(tf.cast(condition, tf.float32), name=name)

        with tf.name_scope('GAN_loss'):
            tf.summary.histogram('score-real', tf.sigmoid(logits_real))
            tf.summary.histogram('score-fake', tf.sigmoid(logits_fake))
            with tf.name_scope('discrim'):
                loss_real = tf.identity(sigmoid_xent(logits_real, 1), name='loss_real')
                loss_fake = tf.identity(sigmoid_xent(logits_fake, 0), name='loss_fake')
                self.d_loss = tf.multiply(0.5, loss_real + loss_fake, name='loss')
                acc_real = fraction(logits_real > 0, 'accuracy_real')
                acc_fake = fraction(logits_fake < 0, 'accuracy_fake')
                d_accuracy = tf.multiply(0.5, acc_real + acc_fake, name='accuracy')
            with tf.name_scope('gen'):
                self.g_loss = tf.identity(sigmoid_xent(logits_fake, 1), name='loss')
                g_accuracy = fraction(logits_fake > 0, 'accuracy')
            add_moving_summary(self.d_loss, self.g_loss, d_accuracy, g_accuracy)

    def build_graph(self, *inputs):
        """Build the generator and the discriminator from the inputs; set ``d_loss``,
        ``g_loss`` (e.g. with :meth:`build_losses`) and call :meth:`collect_variables`."""
        raise NotImplementedError("{} must implement build_graph()".format(type(self).__name__))

    @memoized_method
    def get_optimizer(self):
        """The optimizer of both players, created once by :meth:`optimizer`."""
        return self.optimizer()

    def optimizer(self):
        """Return the ``tf.compat.v1.train.Optimizer`` both players train with."""
        raise NotImplementedError("{} must implement optimizer()".format(type(self).__name__))


def _check_losses(model):
    """The model's losses and variables after ``build_graph``, or an error naming what is missing."""
    missing = [name for name in ('d_loss', 'g_loss', 'd_vars', 'g_vars')
               if getattr(model, name, None) is None]
    if missing:
        raise AttributeError("{}.build_graph() must set {} (see GANModelDesc.build_losses and "
                             "collect_variables).".format(type(model).__name__, ', '.join(missing)))


class _GANTrainerBase(TowerTrainer):
    """Sets up the input and ``tower_func`` of a GAN trainer, then builds the graph through
    :meth:`_build_graph`, which subclasses implement. ``mixed_precision`` ('bf16', 'fp16' or
    a MixedPrecision) is the trainer's mode, set before the graph is built; with 'fp16' both
    players' optimizers scale the loss, and one loss scale decides for the whole step."""

    def __init__(self, input, model, mixed_precision=None):
        super().__init__()
        if not isinstance(model, GANModelDesc):
            raise TypeError("{} needs a GANModelDesc, got {!r}".format(type(self).__name__, model))
        self.mixed_precision = mixed_precision
        self.loss_scale = None if self.mixed_precision is None else self.mixed_precision.new_loss_scale()
        self.model = model
        input = self._prepare_input(input)
        self.register_callback(input.setup(model.get_input_signature()))
        self.tower_func = TowerFunc(self._tower_fn, model.get_input_signature())
        self._build_graph(input)

    def _prepare_input(self, input):
        """The InputSource the towers read (by default ``input`` itself)."""
        return input

    def _tower_fn(self, *inputs):
        """Builds one tower of the model; returns its (d_loss, g_loss)."""
        self.model.build_graph(*inputs)
        _check_losses(self.model)
        return self.model.d_loss, self.model.g_loss

    def _build_graph(self, input):
        """Build the towers and the training op(s)."""
        raise NotImplementedError("{} must implement _build_graph()".format(type(self).__name__))

    def _minimize(self, loss, var_list, name):
        opt = self.model.get_optimizer()
        if self.loss_scale is not None:
            opt = LossScaleOptimizer(opt, self.loss_scale)
        return opt.minimize(loss, var_list=var_list, colocate_gradients_with_ops=True, name=name)

    def _with_loss_scale_update(self, train_op):
        """``train_op``, followed by the loss scale's update in 'fp16'."""
        if self.loss_scale is None:
            return train_op
        self.loss_scale.add_summaries()
        return self.loss_scale.update_after(train_op)


class GANTrainer(_GANTrainerBase):
    """Trains a :class:`GANModelDesc` with one op per step: a discriminator update, then
    (under a control dependency) a generator update.

    Args:
        input (InputSource): the real images.
        model (GANModelDesc): the model.
        num_gpu (int or list): one tower per GPU (a number of GPUs, GPU ids or device
            strings such as ``['/cpu:0', '/cpu:1']``); more than one tower uses
            :class:`MultiGPUGANTrainer`'s graph.

    Example::

        GANTrainer(QueueInput(df), Model()).train_with_defaults(
            callbacks=[ModelSaver()], steps_per_epoch=300, max_epoch=20)
    """

    def __init__(self, input, model, num_gpu=1, mixed_precision=None):
        single = isinstance(num_gpu, numbers.Integral) and num_gpu <= 1
        self.devices = [] if single else [
            tower_device(t) for t in interpret_towers(num_gpu, type(self).__name__)]
        super().__init__(input, model, mixed_precision)

    def _prepare_input(self, input):
        if len(self.devices) <= 1:
            return input
        if not isinstance(input, FeedfreeInput):
            raise TypeError("{} with {} towers needs a feed-free InputSource (e.g. QueueInput), so that each "
                            "tower takes its own batch; got {}.".format(
                                type(self).__name__, len(self.devices), type(input).__name__))
        return StagingInput(input)

    def _build_graph(self, input):
        d_loss, g_loss = self._build_losses(input)
        with tf.name_scope('optimize'):
            d_min = self._minimize(d_loss, self.model.d_vars, 'd_op')
            with tf.control_dependencies([d_min]):
                g_min = self._minimize(g_loss, self.model.g_vars, 'g_op')
            self.train_op = self._with_loss_scale_update(g_min)

    def _build_losses(self, input):
        """(d_loss, g_loss) of one tower, or averaged over one tower per device (the
        variables spread over the devices)."""
        if len(self.devices) <= 1:
            with tf.device(self.devices[0] if self.devices else None), TowerContext('', is_training=True):
                return self.tower_func(*input.get_input_tensors())
        setters = [LeastLoadedDeviceSetter(d, self.devices) for d in self.devices]
        losses = DataParallelBuilder.call_for_each_tower(
            self.devices, lambda: self.tower_func(*input.get_input_tensors()), setters)
        self.register_callback(_SessionDevicesCheck(self.devices, type(self).__name__))
        with tf.name_scope('optimize'):
            return [tf.add_n(list(each)) * (1.0 / len(losses)) for each in zip(*losses)]


class MultiGPUGANTrainer(GANTrainer):
    """:class:`GANTrainer` with one tower per device; each tower takes its own batch, and the
    losses of the towers are averaged.

    Args:
        num_gpu (int or list): a number of GPUs, GPU ids, or device strings (e.g.
            ``['/cpu:0', '/cpu:1']``, with a session made by
            ``tf.ConfigProto(device_count={'CPU': 2})``).
        input (InputSource): a feed-free input (e.g. QueueInput), staged onto the towers.
        model (GANModelDesc): the model.
    """

    def __init__(self, num_gpu, input, model, mixed_precision=None):
        super().__init__(input, model, num_gpu=num_gpu, mixed_precision=mixed_precision)


class _SessionDevicesCheck(Callback):
    """Before training: the session must have every tower's device."""

    _chief_only = False

    def __init__(self, devices, owner):
        self._devices, self._owner = devices, owner

    def _before_train(self):
        check_session_devices(self.trainer.sess, self._devices, self._owner)


class SeparateGANTrainer(_GANTrainerBase):
    """Trains a :class:`GANModelDesc` with two separate ops: the discriminator is updated on
    the steps divisible by ``d_period``, the generator on those divisible by ``g_period``
    (e.g. ``g_period=5``: five discriminator updates per generator update, as WGAN does).

    Each step makes one hooked session run (so the global step counts steps); when both
    players are due, the discriminator's update runs first, in a plain session run.

    Args:
        input (InputSource): the real images.
        model (GANModelDesc): the model.
        d_period, g_period (int): one of them must be 1.
    """

    def __init__(self, input, model, d_period=1, g_period=1, mixed_precision=None):
        self._d_period, self._g_period = int(d_period), int(g_period)
        if min(self._d_period, self._g_period) != 1 or max(self._d_period, self._g_period) < 1:
            raise ValueError("SeparateGANTrainer: one of d_period ({}) and g_period ({}) must be 1 and "
                             "the other positive".format(d_period, g_period))
        super().__init__(input, model, mixed_precision)

    def _build_graph(self, input):
        with TowerContext('', is_training=True):
            self.tower_func(*input.get_input_tensors())
        if tf.get_collection(tf.GraphKeys.UPDATE_OPS):
            logger.warn("SeparateGANTrainer: the model has UPDATE_OPS (e.g. BatchNorm's moving averages); "
                        "they run with every step, whichever player is updated.")
        if self.loss_scale is not None:
            raise ValueError("SeparateGANTrainer: mixed_precision='fp16' needs one loss-scale decision per "
                             "step, and its two players update in separate runs; use GANTrainer, or "
                             "mixed_precision='bf16' (no loss scaling).")
        with tf.name_scope('optimize'):
            self.d_min = self._minimize(self.model.d_loss, self.model.d_vars, 'd_min')
            self.g_min = self._minimize(self.model.g_loss, self.model.g_vars, 'g_min')

    def run_step(self):
        due = [op for op, period in ((self.d_min, self._d_period), (self.g_min, self._g_period))
               if self.global_step % period == 0]
        for op in due[:-1]:
            self.sess.run(op)
        self.hooked_sess.run(due[-1])
