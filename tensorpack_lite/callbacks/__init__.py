"""Callbacks: everything that happens around the training steps, and the monitors that
receive training statistics."""

from .base import Callback, CallbackFactory, ProxyCallback
from .concurrency import StartProcOrThread
from .graph import ProcessTensors, RunOp, RunUpdateOps
from .group import Callbacks
from .hooks import CallbackToHook, HookToCallback
from .misc import EstimatedTimeLeft
from .monitor import (JSONWriter, MonitorBase, Monitors, NoOpMonitor, ScalarPrinter,
                      SendMonitorData, TFEventWriter)
from .prof import GPUUtilizationTracker, PeakMemoryTracker, ThroughputTracker
from .steps import MaintainStepCounter, ProgressBar, SessionRunTimeout, TensorPrinter
from .summary import MergeAllSummaries, MovingAverageSummary, SimpleMovingAverage
from .trigger import EnableCallbackIf, PeriodicCallback, PeriodicTrigger

__all__ = [
    'Callback', 'CallbackFactory', 'ProxyCallback', 'Callbacks',
    'StartProcOrThread',
    'ProcessTensors', 'RunOp', 'RunUpdateOps',
    'CallbackToHook', 'HookToCallback',
    'EstimatedTimeLeft',
    'JSONWriter', 'MonitorBase', 'Monitors', 'NoOpMonitor', 'ScalarPrinter', 'SendMonitorData',
    'TFEventWriter',
    'GPUUtilizationTracker', 'PeakMemoryTracker', 'ThroughputTracker',
    'MaintainStepCounter', 'ProgressBar', 'SessionRunTimeout', 'TensorPrinter',
    'MergeAllSummaries', 'MovingAverageSummary', 'SimpleMovingAverage',
    'EnableCallbackIf', 'PeriodicCallback', 'PeriodicTrigger',
]
