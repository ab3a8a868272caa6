"""How fast datapoints cross from worker processes to the parent, and how fast they serialize.

Moves batches (by default 64x224x224x3 uint8 images + 64 int32 labels, 9.6 MB) through:

* memcpy: ``np.copyto`` of the batch in this process (the bandwidth bound of one copy);
* mp.Queue baseline: a worker puts the batch into a plain ``multiprocessing.Queue``;
* MultiProcessRunner: the library's queue runner;
* MultiProcessRunnerZMQ: the library's ZeroMQ runner (1 worker, and 2 workers), and with its
  shared-memory slots turned off (every array through the ipc pipe).

The worker's dataflow yields the same prebuilt batch each time, so only the transport is
measured. Each path runs ``--rounds`` times (interleaved); the medians are printed, with the
ratios the issue asks for. Then dumps/loads (and the zero-copy frame variants) against pickle
protocol 5, in MB/s.

Run: python benchmarks/dataflow_throughput.py [--batch 64 --size 224 --count 30 --rounds 5]
"""

import argparse
import multiprocessing as mp
import os
import pickle
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tensorpack_lite.dataflow import DataFlow, MultiProcessRunner, MultiProcessRunnerZMQ  # noqa: E402
from tensorpack_lite.utils.serialize import dumps, dumps_frames, loads, loads_frames  # noqa: E402


class SameBatch(DataFlow):
    """The same batch forever (not modified after being yielded)."""

    def __init__(self, batch):
        self.batch = batch

    def __iter__(self):
        while True:
            yield self.batch


def make_batch(n, size):
    rng = np.random.RandomState(0)
    return [rng.randint(0, 256, size=(n, size, size, 3), dtype=np.uint8),
            rng.randint(0, 1000, size=(n,)).astype(np.int32)]


def nbytes(batch):
    return sum(a.nbytes for a in batch)


def timed_pulls(itr, count, warmup=3):
    """Seconds to take ``count`` datapoints from ``itr`` (after ``warmup``), touching each."""
    for _ in range(warmup):
        next(itr)
    start = time.perf_counter()
    for _ in range(count):
        dp = next(itr)
        assert dp[0].shape[0] > 0
    return time.perf_counter() - start


# ----------------------------------------------------------------- transports

def run_memcpy(batch, count):
    dst = [np.empty_like(a) for a in batch]
    start = time.perf_counter()
    for _ in range(count):
        for d, s in zip(dst, batch):
            np.copyto(d, s)
    return time.perf_counter() - start


def _queue_producer(q, batch):
    while True:
        q.put(batch)


def run_mp_queue(batch, count):
    ctx = mp.get_context('fork')
    q = ctx.Queue(8)
    proc = ctx.Process(target=_queue_producer, args=(q, batch), daemon=True)
    proc.start()
    try:
        return timed_pulls(iter(q.get, None), count)
    finally:
        proc.terminate()
        proc.join()


def run_runner(make):
    def run(batch, count):
        df = make(SameBatch(batch))
        df.reset_state()
        try:
            return timed_pulls(iter(df), count)
        finally:
            df.close()
    return run


def zmq_pipe_only(ds):
    df = MultiProcessRunnerZMQ(ds, num_proc=1, hwm=8)
    df.shared_memory_slots = 0  # every array through the ipc pipe (zero-copy send, no slots)
    return df


TRANSPORTS = [
    ('memcpy', run_memcpy),
    ('mp.Queue baseline', run_mp_queue),
    ('MultiProcessRunner', run_runner(lambda ds: MultiProcessRunner(ds, num_prefetch=8, num_proc=1))),
    ('MultiProcessRunnerZMQ', run_runner(lambda ds: MultiProcessRunnerZMQ(ds, num_proc=1, hwm=8))),
    ('MultiProcessRunnerZMQ x2', run_runner(lambda ds: MultiProcessRunnerZMQ(ds, num_proc=2, hwm=8))),
    ('MultiProcessRunnerZMQ pipe', run_runner(zmq_pipe_only)),
]


# ----------------------------------------------------------------- serialization

def pickle5_out_of_band(obj):
    buffers = []
    head = pickle.dumps(obj, protocol=5, buffer_callback=buffers.append)
    return [head] + [b.raw() for b in buffers]


def pickle5_out_of_band_loads(frames):
    return pickle.loads(frames[0], buffers=frames[1:])


SERIALIZERS = [
    ('pickle protocol 5', lambda o: pickle.dumps(o, protocol=5), pickle.loads),
    ('utils.serialize dumps/loads', dumps, loads),
    ('pickle 5 out-of-band buffers', pickle5_out_of_band, pickle5_out_of_band_loads),
    ('utils.serialize dumps_frames/loads_frames', dumps_frames, loads_frames),
]


def time_serializer(dump, load, batch, count):
    start = time.perf_counter()
    for _ in range(count):
        buf = dump(batch)
    mid = time.perf_counter()
    for _ in range(count):
        load(buf)
    return mid - start, time.perf_counter() - mid


# ----------------------------------------------------------------- main

def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--batch', type=int, default=64)
    parser.add_argument('--size', type=int, default=224)
    parser.add_argument('--count', type=int, default=30, help='batches per measurement')
    parser.add_argument('--rounds', type=int, default=5)
    args = parser.parse_args()

    batch = make_batch(args.batch, args.size)
    megabytes = nbytes(batch) / 1e6
    print("batch: {}x{}x{}x3 uint8 + {} int32 = {:.1f} MB; {} batches x {} rounds; load average {}".format(
        args.batch, args.size, args.size, args.batch, megabytes, args.count, args.rounds,
        ', '.join('{:.2f}'.format(x) for x in os.getloadavg())))

    seconds = {name: [] for name, _ in TRANSPORTS}
    for _ in range(args.rounds):
        for name, run in TRANSPORTS:
            seconds[name].append(run(batch, args.count))
    rate = {name: args.count * megabytes / statistics.median(s) for name, s in seconds.items()}
    print("\n{:<28}{:>12}{:>14}".format('transport (median)', 'MB/s', 'batches/s'))
    for name, _ in TRANSPORTS:
        print("{:<28}{:>12.0f}{:>14.1f}".format(name, rate[name], rate[name] / megabytes))
    zmq, base, memcpy = rate['MultiProcessRunnerZMQ'], rate['mp.Queue baseline'], rate['memcpy']
    print("\nMultiProcessRunnerZMQ / mp.Queue baseline: {:.2f}x  (target >= 3x)".format(zmq / base))
    print("memcpy / MultiProcessRunnerZMQ:            {:.2f}x  (target <= 2x)".format(memcpy / zmq))

    print("\n{:<44}{:>12}{:>12}".format('serialization (median)', 'dump MB/s', 'load MB/s'))
    for name, dump, load in SERIALIZERS:
        times = [time_serializer(dump, load, batch, max(1, args.count // 3)) for _ in range(args.rounds)]
        n = max(1, args.count // 3) * megabytes
        print("{:<44}{:>12.0f}{:>12.0f}".format(
            name, n / statistics.median(t[0] for t in times), n / statistics.median(t[1] for t in times)))


if __name__ == '__main__':
    main()
