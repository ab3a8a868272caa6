import logging
import re
import threading

import pytest

from helpers.logs import capture_logs
from helpers.shards import directory_bytes, numbers, write_numbered
from helpers.timing import HANG_TIMEOUT, wait_until
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
    """The storage failing with ConnectionError for ``times`` reads of shards from the
    ``after``-th: when a shard is opened, or (``mid_read``) after its first chunk was read."""

    def __init__(self, monkeypatch, after, times, mid_read=False):
        self.calls, self.after, self.times, self.mid_read = 0, after, times, mid_read
        self.real = ShardStore.open
        monkeypatch.setattr(ShardStore, 'open', lambda store, name: self.open(store, name))
        monkeypatch.setattr(cache_module.ShardCache, 'first_backoff', 0.01)

    def failing(self):
        return self.after <= self.calls < self.after + self.times

    def open(self, store, name):
        if not name.startswith('shard-'):
            return self.real(store, name)
        self.calls += 1
        if self.failing() and not self.mid_read:
            raise ConnectionError('Connection refused by the test')
        f = self.real(store, name)
        if self.failing():
            f.read = BrokenRead(f.read)
        return f


class BrokenRead(object):
    def __init__(self, read):
        self.read, self.chunks = read, 0

    def __call__(self, size=-1):
        self.chunks += 1
        if self.chunks > 1:
            raise ConnectionError('Connection reset by the test')
        return self.read(min(size, 10))


@pytest.mark.parametrize('mid_read', [False, True], ids=['refused', 'reset-mid-read'])
def test_a_storage_outage_is_retried_and_said_once(s3, tmp_path, monkeypatch, mid_read):
    write_numbered('s3://bucket/data', 600, shard_bytes=500)
    expected = numbers(stream('s3://bucket/data', tmp_path / 'cache0'))
    outage = Outage(monkeypatch, after=4, times=6, mid_read=mid_read)
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


def test_a_worker_reads_the_bytes_of_its_shards_only(tmp_path):
    url = str(tmp_path / 'data')
    index = write_numbered(url, 1200, shard_bytes=500)
    sizes = [e['bytes'] for e in index['shards']]
    read = []
    for rank in range(2):
        df = stream(url, tmp_path / 'cache{}'.format(rank), rank=rank, world=2)
        assert len(numbers(df)) == 600
        shards = set(df.order.locate(df.order.share(0, 0, rank, 2))[0].tolist())
        assert df.fetched_bytes == sum(sizes[s] for s in shards)
        read.append(df.fetched_bytes)
    print('bytes read by each of 2 workers: {}, the dataset: {}'.format(read, sum(sizes)))
    assert max(read) < 0.6 * sum(sizes) and sum(read) < 1.1 * sum(sizes)


FAIL_FAST = {'config_kwargs': {'retries': {'max_attempts': 1}}}
"""botocore without retries of its own (and s3fs's ``retries`` at 1): the stream's retries act
at once."""


def test_a_real_outage_of_the_s3_server_is_retried_and_said_once_and_a_longer_one_names_the_shard(
        own_s3_server, tmp_path, monkeypatch):
    """The S3 server ended mid-stream (its connections with it) and started again on its port once
    the stream said it retries (helpers.s3.S3Server.pause/resume: the objects are copied out and
    loaded into the new server before it listens); then ended for longer than retry_seconds."""
    import s3fs
    monkeypatch.setattr(s3fs.S3FileSystem, 'retries', 1)
    server = own_s3_server
    server.serve_this_process(monkeypatch)
    write_numbered('s3://bucket/data', 600, shard_bytes=500)
    expected = numbers(stream('s3://bucket/data', tmp_path / 'cache0', lanes=1))
    with capture_logs() as records:
        epoch = iter(stream('s3://bucket/data', tmp_path / 'cache', lanes=1, cache_bytes=3000,
                            storage_options=FAIL_FAST))
        head = numbers(next(epoch) for _ in range(100))
        server.pause()

        def resume_once_said():
            assert wait_until(lambda: records.messages(logging.WARNING), timeout=HANG_TIMEOUT)
            server.resume()
        resuming = threading.Thread(target=resume_once_said)
        resuming.start()
        try:
            rest = numbers(epoch)
        finally:
            resuming.join()
    assert head + rest == expected
    warnings = records.messages(logging.WARNING)
    assert len(warnings) == 1, warnings
    assert re.match(r'Reading s3://bucket/data/shard-\d{5}\.tpls failed \(', warnings[0])
    assert warnings[0].endswith('retrying with backoff for up to 120 s')
    print(warnings[0])
    df = stream('s3://bucket/data', tmp_path / 'cache2', lanes=1, retry_seconds=1,
                storage_options=FAIL_FAST)    # its index read
    server.pause()
    failed = r'^s3://bucket/data/shard-\d{5}.tpls: the storage failed for 1 s: EndpointConnectionError'
    with pytest.raises(ShardError, match=failed):
        list(df)
