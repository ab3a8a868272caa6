"""Monitors: where training statistics go (terminal, stats.json, TensorBoard...).

This is tensorpack's path to them; the interface and ``trainer.monitors`` are in
:mod:`.monitor_group`, the writers of event files, stats.json and the printed table in
:mod:`.monitor_writers`, and the monitors that send statistics elsewhere in
:mod:`.monitor_services`.
"""

from .monitor_group import MonitorBase, Monitors, NoOpMonitor
from .monitor_services import CometMLMonitor, SendMonitorData
from .monitor_writers import JSONWriter, ScalarPrinter, TFEventWriter

__all__ = ['MonitorBase', 'NoOpMonitor', 'Monitors',
           'TFEventWriter', 'JSONWriter', 'ScalarPrinter', 'SendMonitorData', 'CometMLMonitor']
