#!/usr/bin/env python
"""Steps per second of a CIFAR-size convnet in float32 and with ``mixed_precision='bf16'``
(or 'fp16'), through the library's default path.

The model: 32x32x3 images, three 3x3 convs (64, 128, 128 channels, ReLU) each followed by
2x2 max-pooling, a dense layer to 10 classes, batch 64, Momentum. The path: a DataFlow of
random numpy batches -> the default InputSource -> SimpleTrainer with the default callbacks
and monitors (``launch_train_with_config``). Each run is timed per epoch; its first epoch
is warm-up; a run's rate is the median of the other epochs. The modes run in rounds, in
alternating order, so that drift hits both alike. Printed: each mode's median rate over the
rounds, and the ratio of the medians and the median of the per-round ratios. The machine
is shared and noisy: give it several rounds and read the ratios. Every speed run first prints
one line: the CPU's model name, which of the flags in ``CPU_FLAGS`` /proc/cpuinfo lists and
which it does not, and TensorFlow's version.

    python benchmarks/mixed_precision.py --rounds 5

With ``--bare`` (speed, 'bf16' only): does the library lose anything to a bare loop? Each
round runs, in alternating order, the library in float32 and in bf16 and a bare loop of the
same net in both: the graph of the same ModelDesc, its optimizer, the same batches fed by
``feed_dict`` to ``sess.run(train_op)`` in a session of ``mixed_precision_session_config``
(the trainer's rewrite), timed like the library's runs. Printed per mode: the library's and
the bare loop's median rates and library / bare; and bf16 / float32 of each path.

    python benchmarks/mixed_precision.py --bare --rounds 5

With ``--accuracy``: instead of speed, the test accuracy of float32, 'bf16' and 'fp16' runs of
the same model on real data (scikit-learn's digits made 32x32x3, see ``digits_as_cifar``),
``--seeds`` runs per mode of ``--epochs`` epochs each, printed as a table per seed with the
means and each mean's difference to float32's:

    python benchmarks/mixed_precision.py --accuracy --epochs 15 --seeds 3
"""

import argparse
import os
import platform
import statistics
import tempfile
import time

import numpy as np

from tensorpack_lite.compat import tf, tfv1
from tensorpack_lite.callbacks import ClassificationError, InferenceRunner
from tensorpack_lite.dataflow import BatchData, DataFromList
from tensorpack_lite.precision.mixed_precision import mixed_precision_session_config
from tensorpack_lite.tfutils.tower import TowerContext
from tensorpack_lite.train import ModelDesc, SimpleTrainer, TrainConfig, launch_train_with_config
from tensorpack_lite.utils import fix_rng_seed, logger
from timing import EpochTimer

BATCH = 64
CPU_FLAGS = ('avx512f', 'avx512_bf16', 'avx512_fp16', 'amx_tile', 'amx_bf16', 'amx_fp16')


class CifarConvNet(ModelDesc):
    def inputs(self):
        return [tf.TensorSpec([None, 32, 32, 3], tf.float32, 'image'),
                tf.TensorSpec([None], tf.int32, 'label')]

    def build_graph(self, image, label):
        logits = self.logits(image)
        wrong = tf.not_equal(tf.argmax(logits, 1, output_type=tf.int32), label)
        tf.cast(wrong, tf.float32, name='wrong')   # for --accuracy; not run by a training step
        xent = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=label, logits=logits)
        return tf.reduce_mean(xent, name='cost')

    def logits(self, image):
        x = image
        for i, channels in enumerate([64, 128, 128]):
            kernel = tfv1.get_variable('conv{}/W'.format(i), [3, 3, x.shape[-1], channels])
            bias = tfv1.get_variable('conv{}/b'.format(i), [channels], initializer=tfv1.zeros_initializer())
            x = tf.nn.relu(tf.nn.conv2d(x, kernel, 1, 'SAME') + bias)
            x = tf.nn.max_pool2d(x, 2, 2, 'VALID')
        x = tf.reshape(x, [-1, 4 * 4 * 128])
        return tf.matmul(x, tfv1.get_variable('fc/W', [4 * 4 * 128, 10]))

    def optimizer(self):
        return tfv1.train.MomentumOptimizer(0.01, 0.9)


def cpu_description(cpuinfo='/proc/cpuinfo'):
    """The CPU's model name, the flags of ``CPU_FLAGS`` that ``cpuinfo`` lists and those it does
    not (the lists are empty when the file cannot be read)."""
    try:
        with open(cpuinfo) as f:
            lines = f.read().splitlines()
    except OSError:
        return platform.processor() or 'unknown', [], []
    name, flags = platform.processor() or 'unknown', set()
    for line in lines:
        key, _, value = line.partition(':')
        if key.strip() == 'model name':
            name = value.strip()
        elif key.strip() == 'flags':
            flags.update(value.split())
    return name, [f for f in CPU_FLAGS if f in flags], [f for f in CPU_FLAGS if f not in flags]


def numpy_batches(num):
    """``num`` random [image, label] batches of BATCH (the same ones on every call)."""
    rng = np.random.RandomState(0)
    return [[rng.rand(BATCH, 32, 32, 3).astype('float32'), rng.randint(0, 10, BATCH).astype('int32')]
            for _ in range(num)]


def random_batches(num):
    return DataFromList(numpy_batches(num), shuffle=False)


def run(mode, steps, epochs):
    """Steps per second of one training run (the median of its epochs after the first)."""
    timer = EpochTimer()
    with tfv1.Graph().as_default():
        config = TrainConfig(model=CifarConvNet(), dataflow=random_batches(steps), callbacks=[timer],
                             steps_per_epoch=steps, max_epoch=epochs, mixed_precision=mode)
        launch_train_with_config(config, SimpleTrainer())
    return steps / statistics.median(timer.times[1:])


def bare_run(mode, steps, epochs):
    """Steps per second of the same net and optimizer in a bare ``sess.run(train_op, feed_dict)``
    loop over ``steps`` fed batches per epoch, timed like :func:`run`."""
    model = CifarConvNet()
    with tfv1.Graph().as_default():
        inputs = [tfv1.placeholder(spec.dtype, spec.shape, spec.name) for spec in model.inputs()]
        with TowerContext('', is_training=True):
            cost = model.build_graph(*inputs)
        train_op = model.optimizer().minimize(cost)
        init = tfv1.global_variables_initializer()
        feeds = [dict(zip(inputs, batch)) for batch in numpy_batches(steps)]
        with tfv1.Session(config=mixed_precision_session_config(mode)) as sess:
            sess.run(init)
            sess.graph.finalize()
            times = []
            for _ in range(epochs):
                start = time.perf_counter()
                for feed in feeds:
                    sess.run(train_op, feed_dict=feed)
                times.append(time.perf_counter() - start)
    return steps / statistics.median(times[1:])


def digits_as_cifar(test_size=297):
    """scikit-learn's 8x8 digits (1797 images, values 0..16) as 32x32x3 images in [0, 1]: each
    pixel repeated 4x4 and each image tinted by a color of its own. A fixed split: ``test_size``
    images for testing, the rest for training. The data are not CIFAR-10's: only the input size
    and the network are CIFAR's."""
    from sklearn.datasets import load_digits
    digits = load_digits()
    rng = np.random.RandomState(0)
    gray = np.repeat(np.repeat(digits.images / 16.0, 4, axis=1), 4, axis=2)
    colors = rng.uniform(0.3, 1.0, (len(gray), 1, 1, 3))
    images = (gray[..., None] * colors).astype('float32')
    labels = digits.target.astype('int32')
    order = rng.permutation(len(images))
    test, train = order[:test_size], order[test_size:]
    return [[images[i], labels[i]] for i in train], [[images[i], labels[i]] for i in test]


def accuracy_run(mode, seed, epochs, data):
    """Test accuracy after ``epochs`` epochs of training with ``mode``, and the fp16 skipped steps."""
    train, test = data
    fix_rng_seed(seed)
    train_df = BatchData(DataFromList(train, shuffle=True), BATCH)
    test_df = BatchData(DataFromList(test, shuffle=False), BATCH, remainder=True)
    trainer = SimpleTrainer()
    with tfv1.Graph().as_default():
        tfv1.set_random_seed(seed)
        config = TrainConfig(model=CifarConvNet(), dataflow=train_df, max_epoch=epochs,
                             callbacks=[InferenceRunner(test_df, ClassificationError('wrong', 'test-error'))],
                             mixed_precision=mode)
        launch_train_with_config(config, trainer)
    skipped = trainer.monitors.get_latest('loss_scale/skipped_steps') if mode == 'fp16' else None
    return 100 * (1 - trainer.monitors.get_latest('test-error')), skipped


def accuracy(args):
    """Prints the test accuracy of float32, 'bf16' and 'fp16' runs of each seed, their means,
    and the difference of each mean to float32's."""
    data = digits_as_cifar()
    modes = [None, 'bf16', 'fp16']
    results = {mode: [] for mode in modes}
    for seed in range(1, args.seeds + 1):
        for mode in modes:
            start = time.perf_counter()
            acc, skipped = accuracy_run(mode, seed, args.epochs, data)
            results[mode].append(acc)
            print("seed {} {}: {:.2f}% ({:.0f} s{})".format(
                seed, mode or 'float32', acc, time.perf_counter() - start,
                '' if skipped is None else ', skipped steps {:.0f}'.format(skipped)), flush=True)
    base = statistics.mean(results[None])
    print("| mode | " + " | ".join("seed {}".format(s) for s in range(1, args.seeds + 1)) +
          " | mean | mean - float32 |")
    print("| --- " * (args.seeds + 3) + "|")
    for mode in modes:
        mean = statistics.mean(results[mode])
        print("| {} | {} | {:.2f}% | {:+.2f} |".format(
            mode or 'float32', " | ".join("{:.2f}%".format(a) for a in results[mode]), mean, mean - base))


def bare(args):
    """``--bare``: rounds of the library and the bare loop in float32 and bf16; prints each mode's
    median rates and library / bare, and bf16 / float32 of each path."""
    runs = [('library', None), ('bare', None), ('library', 'bf16'), ('bare', 'bf16')]
    rates = {key: [] for key in runs}
    for index in range(args.rounds):
        for path, mode in (runs if index % 2 == 0 else runs[::-1]):
            rates[path, mode].append((run if path == 'library' else bare_run)(mode, args.steps, args.epochs))
        print("round {}: ".format(index + 1) + ", ".join("{} {} {:.2f}".format(
            path, mode or 'float32', rates[path, mode][-1]) for path, mode in runs) + " steps/s", flush=True)

    def ratios(top, bottom):
        return (statistics.median(rates[top]) / statistics.median(rates[bottom]),
                statistics.median(t / b for t, b in zip(rates[top], rates[bottom])))

    for mode in (None, 'bf16'):
        lib, plain = statistics.median(rates['library', mode]), statistics.median(rates['bare', mode])
        print("{}: library {:.2f} steps/s, bare {:.2f} steps/s (medians); library / bare {:.3f}x "
              "(medians), {:.3f}x (median of per-round ratios)".format(
                  mode or 'float32', lib, plain, *ratios(('library', mode), ('bare', mode))))
    for path in ('library', 'bare'):
        print("{} bf16 / float32: {:.3f}x (medians), {:.3f}x (median of per-round ratios)".format(
            path, *ratios((path, 'bf16'), (path, None))))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[1])
    parser.add_argument('--rounds', type=int, default=3)
    parser.add_argument('--steps', type=int, default=20, help='steps per epoch')
    parser.add_argument('--epochs', type=int, default=4, help='epochs per run (the first is warm-up)')
    parser.add_argument('--mode', choices=['bf16', 'fp16'], default='bf16')
    parser.add_argument('--accuracy', action='store_true',
                        help='instead of speed: test accuracy on digits made CIFAR-size, float32 against '
                             'bf16 and fp16, --epochs epochs per run (use about 15)')
    parser.add_argument('--seeds', type=int, default=3, help='with --accuracy: runs per mode')
    parser.add_argument('--bare', action='store_true',
                        help='speed: the library and a bare sess.run(train_op) loop, float32 and bf16')
    args = parser.parse_args()
    if args.bare and args.accuracy:
        parser.error('--bare is a speed mode: not with --accuracy')
    if args.bare and args.mode != 'bf16':
        parser.error("--bare compares float32 and bf16 only (the bare loop has no loss scaling)")
    logger.set_logger_dir(os.path.join(tempfile.mkdtemp(), 'log'), action='d')
    if args.accuracy:
        accuracy(args)
        return
    name, present, absent = cpu_description()
    print("CPU: {}; flags: {}; absent: {}; TensorFlow {}".format(
        name, ' '.join(present) or '-', ' '.join(absent) or '-', tf.__version__), flush=True)
    if args.bare:
        bare(args)
        return
    modes = [None, args.mode]
    rates = {mode: [] for mode in modes}
    for index in range(args.rounds):
        for mode in (modes if index % 2 == 0 else modes[::-1]):
            rates[mode].append(run(mode, args.steps, args.epochs))
        print("round {}: float32 {:.2f} steps/s, {} {:.2f} steps/s".format(
            index + 1, rates[None][-1], args.mode, rates[args.mode][-1]), flush=True)
    base, mixed = statistics.median(rates[None]), statistics.median(rates[args.mode])
    paired = statistics.median(m / b for m, b in zip(rates[args.mode], rates[None]))
    print("float32: median {:.2f} steps/s ({:.1f} ms/step), range {:.2f}..{:.2f}".format(
        base, 1000 / base, min(rates[None]), max(rates[None])))
    print("{}: median {:.2f} steps/s ({:.1f} ms/step), range {:.2f}..{:.2f}".format(
        args.mode, mixed, 1000 / mixed, min(rates[args.mode]), max(rates[args.mode])))
    print("ratio {} / float32: {:.2f}x (medians), {:.2f}x (median of per-round ratios)".format(
        args.mode, mixed / base, paired))


if __name__ == '__main__':
    main()
