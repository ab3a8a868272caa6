import logging

import pytest

from helpers.logs import capture_logs
from helpers.shards import directory_bytes, numbers, write_numbered
from tensorpack_lite.dataflow import ShardedData, ShardError
from tensorpack_lite.dataflow.shards import cache as cache_module
from tensorpack_lite.dataflow.shards.store import ShardStore

LIMIT = 9000


def stream(url, cache_dir, **kwargs):
    options = dict(seed=1, window=16, lanes=4, cache_dir=str(cache_dir), cache_bytes=LIMIT)
    options.update(kwargs)
    df = ShardedData(url, **options)
    df.reset_state()
    return df


def test_the_cache_never_holds_more_than_its_limit(tmp_path):
    url = str(tmp_path / 'data')
    index = write_numbered(url, 1200, shard_bytes=500)
    cache_dir = tmp_path / 'cache'
    df = stream(url, cache_dir)
    sizes, seen = [], []
    for epoch in range(2):
        for dp in df:
            seen.append(dp)
            sizes.append(directory_bytes(cache_dir))
    assert sorted(numbers(seen)) == sorted(list(range(1200)) * 2)
    total = sum(e['bytes'] for e in index['shards'])
    assert max(sizes) <= LIMIT < total, (max(sizes), LIMIT, total)
    assert max(sizes) > LIMIT / 3     # it fetches ahead
    assert directory_bytes(cache_dir) == 0      # what is read is removed


def test_a_cache_too_small_for_the_shards_read_at_once_is_an_error_before_any_datapoint(tmp_path):
    url = str(tmp_path / 'data')
    write_numbered(url, 1200, shard_bytes=500)
    message = (r'cache_bytes=2000 is less than the \d+ bytes of the shards worker 0 of 1 reads at one time '
               r'in epoch 0 \(about 2 per lane it reads, 4 lanes\)')
    with pytest.raises(ValueError, match=message):
        next(iter(stream(url, tmp_path / 'cache', cache_bytes=2000)))


def break_shard(s3, index, position, change):
    name = index['shards'][position]['name']
    key = 'bucket/data/{}'.format(name)
    if change is None:
        s3.fs.rm_file(key)
    else:
        s3.fs.pipe_file(key, change(s3.fs.cat_file(key)))
    return name


@pytest.mark.parametrize('change, cause', [
    (None, 'missing'),
    (lambda data: data[:100] + bytes([data[100] ^ 1]) + data[101:],
     'corrupt: sha256 [0-9a-f]{64}, the index says'),
    (lambda data: data[:-10], r'corrupt: \d+ bytes, the index says \d+'),
])
def test_a_missing_or_corrupt_shard_stops_the_stream_naming_it(s3, tmp_path, change, cause):
    index = write_numbered('s3://bucket/data', 600, shard_bytes=500)
    df = stream('s3://bucket/data', tmp_path / 'cache', shuffle=False)
    name = break_shard(s3, index, 3, change)
    got = []
    with pytest.raises(ShardError, match='^s3://bucket/data/{}: {}'.format(name, cause)):
        for dp in df:
            got.append(dp)
    assert len(got) < 600
    assert directory_bytes(tmp_path / 'cache') == 0


class Outage(object):
    """ShardStore.open failing with ConnectionError ``times`` times from its ``after``-th call
    for a shard."""

    def __init__(self, monkeypatch, after, times):
        self.calls, self.after, self.times = 0, after, times
        self.real = ShardStore.open
        monkeypatch.setattr(ShardStore, 'open', lambda store, name: self.open(store, name))
        monkeypatch.setattr(cache_module.ShardCache, 'first_backoff', 0.01)

    def open(self, store, name):
        if not name.startswith('shard-'):
            return self.real(store, name)
        self.calls += 1
        if self.after <= self.calls < self.after + self.times:
            raise ConnectionError('Connection refused by the test')
        return self.real(store, name)


def test_a_storage_outage_is_retried_and_said_once(s3, tmp_path, monkeypatch):
    write_numbered('s3://bucket/data', 600, shard_bytes=500)
    expected = numbers(stream('s3://bucket/data', tmp_path / 'cache0'))
    outage = Outage(monkeypatch, after=4, times=6)
    with capture_logs() as records:
        got = numbers(stream('s3://bucket/data', tmp_path / 'cache'))
    assert got == expected
    assert outage.calls >= 4 + 6
    warnings = records.messages(logging.WARNING)
    assert len(warnings) == 1, warnings
    assert warnings[0].startswith('Reading s3://bucket/data/shard-') and 'ConnectionError' in warnings[0]
    assert 'retrying with backoff for up to 120 s' in warnings[0]


def test_a_storage_failing_too_long_stops_the_stream_naming_the_shard(s3, tmp_path, monkeypatch):
    write_numbered('s3://bucket/data', 600, shard_bytes=500)
    Outage(monkeypatch, after=2, times=10 ** 6)
    with pytest.raises(ShardError, match=r'^s3://bucket/data/shard-\d{5}.tpls: the storage failed for 0 s: '
                                         'ConnectionError: Connection refused by the test'):
        list(stream('s3://bucket/data', tmp_path / 'cache', retry_seconds=0))
