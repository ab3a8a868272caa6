"""utils.fs: a file is replaced whole or not at all."""

import os

import pytest

from tensorpack_lite.utils.fs import atomic_path, write_atomically


@pytest.mark.quick
def test_write_atomically_replaces_the_file_and_leaves_no_temporary(tmp_path):
    path = tmp_path / 'stats.json'
    path.write_text('old')
    write_atomically(str(path), lambda f: f.write('new'), mode='w')
    assert path.read_text() == 'new'
    assert os.listdir(tmp_path) == ['stats.json']


@pytest.mark.parametrize('durable', [True, False])
def test_a_crash_while_writing_keeps_the_old_file(tmp_path, durable):
    path = tmp_path / 'data.bin'
    path.write_bytes(b'complete old content')

    def crash_half_way(f):
        f.write(b'half of the ne')
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        write_atomically(str(path), crash_half_way, durable=durable)
    assert path.read_bytes() == b'complete old content'
    assert os.listdir(tmp_path) == ['data.bin']


def test_atomic_path_for_writers_that_take_a_path(tmp_path):
    path = tmp_path / 'records'
    with atomic_path(path) as tmp:
        assert tmp.endswith('.tmp') and os.path.dirname(tmp) == str(tmp_path)
        with open(tmp, 'wb') as f:
            f.write(b'x' * 10)
        assert not path.exists()          # nothing visible before the block ends
    assert path.read_bytes() == b'x' * 10 and os.listdir(tmp_path) == ['records']
