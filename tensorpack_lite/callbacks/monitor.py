"""Monitors at tensorpack's path (``tensorpack.callbacks.monitor``): the names of
:mod:`tensorpack_lite.callbacks.monitors` tensorpack had, the same objects."""

from .monitors.group import MonitorBase, Monitors, NoOpMonitor
from .monitors.services import CometMLMonitor, SendMonitorData
from .monitors.writers import JSONWriter, ScalarPrinter, TFEventWriter

__all__ = ['MonitorBase', 'NoOpMonitor', 'Monitors',
           'TFEventWriter', 'JSONWriter', 'ScalarPrinter', 'SendMonitorData', 'CometMLMonitor']
