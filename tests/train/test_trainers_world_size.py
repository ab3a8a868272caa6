"""The number of model replicas a run trains with (``trainer.world_size``): each trainer's own,
recorded at every epoch's end in stats.json, and a run resumed with another number says so
(in one process: 2 towers, then 1; the multi-process trainers' counts are checked here too,
their runs in distributed/test_trainers.py and distributed/test_mpi.py)."""

import json
import logging
import os

import numpy as np

from tensorpack_lite.callbacks import ModelSaver
from tensorpack_lite.compat import tfv1
from tensorpack_lite.dataflow import BatchData, DataFromList
from tensorpack_lite.train import (AutoResumeTrainConfig, SimpleTrainer, SyncMultiGPUTrainerReplicated,
                                   launch_train_with_config)

from helpers.models import LineRegression


def train(trainer, max_epoch, towers=1):
    """Train up to ``max_epoch`` (3 steps an epoch), resuming what the logger directory holds."""
    points = [[np.full(4, i, 'float32')] for i in range(8)]
    with tfv1.Graph().as_default():
        dataflow = BatchData(DataFromList(points, shuffle=False), 2)
        model = LineRegression(dim=4, init=1.0, target=0.0, lr=0.01, lr_variable=False)   # x w fitted to 0
        config = AutoResumeTrainConfig(model=model, dataflow=dataflow,
                                       callbacks=[ModelSaver()], steps_per_epoch=3, max_epoch=max_epoch,
                                       session_config=tfv1.ConfigProto(device_count={'CPU': towers}))
        launch_train_with_config(config, trainer)


def resume_warnings(log_records):
    return [m for m in log_records.messages_at(logging.WARNING) if 'model replicas' in m]


def test_stats_record_the_replicas_and_a_resume_with_another_number_says_so(logdir, log_records):
    train(SyncMultiGPUTrainerReplicated(['/cpu:0', '/cpu:1']), max_epoch=1, towers=2)
    assert not resume_warnings(log_records)
    train(SimpleTrainer(), max_epoch=2)
    assert resume_warnings(log_records) == [
        "Resuming at epoch 2 with 1 model replicas (towers x processes), where epoch 1 ended with 2: each "
        "replica keeps its batch, so a step now takes 1/2 times the data (the global batch changed from "
        "2 x B to 1 x B), with the same learning rate and steps per epoch. Nothing is adjusted for it "
        "(TrainConfig(elastic=KeepGlobalBatch(...) or ScaleLearningRate(...)) would)."]
    train(SimpleTrainer(), max_epoch=3)            # the same number again: nothing to say
    assert len(resume_warnings(log_records)) == 1
    with open(os.path.join(logdir, 'stats.json')) as f:
        records = json.load(f)
    assert [(r['epoch_num'], r['world_size']) for r in records] == [(1, 2), (2, 1), (3, 1)]


def test_each_trainer_counts_its_replicas():
    assert SimpleTrainer().world_size == 1
    assert SyncMultiGPUTrainerReplicated(['/cpu:0', '/cpu:1', '/cpu:2']).world_size == 3
