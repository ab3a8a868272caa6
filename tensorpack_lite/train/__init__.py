"""Trainers, models and the configuration of a training run (and ``create_server``, the server of
a multi-process job's task, from :mod:`tensorpack_lite.multiprocess.server`)."""

from ..multiprocess.server import create_server
from .base import StopTraining, TrainLoop, Trainer
from .config import DEFAULT_CALLBACKS, DEFAULT_MONITORS, AutoResumeTrainConfig, TrainConfig
from .distributed import (CollectiveAllReduceTrainer, DistributedTrainerParameterServer,
                          DistributedTrainerReplicated)
from .interface import apply_default_prefetch, launch_train_with_config
from .horovod_trainer import HorovodTrainer, RankShardData
from .lr_finder import LRFinderResult, find_learning_rate
from .model_desc import ModelDesc, ModelDescBase
from .optuna_trial import launch_optuna_trial
from .tower import SingleCostTrainer, TowerTrainer
from .trainers import (AsyncMultiGPUTrainer, NoOpTrainer, QueueInputTrainer, SimpleTrainer,
                       SyncMultiGPUTrainer, SyncMultiGPUTrainerParameterServer, SyncMultiGPUTrainerReplicated)

__all__ = ['StopTraining', 'TrainLoop', 'Trainer', 'DEFAULT_CALLBACKS', 'DEFAULT_MONITORS',
           'TrainConfig', 'AutoResumeTrainConfig', 'apply_default_prefetch', 'launch_train_with_config',
           'ModelDesc', 'ModelDescBase', 'SingleCostTrainer', 'TowerTrainer', 'NoOpTrainer',
           'QueueInputTrainer', 'SimpleTrainer', 'SyncMultiGPUTrainerParameterServer', 'SyncMultiGPUTrainer',
           'SyncMultiGPUTrainerReplicated', 'AsyncMultiGPUTrainer', 'HorovodTrainer', 'RankShardData',
           'DistributedTrainerParameterServer', 'DistributedTrainerReplicated', 'CollectiveAllReduceTrainer',
           'launch_optuna_trial', 'find_learning_rate', 'LRFinderResult', 'create_server']
