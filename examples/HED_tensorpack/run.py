#!/usr/bin/env python
"""Run tensorpack's examples/HED (holistically-nested edge detection, a VGG-16 with five side
outputs) on tensorpack_lite, on a CPU, for a few short epochs on a tiny fake BSDS500: hed.py's
own pipeline (augmentation, ``BatchDataByShape``, ``PrefetchDataZMQ`` = a
``MultiProcessRunnerZMQ`` worker), ``InferenceRunner`` with ``BinaryClassificationStats`` every
epoch, then its ``--run`` prediction on a validation image from the checkpoint.

Nothing of tensorpack is shipped here: give the path of your checkout of its
``examples/HED``. It is copied to a work directory, its imports are renamed from
``tensorpack`` to ``tensorpack_lite``, and the changes of ``changes()`` are applied (each must
match the source exactly once, or the run stops saying which one did not). Needs OpenCV, scipy
and six.

Usage::

    python examples/HED_tensorpack/run.py --tensorpack-examples /path/to/tensorpack/examples/HED \\
        [--workdir /tmp/hed-run]
"""

import glob
import json
import os
import shutil
import sys
import tempfile

from fake_bsds500 import make_fake_bsds500

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from tensorpack_port import driver_arguments, library_env, port, run  # noqa: E402 (examples/)

# hed.py uses TF1 names (tf.placeholder, tf.variable_scope, tf.get_variable, tf.train.AdamOptimizer...)
TF1_MODULES = ['hed.py']
# BSDS500 images are 321x481; a third of that (107x160) keeps every augmentation of hed.py valid
SMALL_SHAPE = (107, 160)


def changes(steps_per_epoch, max_epoch):
    """(file, text in tensorpack's example, replacement, why)."""
    return [
        ('hed.py', '    ds = dataset.BSDS500(name, shuffle=True)\n',
         '    ds = dataset.BSDS500(name, shuffle=True)\n'
         '    ds = AugmentImageComponents(ds, [imgaug.Resize({})], (0, 1))\n'.format(SMALL_SHAPE),
         "images and edge maps resized to {}x{}: a VGG-16 step on 8 images of BSDS500's size takes "
         "minutes on a CPU".format(*SMALL_SHAPE)),
        ('hed.py', 'IMAGE_SHAPE = (320, 480)', 'IMAGE_SHAPE = (96, 160)',
         "the validation center crop (a multiple of 16) fits the resized images"),
        ('hed.py', 'steps_per_epoch = dataset_train.size() * 40',
         'steps_per_epoch = {}'.format(steps_per_epoch), "short epochs"),
        ('hed.py', 'max_epoch=100,', 'max_epoch={},'.format(max_epoch), "a few epochs"),
    ]


def main():
    parser = driver_arguments(__doc__, 'HED', steps_per_epoch=3)
    parser.add_argument('--max-epoch', type=int, default=3)
    parser.add_argument('--train-images', type=int, default=10)
    parser.add_argument('--val-images', type=int, default=3)
    args = parser.parse_args()

    workdir = args.workdir or tempfile.mkdtemp(prefix='hed-')
    example = os.path.join(workdir, 'HED')
    if os.path.exists(example):
        shutil.rmtree(example)
    for line in port(args.tensorpack_examples, example, changes(args.steps_per_epoch, args.max_epoch),
                     TF1_MODULES):
        print('changed: ' + line)
    datadir = os.path.join(workdir, 'data')   # $TENSORPACK_DATASET: BSDS500 reads datadir/bsds500_data
    if os.path.exists(datadir):
        shutil.rmtree(datadir)
    make_fake_bsds500(os.path.join(datadir, 'bsds500_data'), args.train_images, args.val_images)
    env = library_env(TENSORPACK_DATASET=datadir)

    run([sys.executable, 'hed.py'], example, env, args.timeout)   # logs to HED/train_log/hed
    logdir = os.path.join(example, 'train_log', 'hed')
    with open(os.path.join(logdir, 'stats.json')) as f:
        stats = json.load(f)
    last = stats[-1]
    print('trained {} epochs ({} steps): cost {:.4f}, val_precision {:.4f}, val_recall {:.4f}'.format(
        last['epoch_num'], last['global_step'], last['cost'], last['val_precision'], last['val_recall']))

    image = sorted(glob.glob(os.path.join(datadir, 'bsds500_data', 'BSR', 'BSDS500', 'data', 'images',
                                          'val', '*.jpg')))[0]
    run([sys.executable, 'hed.py', '--load', os.path.join(logdir, 'checkpoint'), '--run', image],
        example, env, args.timeout)
    for name in ['out{}.png'.format(k) for k in range(1, 6)] + ['out-fused.png']:
        path = os.path.join(example, name)
        print('hed.py --run wrote {} ({} bytes)'.format(path, os.path.getsize(path)))


if __name__ == '__main__':
    main()
