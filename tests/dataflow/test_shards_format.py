import io
import json

import pytest

from tensorpack_lite.dataflow.shards.format import (INDEX_NAME, ShardError, ShardFile, encode_shard,
                                                    index_bytes, make_index, parse_index, shard_entry,
                                                    shard_name)

pytestmark = pytest.mark.quick


def test_a_record_is_read_by_its_number():
    records = [b'', b'a', b'bc' * 100, bytes(range(256))]
    shard = ShardFile(io.BytesIO(encode_shard(records)), 'x')
    assert len(shard) == 4
    assert [shard.record(i) for i in (3, 0, 2, 1)] == [records[3], records[0], records[2], records[1]]


def test_the_layout_is_length_prefixed_records_then_offsets_then_a_footer():
    data = encode_shard([b'xyz', b'hello'])
    assert data[:8] == (3).to_bytes(8, 'little') and data[8:11] == b'xyz'
    assert data[11:19] == (5).to_bytes(8, 'little') and data[19:24] == b'hello'
    assert data[24:40] == (0).to_bytes(8, 'little') + (11).to_bytes(8, 'little')
    assert data[40:44] == b'TPLS' and len(data) == 40 + 24


@pytest.mark.parametrize('data', [b'', b'not a shard at all, but long enough', encode_shard([b'a'])[:-1]])
def test_what_is_not_a_shard_is_refused_with_its_name(data):
    with pytest.raises(ShardError, match='s3://b/shard-00001.tpls: not a shard file'):
        ShardFile(io.BytesIO(data), 's3://b/shard-00001.tpls')


def test_the_index_counts_and_checksums():
    entries = [shard_entry(shard_name(0), 2, b'12345'), shard_entry(shard_name(1), 1, b'')]
    index = make_index(entries)
    assert index['total'] == 3 and index['version'] == 1 and INDEX_NAME == 'index.json'
    assert index['shards'][0] == {'name': 'shard-00000.tpls', 'count': 2, 'bytes': 5, 'sha256':
                                  '5994471abb01112afcc18159f6cc74b4f511b99806da59b3caf5a9c173cacfc5'}
    assert parse_index(index_bytes(index), 'where') == index


@pytest.mark.parametrize('change, message', [
    (lambda i: i.update(format='other'), 'not an index of shards'),
    (lambda i: i.update(total=4), 'not the sum'),
    (lambda i: i.update(version=2), 'index version 2; this library reads version 1'),
    (lambda i: i.pop('shards'), 'not an index of shards'),
])
def test_a_wrong_index_is_refused(change, message):
    index = make_index([shard_entry(shard_name(0), 3, b'x')])
    change(index)
    with pytest.raises(ShardError, match='^s3://b/index.json: .*' + message):
        parse_index(json.dumps(index).encode(), 's3://b/index.json')
