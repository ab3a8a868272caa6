"""Callbacks: everything that happens around the training steps, and the monitors that
receive training statistics (their package: ``tensorpack_lite.callbacks.monitors``)."""

from .base import Callback, CallbackFactory, ProxyCallback
from .concurrency import StartProcOrThread
from .debug import DumpParamAsImage, DumpTensor, DumpTensorAsImage, DumpTensors
from .graph import CheckNumerics, ProcessTensors, RunOp, RunUpdateOps
from .group import Callbacks
from .hooks import CallbackToHook, HookToCallback, TFLocalCLIDebugHook
from .inference import BinaryClassificationStats, ClassificationError, Inferencer, ScalarStats
from .inference_runner import DataParallelInferenceRunner, InferenceRunner, InferenceRunnerBase
from .early_stopping import EarlyStopping
from .misc import EstimatedTimeLeft
from .optuna_pruning import OptunaPruning
from .monitors import (CometMLMonitor, JSONWriter, MLflowMonitor, MonitorBase, Monitors, NoOpMonitor,
                       ScalarPrinter, SendMonitorData, TensorBoardHParams, TFEventWriter, WandbMonitor)
from .param import (GraphVarParam, HumanHyperParamSetter, HyperParam, HyperParamSetter,
                    HyperParamSetterWithFunc, ObjAttrParam, ScheduledHyperParamSetter,
                    StatMonitorParamSetter)
from .prof import (CommunicationTimeline, GPUMemoryTracker, GPUUtilizationTracker, GraphProfiler,
                   HostMemoryTracker, PeakMemoryTracker, ThroughputTracker)
from .rollback import RollbackOnAnomaly, SpikeRule
from .saver import CheckpointWriteError, MaxSaver, MinSaver, ModelSaver
from .stats import InjectShell, SendStat
from .step_monitor import StepTimeMonitor
from .steps import MaintainStepCounter, ProgressBar, SessionRunTimeout, TensorPrinter
from .summary import MergeAllSummaries, MovingAverageSummary, SimpleMovingAverage
from .trigger import EnableCallbackIf, PeriodicCallback, PeriodicTrigger
from .weight_average import WeightAverage

__all__ = [
    'Callback', 'CallbackFactory', 'ProxyCallback', 'Callbacks',
    'StartProcOrThread',
    'DumpParamAsImage', 'DumpTensor', 'DumpTensorAsImage', 'DumpTensors', 'InjectShell', 'SendStat',
    'CheckNumerics', 'ProcessTensors', 'RunOp', 'RunUpdateOps',
    'CallbackToHook', 'HookToCallback', 'TFLocalCLIDebugHook',
    'BinaryClassificationStats', 'ClassificationError', 'Inferencer', 'ScalarStats', 'InferenceRunner',
    'InferenceRunnerBase',
    'DataParallelInferenceRunner',
    'EarlyStopping', 'EstimatedTimeLeft',
    'CometMLMonitor', 'JSONWriter', 'MonitorBase', 'Monitors', 'NoOpMonitor', 'ScalarPrinter',
    'SendMonitorData', 'TFEventWriter', 'MLflowMonitor', 'WandbMonitor', 'TensorBoardHParams',
    'GraphVarParam', 'HumanHyperParamSetter', 'HyperParam', 'HyperParamSetter',
    'HyperParamSetterWithFunc', 'ObjAttrParam', 'ScheduledHyperParamSetter', 'StatMonitorParamSetter',
    'GPUMemoryTracker', 'GPUUtilizationTracker', 'GraphProfiler', 'CommunicationTimeline',
    'HostMemoryTracker',
    'PeakMemoryTracker', 'ThroughputTracker',
    'MaxSaver', 'MinSaver', 'ModelSaver', 'CheckpointWriteError',
    'MaintainStepCounter', 'ProgressBar', 'SessionRunTimeout', 'TensorPrinter',
    'MergeAllSummaries', 'MovingAverageSummary', 'SimpleMovingAverage',
    'EnableCallbackIf', 'PeriodicCallback', 'PeriodicTrigger',
    'WeightAverage', 'OptunaPruning', 'StepTimeMonitor', 'RollbackOnAnomaly', 'SpikeRule',
]
