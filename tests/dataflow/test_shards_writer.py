import hashlib
import json
import os

import numpy as np
import pytest

from helpers.shards import numbered, numbers, write_numbered
from tensorpack_lite.dataflow import DataFlow, ShardedData, ShardError, save_shards


def read_back(url, **kwargs):
    df = ShardedData(url, shuffle=False, lanes=1, **kwargs)
    df.reset_state()
    return list(df)


def test_written_to_a_directory_and_read_back_equal(tmp_path):
    url = str(tmp_path / 'data')
    index = write_numbered(url, 500, shard_bytes=1000)
    names = sorted(os.listdir(url))
    assert names == ['index.json'] + ['shard-{:05d}.tpls'.format(i) for i in range(len(index['shards']))]
    assert json.loads((tmp_path / 'data' / 'index.json').read_text()) == index
    assert index['total'] == 500 == sum(e['count'] for e in index['shards'])
    for entry in index['shards']:
        data = (tmp_path / 'data' / entry['name']).read_bytes()
        assert entry['bytes'] == len(data) and entry['sha256'] == hashlib.sha256(data).hexdigest()
    assert len(index['shards']) > 10
    assert all(e['bytes'] >= 1000 for e in index['shards'][:-1])
    assert numbers(read_back(url)) == list(range(500))


def test_written_to_a_bucket_and_read_back_equal(s3):
    index = write_numbered('s3://bucket/digits', 300, shard_bytes=800)
    objects = s3.objects('digits')
    assert sorted(objects) == ['index.json'] + [e['name'] for e in index['shards']]
    assert json.loads(objects['index.json']) == index
    dps = read_back('s3://bucket/digits')
    assert numbers(dps) == list(range(300))
    assert all(dp[1].dtype == np.float32 for dp in dps)


class Failing(DataFlow):
    def __iter__(self):
        yield from numbered(50)
        raise OSError('the source broke')


def test_an_interrupted_writing_leaves_no_index(tmp_path):
    url = str(tmp_path / 'data')
    write_numbered(url, 100)
    with pytest.raises(OSError, match='the source broke'):
        save_shards(Failing(), url, shard_bytes=100)
    assert 'index.json' not in os.listdir(url)
    with pytest.raises(ShardError, match='index.json: missing: not a sharded dataset, or its writing did'):
        ShardedData(url)


def test_bad_datapoints_and_arguments(tmp_path):
    with pytest.raises(TypeError, match='datapoint #0'):
        save_shards(numbered(0).__class__([[object()]]), str(tmp_path))
    with pytest.raises(TypeError, match='takes a DataFlow'):
        save_shards([[1]], str(tmp_path))
    with pytest.raises(ValueError, match='shard_bytes must be >= 1'):
        save_shards(numbered(2), str(tmp_path), shard_bytes=0)


def test_an_empty_dataflow_gives_one_empty_shard(tmp_path):
    index = save_shards(numbered(0), str(tmp_path))
    assert index['total'] == 0 and len(index['shards']) == 1
    assert read_back(str(tmp_path)) == []
