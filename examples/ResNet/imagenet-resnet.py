#!/usr/bin/env python
"""Train a ResNet on ImageNet (ILSVRC12) with the augmentation of fb.resnet.torch.

The network is ResNet-18 by default (``--depth``: 10, 18, 34 with basic blocks; 50, 101, 152
with bottleneck blocks), with the stride in the 3x3 convolution of a block and the last
BatchNorm of each residual branch starting at zero. Images enter as BGR uint8 and are
normalized in the graph.

Training images get a random crop of 8-100% of the area and 3/4-4/3 aspect ratio resized to
``--image-size`` (``GoogleNetRandomCropAndResize``), brightness, contrast, saturation and
PCA lighting changes in a random order, and a random horizontal flip; validation images are
resized (shortest edge to 256/224 of the image size) and center-cropped. The learning rate is
0.1 x batch/256, divided by 10 after epochs 30, 60, 90 and 100, for 105 epochs (Nesterov
momentum 0.9, weight decay 1e-4): made for GPUs (a step of ResNet-18 on 64 images of 224x224
took about 40 s on 2 busy CPU cores).

Where the images come from:

* ``--data DIR``: the ILSVRC12 layout (``DIR/train/n01440764/*.JPEG``, ``DIR/val/*.JPEG``, the
  val directory flat or by synset) with caffe's meta files (``synsets.txt``, ``train.txt``,
  ``val.txt``...) in ``--meta-dir`` (default ``$TENSORPACK_DATASET/ilsvrc_metadata``). Training
  images are decoded and augmented in ``--parallel`` processes, validation images in threads.
* ``--lmdb FILE``: an LMDB of ``[JPEG bytes as a uint8 array, label]`` written by
  ``LMDBSerializer`` (validation from ``--val-lmdb FILE``, or from ``--data DIR`` when given).
  It reads sequentially, shuffles in a buffer and decodes with ``cv2.imdecode``::

      class BinaryILSVRC12(ILSVRC12Files):
          def __iter__(self):
              for fname, label in super().__iter__():
                  with open(fname, 'rb') as f:
                      yield [np.frombuffer(f.read(), np.uint8), label]

      LMDBSerializer.save(BinaryILSVRC12('/data/imagenet', 'train'), '/data/ILSVRC-train.lmdb')

* ``--fake``: random images (model speed; nothing is learned).

    python examples/ResNet/imagenet-resnet.py --data /data/imagenet --meta-dir /data/caffe_meta
    python examples/ResNet/imagenet-resnet.py --lmdb /data/train.lmdb --val-lmdb /data/val.lmdb
    python examples/ResNet/imagenet-resnet.py --fake --depth 10 --image-size 64 --steps-per-epoch 5  # speed

Logs, ``stats.json`` and checkpoints go to ``train_log/imagenet-resnet`` (``--logdir``); an
existing directory there is replaced.
"""

import argparse
import multiprocessing
import os
import sys

import numpy as np

from tensorpack_lite import (
    AugmentImageComponent, BatchData, BatchNorm, BNReLU, ClassificationError, Conv2D, EstimatedTimeLeft,
    FullyConnected, FakeData, GlobalAvgPooling, InferenceRunner, LMDBSerializer, LocallyShuffleData,
    MapDataComponent, MaxPooling, ModelDesc, ModelSaver, MultiProcessRunnerZMQ, MultiThreadMapData,
    QueueInput, ScheduledHyperParamSetter, SimpleTrainer, SmartInit, SyncMultiGPUTrainerReplicated,
    TrainConfig, argscope, launch_train_with_config, logger, regularize_cost, l2_regularizer)
from tensorpack_lite import tfv1 as tf
from tensorpack_lite.dataflow import dataset, imgaug
from tensorpack_lite.dataflow.image import read_image
from tensorpack_lite.tfutils.summary import add_moving_summary
from tensorpack_lite.utils.develop import import_optional
from tensorpack_lite.utils.gpu import get_num_gpu

cv2 = import_optional('cv2', extra='image', purpose='imagenet-resnet.py')

NUM_CLASSES = 1000


# ----- the network ---------------------------------------------------------------------------

def batch_norm(zero_init=False):
    """A BatchNorm activation; ``zero_init`` starts its scale at 0 (a residual branch that
    begins as the identity)."""
    if zero_init:
        return lambda x: BatchNorm('bn', x, gamma_initializer=tf.zeros_initializer())
    return lambda x: BatchNorm('bn', x)


def shortcut(x, channels, stride, channel_axis):
    """``x`` itself, or a strided 1x1 projection when the shape changes."""
    if x.shape[channel_axis] != channels or stride != 1:
        return Conv2D('convshortcut', x, channels, 1, strides=stride, activation=batch_norm())
    return x


def basic_block(x, channels, stride, channel_axis):
    y = Conv2D('conv1', x, channels, 3, strides=stride, activation=BNReLU)
    y = Conv2D('conv2', y, channels, 3, activation=batch_norm(zero_init=True))
    return tf.nn.relu(y + shortcut(x, channels, stride, channel_axis))


def bottleneck_block(x, channels, stride, channel_axis):
    y = Conv2D('conv1', x, channels, 1, activation=BNReLU)
    y = Conv2D('conv2', y, channels, 3, strides=stride, activation=BNReLU)
    y = Conv2D('conv3', y, channels * 4, 1, activation=batch_norm(zero_init=True))
    return tf.nn.relu(y + shortcut(x, channels * 4, stride, channel_axis))


# depth -> (blocks in each of the 4 groups, block function)
ARCHITECTURES = {
    10: ([1, 1, 1, 1], basic_block),
    18: ([2, 2, 2, 2], basic_block),
    34: ([3, 4, 6, 3], basic_block),
    50: ([3, 4, 6, 3], bottleneck_block),
    101: ([3, 4, 23, 3], bottleneck_block),
    152: ([3, 8, 36, 3], bottleneck_block),
}


class Model(ModelDesc):
    """A ResNet of ``depth`` on ``image_size`` x ``image_size`` BGR uint8 images."""

    weight_decay = 1e-4

    def __init__(self, depth, image_size, data_format='channels_last'):
        self.blocks, self.block_func = ARCHITECTURES[depth]
        self.image_size = image_size
        self.data_format = data_format

    def inputs(self):
        return [tf.TensorSpec([None, self.image_size, self.image_size, 3], tf.uint8, 'input'),
                tf.TensorSpec([None], tf.int32, 'label')]

    def build_graph(self, image, label):
        image = self.normalize(image)
        channel_axis = 3
        if self.data_format == 'channels_first':
            image = tf.transpose(image, [0, 3, 1, 2])
            channel_axis = 1
        logits = self.backbone(image, channel_axis)
        tf.nn.softmax(logits, name='prob')

        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(logits=logits, labels=label),
                              name='xentropy-loss')
        for k in (1, 5):
            wrong = tf.cast(tf.logical_not(tf.nn.in_top_k(logits, label, k)), tf.float32,
                            name='wrong-top{}'.format(k))
            add_moving_summary(tf.reduce_mean(wrong, name='train-error-top{}'.format(k)))
        wd_loss = regularize_cost('.*/W', l2_regularizer(self.weight_decay), name='l2_regularize_loss')
        add_moving_summary(loss, wd_loss)
        return tf.add_n([loss, wd_loss], name='cost')

    @staticmethod
    def normalize(image):
        """uint8 BGR -> float32, each channel standardized with ImageNet's mean and deviation."""
        with tf.name_scope('image_preprocess'):
            mean = np.array([0.485, 0.456, 0.406][::-1], np.float32) * 255   # given as RGB
            std = np.array([0.229, 0.224, 0.225][::-1], np.float32) * 255
            return (tf.cast(image, tf.float32) - mean) / std

    def backbone(self, image, channel_axis):
        with argscope([Conv2D, MaxPooling, GlobalAvgPooling, BatchNorm], data_format=self.data_format), \
                argscope(Conv2D, use_bias=False,
                         kernel_initializer=tf.variance_scaling_initializer(scale=2.0, mode='fan_out')):
            x = Conv2D('conv0', image, 64, 7, strides=2, activation=BNReLU)
            x = MaxPooling('pool0', x, pool_size=3, strides=2, padding='SAME')
            for group, (count, channels) in enumerate(zip(self.blocks, [64, 128, 256, 512])):
                for k in range(count):
                    with tf.variable_scope('group{}/block{}'.format(group, k)):
                        stride = 2 if group > 0 and k == 0 else 1
                        x = self.block_func(x, channels, stride, channel_axis)
            x = GlobalAvgPooling('gap', x)
        return FullyConnected('linear', x, NUM_CLASSES,
                              kernel_initializer=tf.random_normal_initializer(stddev=0.01))

    def optimizer(self):
        lr = tf.get_variable('learning_rate', initializer=0.1, trainable=False)
        tf.summary.scalar('learning_rate-summary', lr)
        return tf.train.MomentumOptimizer(lr, 0.9, use_nesterov=True)


# ----- the data ------------------------------------------------------------------------------

# PCA of ImageNet's RGB pixels (fb.resnet.torch): eigenvalues, and eigenvectors as columns.
# The rows (channels) are reversed to BGR.
LIGHTING_EIGVAL = np.array([0.2175, 0.0188, 0.0045], np.float32) * 255
LIGHTING_EIGVEC = np.array([[-0.5675, 0.7192, 0.4009],
                            [-0.5808, -0.0045, -0.8140],
                            [-0.5836, -0.6948, 0.4203]], np.float32)[::-1]


def fbresnet_augmentor(training, image_size):
    """The augmentors of fb.resnet.torch for BGR uint8 images, producing image_size^2 uint8."""
    if training:
        return [
            imgaug.GoogleNetRandomCropAndResize(target_shape=image_size, interp=cv2.INTER_CUBIC),
            imgaug.ToFloat32(),     # the colour changes compose in float32, clipped once by ToUint8
            imgaug.RandomOrderAug([
                imgaug.BrightnessScale((0.6, 1.4), clip=False),
                imgaug.Contrast((0.6, 1.4), rgb=False, clip=False),
                imgaug.Saturation(0.4, rgb=False, clip=False),
                imgaug.Lighting(0.1, eigval=LIGHTING_EIGVAL, eigvec=LIGHTING_EIGVEC, clip=False),
            ]),
            imgaug.ToUint8(),
            imgaug.Flip(horiz=True),
        ]
    return [imgaug.ResizeShortestEdge(image_size * 256 // 224, interp=cv2.INTER_CUBIC),
            imgaug.CenterCrop((image_size, image_size))]


def decode_jpeg(jpeg):
    """A BGR uint8 image from the bytes of an encoded image (a uint8 array or bytes)."""
    image = cv2.imdecode(np.frombuffer(jpeg, np.uint8), cv2.IMREAD_COLOR)
    if image is None:
        raise ValueError("cannot decode an image from {} bytes (not a JPEG/PNG?)".format(len(jpeg)))
    return image


def batched(ds, batch, training, parallel):
    """Augmented training datapoints (a stream of single images) -> batches from ``parallel``
    processes; validation datapoints -> batches in order, the last one smaller."""
    if training:
        return BatchData(MultiProcessRunnerZMQ(ds, parallel), batch, remainder=False)
    return BatchData(ds, batch, remainder=True)


def dataflow_from_dir(args, split):
    """[image, label] batches of the ILSVRC12 directory ``args.data``."""
    augmentors = fbresnet_augmentor(split == 'train', args.image_size)
    if split == 'train':
        ds = dataset.ILSVRC12(args.data, 'train', meta_dir=args.meta_dir, shuffle=True)
        ds = AugmentImageComponent(ds, augmentors, copy=False)
        return batched(ds, args.batch, True, args.parallel)
    augmentor = imgaug.AugmentorList(augmentors)

    def read_and_augment(datapoint):
        filename, label = datapoint
        return [augmentor.augment(read_image(filename, purpose='imagenet-resnet.py')), label]

    ds = dataset.ILSVRC12Files(args.data, split, meta_dir=args.meta_dir, shuffle=False)
    ds = MultiThreadMapData(ds, args.parallel, read_and_augment, buffer_size=2 * args.batch, strict=True)
    return batched(ds, args.batch, False, args.parallel)


def dataflow_from_lmdb(path, args, training):
    """[image, label] batches of an LMDB of [JPEG bytes, label] datapoints."""
    ds = LMDBSerializer.load(path, shuffle=False)   # sequential reads are fast
    if training:
        ds = LocallyShuffleData(ds, min(50000, len(ds)))
    ds = MapDataComponent(ds, decode_jpeg, 0)
    ds = AugmentImageComponent(ds, fbresnet_augmentor(training, args.image_size), copy=False)
    return batched(ds, args.batch, training, args.parallel)


def get_data(args):
    """(training batches, validation batches or None)."""
    if args.fake:
        shape = [args.batch, args.image_size, args.image_size, 3]
        return FakeData([shape, [args.batch]], 1000, random=False, dtype=['uint8', 'int32'],
                        domain=[(0, 255), (0, NUM_CLASSES)]), None
    if args.lmdb:
        train = dataflow_from_lmdb(args.lmdb, args, training=True)
    else:
        train = dataflow_from_dir(args, 'train')
    if args.val_lmdb:
        return train, dataflow_from_lmdb(args.val_lmdb, args, training=False)
    if args.data:
        return train, dataflow_from_dir(args, 'val')
    return train, None


def get_config(model, train, val, args, num_towers):
    base_lr = 0.1 * args.batch * num_towers / 256
    callbacks = [
        ModelSaver(),
        EstimatedTimeLeft(),
        ScheduledHyperParamSetter('learning_rate', [(0, base_lr), (30, base_lr * 1e-1), (60, base_lr * 1e-2),
                                                    (90, base_lr * 1e-3), (100, base_lr * 1e-4)]),
    ]
    if val is not None:
        errors = [ClassificationError('wrong-top{}'.format(k), 'val-error-top{}'.format(k)) for k in (1, 5)]
        callbacks.append(InferenceRunner(QueueInput(val), errors))
    else:
        logger.info("No validation data: training only.")
    return TrainConfig(
        model=model,
        data=QueueInput(train),
        callbacks=callbacks,
        steps_per_epoch=args.steps_per_epoch or (100 if args.fake else len(train)),
        max_epoch=args.max_epoch,
        session_init=SmartInit(args.load), mixed_precision=args.mixed_precision)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[1])
    parser.add_argument('--data', help='ILSVRC12 directory (train/, val/)')
    parser.add_argument('--meta-dir', help="caffe's ILSVRC12 meta files (default: "
                                           "$TENSORPACK_DATASET/ilsvrc_metadata)")
    parser.add_argument('--lmdb', help='training LMDB of [JPEG bytes, label] (instead of --data train/)')
    parser.add_argument('--val-lmdb', help='validation LMDB of [JPEG bytes, label] (instead of --data val/)')
    parser.add_argument('--fake', action='store_true', help='random images: measures the model speed')
    parser.add_argument('-d', '--depth', type=int, choices=sorted(ARCHITECTURES), default=18,
                        help='ResNet depth (default 18)')
    parser.add_argument('--image-size', type=int, default=224, help='training image size (default 224)')
    parser.add_argument('--batch', type=int, default=64, help='batch size of each GPU (default 64)')
    parser.add_argument('--parallel', type=int, default=max(1, multiprocessing.cpu_count() // 2),
                        help='processes (and validation threads) decoding images (default: half the CPUs)')
    parser.add_argument('--max-epoch', type=int, default=105, help='number of epochs (default 105)')
    parser.add_argument('--steps-per-epoch', type=int,
                        help='default: one pass over the training set (100 with --fake)')
    parser.add_argument('--load', help='a checkpoint to start from')
    parser.add_argument('--mixed-precision', choices=['bf16', 'fp16'],
                        help='compute in 16 bits (docs/mixed_precision.md; default: float32)')
    parser.add_argument('--logdir', default='train_log/imagenet-resnet',
                        help='where logs, stats.json and checkpoints go (replaced if it exists; '
                             'default %(default)s)')
    args = parser.parse_args()
    if args.fake == bool(args.data or args.lmdb):
        parser.error("give the images with --data DIR (the ILSVRC12 layout, from https://image-net.org) "
                     "and/or --lmdb FILE, or use --fake for random images")
    if args.image_size < 32:
        parser.error("--image-size must be at least 32 (5 halvings), got {}".format(args.image_size))

    try:
        train, val = get_data(args)
    except FileNotFoundError as err:
        sys.exit("imagenet-resnet: {}".format(err))

    num_gpu = get_num_gpu()
    model = Model(args.depth, args.image_size, 'channels_first' if num_gpu > 0 else 'channels_last')
    logger.set_logger_dir(args.logdir, action='d')
    trainer = SyncMultiGPUTrainerReplicated(num_gpu) if num_gpu > 1 else SimpleTrainer()
    launch_train_with_config(get_config(model, train, val, args, max(num_gpu, 1)), trainer)
    if val is not None:
        logger.info("Final val-error-top1: {:.4f}, val-error-top5: {:.4f} (log in {})".format(
            trainer.monitors.get_latest('val-error-top1'), trainer.monitors.get_latest('val-error-top5'),
            os.path.abspath(logger.get_logger_dir())))


if __name__ == '__main__':
    main()
