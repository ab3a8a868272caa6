"""tensorpack_lite: tensorpack's graph-mode training stack on TensorFlow 2.x (tf.compat.v1).

Typical imports::

    from tensorpack_lite import Trainer, PeriodicTrigger, BatchData, logger
    from tensorpack_lite import tfv1 as tf      # tf.compat.v1

``from tensorpack_lite import *`` binds what ``from tensorpack import *`` binds (the names of
utils, dataflow, models, callbacks, tfutils, train, input_source and predict, and those
subpackages). Without TensorFlow installed, the package still offers what does not need it
(``utils``, the DataFlows, ``dataset`` and ``imgaug``), as tensorpack does; any other name
raises one ImportError saying what to install.

The TensorFlow part (``tfv1``, ``callbacks``, ``train``... and the names taken from them) is
imported on first use, so that ``import tensorpack_lite`` and the TensorFlow-free tools
(``python -m tensorpack_lite.utils.plot``) do not load TensorFlow.
"""

import importlib
import importlib.util

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

_TENSORFLOW_SUBPACKAGES = ('callbacks', 'compat', 'graph_builder', 'input_source', 'models', 'predict',
                           'tfutils', 'train')

# The names the top level takes from each TensorFlow subpackage, imported on first use.
_TENSORFLOW_NAMES = {
    'callbacks': (
        'BinaryClassificationStats', 'Callback', 'CheckpointWriteError', 'CallbackFactory',
        'Callbacks', 'CallbackToHook', 'CheckNumerics', 'ClassificationError', 'CometMLMonitor',
        'CommunicationTimeline', 'DataParallelInferenceRunner', 'DumpParamAsImage', 'DumpTensor',
        'DumpTensorAsImage', 'DumpTensors', 'EarlyStopping', 'EnableCallbackIf', 'EstimatedTimeLeft',
        'GPUMemoryTracker', 'GPUUtilizationTracker', 'GraphProfiler', 'GraphVarParam', 'HookToCallback',
        'HostMemoryTracker', 'HumanHyperParamSetter', 'HyperParam', 'HyperParamSetter',
        'HyperParamSetterWithFunc', 'Inferencer', 'InferenceRunner', 'InferenceRunnerBase',
        'InjectShell', 'JSONWriter', 'MaxSaver', 'MergeAllSummaries', 'MinSaver', 'MLflowMonitor',
        'ModelSaver', 'MonitorBase', 'Monitors', 'MovingAverageSummary', 'ObjAttrParam', 'OptunaPruning',
        'PeakMemoryTracker',
        'PeriodicCallback', 'PeriodicTrigger', 'ProcessTensors', 'ProgressBar', 'ProxyCallback',
        'RollbackOnAnomaly', 'RunOp', 'RunUpdateOps',
        'ScalarPrinter', 'ScalarStats', 'ScheduledHyperParamSetter',
        'SendMonitorData', 'SendStat', 'SessionRunTimeout', 'SimpleMovingAverage', 'SpikeRule',
        'StartProcOrThread',
        'StatMonitorParamSetter', 'StepTimeMonitor', 'TensorBoardHParams', 'TensorPrinter',
        'TFEventWriter', 'TFLocalCLIDebugHook', 'ThroughputTracker', 'WandbMonitor', 'WeightAverage'),
    'graph_builder': (
        'aggregate_grads', 'allreduce_grads', 'AsyncMultiGPUBuilder', 'average_grads',
        'DataParallelBuilder', 'GradientPacker', 'LeastLoadedDeviceSetter', 'merge_grad_list',
        'override_to_local_variable', 'split_grad_list', 'SyncMultiGPUParameterServerBuilder',
        'SyncMultiGPUReplicatedBuilder'),
    'input_source': (
        'BatchQueueInput', 'DummyConstantInput', 'FeedfreeInput', 'FeedInput', 'InputSource',
        'PlaceholderInput', 'QueueInput', 'remap_input_source', 'StagingInput', 'TensorInput',
        'TFDatasetInput', 'ZMQInput'),
    'models': (
        'AvgPooling', 'BatchNorm', 'BatchRenorm', 'BNReLU', 'ConcatWith', 'Conv2D',
        'Conv2DTranspose', 'Deconv2D', 'disable_layer_logging', 'Dropout', 'FixedUnPooling',
        'FullyConnected', 'GlobalAvgPooling', 'InstanceNorm', 'l1_regularizer', 'l2_regularizer',
        'LayerNorm', 'layer_register', 'LeakyReLU', 'LinearWrap', 'Maxout', 'MaxPooling', 'PReLU',
        'regularize_cost', 'regularize_cost_from_collection', 'rename_tflayer_get_variable',
        'VariableHolder'),
    'predict': (
        'DataParallelOfflinePredictor', 'DatasetPredictorBase', 'FeedfreePredictor',
        'MultiProcessDatasetPredictor', 'MultiThreadAsyncPredictor', 'MultiTowerOfflinePredictor',
        'OfflinePredictor', 'OnlinePredictor', 'PredictConfig', 'PredictorBase',
        'SimpleDatasetPredictor'),
    'tfutils': (
        'argscope', 'AveragedRestore', 'ChainInit', 'collect_env_info', 'DictRestore',
        'enable_argscope_for_function',
        'enable_argscope_for_module', 'get_arg_scope', 'get_current_tower_context',
        'get_default_sess_config', 'get_global_step_value', 'get_global_step_var',
        'get_model_loader', 'get_tf_version_tuple', 'gradproc', 'JustCurrentSession', 'optimizer',
        'SaverRestore', 'SaverRestoreRelaxed', 'sesscreate', 'sessinit', 'SessionInit', 'SmartInit',
        'summary', 'tower', 'TowerContext', 'varreplace'),
    'train': (
        'AsyncMultiGPUTrainer', 'AutoResumeTrainConfig', 'CollectiveAllReduceTrainer',
        'DistributedTrainerParameterServer', 'DistributedTrainerReplicated', 'DEFAULT_CALLBACKS',
        'DEFAULT_MONITORS', 'find_learning_rate', 'HorovodTrainer', 'launch_optuna_trial',
        'launch_train_with_config', 'LRFinderResult', 'ModelDesc',
        'ModelDescBase', 'NoOpTrainer', 'QueueInputTrainer', 'SimpleTrainer', 'SingleCostTrainer',
        'StopTraining', 'SyncMultiGPUTrainer', 'SyncMultiGPUTrainerParameterServer',
        'SyncMultiGPUTrainerReplicated', 'TowerTrainer', 'TrainConfig', 'Trainer'),
    'compat': ('tfv1',),
}

_SUBPACKAGE_OF = {name: subpackage for subpackage, names in _TENSORFLOW_NAMES.items() for name in names}

if importlib.util.find_spec('tensorflow') is not None:
    __all__ += list(_TENSORFLOW_SUBPACKAGES) + list(_SUBPACKAGE_OF)


def __getattr__(name):
    """A TensorFlow subpackage or a name from one, imported on first use; without TensorFlow, one
    ImportError saying what to install."""
    if name in _TENSORFLOW_SUBPACKAGES:
        subpackage = name
    elif name in _SUBPACKAGE_OF:
        subpackage = _SUBPACKAGE_OF[name]
    else:
        raise AttributeError("module {!r} has no attribute {!r}".format(__name__, name))
    try:
        importlib.import_module('.compat', __name__)    # its ImportError says what to install
    except ImportError as err:
        raise ImportError("tensorpack_lite.{} is not available: {}".format(name, err)) from err
    module = importlib.import_module('.' + subpackage, __name__)
    return module if subpackage == name else getattr(module, name)


def __dir__():
    return sorted(set(__all__) | set(_TENSORFLOW_SUBPACKAGES) | set(_SUBPACKAGE_OF))
