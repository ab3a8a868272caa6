"""tensorpack_lite: tensorpack's graph-mode training stack on TensorFlow 2.x (tf.compat.v1).

Typical imports::

    from tensorpack_lite import Trainer, PeriodicTrigger, BatchData, logger
    from tensorpack_lite import tfv1 as tf      # tf.compat.v1

``from tensorpack_lite import *`` binds what ``from tensorpack import *`` binds (the names of
utils, dataflow, models, callbacks, tfutils, train, input_source and predict, and those
subpackages). Without TensorFlow installed, the package still offers what does not need it
(``utils``, the DataFlows, ``dataset`` and ``imgaug``), as tensorpack does; any other name
raises one ImportError saying what to install.
"""

from . import dataflow, libinfo, utils
from .dataflow import (
    AugmentImageComponent, AugmentImageComponents, AugmentImageCoordinates, BatchData, BatchDataByShape,
    CacheData, CaffeLMDB, ConcatData, DataFlow, DataFlowTerminated, DataFromGenerator, DataFromIterable,
    DataFromList, DataFromQueue, FakeData, FixedSizeData, HDF5Data, HDF5Serializer, ImageFromFile, JoinData,
    LMDBData, LMDBDataDecoder, LMDBSerializer, LocallyShuffleData, MapData, MapDataComponent,
    MsgpackSerializer, MultiProcessMapAndBatchData, MultiProcessMapAndBatchDataZMQ, MultiProcessMapData,
    MultiProcessMapDataZMQ, MultiProcessPrefetchData, MultiProcessRunner, MultiProcessRunnerZMQ,
    MultiThreadMapData, MultiThreadPrefetchData, MultiThreadRunner, NumpySerializer, PrefetchData,
    PrefetchDataZMQ, PrintData, ProxyDataFlow, RandomChooseData, RandomMixData, RemoteDataZMQ, RepeatedData,
    RepeatedDataPoint, RNGDataFlow, SelectComponent, send_dataflow_zmq, SVMLightData, TestDataSpeed,
    TFRecordSerializer, dataset, imgaug)
from .libinfo import __version__
from .utils import (change_env, execute_only_once, fix_rng_seed, get_rng, get_tqdm, humanize_time_delta,
                    logger)

__all__ = [
    '__version__', 'dataflow', 'libinfo', 'utils', 'dataset', 'imgaug',
    # utils
    'change_env', 'execute_only_once', 'fix_rng_seed', 'get_rng', 'get_tqdm', 'humanize_time_delta', 'logger',
    # dataflow
    'AugmentImageComponent', 'AugmentImageComponents', 'AugmentImageCoordinates', 'BatchData',
    'BatchDataByShape', 'CacheData', 'CaffeLMDB', 'ConcatData', 'DataFlow', 'DataFlowTerminated',
    'DataFromGenerator', 'DataFromIterable', 'DataFromList', 'DataFromQueue', 'FakeData', 'FixedSizeData',
    'HDF5Data', 'HDF5Serializer', 'ImageFromFile', 'JoinData', 'LMDBData', 'LMDBDataDecoder',
    'LMDBSerializer',
    'LocallyShuffleData', 'MapData', 'MapDataComponent', 'MsgpackSerializer', 'MultiProcessMapAndBatchData',
    'MultiProcessMapAndBatchDataZMQ', 'MultiProcessMapData', 'MultiProcessMapDataZMQ',
    'MultiProcessPrefetchData', 'MultiProcessRunner', 'MultiProcessRunnerZMQ', 'MultiThreadMapData',
    'MultiThreadPrefetchData', 'MultiThreadRunner', 'NumpySerializer', 'PrefetchData', 'PrefetchDataZMQ',
    'PrintData', 'ProxyDataFlow', 'RandomChooseData', 'RandomMixData', 'RemoteDataZMQ', 'RepeatedData',
    'RepeatedDataPoint', 'RNGDataFlow', 'SelectComponent', 'send_dataflow_zmq', 'SVMLightData',
    'TestDataSpeed', 'TFRecordSerializer',
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
    from . import callbacks, compat, graph_builder, input_source, models, predict, tfutils, train
    from .callbacks import (
        BinaryClassificationStats, Callback, CheckpointWriteError, CallbackFactory, Callbacks,
        CallbackToHook, CheckNumerics,
        ClassificationError, CometMLMonitor, DataParallelInferenceRunner, DumpParamAsImage, DumpTensor,
        DumpTensorAsImage, DumpTensors, EnableCallbackIf, EstimatedTimeLeft, GPUMemoryTracker,
        GPUUtilizationTracker, GraphProfiler, GraphVarParam, HookToCallback, HostMemoryTracker,
        HumanHyperParamSetter, HyperParam, HyperParamSetter, HyperParamSetterWithFunc, Inferencer,
        InferenceRunner, InferenceRunnerBase, InjectShell, JSONWriter, MaxSaver, MergeAllSummaries, MinSaver,
        ModelSaver, MonitorBase, Monitors, MovingAverageSummary, ObjAttrParam, PeakMemoryTracker,
        PeriodicCallback, PeriodicTrigger, ProcessTensors, ProgressBar, ProxyCallback, RunOp, RunUpdateOps,
        ScalarPrinter, ScalarStats, ScheduledHyperParamSetter, SendMonitorData, SendStat, SessionRunTimeout,
        SimpleMovingAverage, StartProcOrThread, StatMonitorParamSetter, TensorPrinter, TFEventWriter,
        TFLocalCLIDebugHook, ThroughputTracker)
    from .graph_builder import (
        aggregate_grads, allreduce_grads, AsyncMultiGPUBuilder, average_grads, DataParallelBuilder,
        GradientPacker, LeastLoadedDeviceSetter, merge_grad_list, override_to_local_variable, split_grad_list,
        SyncMultiGPUParameterServerBuilder, SyncMultiGPUReplicatedBuilder)
    from .input_source import (
        BatchQueueInput, DummyConstantInput, FeedfreeInput, FeedInput, InputSource, PlaceholderInput,
        QueueInput, remap_input_source, StagingInput, TensorInput, TFDatasetInput, ZMQInput)
    from .models import (
        AvgPooling, BatchNorm, BatchRenorm, BNReLU, ConcatWith, Conv2D, Conv2DTranspose, Deconv2D,
        disable_layer_logging, Dropout, FixedUnPooling, FullyConnected, GlobalAvgPooling, InstanceNorm,
        l1_regularizer, l2_regularizer, LayerNorm, layer_register, LeakyReLU, LinearWrap, Maxout, MaxPooling,
        PReLU, regularize_cost, regularize_cost_from_collection, rename_tflayer_get_variable, VariableHolder)
    from .predict import (
        DataParallelOfflinePredictor, DatasetPredictorBase, FeedfreePredictor, MultiProcessDatasetPredictor,
        MultiThreadAsyncPredictor, MultiTowerOfflinePredictor, OfflinePredictor, OnlinePredictor,
        PredictConfig, PredictorBase, SimpleDatasetPredictor)
    from .tfutils import (
        argscope, ChainInit, collect_env_info, DictRestore, enable_argscope_for_function,
        enable_argscope_for_module, get_arg_scope, get_current_tower_context, get_default_sess_config,
        get_global_step_value, get_global_step_var, get_model_loader, get_tf_version_tuple, gradproc,
        JustCurrentSession, optimizer, SaverRestore, SaverRestoreRelaxed, sesscreate, sessinit, SessionInit,
        SmartInit, summary, tower, TowerContext, varreplace)
    from .train import (
        AsyncMultiGPUTrainer, AutoResumeTrainConfig, CollectiveAllReduceTrainer,
        DistributedTrainerParameterServer,
        DistributedTrainerReplicated, DEFAULT_CALLBACKS, DEFAULT_MONITORS, HorovodTrainer,
        launch_train_with_config, ModelDesc, ModelDescBase, NoOpTrainer, QueueInputTrainer, SimpleTrainer,
        SingleCostTrainer, StopTraining, SyncMultiGPUTrainer, SyncMultiGPUTrainerParameterServer,
        SyncMultiGPUTrainerReplicated, TowerTrainer, TrainConfig, Trainer)

    __all__ += [
        'tfv1', 'callbacks', 'compat', 'graph_builder', 'input_source', 'models', 'predict',
        'tfutils', 'train',
        # callbacks
        'BinaryClassificationStats', 'Callback', 'CheckpointWriteError', 'CallbackFactory', 'Callbacks',
        'CallbackToHook',
        'CheckNumerics', 'ClassificationError', 'CometMLMonitor', 'DataParallelInferenceRunner',
        'DumpParamAsImage', 'DumpTensor', 'DumpTensorAsImage', 'DumpTensors', 'EnableCallbackIf',
        'EstimatedTimeLeft', 'GPUMemoryTracker', 'GPUUtilizationTracker', 'GraphProfiler', 'GraphVarParam',
        'HookToCallback', 'HostMemoryTracker', 'HumanHyperParamSetter', 'HyperParam', 'HyperParamSetter',
        'HyperParamSetterWithFunc', 'Inferencer', 'InferenceRunner', 'InferenceRunnerBase', 'InjectShell',
        'JSONWriter', 'MaxSaver', 'MergeAllSummaries', 'MinSaver', 'ModelSaver', 'MonitorBase', 'Monitors',
        'MovingAverageSummary', 'ObjAttrParam', 'PeakMemoryTracker', 'PeriodicCallback', 'PeriodicTrigger',
        'ProcessTensors', 'ProgressBar', 'ProxyCallback', 'RunOp', 'RunUpdateOps', 'ScalarPrinter',
        'ScalarStats', 'ScheduledHyperParamSetter', 'SendMonitorData', 'SendStat', 'SessionRunTimeout',
        'SimpleMovingAverage', 'StartProcOrThread', 'StatMonitorParamSetter', 'TensorPrinter',
        'TFEventWriter', 'TFLocalCLIDebugHook', 'ThroughputTracker',
        # graph_builder
        'aggregate_grads', 'allreduce_grads', 'AsyncMultiGPUBuilder', 'average_grads', 'DataParallelBuilder',
        'GradientPacker', 'LeastLoadedDeviceSetter', 'merge_grad_list', 'override_to_local_variable',
        'split_grad_list', 'SyncMultiGPUParameterServerBuilder', 'SyncMultiGPUReplicatedBuilder',
        # input_source
        'BatchQueueInput', 'DummyConstantInput', 'FeedfreeInput', 'FeedInput', 'InputSource',
        'PlaceholderInput', 'QueueInput', 'remap_input_source', 'StagingInput', 'TensorInput',
        'TFDatasetInput', 'ZMQInput',
        # models
        'AvgPooling', 'BatchNorm', 'BatchRenorm', 'BNReLU', 'ConcatWith', 'Conv2D', 'Conv2DTranspose',
        'Deconv2D', 'disable_layer_logging', 'Dropout', 'FixedUnPooling', 'FullyConnected',
        'GlobalAvgPooling',
        'InstanceNorm', 'l1_regularizer', 'l2_regularizer', 'LayerNorm', 'layer_register', 'LeakyReLU',
        'LinearWrap', 'Maxout', 'MaxPooling', 'PReLU', 'regularize_cost', 'regularize_cost_from_collection',
        'rename_tflayer_get_variable', 'VariableHolder',
        # predict
        'DataParallelOfflinePredictor', 'DatasetPredictorBase', 'FeedfreePredictor',
        'MultiProcessDatasetPredictor', 'MultiThreadAsyncPredictor', 'MultiTowerOfflinePredictor',
        'OfflinePredictor', 'OnlinePredictor', 'PredictConfig', 'PredictorBase', 'SimpleDatasetPredictor',
        # tfutils
        'argscope', 'ChainInit', 'collect_env_info', 'DictRestore', 'enable_argscope_for_function',
        'enable_argscope_for_module', 'get_arg_scope', 'get_current_tower_context', 'get_default_sess_config',
        'get_global_step_value', 'get_global_step_var', 'get_model_loader', 'get_tf_version_tuple',
        'gradproc',
        'JustCurrentSession', 'optimizer', 'SaverRestore', 'SaverRestoreRelaxed', 'sesscreate', 'sessinit',
        'SessionInit', 'SmartInit', 'summary', 'tower', 'TowerContext', 'varreplace',
        # train
        'AsyncMultiGPUTrainer', 'AutoResumeTrainConfig', 'CollectiveAllReduceTrainer',
        'DistributedTrainerParameterServer', 'DistributedTrainerReplicated', 'DEFAULT_CALLBACKS',
        'DEFAULT_MONITORS',
        'HorovodTrainer', 'launch_train_with_config', 'ModelDesc', 'ModelDescBase', 'NoOpTrainer',
        'QueueInputTrainer', 'SimpleTrainer', 'SingleCostTrainer', 'StopTraining', 'SyncMultiGPUTrainer',
        'SyncMultiGPUTrainerParameterServer', 'SyncMultiGPUTrainerReplicated', 'TowerTrainer', 'TrainConfig',
        'Trainer',
    ]
