"""Sharded datasets streamed per worker against the LMDB + RankShardData pattern (issue 69).

The data: ``--count`` datapoints ``[3 x size x size uint8 image, int32 label]`` drawn with a fixed
seed, written once as shards (``save_shards``) to a local directory and to a bucket of a moto S3
server this script starts (and stops), and as an LMDB database (``LMDBSerializer``).

1. Samples/s of one epoch at 1, 2 and 4 workers: worker k of n is run as its own iteration in
   this process, one after the other, each with a new empty shard cache:

   * ``S3 shards``, ``local shards``: ``ShardedData(url, rank=k, world=n)`` (shuffled);
   * ``LMDB``: ``LMDBSerializer.load(path, shuffle=True)``, the whole epoch (one reader);
   * ``RankShardData(LMDB)``: ``RankShardData(LMDBSerializer.load(...), k, n)``.

   Per worker: its samples/s and the bytes it read (for shards, the shard bytes it fetched,
   counted at the store; for LMDB, the values it decoded). The job's samples/s is the sum of
   its workers' (what n machines would do, each worker on its own).

2. Resume: the time from a resume's start (a new DataFlow, ``set_state``) to its first datapoint,
   for ``ShardedData`` with ``window=B`` (local, and S3 with an empty cache) against
   ``LocallyShuffleData(LMDB, buffer_size=B)``, whose resume reads its buffer again; the state is
   taken after ``3 B + 7`` datapoints.

Each measurement runs ``--rounds`` times, interleaved; medians are printed.

Run: python benchmarks/shard_streaming.py [--count 4000 --size 64 --rounds 3]
"""

import argparse
import logging
import os
import shutil
import statistics
import sys
import tempfile
import time

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
sys.path.append(os.path.join(REPO, 'tests'))   # helpers.s3: the moto server the tests use

from tensorpack_lite.dataflow import (DataFromGenerator, LMDBSerializer, LocallyShuffleData,  # noqa: E402
                                      MapData, ShardedData, save_shards)
from tensorpack_lite.train import RankShardData  # noqa: E402

from helpers.s3 import BUCKET, S3Server  # noqa: E402

MB = 1e6


# ----------------------------------------------------------------- the data

def generated(count, size):
    """The benchmark's datapoints, drawn with a fixed seed."""
    def gen():
        rng = np.random.RandomState(0)
        for i in range(count):
            yield [rng.randint(0, 256, (3, size, size), dtype=np.uint8), np.int32(rng.randint(1000))]
    return DataFromGenerator(gen, size=count)


class CountingFile:
    """A file read through, counting its bytes into ``counter``."""

    def __init__(self, f, counter):
        self._f, self._counter = f, counter

    def read(self, *args):
        data = self._f.read(*args)
        self._counter['bytes'] += len(data)
        return data

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._f.close()


class CountingStore:
    """A ``ShardStore`` whose opened files count the bytes read from them."""

    def __init__(self, store):
        self._store, self.counter = store, {'bytes': 0}

    def __getattr__(self, name):
        return getattr(self._store, name)

    def open(self, name):
        return CountingFile(self._store.open(name), self.counter)


def sharded(url, counter_box, **kwargs):
    """``ShardedData(url, **kwargs)`` whose shard bytes fetched are counted."""
    df = ShardedData(url, **kwargs)
    df.store = CountingStore(df.store)
    counter_box.append(df.store.counter)
    return df


def lmdb_counted(path, counter_box, shuffle=True):
    """``LMDBSerializer.load(path)`` counting the bytes of the values it decodes."""
    df = LMDBSerializer.load(path, shuffle=shuffle)
    counter = {'bytes': 0, 'datapoints': 0}

    def count(pair):
        counter['bytes'] += len(pair[1])
        counter['datapoints'] += 1
        return pair
    df.ds = MapData(df.ds, count)
    counter_box.append(counter)
    return df


# ----------------------------------------------------------------- 1. throughput

def read_epoch(make):
    """(datapoints, seconds, bytes read) of one epoch of ``make(box)``, construction included."""
    box = []
    start = time.perf_counter()
    df = make(box)
    df.reset_state()
    count = 0
    for dp in df:
        assert dp[0].shape[0] == 3
        count += 1
    return count, time.perf_counter() - start, box[0]['bytes']


def throughput_paths(urls, lmdb_path, storage_options, caches, workers):
    """[(name, n, k, make)] of every measured iteration."""
    paths = [('LMDB', 1, 0, lambda box: lmdb_counted(lmdb_path, box))]

    def shards(url, opts, n, k):
        return lambda box: sharded(url, box, rank=k, world=n, seed=0, cache_dir=caches(),
                                   storage_options=opts)
    for n in workers:
        for k in range(n):
            paths.append(('S3 shards', n, k, shards(urls['s3'], storage_options, n, k)))
            paths.append(('local shards', n, k, shards(urls['local'], None, n, k)))
            paths.append(('RankShardData(LMDB)', n, k,
                          lambda box, n=n, k=k: RankShardData(lmdb_counted(lmdb_path, box), k, n)))
    return paths


def print_throughput(results, names, workers, data_bytes):
    print("\n1. One epoch, worker k of n as its own iteration (medians of the rounds)\n")
    print("{:<22}{:>3}{:>24}{:>15}{:>10}{:>20}{:>14}".format(
        'source', 'n', 'samples/s a worker', 'job samples/s', 'job/n=1', 'MB read a worker', 'of the data'))
    for name in names:
        base = None
        for n in workers:
            runs = [results[(name, n, k)] for k in range(n) if (name, n, k) in results]
            if not runs:
                continue
            rates = [statistics.median(c / s for c, s, _ in r) for r in runs]
            megabytes = [statistics.median(b for _, _, b in r) / MB for r in runs]
            job = sum(rates)
            base = base or job
            print("{:<22}{:>3}{:>24}{:>15.0f}{:>10.2f}{:>20}{:>14}".format(
                name, n, '{:.0f} ({:.0f}-{:.0f})'.format(statistics.mean(rates), min(rates), max(rates)),
                job, job / base, '{:.1f} ({:.1f}-{:.1f})'.format(statistics.mean(megabytes), min(megabytes),
                                                                 max(megabytes)),
                '{:.0%}'.format(statistics.mean(megabytes) * MB / data_bytes)))


# ----------------------------------------------------------------- 2. resume

def time_to_first(make, state):
    """(seconds from a new DataFlow to its first datapoint after ``set_state(state)``, bytes read
    by then (for shards, with what the cache's thread fetched ahead), datapoints decoded by then:
    one for shards, which decode only what they yield)."""
    box = []
    start = time.perf_counter()
    df = make(box)
    df.reset_state()
    df.set_state(state)
    itr = iter(df)
    next(itr)
    seconds = time.perf_counter() - start
    counter = dict(box[0])
    itr.close()
    return seconds, counter['bytes'], counter.get('datapoints', 1)


def state_after(make, count):
    """The state of ``make(box)`` after ``count`` datapoints (across epochs)."""
    df = make([])
    df.reset_state()
    taken = 0
    while taken < count:
        for _ in df:
            taken += 1
            if taken == count:
                return df.get_state()


def resume_paths(urls, lmdb_path, storage_options, caches, buffer):
    def shards(url, opts):
        return lambda box: sharded(url, box, seed=0, window=buffer, cache_dir=caches(), storage_options=opts)
    return [('ShardedData S3, empty cache', shards(urls['s3'], storage_options)),
            ('ShardedData local', shards(urls['local'], None)),
            ('LocallyShuffleData(LMDB) replay',
             lambda box: LocallyShuffleData(lmdb_counted(lmdb_path, box), buffer))]


def print_resume(results, buffers):
    print("\n2. Resume: from a new DataFlow's set_state to its first datapoint (medians)\n")
    print("{:>8}  {:<34}{:>12}{:>16}{:>20}".format('buffer', 'path', 'seconds', 'MB fetched',
                                                   'datapoints decoded'))
    for buffer in buffers:
        for name, runs in results[buffer].items():
            print("{:>8}  {:<34}{:>12.3f}{:>16.2f}{:>20}".format(
                buffer, name, statistics.median(s for s, _, _ in runs),
                statistics.median(b for _, b, _ in runs) / MB, int(statistics.median(d for _, _, d in runs))))


# ----------------------------------------------------------------- main

def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--count', type=int, default=4000, help='datapoints')
    parser.add_argument('--size', type=int, default=64, help='image side')
    parser.add_argument('--shard-bytes', type=int, default=1 << 18,
                        help='about 200 shards of the default data: several per lane of the order (48)')
    parser.add_argument('--workers', default='1,2,4')
    parser.add_argument('--buffers', default='1000,10000', help='resume: window / buffer sizes')
    parser.add_argument('--rounds', type=int, default=3)
    args = parser.parse_args()
    workers = [int(n) for n in args.workers.split(',')]
    buffers = [int(b) for b in args.buffers.split(',')]
    logging.getLogger('tensorpack_lite').setLevel(logging.WARNING)   # the tables only
    root = tempfile.mkdtemp(prefix='shard-streaming-')
    server = None
    try:
        server = S3Server(root)
        opts = {'endpoint_url': server.endpoint, 'key': 'testing', 'secret': 'testing'}
        urls = {'local': os.path.join(root, 'shards'), 's3': 's3://{}/shards'.format(BUCKET)}
        lmdb_path = os.path.join(root, 'data.lmdb')
        index = save_shards(generated(args.count, args.size), urls['local'], shard_bytes=args.shard_bytes)
        save_shards(generated(args.count, args.size), urls['s3'], shard_bytes=args.shard_bytes,
                    storage_options=opts)
        LMDBSerializer.save(generated(args.count, args.size), lmdb_path)
        caches = CacheDirs(root)
        print("data: {} datapoints of 3x{}x{} uint8 + int32 ({:.1f} MB of shards, {} shards of ~{:.2f} MB; "
              "LMDB file {:.1f} MB); {} rounds; load average {}".format(
                  args.count, args.size, args.size, sum(s['bytes'] for s in index['shards']) / MB,
                  len(index['shards']), args.shard_bytes / MB, os.path.getsize(lmdb_path) / MB, args.rounds,
                  ', '.join('{:.2f}'.format(x) for x in os.getloadavg())))

        paths = throughput_paths(urls, lmdb_path, opts, caches, workers)
        results = {}
        for _ in range(args.rounds):
            for name, n, k, make in paths:
                results.setdefault((name, n, k), []).append(read_epoch(make))
                caches.clear()
        print_throughput(results, ['S3 shards', 'local shards', 'LMDB', 'RankShardData(LMDB)'], workers,
                         sum(s['bytes'] for s in index['shards']))

        resumed = {}
        for buffer in buffers:
            resumed[buffer] = {}
            paths = resume_paths(urls, lmdb_path, opts, caches, buffer)
            states = {name: state_after(make, 3 * buffer + 7) for name, make in paths}
            caches.clear()
            for _ in range(args.rounds):
                for name, make in paths:
                    resumed[buffer].setdefault(name, []).append(time_to_first(make, states[name]))
                    caches.clear()
        print_resume(resumed, buffers)
        print("\nload average at the end: {}".format(', '.join('{:.2f}'.format(x) for x in os.getloadavg())))
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(root, ignore_errors=True)


class CacheDirs:
    """New empty cache directories under ``root``, removed by :meth:`clear`."""

    def __init__(self, root):
        self.root, self.made = root, []

    def __call__(self):
        path = tempfile.mkdtemp(prefix='cache-', dir=self.root)
        self.made.append(path)
        return path

    def clear(self):
        for path in self.made:
            shutil.rmtree(path, ignore_errors=True)
        self.made = []


if __name__ == '__main__':
    main()
