"""Prediction: run a trained model (or any part of a graph) on arrays."""

from .base import AsyncPredictorBase, OfflinePredictor, OnlinePredictor, PredictorBase
from .concurrency import MultiThreadAsyncPredictor
from .config import PredictConfig
from .dataset import DatasetPredictorBase, MultiProcessDatasetPredictor, SimpleDatasetPredictor
from .feedfree import FeedfreePredictor
from .multigpu import DataParallelOfflinePredictor, MultiTowerOfflinePredictor

__all__ = ['PredictorBase', 'AsyncPredictorBase', 'OnlinePredictor', 'OfflinePredictor',
           'PredictConfig', 'DatasetPredictorBase', 'SimpleDatasetPredictor',
           'MultiProcessDatasetPredictor', 'MultiTowerOfflinePredictor', 'DataParallelOfflinePredictor',
           'FeedfreePredictor', 'MultiThreadAsyncPredictor']
