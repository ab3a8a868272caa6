import os
import pickle

import pytest

from tensorpack_lite.dataflow.shards.store import ShardStore


def test_a_directory_written_read_and_removed_by_name(tmp_path):
    store = ShardStore(str(tmp_path / 'new' / 'data'))
    store.write('a.bin', b'abc')
    store.write('a.bin', b'de')     # replaced whole
    assert store.where('a.bin') == str(tmp_path / 'new' / 'data' / 'a.bin')
    assert os.listdir(str(tmp_path / 'new' / 'data')) == ['a.bin']     # nothing written aside is left
    assert store.read('a.bin') == b'de'
    store.remove('a.bin')
    store.remove('a.bin')           # not there: nothing to do
    with pytest.raises(FileNotFoundError):
        store.open('a.bin')


def test_a_bucket_written_read_and_removed_by_name(s3):
    store = ShardStore('s3://bucket/some/data/')
    store.write('a.bin', b'abc')
    assert store.where('a.bin') == 's3://bucket/some/data/a.bin'
    assert s3.objects('some/data') == {'a.bin': b'abc'}
    with store.open('a.bin') as f:
        assert f.read(2) == b'ab'
    copy = pickle.loads(pickle.dumps(store))    # to another process: its file system made there
    assert copy.read('a.bin') == b'abc'
    store.remove('a.bin')
    store.remove('a.bin')
    assert s3.objects('some/data') == {}
    with pytest.raises(FileNotFoundError):
        store.read('a.bin')
