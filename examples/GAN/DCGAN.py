#!/usr/bin/env python
"""DCGAN (Radford et al. 2015) on handwritten digits, then a PNG sheet of generated samples.

By default it learns the 8x8 digits scikit-learn ships, resized to 16x16 (nothing to
download); the default run (2000 steps) takes 1-2 minutes on 2 CPU cores. After training, 100 samples
from the last checkpoint are written to ``<logdir>/samples.png``.

    python examples/GAN/DCGAN.py                                   # train, then sample
    python examples/GAN/DCGAN.py --max-epoch 1 --steps-per-epoch 5  # smoke run
    python examples/GAN/DCGAN.py --sample --load train_log/DCGAN --out samples.png   # its last checkpoint
"""

import argparse
import os

import numpy as np

from GAN import GANModelDesc, GANTrainer
from tensorpack_lite import (
    BatchData, BatchNorm, BNReLU, Conv2D, Conv2DTranspose, FullyConnected, ModelSaver,
    OfflinePredictor, PredictConfig, QueueInput, SelectComponent, SmartInit, argscope, logger)
from tensorpack_lite import tfv1 as tf
from tensorpack_lite.dataflow.dataset import Digits
from tensorpack_lite.tfutils.scope_utils import auto_reuse_variable_scope
from tensorpack_lite.utils.viz import stack_patches


class Model(GANModelDesc):
    """A generator of ``shape`` x ``shape`` one-channel images from ``z_dim`` uniform noise and
    a convolutional discriminator; ``shape`` is 4 times a power of 2."""

    INPUT_NOISE = 0.1
    """Standard deviation of the noise added to the discriminator's inputs (in [-1, 1])."""

    def __init__(self, shape, batch, z_dim, nf=32):
        num_up = int(np.log2(shape // 4))
        if shape < 8 or 4 * 2 ** num_up != shape:
            raise ValueError("Model: the image size must be 4 times a power of 2 (8, 16, 32...), got "
                             "{}".format(shape))
        self.shape, self.batch, self.z_dim, self.nf = shape, batch, z_dim, nf
        self.num_up = num_up

    def inputs(self):
        return [tf.TensorSpec((None, self.shape, self.shape), tf.float32, 'input')]

    def generator(self, z):
        """A ``[N, shape, shape, 1]`` image in [-1, 1] from noise ``z``; the output tensor
        is named ``gen`` (``gen/gen`` under the generator's scope)."""
        channels = self.nf * 2 ** (self.num_up - 1)
        x = FullyConnected('fc0', z, 4 * 4 * channels)
        x = BNReLU(tf.reshape(x, [-1, 4, 4, channels]))
        with argscope(Conv2DTranspose, activation=BNReLU, kernel_size=4, strides=2):
            for k in range(1, self.num_up):
                channels //= 2
                x = Conv2DTranspose('deconv{}'.format(k), x, channels)
            x = Conv2DTranspose('deconv{}'.format(self.num_up), x, 1, activation=tf.identity)
        return tf.tanh(x, name='gen')

    @auto_reuse_variable_scope
    def discriminator(self, images):
        """One logit per image: strided convolutions down to 4x4, then a linear layer."""
        with argscope(Conv2D, kernel_size=4, strides=2):
            x = Conv2D('conv0', images, self.nf, activation=tf.nn.leaky_relu)
            for k in range(1, self.num_up):
                x = Conv2D('conv{}'.format(k), x, self.nf * 2 ** k)
                x = tf.nn.leaky_relu(self.normalize(k, x))
        return FullyConnected('fct', x, 1)

    def normalize(self, index, x):
        """The normalization after the discriminator's convolution ``index``."""
        return BatchNorm('bn{}'.format(index), x)

    def build_graph(self, image_pos):
        image_pos = tf.expand_dims(image_pos * 2 - 1, 3)    # [0, 1] -> [-1, 1], one channel
        z = tf.random_uniform([self.batch, self.z_dim], -1, 1, name='z_train')
        z = tf.placeholder_with_default(z, [None, self.z_dim], name='z')

        with argscope([Conv2D, Conv2DTranspose, FullyConnected],
                      kernel_initializer=tf.truncated_normal_initializer(stddev=0.02)):
            with tf.variable_scope('gen'):
                image_gen = self.generator(z)
            tf.summary.image('generated-samples', image_gen, max_outputs=30)
            # The discriminator sees the real and the fake batch separately (its BatchNorm
            # statistics are per batch), with the same variables, and both with a little
            # Gaussian noise ("instance noise"), which keeps it from winning too easily on
            # this small dataset. The second call reuses the first one's variables.
            with tf.variable_scope('discrim'):
                logits_real = self.discriminator(add_noise(image_pos, self.INPUT_NOISE))
                logits_fake = self.discriminator(add_noise(image_gen, self.INPUT_NOISE))
        self.build_losses(logits_real, logits_fake)
        self.collect_variables()

    def optimizer(self):
        lr = tf.get_variable('learning_rate', initializer=2e-4, trainable=False)
        return tf.train.AdamOptimizer(lr, beta1=0.5, epsilon=1e-3)


def add_noise(images, stddev):
    """``images`` plus Gaussian noise of standard deviation ``stddev`` (none when 0)."""
    if not stddev:
        return images
    return images + tf.random_normal(tf.shape(images), stddev=stddev)


def get_data(shape, batch):
    """Batches of the Digits training images at ``shape`` x ``shape`` (the labels dropped)."""
    return BatchData(SelectComponent(Digits('train', image_size=shape), [0]), batch, remainder=False)


def save_samples(model, session_init, path, rows=10, scale=2, seed=0):
    """Generate ``rows`` x ``rows`` images with the variables of ``session_init`` and write
    them as one PNG sheet to ``path`` (each pixel repeated ``scale`` times); return the sheet."""
    predictor = OfflinePredictor(PredictConfig(
        model=model, session_init=session_init, input_names=['z'], output_names=['gen/gen']))
    z = np.random.RandomState(seed).uniform(-1, 1, size=(rows * rows, model.z_dim)).astype('float32')
    images, = predictor(z)
    images = (images[..., 0] + 1) * 127.5                 # [-1, 1] -> [0, 255]
    images = images.repeat(scale, axis=1).repeat(scale, axis=2)
    sheet = stack_patches(np.clip(images, 0, 255), rows, rows, border=2 * scale)
    write_png(path, sheet)
    return sheet


def write_png(path, image):
    """Write a uint8 HxWx1 or HxWx3 image as PNG."""
    import matplotlib.image
    if image.shape[-1] == 1:
        matplotlib.image.imsave(path, image[..., 0], cmap='gray', vmin=0, vmax=255)
    else:
        matplotlib.image.imsave(path, image)
    logger.info("Samples written to {}".format(path))


def get_parser(description, logdir, max_epoch=20):
    """The command line of the GAN examples on Digits."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument('--image-size', type=int, default=16, help='side of the images (default 16)')
    parser.add_argument('--z-dim', type=int, default=100, help='dimension of the noise (default 100)')
    parser.add_argument('--batch', type=int, default=64, help='batch size (default 64)')
    parser.add_argument('--max-epoch', type=int, default=max_epoch,
                        help='number of epochs (default %(default)s)')
    parser.add_argument('--steps-per-epoch', type=int, default=100, help='steps per epoch (default 100)')
    parser.add_argument('--logdir', default=logdir,
                        help='where logs, checkpoints and samples.png go (replaced if it exists; '
                             'default %(default)s)')
    parser.add_argument('--mixed-precision', choices=['bf16', 'fp16'],
                        help='compute in 16 bits (docs/mixed_precision.md; default: float32)')
    parser.add_argument('--sample', action='store_true', help='only write samples from --load')
    parser.add_argument('--load', help='with --sample: a checkpoint, or a directory of checkpoints')
    parser.add_argument('--out', default='samples.png', help='PNG written by --sample')
    return parser


def run(parser, make_model, make_trainer, callbacks, final_stat):
    """Parse the command line, then sample from a checkpoint (--sample) or train with
    ``make_trainer(input, model, mixed_precision=...)`` and write samples of the last checkpoint."""
    args = parser.parse_args()
    if args.sample:
        if not args.load:
            parser.error("--sample needs --load CHECKPOINT")
        save_samples(make_model(args), SmartInit(args.load), args.out)
        return
    logger.set_logger_dir(args.logdir, action='d')
    trainer = make_trainer(QueueInput(get_data(args.image_size, args.batch)), make_model(args),
                           mixed_precision=args.mixed_precision)
    trainer.train_with_defaults(callbacks=[ModelSaver()] + callbacks,
                                steps_per_epoch=args.steps_per_epoch, max_epoch=args.max_epoch)
    logger.info("Final {} (moving average): {:.4f}".format(
        final_stat, trainer.monitors.get_latest(final_stat)))
    save_samples(make_model(args), SmartInit(tf.train.latest_checkpoint(logger.get_logger_dir())),
                 os.path.join(logger.get_logger_dir(), 'samples.png'))


if __name__ == '__main__':
    run(get_parser(__doc__.split('\n')[1], 'train_log/DCGAN'),
        lambda args: Model(args.image_size, args.batch, args.z_dim),
        GANTrainer, [], 'GAN_loss/discrim/accuracy')
