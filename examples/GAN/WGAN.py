#!/usr/bin/env python
"""Wasserstein GAN (Arjovsky et al. 2017) on handwritten digits, then a PNG sheet of samples.

The networks are DCGAN.py's, except that the critic (the discriminator) uses LayerNorm
instead of BatchNorm; the losses are the Wasserstein ones and the critic's weights are clipped
to [-0.01, 0.01] after every step. The generator is updated every step and the critic every
third step (SeparateGANTrainer with d_period=3, tensorpack's schedule for this example; the
paper's five critic updates per generator update, ``g_period=5``, learns much slower here).
Same command line as DCGAN.py:

    python examples/GAN/WGAN.py                                   # train, then sample
    python examples/GAN/WGAN.py --max-epoch 1 --steps-per-epoch 5  # smoke run
"""

import DCGAN
from GAN import SeparateGANTrainer
from tensorpack_lite import Callback, LayerNorm, logger
from tensorpack_lite import tfv1 as tf
from tensorpack_lite.tfutils.summary import add_moving_summary

CLIP = 0.01


class Model(DCGAN.Model):
    """DCGAN's networks with a LayerNorm critic, trained with the Wasserstein losses."""

    def normalize(self, index, x):
        return LayerNorm('ln{}'.format(index), x)

    def build_losses(self, logits_real, logits_fake):
        """The critic maximizes ``E[critic(real)] - E[critic(fake)]``; the generator
        maximizes ``E[critic(fake)]``."""
        with tf.name_scope('GAN_loss'):
            self.d_loss = tf.subtract(tf.reduce_mean(logits_fake), tf.reduce_mean(logits_real), name='d_loss')
            self.g_loss = tf.negative(tf.reduce_mean(logits_fake), name='g_loss')
            add_moving_summary(self.d_loss, self.g_loss)

    def optimizer(self):
        return tf.train.RMSPropOptimizer(1e-4)


class ClipCallback(Callback):
    """Clips every variable of the critic to [-CLIP, CLIP] after each step."""

    def _setup_graph(self):
        clips = []
        for var in tf.trainable_variables():
            if var.op.name.startswith('discrim/'):
                clips.append(tf.assign(var, tf.clip_by_value(var, -CLIP, CLIP)))
        logger.info("ClipCallback clips {} variables of the critic.".format(len(clips)))
        self._op = tf.group(*clips, name='clip')

    def _trigger_step(self):
        self.trainer.sess.run(self._op)


if __name__ == '__main__':
    DCGAN.run(DCGAN.get_parser(__doc__.split('\n')[1], 'train_log/WGAN'),
              lambda args: Model(args.image_size, args.batch, args.z_dim),
              lambda input, model, **kwargs: SeparateGANTrainer(input, model, d_period=3, **kwargs),
              [ClipCallback()], 'GAN_loss/d_loss')
