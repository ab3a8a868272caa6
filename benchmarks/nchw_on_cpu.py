#!/usr/bin/env python
"""Steps per second of a small ResNet-like model trained on the CPU in channels-first (NCHW,
whose convolutions and pooling run in NHWC between transposes there) against the same model
in channels-last (NHWC).

The model: 32x32x3 inputs, a 3x3 convolution to ``--width`` channels, two residual blocks
(convolution, BatchNorm, ReLU), a strided convolution, max and average pooling, global
average pooling and a 10-way classifier; batch ``--batch``, momentum SGD, data in the graph
(DummyConstantInput), SimpleTrainer without callbacks. A run trains ``--epochs`` epochs after
one of warm-up; its rate is steps over the median epoch time. The two formats run one after
the other in rounds, in alternating order. Printed: per format the median rate over rounds and
the range, then the median of the per-round ratios NCHW / NHWC.

    python benchmarks/nchw_on_cpu.py --rounds 5
    TF_ENABLE_ONEDNN_OPTS=0 python benchmarks/nchw_on_cpu.py --rounds 5   # TensorFlow's generic kernels
"""

import argparse
import os
import statistics

from tensorpack_lite.compat import enable_graph_mode, tf, tfv1
from tensorpack_lite.input_source import DummyConstantInput
from tensorpack_lite.models import (AvgPooling, BatchNorm, BNReLU, Conv2D, FullyConnected, GlobalAvgPooling,
                                    MaxPooling)
from tensorpack_lite.tfutils.argscope import argscope
from tensorpack_lite.train import ModelDesc, SimpleTrainer
from tensorpack_lite.utils import logger
from timing import EpochTimer

FORMATS = ('channels_last', 'channels_first')


class SmallResNet(ModelDesc):
    def __init__(self, data_format, batch, width):
        self.data_format, self.batch, self.width = data_format, batch, width

    def inputs(self):
        return [tf.TensorSpec([self.batch, 32, 32, 3], tf.float32, 'image'),
                tf.TensorSpec([self.batch], tf.int32, 'label')]

    def build_graph(self, image, label):
        x = tf.transpose(image, [0, 3, 1, 2]) if self.data_format == 'channels_first' else image
        layers = [Conv2D, MaxPooling, AvgPooling, GlobalAvgPooling, BatchNorm]
        with argscope(layers, data_format=self.data_format):
            x = Conv2D('conv0', x, self.width, 3, activation=BNReLU)
            for block in range(2):
                residual = Conv2D('res{}/conv1'.format(block), x, self.width, 3, activation=BNReLU)
                residual = Conv2D('res{}/conv2'.format(block), residual, self.width, 3)
                x = tf.nn.relu(x + BatchNorm('res{}/bn'.format(block), residual))
            x = Conv2D('down', x, 2 * self.width, 3, strides=2, activation=BNReLU)   # 16x16
            x = MaxPooling('pool0', x, 2)                                           # 8x8
            x = AvgPooling('pool1', x, 3, strides=1, padding='same')
            logits = FullyConnected('fc', GlobalAvgPooling('gap', x), 10)
        xent = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=label, logits=logits)
        return tf.reduce_mean(xent, name='cost')

    def optimizer(self):
        return tfv1.train.MomentumOptimizer(0.01, 0.9)


def steps_per_second(data_format, args):
    """One run: train, return steps over the median epoch time (the warm-up epoch left out)."""
    model = SmallResNet(data_format, args.batch, args.width)
    timer = EpochTimer()
    with tfv1.Graph().as_default():
        trainer = SimpleTrainer()
        trainer.setup_graph(model.get_input_signature(), DummyConstantInput(
            [s.shape.as_list() for s in model.get_input_signature()]), model.build_graph, model.get_optimizer)
        trainer.train_with_defaults(callbacks=[timer], monitors=[], extra_callbacks=[],
                                    steps_per_epoch=args.steps, max_epoch=args.epochs + 1)
    return args.steps / statistics.median(timer.times[1:])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--rounds', type=int, default=5)
    parser.add_argument('--epochs', type=int, default=3, help='timed epochs per run (after one warm-up)')
    parser.add_argument('--steps', type=int, default=20, help='steps per epoch')
    parser.add_argument('--batch', type=int, default=32)
    parser.add_argument('--width', type=int, default=32, help='channels of the residual blocks')
    args = parser.parse_args()
    enable_graph_mode()
    logger.setLevel('WARNING')

    rates = {fmt: [] for fmt in FORMATS}
    for index in range(args.rounds):
        for fmt in (FORMATS if index % 2 == 0 else FORMATS[::-1]):
            rates[fmt].append(steps_per_second(fmt, args))
        print('round {}: {}'.format(index + 1, ', '.join(
            '{} {:.2f}'.format(fmt, rates[fmt][-1]) for fmt in FORMATS)), flush=True)

    print('\nbatch {}, width {}, {} rounds of {} x {} steps, {} CPUs, TF_ENABLE_ONEDNN_OPTS={}'.format(
        args.batch, args.width, args.rounds, args.epochs, args.steps, os.cpu_count(),
        os.environ.get('TF_ENABLE_ONEDNN_OPTS', '(unset)')))
    print('| data format | steps/s (median) | range |')
    print('|---|---|---|')
    for fmt in FORMATS:
        print('| {} | {:.2f} | {:.2f} - {:.2f} |'.format(fmt, statistics.median(rates[fmt]), min(rates[fmt]),
                                                         max(rates[fmt])))
    ratios = [first / last for first, last in zip(rates['channels_first'], rates['channels_last'])]
    print('\nchannels_first / channels_last: {:.3f} (median of per-round ratios; range {:.3f} - {:.3f})'
          .format(statistics.median(ratios), min(ratios), max(ratios)))


if __name__ == '__main__':
    main()
