"""The ``checkpoint`` state file of a directory (checkpoint/state_file.py): TensorFlow's
``CheckpointState`` in text format, so that TensorFlow's writer and readers and the library
agree on every name (TensorFlow writes a non-ASCII name as octal escapes), and a file that is
no state file is an error naming it."""

import os
import re

import pytest

from tensorpack_lite.checkpoint import (STATE_FILE, CheckpointStateError, read_checkpoint_state,
                                        write_checkpoint_state)
from tensorpack_lite.compat import tf, tfv1

NAMES = ['odd "name" \\ -1', 'modèle-2', '模型-3']
"""Checkpoint names that need escaping in the text format: quotes and a backslash, non-ASCII."""


@pytest.fixture
def directory(tmp_path):
    """A checkpoint directory whose own name is not ASCII either."""
    path = tmp_path / 'répertoire'
    path.mkdir()
    return str(path)


def test_the_state_file_round_trips_names_that_need_escaping(directory):
    paths = [os.path.join(directory, name) for name in NAMES]
    write_checkpoint_state(directory, paths)
    assert read_checkpoint_state(directory) == paths
    assert os.listdir(directory) == [STATE_FILE]   # no temporary left
    with open(os.path.join(directory, STATE_FILE), 'rb') as f:
        assert f.read().isascii()      # names that are not ASCII in octal escapes


@pytest.mark.parametrize('relative', [False, True], ids=['absolute', 'relative'])
def test_a_state_file_tensorflow_writes_with_non_ascii_names_reads_back(directory, relative):
    """TensorFlow's own writer (tf.compat.v1.train.update_checkpoint_state, what its Saver calls),
    with the names as they are or in octal escapes, as the installed protobuf's text format
    writes them by default (as they are with protobuf 5.29 and 7.36)."""
    paths = [os.path.join(directory, name) for name in NAMES]
    given = NAMES if relative else paths
    tfv1.train.update_checkpoint_state(directory, given[-1], given)
    assert read_checkpoint_state(directory) == paths


def test_octal_escapes_of_non_ascii_names_read_back(directory):
    """What TensorFlow's writer writes with a protobuf that escapes by default (3.x), and what
    the library writes: each UTF-8 byte of a name that is not ASCII as an octal escape."""
    with open(os.path.join(directory, STATE_FILE), 'w') as f:
        f.write('model_checkpoint_path: "\\346\\250\\241\\345\\236\\213-3"\n'
                'all_model_checkpoint_paths: "mod\\303\\250le-2"\n')
    assert read_checkpoint_state(directory) == [os.path.join(directory, 'modèle-2'),
                                                os.path.join(directory, '模型-3')]


def test_a_state_file_written_here_with_non_ascii_names_reads_in_tensorflow(directory):
    paths = [os.path.join(directory, name) for name in NAMES]
    write_checkpoint_state(directory, paths)
    state = tf.train.get_checkpoint_state(directory)
    assert state.model_checkpoint_path == paths[-1]
    assert list(state.all_model_checkpoint_paths) == paths
    open(paths[-1] + '.index', 'wb').close()     # latest_checkpoint wants its index to exist
    assert tf.train.latest_checkpoint(directory) == paths[-1]


def test_the_latest_is_last_and_each_checkpoint_is_listed_once(tmp_path):
    (tmp_path / STATE_FILE).write_text('model_checkpoint_path: "model-2"\n'
                                       'all_model_checkpoint_paths: "model-2"\n'
                                       'all_model_checkpoint_paths: "model-1"\n'
                                       'all_model_checkpoint_paths: "model-1"\n')
    assert read_checkpoint_state(str(tmp_path)) == [str(tmp_path / 'model-1'), str(tmp_path / 'model-2')]
    os.remove(str(tmp_path / STATE_FILE))
    assert read_checkpoint_state(str(tmp_path)) == []


DAMAGED = {
    'garbage': (b'garbage {{{ not a checkpoint state\n',
                "is not a checkpoint state: line 1 is 'garbage {{{ not a checkpoint state'"),
    'zeroed': (b'\0' * 40, 'is not a checkpoint state'),
    'cut short in a name': (b'model_checkpoint_path: "model-3"\nall_model_checkpoint_paths: "mod',
                            "is not a checkpoint state: line 2 is 'all_model_checkpoint_paths: \"mod'"),
    'an unknown field': (b'model_checkpoint_path: "model-3"\nbest: "model-1"\n',
                         "is not a checkpoint state: line 2 is 'best: \"model-1\"'"),
    'no latest': (b'all_model_checkpoint_paths: "model-3"\n', 'names no latest checkpoint'),
    'empty': (b'', 'names no latest checkpoint'),
    'not UTF-8': (b'model_checkpoint_path: "\xff"\n', 'cannot read state file'),
    'an escape that is not UTF-8': (b'model_checkpoint_path: "\\377"\n', "is not a checkpoint state"),
}


@pytest.mark.parametrize('case', sorted(DAMAGED))
def test_a_damaged_state_file_is_an_error_naming_it(tmp_path, case):
    content, says = DAMAGED[case]
    (tmp_path / STATE_FILE).write_bytes(content)
    with pytest.raises(CheckpointStateError, match=re.escape("'{}'".format(tmp_path / STATE_FILE))) as info:
        read_checkpoint_state(str(tmp_path))
    assert says in str(info.value)
