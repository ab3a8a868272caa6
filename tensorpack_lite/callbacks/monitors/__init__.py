"""Monitors: where training statistics go, apart from the callbacks that produce them.

The interface and ``trainer.monitors`` (:mod:`.group`); what keeps a run's statistics: event
files, ``stats.json``, the printed table (:mod:`.writers`); what sends them out of the process
(:mod:`.services`); the experiment trackers: MLflow (:mod:`.mlflow`), Weights & Biases
(:mod:`.wandb`), TensorBoard's HParams tab (:mod:`.hparams`), and what they share
(:mod:`.tracking`). ``tensorpack_lite.callbacks`` exports every name here.
"""

from .group import MonitorBase, Monitors, NoOpMonitor
from .hparams import TensorBoardHParams
from .mlflow import MLflowMonitor
from .services import CometMLMonitor, SendMonitorData
from .wandb import WandbMonitor
from .writers import JSONWriter, ScalarPrinter, TFEventWriter

__all__ = ['MonitorBase', 'NoOpMonitor', 'Monitors',
           'TFEventWriter', 'JSONWriter', 'ScalarPrinter', 'SendMonitorData', 'CometMLMonitor',
           'MLflowMonitor', 'WandbMonitor', 'TensorBoardHParams']
