"""The GAN trainers of examples/GAN/GAN.py, in this process, on a tiny GAN of 2-D points."""

import os
import sys

import numpy as np
import pytest

from tensorpack_lite import Callback, DataFromList, FeedInput, FullyConnected, ModelDesc, QueueInput
from tensorpack_lite.compat import tfv1 as tf
from tensorpack_lite.tfutils.common import get_default_sess_config
from tensorpack_lite.tfutils.sesscreate import NewSessionCreator
from helpers.paths import REPO_DIR

REPO = REPO_DIR
sys.path.insert(0, os.path.join(REPO, 'examples', 'GAN'))
import GAN  # noqa: E402


class TinyGAN(GAN.GANModelDesc):
    """A linear generator of 2-D points and a linear discriminator."""

    def inputs(self):
        return [tf.TensorSpec((None, 2), tf.float32, 'point')]

    def build_graph(self, point):
        z = tf.random_uniform(tf.shape(point), -1, 1)
        with tf.variable_scope('gen'):
            fake = FullyConnected('fc', z, 2)
        with tf.variable_scope('discrim', reuse=tf.AUTO_REUSE):
            logits_real = FullyConnected('fc', point, 1)
            logits_fake = FullyConnected('fc', fake, 1)
        self.build_losses(logits_real, logits_fake)
        self.collect_variables()

    def optimizer(self):
        return tf.train.GradientDescentOptimizer(0.1)


def points(num=64, batch=8):
    """Batches of points around (3, -2)."""
    rng = np.random.RandomState(0)
    data = rng.normal(size=(num // batch, batch, 2)).astype(np.float32) + [3, -2]
    return DataFromList([[b] for b in data], shuffle=False)


class RecordUpdates(Callback):
    """After each step: which of the generator's and the discriminator's variables changed."""

    def _before_train(self):
        self.model = self.trainer.model
        self.last = self._values()
        self.changed = []

    def _values(self):
        return self.trainer.sess.run([self.model.g_vars, self.model.d_vars])

    def _trigger_step(self):
        now = self._values()
        self.changed.append(tuple(
            any(not np.array_equal(a, b) for a, b in zip(before, after))
            for before, after in zip(self.last, now)))
        self.last = now


def train(trainer, steps, session_creator=None):
    record = RecordUpdates()
    trainer.train_with_defaults(callbacks=[record], steps_per_epoch=steps, max_epoch=1,
                                session_creator=session_creator)
    return record.changed


def test_gan_trainer_updates_both_players_every_step():
    trainer = GAN.GANTrainer(QueueInput(points()), TinyGAN())
    assert trainer.train_op.name == 'optimize/g_op'
    d_op = tf.get_default_graph().get_operation_by_name('optimize/d_op')
    assert d_op in trainer.train_op.control_inputs      # the discriminator's update runs first
    changed = train(trainer, 4)
    assert changed == [(True, True)] * 4                 # (generator, discriminator)
    assert trainer.global_step == 4
    for name in ('GAN_loss/discrim/loss', 'GAN_loss/gen/loss', 'GAN_loss/gen/accuracy'):
        assert np.isfinite(trainer.monitors.get_latest(name)), name
    assert 0 <= trainer.monitors.get_latest('GAN_loss/discrim/accuracy') <= 1
    assert [v.op.name for v in trainer.model.g_vars] == ['gen/fc/W', 'gen/fc/b']
    assert [v.op.name for v in trainer.model.d_vars] == ['discrim/fc/W', 'discrim/fc/b']


def test_separate_gan_trainer_runs_each_player_on_its_period():
    trainer = GAN.SeparateGANTrainer(QueueInput(points()), TinyGAN(), g_period=3)
    changed = train(trainer, 6)
    assert [g for g, _ in changed] == [True, False, False, True, False, False]
    assert [d for _, d in changed] == [True] * 6
    assert trainer.global_step == 6                      # one step counted per step


def test_separate_gan_trainer_rejects_bad_periods():
    with pytest.raises(ValueError, match='one of d_period'):
        GAN.SeparateGANTrainer(QueueInput(points()), TinyGAN(), d_period=2, g_period=3)


def test_multigpu_gan_trainer_on_two_virtual_cpus():
    trainer = GAN.MultiGPUGANTrainer(['/cpu:0', '/cpu:1'], QueueInput(points()), TinyGAN())
    towers = trainer.towers.training()
    assert [t.ns_name for t in towers] == ['tower0', 'tower1']
    for index, tower in enumerate(towers):
        d_loss, g_loss = tower.outputs
        assert tf.DeviceSpec.from_string(d_loss.device).device_index == index
        assert d_loss.op.name == 'tower{}/GAN_loss/discrim/loss'.format(index)
    assert len(tf.trainable_variables()) == 4            # the towers share the variables
    config = get_default_sess_config()
    config.device_count['CPU'] = 2
    changed = train(trainer, 3, NewSessionCreator(config=config))
    assert changed == [(True, True)] * 3


def test_multigpu_gan_trainer_needs_the_devices_and_a_feedfree_input():
    with pytest.raises(TypeError, match='MultiGPUGANTrainer with 2 towers needs a feed-free InputSource'):
        GAN.MultiGPUGANTrainer(['/cpu:0', '/cpu:1'], FeedInput(points()), TinyGAN())
    with tf.Graph().as_default():
        trainer = GAN.MultiGPUGANTrainer(['/cpu:0', '/cpu:1'], QueueInput(points()), TinyGAN())
        with pytest.raises(ValueError, match="tower 1 is on device '/cpu:1'"):
            train(trainer, 1)


class NotAGAN(ModelDesc):
    def inputs(self):
        return [tf.TensorSpec((None, 2), tf.float32, 'point')]


class ForgetsTheLosses(TinyGAN):
    def build_graph(self, point):
        with tf.variable_scope('gen'):
            FullyConnected('fc', point, 2)
        self.collect_variables(d_scope='gen')


class NoDiscriminator(TinyGAN):
    def build_graph(self, point):
        with tf.variable_scope('gen'):
            FullyConnected('fc', point, 2)
        self.collect_variables()


def test_gan_trainer_errors_name_the_culprit():
    with pytest.raises(TypeError, match='needs a GANModelDesc'):
        GAN.GANTrainer(QueueInput(points()), NotAGAN())
    with tf.Graph().as_default():
        with pytest.raises(AttributeError, match=r'ForgetsTheLosses.build_graph\(\) must set d_loss, g_loss'):
            GAN.GANTrainer(QueueInput(points()), ForgetsTheLosses())
    with tf.Graph().as_default():
        with pytest.raises(ValueError, match="discriminator has no trainable variable under the variable "
                                             "scope 'discrim/'"):
            GAN.GANTrainer(QueueInput(points()), NoDiscriminator())
