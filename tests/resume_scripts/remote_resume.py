"""A run whose logger directory is on S3 (issue 58 item 6): the digits MLP of tests/helpers/__init__.py,
6 steps an epoch of 8 shuffled digits, 2 epochs, AutoResumeTrainConfig, a checkpoint every 2 steps
kept by ModelSaver(max_to_keep=2). The test starts it against a local S3 server (moto), kills it
during an upload, and runs it again on a "fresh machine" (another empty mirror directory).

    python remote_resume.py URL [--kill-uploading NAME]

``--kill-uploading model-10.index``: SIGKILL this process when it starts uploading that object.
The endpoint and credentials come from the environment (AWS_ENDPOINT_URL...), the mirror's
place from TENSORPACK_LITE_CACHE.
"""

import argparse
import os
import signal
import sys

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if TESTS not in sys.path:     # run as a program (imported by the tests, tests/ is on the path already)
    sys.path.insert(0, TESTS)

from helpers.models import DigitsMLPBase  # noqa: E402
from tensorpack_lite import (AutoResumeTrainConfig, DataFromList, BatchData, ModelSaver,  # noqa: E402
                             PeriodicTrigger, SimpleTrainer, launch_train_with_config, logger)
from tensorpack_lite import tfv1 as tf  # noqa: E402
from tensorpack_lite.dataflow.dataset import Digits  # noqa: E402
from tensorpack_lite.utils.utils import fix_rng_seed  # noqa: E402

STEPS_PER_EPOCH, BATCH, EPOCHS = 6, 8, 2


class Model(DigitsMLPBase):
    """The shared digits MLP on 8x8 images."""

    def inputs(self):
        return [tf.TensorSpec([None, 8, 8], tf.float32, 'image'), tf.TensorSpec([None], tf.int32, 'label')]

    def build_graph(self, image, label):
        return super().build_graph(tf.reshape(image, [-1, 64]), label)


def kill_when_uploading(name):
    """SIGKILL this process when fsspec's S3 file system starts uploading object ``name``."""
    import s3fs
    put_file = s3fs.S3FileSystem.put_file

    def put_or_die(self, lpath, rpath, *args, **kwargs):
        if os.path.basename(rpath) == name:
            print('[remote_resume] SIGKILL while uploading {}'.format(rpath), flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        return put_file(self, lpath, rpath, *args, **kwargs)
    s3fs.S3FileSystem.put_file = put_or_die


def train(url, logger_dir=None):
    """Train (or resume) the run of ``url``: its logger directory, or with ``logger_dir`` the
    URL of ModelSaver's ``checkpoint_dir``."""
    fix_rng_seed(1234)
    trainer = SimpleTrainer()
    tf.set_random_seed(1234)
    logger.set_logger_dir(logger_dir or url, action='k')
    digits = Digits('train')
    digits.reset_state()
    datapoints = [[image, label] for image, label in digits][:STEPS_PER_EPOCH * BATCH]
    config = AutoResumeTrainConfig(
        model=Model(hidden=16, lr=0.2), dataflow=BatchData(DataFromList(datapoints, shuffle=True), BATCH),
        callbacks=[PeriodicTrigger(ModelSaver(max_to_keep=2, checkpoint_dir=url if logger_dir else None),
                                   every_k_steps=2)], max_epoch=EPOCHS,
        session_config=tf.ConfigProto(intra_op_parallelism_threads=1, inter_op_parallelism_threads=1))
    launch_train_with_config(config, trainer)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument('url')
    parser.add_argument('--kill-uploading')
    args = parser.parse_args()
    if args.kill_uploading:
        kill_when_uploading(args.kill_uploading)
    train(args.url)


if __name__ == '__main__':
    main()
