"""tensorpack_lite: tensorpack's graph-mode training stack on TensorFlow 2.x (tf.compat.v1).

Typical imports::

    from tensorpack_lite import Trainer, PeriodicTrigger, BatchData, logger
    from tensorpack_lite import tfv1 as tf      # tf.compat.v1
"""

from .compat import tfv1  # first: one clear error when TensorFlow is missing
from .libinfo import __version__
from .utils import logger

from .callbacks import (
    Callback, CallbackFactory, Callbacks, CallbackToHook, EnableCallbackIf, EstimatedTimeLeft,
    GPUUtilizationTracker, HookToCallback, JSONWriter, MergeAllSummaries, MonitorBase, Monitors,
    MovingAverageSummary, PeakMemoryTracker, PeriodicCallback, PeriodicTrigger, ProcessTensors,
    ProgressBar, ProxyCallback, RunOp, RunUpdateOps, ScalarPrinter, SendMonitorData,
    SessionRunTimeout, SimpleMovingAverage, StartProcOrThread, TFEventWriter, ThroughputTracker)
from .dataflow import (
    BatchData, BatchDataByShape, CacheData, ConcatData, DataFlow, DataFlowTerminated,
    DataFromGenerator, DataFromIterable, DataFromList, FixedSizeData, JoinData,
    LocallyShuffleData, MapData, MapDataComponent, PrintData, ProxyDataFlow, RepeatedData,
    RepeatedDataPoint, RNGDataFlow, SelectComponent, TestDataSpeed)
from .input_source import (
    BatchQueueInput, DummyConstantInput, FeedfreeInput, FeedInput, InputSource, PlaceholderInput,
    QueueInput, StagingInput, TensorInput, TFDatasetInput, ZMQInput)
from .predict import OfflinePredictor, OnlinePredictor, PredictConfig, PredictorBase
from .tfutils.common import get_global_step_var
from .tfutils.sessinit import JustCurrentSession, SessionInit
from .tfutils.tower import TowerContext, get_current_tower_context
from .train import (
    DEFAULT_CALLBACKS, DEFAULT_MONITORS, launch_train_with_config, ModelDesc, ModelDescBase,
    NoOpTrainer, QueueInputTrainer, SimpleTrainer, SingleCostTrainer, StopTraining, TowerTrainer,
    TrainConfig, Trainer)

__all__ = [
    'tfv1', 'logger', '__version__',
    # callbacks
    'Callback', 'CallbackFactory', 'Callbacks', 'CallbackToHook', 'EnableCallbackIf',
    'EstimatedTimeLeft', 'GPUUtilizationTracker', 'HookToCallback', 'JSONWriter',
    'MergeAllSummaries', 'MonitorBase', 'Monitors', 'MovingAverageSummary', 'PeakMemoryTracker',
    'PeriodicCallback', 'PeriodicTrigger', 'ProcessTensors', 'ProgressBar', 'ProxyCallback',
    'RunOp', 'RunUpdateOps', 'ScalarPrinter', 'SendMonitorData', 'SessionRunTimeout',
    'SimpleMovingAverage', 'StartProcOrThread', 'TFEventWriter', 'ThroughputTracker',
    # dataflow
    'BatchData', 'BatchDataByShape', 'CacheData', 'ConcatData', 'DataFlow', 'DataFlowTerminated',
    'DataFromGenerator', 'DataFromIterable', 'DataFromList', 'FixedSizeData', 'JoinData',
    'LocallyShuffleData', 'MapData', 'MapDataComponent', 'PrintData', 'ProxyDataFlow',
    'RepeatedData', 'RepeatedDataPoint', 'RNGDataFlow', 'SelectComponent', 'TestDataSpeed',
    # input_source
    'BatchQueueInput', 'DummyConstantInput', 'FeedfreeInput', 'FeedInput', 'InputSource',
    'PlaceholderInput', 'QueueInput', 'StagingInput', 'TensorInput', 'TFDatasetInput', 'ZMQInput',
    # predict
    'OfflinePredictor', 'OnlinePredictor', 'PredictConfig', 'PredictorBase',
    # tfutils
    'get_global_step_var', 'JustCurrentSession', 'SessionInit', 'TowerContext',
    'get_current_tower_context',
    # train
    'DEFAULT_CALLBACKS', 'DEFAULT_MONITORS', 'launch_train_with_config', 'ModelDesc',
    'ModelDescBase', 'NoOpTrainer', 'QueueInputTrainer', 'SimpleTrainer', 'SingleCostTrainer',
    'StopTraining', 'TowerTrainer', 'TrainConfig', 'Trainer',
]
