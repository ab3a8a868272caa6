"""tensorpack_lite: tensorpack's graph-mode training stack on TensorFlow 2.x (tf.compat.v1).

Typical imports::

    from tensorpack_lite import Trainer, PeriodicTrigger, BatchData, logger
    from tensorpack_lite import tfv1 as tf      # tf.compat.v1

Without TensorFlow installed, the package still offers what does not need it (``utils``,
DataFlows, ``dataset`` and ``imgaug``), as tensorpack does; any other name raises one
ImportError saying what to install.
"""

from .libinfo import __version__
from .utils import logger
from .dataflow import (
    BatchData, BatchDataByShape, CacheData, ConcatData, DataFlow, DataFlowTerminated,
    DataFromGenerator, DataFromIterable, DataFromList, FixedSizeData, JoinData,
    LocallyShuffleData, MapData, MapDataComponent, MsgpackSerializer, MultiProcessMapData,
    MultiProcessMapDataZMQ, MultiProcessPrefetchData, MultiProcessRunner, MultiProcessRunnerZMQ,
    MultiThreadMapData, MultiThreadRunner, NumpySerializer, PrefetchData, PrefetchDataZMQ, PrintData,
    ProxyDataFlow, RemoteDataZMQ, RepeatedData, RepeatedDataPoint, RNGDataFlow, SelectComponent,
    send_dataflow_zmq, TestDataSpeed, TFRecordSerializer)
from .dataflow import dataset, imgaug

__all__ = [
    'logger', '__version__', 'imgaug', 'dataset',
    # dataflow
    'BatchData', 'BatchDataByShape', 'CacheData', 'ConcatData', 'DataFlow', 'DataFlowTerminated',
    'DataFromGenerator', 'DataFromIterable', 'DataFromList', 'FixedSizeData', 'JoinData',
    'LocallyShuffleData', 'MapData', 'MapDataComponent', 'PrintData', 'ProxyDataFlow',
    'RepeatedData', 'RepeatedDataPoint', 'RNGDataFlow', 'SelectComponent', 'TestDataSpeed',
    'MsgpackSerializer', 'MultiProcessMapData', 'MultiProcessMapDataZMQ', 'MultiProcessPrefetchData',
    'MultiProcessRunner', 'MultiProcessRunnerZMQ', 'MultiThreadMapData', 'MultiThreadRunner',
    'NumpySerializer', 'PrefetchData', 'PrefetchDataZMQ', 'RemoteDataZMQ', 'send_dataflow_zmq',
    'TFRecordSerializer',
]

try:
    from .compat import tfv1
except ImportError as _error:  # TensorFlow is missing or broken: offer the TensorFlow-free part only
    _TENSORFLOW_IMPORT_ERROR = _error
else:
    _TENSORFLOW_IMPORT_ERROR = None

if _TENSORFLOW_IMPORT_ERROR is not None:
    def __getattr__(name):
        if name.startswith('__'):
            raise AttributeError(name)
        raise ImportError("tensorpack_lite.{} is not available: {}".format(name, _TENSORFLOW_IMPORT_ERROR))
else:
    from .callbacks import (
        Callback, CallbackFactory, Callbacks, CallbackToHook, ClassificationError,
        DataParallelInferenceRunner, DumpParamAsImage,
        DumpTensorAsImage, DumpTensors, EnableCallbackIf, InjectShell, SendStat,
        EstimatedTimeLeft, GPUUtilizationTracker, GraphVarParam, HookToCallback, HumanHyperParamSetter,
        HyperParam, HyperParamSetter, HyperParamSetterWithFunc, Inferencer, InferenceRunner, JSONWriter,
        MaxSaver, MergeAllSummaries, MinSaver, ModelSaver, MonitorBase, Monitors, MovingAverageSummary,
        ObjAttrParam, PeakMemoryTracker, PeriodicCallback, PeriodicTrigger, ProcessTensors, ProgressBar,
        ProxyCallback, RunOp, RunUpdateOps, ScalarPrinter, ScalarStats, ScheduledHyperParamSetter,
        SendMonitorData, SessionRunTimeout, SimpleMovingAverage, StartProcOrThread,
        StatMonitorParamSetter, TFEventWriter, ThroughputTracker)
    from .graph_builder import (
        aggregate_grads, allreduce_grads, AsyncMultiGPUBuilder, average_grads, DataParallelBuilder,
        GradientPacker, LeastLoadedDeviceSetter, merge_grad_list, override_to_local_variable, split_grad_list,
        SyncMultiGPUParameterServerBuilder, SyncMultiGPUReplicatedBuilder)
    from .models import (
        AvgPooling, BatchNorm, BatchRenorm, BNReLU, ConcatWith, Conv2D, Conv2DTranspose, Dropout,
        FixedUnPooling, FullyConnected, GlobalAvgPooling, InstanceNorm, l1_regularizer, l2_regularizer,
        LayerNorm, layer_register, LeakyReLU, LinearWrap, Maxout, MaxPooling, regularize_cost,
        regularize_cost_from_collection)
    from .input_source import (
        BatchQueueInput, DummyConstantInput, FeedfreeInput, FeedInput, InputSource, PlaceholderInput,
        QueueInput, StagingInput, TensorInput, TFDatasetInput, ZMQInput)
    from .predict import (
        DataParallelOfflinePredictor, MultiProcessDatasetPredictor, MultiTowerOfflinePredictor,
        OfflinePredictor, OnlinePredictor, PredictConfig, PredictorBase, SimpleDatasetPredictor)
    from .tfutils.argscope import argscope, get_arg_scope
    from .tfutils.common import get_global_step_var
    from .tfutils.sessinit import (
        ChainInit, DictRestore, JustCurrentSession, SaverRestore, SaverRestoreRelaxed, SessionInit, SmartInit,
        get_model_loader)
    from .tfutils.tower import TowerContext, get_current_tower_context
    from .train import (
        DEFAULT_CALLBACKS, DEFAULT_MONITORS, AutoResumeTrainConfig, launch_train_with_config, ModelDesc,
        ModelDescBase, NoOpTrainer, QueueInputTrainer, SimpleTrainer, SingleCostTrainer, StopTraining,
        TowerTrainer, TrainConfig, Trainer, AsyncMultiGPUTrainer, HorovodTrainer, SyncMultiGPUTrainer,
        SyncMultiGPUTrainerParameterServer, SyncMultiGPUTrainerReplicated)

    __all__ += [
        'tfv1',
        # callbacks
        'Callback', 'CallbackFactory', 'Callbacks', 'CallbackToHook', 'ClassificationError',
        'DataParallelInferenceRunner',
        'DumpParamAsImage', 'DumpTensorAsImage', 'DumpTensors', 'InjectShell', 'SendStat',
        'EnableCallbackIf', 'EstimatedTimeLeft', 'GPUUtilizationTracker', 'GraphVarParam', 'HookToCallback',
        'HumanHyperParamSetter', 'HyperParam', 'HyperParamSetter', 'HyperParamSetterWithFunc', 'Inferencer',
        'InferenceRunner', 'JSONWriter', 'MaxSaver', 'MergeAllSummaries', 'MinSaver', 'ModelSaver',
        'MonitorBase', 'Monitors', 'MovingAverageSummary', 'ObjAttrParam', 'PeakMemoryTracker',
        'PeriodicCallback', 'PeriodicTrigger', 'ProcessTensors', 'ProgressBar', 'ProxyCallback',
        'RunOp', 'RunUpdateOps', 'ScalarPrinter', 'ScalarStats', 'ScheduledHyperParamSetter',
        'SendMonitorData', 'SessionRunTimeout', 'SimpleMovingAverage', 'StartProcOrThread',
        'StatMonitorParamSetter', 'TFEventWriter', 'ThroughputTracker',
        # input_source
        'BatchQueueInput', 'DummyConstantInput', 'FeedfreeInput', 'FeedInput', 'InputSource',
        'PlaceholderInput', 'QueueInput', 'StagingInput', 'TensorInput', 'TFDatasetInput', 'ZMQInput',
        # graph_builder
        'aggregate_grads', 'allreduce_grads', 'AsyncMultiGPUBuilder', 'average_grads', 'DataParallelBuilder',
        'GradientPacker', 'LeastLoadedDeviceSetter', 'merge_grad_list', 'override_to_local_variable',
        'split_grad_list', 'SyncMultiGPUParameterServerBuilder', 'SyncMultiGPUReplicatedBuilder',
        # models
        'AvgPooling', 'BatchNorm', 'BatchRenorm', 'BNReLU', 'ConcatWith', 'Conv2D', 'Conv2DTranspose',
        'Dropout', 'FixedUnPooling', 'FullyConnected', 'GlobalAvgPooling', 'InstanceNorm', 'l1_regularizer',
        'l2_regularizer', 'LayerNorm', 'layer_register', 'LeakyReLU', 'LinearWrap', 'Maxout', 'MaxPooling',
        'regularize_cost', 'regularize_cost_from_collection',
        # predict
        'DataParallelOfflinePredictor', 'MultiTowerOfflinePredictor', 'MultiProcessDatasetPredictor',
        'OfflinePredictor', 'OnlinePredictor', 'PredictConfig',
        'PredictorBase', 'SimpleDatasetPredictor',
        # tfutils
        'argscope', 'get_arg_scope', 'get_global_step_var', 'ChainInit', 'DictRestore', 'JustCurrentSession',
        'SaverRestore',
        'SaverRestoreRelaxed', 'SessionInit', 'SmartInit', 'get_model_loader', 'TowerContext',
        'get_current_tower_context',
        # train
        'DEFAULT_CALLBACKS', 'DEFAULT_MONITORS', 'AutoResumeTrainConfig', 'launch_train_with_config',
        'ModelDesc', 'ModelDescBase', 'NoOpTrainer', 'QueueInputTrainer', 'SimpleTrainer',
        'SingleCostTrainer',
        'StopTraining', 'TowerTrainer', 'TrainConfig', 'Trainer', 'AsyncMultiGPUTrainer', 'HorovodTrainer',
        'SyncMultiGPUTrainer', 'SyncMultiGPUTrainerParameterServer', 'SyncMultiGPUTrainerReplicated',
    ]
