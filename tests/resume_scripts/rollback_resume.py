"""A run with RollbackOnAnomaly that a test kills right after a rollback and resumes: the MLP of
helpers.models on helpers.anomalies' batches, 5 steps an epoch, a checkpoint each epoch,
AutoResumeTrainConfig, a snapshot every 5 steps.

    python rollback_resume.py LOGDIR [--steps N] [--spike-at STEP] [--sigkill-after STEP]

``--spike-at``: the batch of that step scaled by -1000. ``--sigkill-after``: the process SIGKILLs
itself after that step (after the rollback callback's work, before the epoch's checkpoint).
"""

import argparse
import os
import signal

from helpers.anomalies import FEATURES, batches, poisoned
from helpers.models import MLP

from tensorpack_lite import (AutoResumeTrainConfig, Callback, DataFromList, FeedInput, ModelSaver,
                             RollbackOnAnomaly, SimpleTrainer, SpikeRule, launch_train_with_config, logger)

STEPS_PER_EPOCH = 5


class KillAfter(Callback):
    def __init__(self, step):
        self.step = step

    def _trigger_step(self):
        if self.global_step == self.step:
            os.kill(os.getpid(), signal.SIGKILL)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument('logdir')
    parser.add_argument('--steps', type=int, default=40)
    parser.add_argument('--spike-at', type=int)
    parser.add_argument('--sigkill-after', type=int)
    args = parser.parse_args()
    data = batches(40)
    if args.spike_at:
        data = poisoned(data, args.spike_at, value=-1000.0)
    logger.set_logger_dir(args.logdir, action='k')
    callbacks = [RollbackOnAnomaly('cost', snapshot_every=5, spikes=SpikeRule(k=8, window=20, warmup=10)),
                 ModelSaver()]
    if args.sigkill_after:
        callbacks.append(KillAfter(args.sigkill_after))
    trainer = SimpleTrainer()
    trainer.CHECK_COST = False
    config = AutoResumeTrainConfig(model=MLP((FEATURES, 8, 3), lr=0.1),
                                   data=FeedInput(DataFromList(data, shuffle=False)), callbacks=callbacks,
                                   steps_per_epoch=STEPS_PER_EPOCH, max_epoch=args.steps // STEPS_PER_EPOCH)
    launch_train_with_config(config, trainer)


if __name__ == '__main__':
    main()
