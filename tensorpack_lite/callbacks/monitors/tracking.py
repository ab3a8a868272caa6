"""What the experiment trackers share (:class:`~tensorpack_lite.callbacks.MLflowMonitor`,
:class:`~tensorpack_lite.callbacks.WandbMonitor`,
:class:`~tensorpack_lite.callbacks.TensorBoardHParams`): the parameters of a run, how it ended,
and a file in the logger directory that keeps a tracker's own record (its run id), so that a run
resumed in that directory goes on in the same tracked run.
"""

import json
import numbers
import os
from collections.abc import Mapping

from ...checkpoint.directory import get_checkpoint_path
from ...cluster.preemption import Preempted
from ...utils import logger
from ...utils.fs import write_atomically

__all__ = ['run_parameters', 'run_outcome', 'last_checkpoint', 'TrackerRecord',
           'FINISHED', 'FAILED', 'KILLED']

FINISHED, FAILED, KILLED = 'FINISHED', 'FAILED', 'KILLED'
"""How a run ended, in MLflow's words: it ran its schedule or was stopped on purpose
(``StopTraining``, :class:`EarlyStopping`); an error ended it; SIGTERM or Ctrl-C ended it (a
resumed run goes on)."""


def _plain(value):
    """A parameter value as trackers store it: bools, numbers and strings as they are, numpy
    scalars as Python numbers, anything else as its ``str``."""
    if isinstance(value, (bool, str)):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    return str(value)


def run_parameters(trainer, params=None, owner='run_parameters()'):
    """The parameters a tracker records for a run, as a flat dict of names to bools, numbers and
    strings: the trainer's (``trainer.run_parameters()``: its class, world size, schedule and the
    settings of the ``TrainConfig`` it was launched with), then ``params`` (the user's, which win).

    Args:
        trainer: the trainer of the run.
        params (dict): more parameters, e.g. ``{'lr': 0.1, 'depth': 18}``.
        owner (str): who asks, named in the error about ``params``.

    Example::

        run_parameters(trainer, {'lr': 0.1})
        # {'trainer': 'SimpleTrainer', 'world_size': 1, 'steps_per_epoch': 100, ..., 'lr': 0.1}
    """
    check_parameters(params, owner)
    found = dict(trainer.run_parameters()) if hasattr(trainer, 'run_parameters') else {}
    found.update(params or {})
    return {name: _plain(value) for name, value in found.items()}


def check_parameters(params, owner):
    """Raise TypeError naming ``owner`` unless ``params`` is None or a dict with str keys."""
    if params is None:
        return
    if not isinstance(params, Mapping) or not all(isinstance(name, str) for name in params):
        raise TypeError("{}: params must be a dict of names (str) to values, got {!r}".format(owner, params))


def run_outcome(loop):
    """How the run of ``loop`` (a :class:`~tensorpack_lite.loop.state.TrainLoop`) ended, for
    a tracker's ``after_train``: ``(status, why)``, status one of :data:`FINISHED`,
    :data:`FAILED` and :data:`KILLED`, ``why`` the error in one line (None when finished)."""
    failure = loop.failure
    if failure is None:
        return FINISHED, None
    if isinstance(failure.error, (Preempted, KeyboardInterrupt)):
        return KILLED, failure.describe()
    return FAILED, failure.describe()


def last_checkpoint(directory):
    """The prefix of the newest checkpoint of ``directory`` that reads back whole
    (:func:`~tensorpack_lite.checkpoint.directory.get_checkpoint_path`), or None when there is none:
    what a tracker keeps of the run at its end."""
    try:
        return get_checkpoint_path(directory)
    except (FileNotFoundError, ValueError):
        return None


class TrackerRecord:
    """A small JSON file in the logger directory where a tracker keeps what a resumed run needs
    (its run id, the last step it logged), replaced atomically at every write.

    Args:
        filename (str): e.g. ``'mlflow-run.json'``.
        directory (str): defaults to the logger directory.

    Example::

        record = TrackerRecord('mlflow-run.json')
        record.read()                  # None in a new directory
        record.write({'run_id': 'abc'})
    """

    def __init__(self, filename, directory=None):
        directory = directory or logger.get_logger_dir()
        if directory is None:
            raise ValueError("TrackerRecord('{}'): no directory given and the logger directory is "
                             "not set (logger.set_logger_dir()).".format(filename))
        self.path = os.path.join(directory, filename)

    def read(self):
        """The dict written last, or None when there is none; a file that cannot be read is
        reported and counts as none."""
        if not os.path.isfile(self.path):
            return None
        try:
            with open(self.path) as f:
                record = json.load(f)
        except (OSError, ValueError) as err:
            logger.warn("Cannot read '{}' ({}: {}): a new tracked run starts.".format(
                self.path, type(err).__name__, err))
            return None
        if not isinstance(record, dict):
            logger.warn("'{}' does not hold a JSON object: a new tracked run starts.".format(self.path))
            return None
        return record

    def write(self, record):
        """Replace the file with ``record`` (a JSON-serializable dict)."""
        write_atomically(self.path, lambda f: json.dump(record, f, indent=1, sort_keys=True), mode='w')
