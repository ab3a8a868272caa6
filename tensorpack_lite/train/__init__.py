"""Trainers and the configuration of a training run."""

from .base import StopTraining, TrainLoop, Trainer
from .config import DEFAULT_CALLBACKS, DEFAULT_MONITORS

__all__ = ['StopTraining', 'TrainLoop', 'Trainer', 'DEFAULT_CALLBACKS', 'DEFAULT_MONITORS']
