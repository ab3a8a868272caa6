#!/usr/bin/env python
"""Run tensorpack's examples/FasterRCNN (Mask R-CNN + FPN) on tensorpack_lite, on a CPU, for a
few steps on a tiny generated COCO-format dataset: train.py with the replicated trainer and
the COCO evaluation callback, then predict.py on a validation image from the checkpoint.

Nothing of tensorpack is shipped here: give the path of your checkout of its
``examples/FasterRCNN``. It is copied to a work directory, its imports are renamed from
``tensorpack`` to ``tensorpack_lite``, and the changes listed in ``CHANGES`` are applied
(each must match the source exactly, or the run stops saying which one did not). Needs
``pip install pycocotools`` (the ``coco`` extra) and OpenCV, scipy, tabulate, termcolor.

Usage::

    python examples/FasterRCNN_tensorpack/run.py \\
        --tensorpack-examples /path/to/tensorpack/examples/FasterRCNN [--workdir /tmp/frcnn-run]
"""

import glob
import os
import shutil
import sys
import tempfile

from tiny_coco import make_tiny_coco

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from tensorpack_port import driver_arguments, library_env, port, run  # noqa: E402 (examples/)

# (file, text in tensorpack's example, replacement, why)
CHANGES = [
    ('config.py', 'assert ngpu > 0, "Has to train with GPU!"',
     'ngpu = max(ngpu, 1)  # CPU: one tower',
     "the example refuses to train without a GPU; on a CPU it trains with one tower"),
    ('data.py', 'dtype=np.int)', 'dtype=int)',
     "np.int was removed in NumPy 1.24 (NumPy-1 alias)"),
    ('common.py', 'dtype=np.bool)', 'dtype=bool)',
     "np.bool was removed in NumPy 1.24 (NumPy-1 alias)"),
    ('predict.py', 'written to output.png".format(input_file))\n    tpviz.interactive_imshow(viz)\n',
     'written to output.png".format(input_file))\n    if os.environ.get("DISPLAY"):\n'
     '        tpviz.interactive_imshow(viz)\n',
     "headless machine: output.png is written, but there is no window to show it in"),
]
# files whose `import tensorflow as tf` uses TF1 names (tf.get_variable, tf.variance_scaling_initializer,
# tf.count_nonzero, tf.losses.huber_loss...): on TensorFlow 2 they need the compat.v1 API
TF1_MODULES = ['eval.py', 'predict.py', 'modeling/*.py', 'utils/box_ops.py']


def config_args(datadir, steps_per_epoch, lr_schedule, eval_period):
    """The example's --config overrides: Mask R-CNN + FPN, a small ResNet and tiny sizes."""
    return [
        'MODE_FPN=True', 'MODE_MASK=True', 'TRAINER=replicated',
        'DATA.BASEDIR={}'.format(datadir), "DATA.TRAIN=('coco_train2017',)", "DATA.VAL=('coco_val2017',)",
        'DATA.NUM_WORKERS=0',
        'BACKBONE.RESNET_NUM_BLOCKS=[1,1,1,1]', 'BACKBONE.FREEZE_AT=0',
        'PREPROC.TRAIN_SHORT_EDGE_SIZE=[64,64]', 'PREPROC.TEST_SHORT_EDGE_SIZE=64', 'PREPROC.MAX_SIZE=128',
        'RPN.BATCH_PER_IM=64', 'RPN.TRAIN_PER_LEVEL_NMS_TOPK=64', 'RPN.TEST_PER_LEVEL_NMS_TOPK=32',
        'FRCNN.BATCH_PER_IM=32', 'FPN.NUM_CHANNEL=32', 'FPN.FRCNN_FC_HEAD_DIM=64', 'MRCNN.HEAD_DIM=16',
        # scipy.interpolate.interp2d, used by the accurate mask pasting, is gone from SciPy 1.14
        'MRCNN.ACCURATE_PASTE=False',
        # an untrained model scores every class about 1/81: keep them, so that COCOeval has results
        'TEST.RESULT_SCORE_THRESH=0.001',
        'TRAIN.STEPS_PER_EPOCH={}'.format(steps_per_epoch), 'TRAIN.WARMUP={}'.format(steps_per_epoch),
        'TRAIN.LR_SCHEDULE={}'.format(lr_schedule), 'TRAIN.EVAL_PERIOD={}'.format(eval_period),
        'TRAIN.CHECKPOINT_PERIOD=1',
    ]


def main():
    parser = driver_arguments(__doc__, 'FasterRCNN', steps_per_epoch=2)
    parser.add_argument('--config', nargs='+', default=[],
                        help='more KEY=VALUE overrides of the example\'s config, after ours '
                             '(e.g. DATA.NUM_WORKERS=2 BACKBONE.NORM=SyncBN)')
    args = parser.parse_args()

    workdir = args.workdir or tempfile.mkdtemp(prefix='frcnn-')
    example = os.path.join(workdir, 'FasterRCNN')
    if os.path.exists(example):
        shutil.rmtree(example)
    for line in port(args.tensorpack_examples, example, CHANGES, TF1_MODULES):
        print('changed: ' + line)
    datadir = os.path.join(workdir, 'coco')
    make_tiny_coco(datadir)
    logdir = os.path.join(workdir, 'train_log')

    env = library_env()
    # LR_SCHEDULE is in steps of 8 GPUs: [0.5, 0.75, 1] * 8 / steps_per_epoch gives 4.0 epochs with 2 steps
    overrides = config_args(datadir, args.steps_per_epoch, '[0.5,0.75,1]', 4) + args.config
    run([sys.executable, 'train.py', '--logdir', logdir, '--config'] + overrides, example, env, args.timeout)

    checkpoint = os.path.join(logdir, 'checkpoint')
    image = sorted(glob.glob(os.path.join(datadir, 'val2017', '*.png')))[0]
    run([sys.executable, 'predict.py', '--load', checkpoint, '--predict', image, '--config'] + overrides,
        example, env, args.timeout)
    print('predict.py wrote {} ({} bytes)'.format(os.path.join(example, 'output.png'),
                                                  os.path.getsize(os.path.join(example, 'output.png'))))


if __name__ == '__main__':
    main()
