"""The ``checkpoint`` state file of a directory: which checkpoints are listed, the latest last.

It is TensorFlow's ``CheckpointState`` protocol buffer in text format
(``model_checkpoint_path: "model-45"``, then one ``all_model_checkpoint_paths: "..."`` line per
listed checkpoint, paths relative to the directory), read and written with protobuf's
``text_format`` and TensorFlow's own message, so both sides agree on every name: TensorFlow's
readers (``tf.train.latest_checkpoint``) understand what is written here, and what TensorFlow
writes (non-ASCII names as they are or in octal escapes, as its protobuf version does, and the
timestamps its Saver records) reads back here.
It is read and written here only; it is replaced in one rename, so a reader sees the old list or
the new one, never a mix.

Example::

    write_checkpoint_state('train_log/run', ['train_log/run/model-30', 'train_log/run/model-45'])
    read_checkpoint_state('train_log/run')   # ['/abs/train_log/run/model-30', '/abs/.../model-45']
"""

import os
import re

from google.protobuf import text_format

from ..compat import tf_internal
from ..utils.fs import write_atomically

__all__ = ['STATE_FILE', 'CheckpointStateError', 'read_checkpoint_state', 'write_checkpoint_state']

STATE_FILE = 'checkpoint'
"""The name of the state file in a checkpoint directory."""


def _checkpoint_state(**fields):
    """TensorFlow's ``CheckpointState`` message (the state file's content) with ``fields``."""
    return tf_internal('python.training.checkpoint_state_pb2').CheckpointState(**fields)


class CheckpointStateError(ValueError):
    """The ``checkpoint`` state file of a directory cannot be read."""


def read_checkpoint_state(dirname):
    """The checkpoint prefixes the ``checkpoint`` state file of ``dirname`` lists (absolute,
    oldest first, the latest last; [] when there is no state file).

    Raises:
        CheckpointStateError: the file is unreadable or not a checkpoint state (garbage,
            zeroed or cut short: it must parse as TensorFlow's ``CheckpointState`` and name the
            latest checkpoint); the message names the file and the line at fault.
    """
    dirname = os.path.abspath(dirname)
    state_file = os.path.join(dirname, STATE_FILE)
    if not os.path.isfile(state_file):
        return []
    try:
        with open(state_file, 'rb') as f:
            text = f.read().decode('utf-8')
    except (OSError, UnicodeDecodeError) as err:
        raise CheckpointStateError("cannot read state file '{}': {}".format(state_file, err)) from err
    state = _checkpoint_state()
    try:
        text_format.Merge(text, state)     # as TensorFlow reads it (get_checkpoint_state)
    except text_format.ParseError as err:
        raise CheckpointStateError("state file '{}' is not a checkpoint state: {}".format(
            state_file, _where(err, text))) from err
    latest = _absolute(dirname, state.model_checkpoint_path) if state.model_checkpoint_path else None
    listed = []
    for path in state.all_model_checkpoint_paths:
        path = _absolute(dirname, path)
        if path not in listed:
            listed.append(path)
    if latest is None:
        raise CheckpointStateError("state file '{}' names no latest checkpoint".format(state_file))
    return [path for path in listed if path != latest] + [latest]


def write_checkpoint_state(dirname, paths):
    """Replace the state file of ``dirname`` with one listing ``paths`` (checkpoint prefixes,
    oldest first; the last is the latest), relative to ``dirname``, in one rename (synced)."""
    names = [os.path.relpath(path, dirname) for path in paths]
    # ASCII only, whatever the names (octal escapes of their UTF-8 bytes, as TensorFlow's writer
    # makes them with a protobuf whose text format escapes by default, e.g. 3.x): any reader
    # reads it, in any locale
    text = text_format.MessageToString(_checkpoint_state(model_checkpoint_path=names[-1],
                                                         all_model_checkpoint_paths=names), as_utf8=False)
    write_atomically(os.path.join(dirname, STATE_FILE), lambda f: f.write(text), mode='w')


def _absolute(dirname, path):
    """A path of the state file (relative to its directory, or absolute) as an absolute one."""
    return os.path.normpath(os.path.join(dirname, path))


def _where(err, text):
    """What a ``text_format.ParseError`` of ``text`` found: its line, shown, and the reason."""
    reason = re.sub(r'^\d+(:\d+)? : ', '', str(err))
    lines = text.splitlines()
    number = err.GetLine()
    if number is None or not 1 <= number <= len(lines):
        return reason
    return "line {} is {!r} ({})".format(number, lines[number - 1].strip()[:60], reason)
