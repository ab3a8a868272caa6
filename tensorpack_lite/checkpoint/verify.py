"""Whether a checkpoint reads back whole: a cheap check of its files (:func:`checked_reader`) and
a full read of every tensor with its checksum (:func:`verify_checkpoint`).

Example::

    verify_checkpoint('train_log/run/model-45')   # ValueError naming what is wrong, else None
"""

import os

import numpy as np

from ..compat import tf, tfv1
from .files import DATA_SHARD, data_shards

__all__ = ['checked_reader', 'read_tensor', 'verify_checkpoint']


def checked_reader(prefix):
    """A ``CheckpointReader`` for ``prefix``, after checking that the checkpoint looks complete:
    a readable index, every data shard present, and data files large enough for every tensor.

    Raises ValueError naming the checkpoint when it is corrupt or incomplete. (Values are
    checksummed by TensorFlow; a corruption these cheap checks miss fails when they are read.)
    """
    try:
        reader = tfv1.train.NewCheckpointReader(prefix)
        shapes = reader.get_variable_to_shape_map()
        dtypes = reader.get_variable_to_dtype_map()
    except Exception as err:  # DataLossError, InvalidArgumentError... from a bad index
        raise ValueError("Checkpoint '{}' is corrupt or not a TensorFlow checkpoint: cannot read "
                         "'{}': {}".format(prefix, prefix + '.index', err)) from err
    shards = {}
    for path in data_shards(prefix):
        match = DATA_SHARD.search(path)
        shards[int(match.group(1))] = (int(match.group(2)), path)
    totals = {n for n, _ in shards.values()}
    if shapes and not shards:
        raise ValueError("Checkpoint '{}' is incomplete: its index lists {} tensors but there is no "
                         "'{}.data-*' file.".format(prefix, len(shapes), prefix))
    if len(totals) > 1 or (shards and set(shards) != set(range(totals.pop()))):
        raise ValueError("Checkpoint '{}' is incomplete or mixed: found data shards {}.".format(
            prefix, sorted(os.path.basename(p) for _, p in shards.values())))
    expected = sum(int(np.prod(shape, dtype=np.int64)) * tf.as_dtype(dtypes[name]).size
                   for name, shape in shapes.items() if dtypes[name] != tf.string)
    actual = sum(os.path.getsize(p) for _, p in shards.values())
    if actual < expected:
        raise ValueError("Checkpoint '{}' is truncated: its data files hold {} bytes, its index "
                         "needs at least {}.".format(prefix, actual, expected))
    return reader


def read_tensor(reader, prefix, name):
    """Tensor ``name`` of checkpoint ``prefix`` through ``reader``, as an array; ValueError naming
    both when it does not read back."""
    try:
        return np.asarray(reader.get_tensor(name))
    except Exception as err:
        raise ValueError("Checkpoint '{}' is corrupt: cannot read tensor '{}': {}".format(
            prefix, name, err)) from err


def verify_checkpoint(prefix):
    """Check that checkpoint ``prefix`` reads back whole: its ``.index`` exists and parses,
    every data shard is there and long enough, and every tensor reads back with a correct
    checksum. Reads the whole checkpoint once, one tensor at a time.

    Raises:
        FileNotFoundError: there is no ``<prefix>.index``.
        ValueError: naming the checkpoint and what is wrong with it.
    """
    if not os.path.isfile(prefix + '.index'):
        raise FileNotFoundError("Checkpoint '{}' has no index: '{}' does not exist.".format(
            prefix, prefix + '.index'))
    reader = checked_reader(prefix)
    for name in reader.get_variable_to_shape_map():
        read_tensor(reader, prefix, name)
