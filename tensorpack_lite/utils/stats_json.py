"""The ``stats.json`` file of a training run: its name, how it is read and written, and which
of its records mark the end of an epoch.

The file holds a JSON list of records made by :class:`JSONWriter`: the scalars put since the
previous record, plus ``epoch_num`` and ``global_step``. A record made at the end of an epoch also holds the
size of the run that trained it (``world_size``, ``steps_per_epoch``, ``global_batch``):
``steps_per_epoch`` marks it as an epoch's end, so the epochs' ends are known even when a
resumed run changed the steps per epoch (elastic training). In files written before that key,
a record made at the end of epoch ``k`` is the one with ``global_step == k * steps_per_epoch``
(the global step counts training steps); records made in the middle of an epoch (a
validation every N steps) have a smaller step.
JSONWriter writes the file, :class:`AutoResumeTrainConfig` finds its resume point in it and
``utils.plot`` draws it.

Example::

    records = load_records('train_log/run1')     # None when there is no stats.json
    last_epoch(records)                          # e.g. 3
    finished_epochs(records, steps_per_epoch=100)   # e.g. {1: 100, 2: 200, 3: 300}
"""

import json
import os
import re
from datetime import datetime

from .fs import write_atomically

__all__ = ['FILENAME', 'X_KEYS', 'RUN_SHAPE_KEYS', 'stats_path', 'load_records', 'last_epoch',
           'write_records', 'epoch_of', 'finished_epochs', 'scalars_of', 'scalar_history', 'backup_path',
           'remove_stale_temporaries']

FILENAME = 'stats.json'

X_KEYS = ('epoch_num', 'global_step')
"""The keys every record has (the position of the run when it was made)."""

RUN_SHAPE_KEYS = ('world_size', 'steps_per_epoch', 'global_batch')
"""The keys an epoch-end record adds about the run that trained the epoch (``JSONWriter``)."""

_TEMPORARY = re.compile(r'^{}\.[0-9a-f]+\.tmp$'.format(re.escape(FILENAME)))
"""The temporary files of :func:`write_records` (``stats.json.<hex>.tmp``)."""


def stats_path(directory):
    """The path of the stats.json file of the log directory ``directory``."""
    return os.path.join(directory, FILENAME)


def load_records(directory):
    """The list of records in ``directory``'s stats.json, or None when there is no such file.
    Raises ValueError naming the file when it is not a JSON list."""
    fname = stats_path(directory)
    if not os.path.isfile(fname):
        return None
    with open(fname) as f:
        try:
            records = json.load(f)
        except ValueError as err:
            raise ValueError("'{}' is not valid JSON: {}".format(fname, err)) from err
    if not isinstance(records, list):
        raise ValueError("'{}' should hold a list of records, got a {}".format(
            fname, type(records).__name__))
    return records


def scalars_of(record):
    """The statistics of ``record``: its keys other than :data:`X_KEYS` and :data:`RUN_SHAPE_KEYS`."""
    return {key: value for key, value in record.items() if key not in X_KEYS + RUN_SHAPE_KEYS}


def scalar_history(records):
    """``{name: [(global_step, value), ...]}`` of every statistic in ``records``, in their order.

    Example::

        scalar_history(load_records('train_log/run1'))['cost'][-1]    # (global step, last cost)
    """
    history = {}
    for record in records:
        for name, value in scalars_of(record).items():
            history.setdefault(name, []).append((record['global_step'], value))
    return history


def epoch_of(record):
    """The ``epoch_num`` of ``record`` as an int, or None when it has no usable one."""
    try:
        return int(record['epoch_num'])
    except (TypeError, KeyError, ValueError):
        return None


def last_epoch(records):
    """The ``epoch_num`` of the last record, or None when there are no records or the last one
    has no epoch number."""
    return epoch_of(records[-1]) if records else None


def finished_epochs(records, steps_per_epoch):
    """``{epoch: global_step}`` of the epochs that ``records`` saw finish: those with an
    epoch-end record (one holding ``steps_per_epoch``), and, for records without that key, a
    record whose ``global_step`` is ``epoch * steps_per_epoch``. Records made mid-epoch and
    records without both numbers do not count.

    Example::

        finished_epochs([{'epoch_num': 1, 'global_step': 4},
                         {'epoch_num': 2, 'global_step': 6}], 4)    # {1: 4}
    """
    finished = {}
    for record in records:
        epoch = epoch_of(record)
        try:
            step = int(record['global_step'])
        except (TypeError, KeyError, ValueError):
            continue
        if epoch is None or epoch <= 0:
            continue
        if 'steps_per_epoch' in record or step == epoch * steps_per_epoch:
            finished[epoch] = step
    return finished


def write_records(directory, records):
    """Replace ``directory``'s stats.json by ``records`` in one rename (the data synced first),
    so that a crash never leaves a half-written file."""
    write_atomically(stats_path(directory), lambda f: json.dump(records, f), mode='w')


def backup_path(directory):
    """A free name ``stats.json.<MMDD-HHMMSS>`` (a counter appended if taken) in ``directory``,
    for setting records aside."""
    backup = '{}.{}'.format(stats_path(directory), datetime.now().strftime('%m%d-%H%M%S'))
    candidate, index = backup, 1
    while os.path.exists(candidate):
        candidate = '{}.{}'.format(backup, index)
        index += 1
    return candidate


def remove_stale_temporaries(directory):
    """Delete the ``stats.json.<hex>.tmp`` files in ``directory`` (left by a process killed
    while writing; nothing else there has that name) and return their paths."""
    removed = []
    for name in sorted(os.listdir(directory)):
        path = os.path.join(directory, name)
        if _TEMPORARY.match(name) and os.path.isfile(path):
            os.remove(path)
            removed.append(path)
    return removed
