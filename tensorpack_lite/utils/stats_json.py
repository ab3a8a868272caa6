"""The ``stats.json`` file of a training run: its name, how it is read and how it is written.

The file holds a JSON list of records, one per trigger of :class:`JSONWriter`: the scalars put
since the previous record, plus ``epoch_num`` and ``global_step``. JSONWriter writes it,
:class:`AutoResumeTrainConfig` reads the last epoch from it and ``utils.plot`` draws it.

Example::

    records = load_records('train_log/run1')   # None when there is no stats.json
    last_epoch(records)                        # e.g. 3
"""

import json
import os

from .fs import write_atomically

__all__ = ['FILENAME', 'X_KEYS', 'stats_path', 'load_records', 'last_epoch', 'write_records']

FILENAME = 'stats.json'

X_KEYS = ('epoch_num', 'global_step')
"""The keys every record has (the position of the run when it was made)."""


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


def last_epoch(records):
    """The ``epoch_num`` of the last record, or None when there are no records or the last one
    has no epoch number."""
    try:
        return int(records[-1]['epoch_num'])
    except (TypeError, IndexError, KeyError, ValueError):
        return None


def write_records(directory, records):
    """Replace ``directory``'s stats.json by ``records`` in one rename (the data synced first),
    so that a crash never leaves a half-written file."""
    write_atomically(stats_path(directory), lambda f: json.dump(records, f), mode='w')
