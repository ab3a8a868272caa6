"""The ``checkpoint`` state file of a directory: which checkpoints are listed, the latest last.

It is TensorFlow's text format (``model_checkpoint_path: "model-45"``, then one
``all_model_checkpoint_paths: "..."`` line per listed checkpoint, paths relative to the
directory), so TensorFlow's own readers (``tf.train.latest_checkpoint``) understand it. It is
read and written here only; it is replaced in one rename, so a reader sees the old list or the
new one, never a mix.

Example::

    write_checkpoint_state('train_log/run', ['train_log/run/model-30', 'train_log/run/model-45'])
    read_checkpoint_state('train_log/run')   # ['/abs/train_log/run/model-30', '/abs/.../model-45']
"""

import os
import re

from ..utils.fs import write_atomically

__all__ = ['STATE_FILE', 'CheckpointStateError', 'read_checkpoint_state', 'write_checkpoint_state']

STATE_FILE = 'checkpoint'
"""The name of the state file in a checkpoint directory."""

_STATE_LINE = re.compile(r'^(model_checkpoint_path|all_model_checkpoint_paths)\s*:\s*"((?:[^"\\]|\\.)*)"$')
# TF's own Saver also records when each checkpoint was written.
_STATE_TIME_LINE = re.compile(
    r'^(all_model_checkpoint_timestamps|last_preserved_timestamp)\s*:\s*[-+.\deE]+$')


class CheckpointStateError(ValueError):
    """The ``checkpoint`` state file of a directory cannot be read."""


def read_checkpoint_state(dirname):
    """The checkpoint prefixes the ``checkpoint`` state file of ``dirname`` lists (absolute,
    oldest first, the latest last; [] when there is no state file).

    Raises:
        CheckpointStateError: the file is unreadable or not a checkpoint state (garbage,
            zeroed or cut short: every non-empty line must be a ``key: "path"`` entry).
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
    latest, listed = None, []
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or _STATE_TIME_LINE.match(line):
            continue
        match = _STATE_LINE.match(line)
        if match is None:
            raise CheckpointStateError("state file '{}' is not a checkpoint state: line {} is {!r}".format(
                state_file, number, line[:60]))
        path = os.path.normpath(os.path.join(dirname, re.sub(r'\\(.)', r'\1', match.group(2))))
        if match.group(1) == 'model_checkpoint_path':
            latest = path
        elif path not in listed:
            listed.append(path)
    if latest is None:
        raise CheckpointStateError("state file '{}' names no latest checkpoint".format(state_file))
    return [path for path in listed if path != latest] + [latest]


def write_checkpoint_state(dirname, paths):
    """Replace the state file of ``dirname`` with one listing ``paths`` (checkpoint prefixes,
    oldest first; the last is the latest), relative to ``dirname``, in one rename (synced)."""
    names = [os.path.relpath(path, dirname).replace('\\', '\\\\').replace('"', '\\"') for path in paths]
    lines = ['model_checkpoint_path: "{}"'.format(names[-1])]
    lines += ['all_model_checkpoint_paths: "{}"'.format(name) for name in names]
    write_atomically(os.path.join(dirname, STATE_FILE), lambda f: f.write('\n'.join(lines) + '\n'), mode='w')
