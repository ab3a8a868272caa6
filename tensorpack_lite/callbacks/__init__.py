"""Callbacks: everything that happens around the training steps, and the monitors that
receive training statistics."""

from .base import Callback, CallbackFactory, ProxyCallback
from .group import Callbacks
from .hooks import CallbackToHook, HookToCallback
from .monitor import MonitorBase, Monitors, NoOpMonitor
from .steps import MaintainStepCounter

__all__ = ['Callback', 'CallbackFactory', 'ProxyCallback', 'Callbacks', 'CallbackToHook',
           'HookToCallback', 'MonitorBase', 'Monitors', 'NoOpMonitor', 'MaintainStepCounter']
