"""Where the CPU of MultiProcessMapData goes, beyond the map function: each setting undone alone.

The map function is the augmentation chain of ``benchmarks/augment.py``; it adds the CPU time
of its own thread to a shared counter. For each variant (``--workers`` workers, batches of
32), the CPU time of the parent and the workers minus that counter, per image, is what
moving the images costs (receiving, sending, serializing, waking up, the threads of ZeroMQ);
it is far steadier on a noisy machine than images/s, since it does not depend on how fast
the chain itself runs at the moment. The in-process ``MapData`` gives the cost of the same
loop without workers (batching, iterating). Medians of interleaved rounds.

Run: python benchmarks/map_overhead.py [--workers 2 --rounds 9]
"""

import argparse
import multiprocessing as mp
import os
import statistics
import sys
import tempfile
import time

import psutil

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from augment import DEFAULT_BUFFER, DecodeAndAugment, measure, settle, write_jpegs  # noqa: E402
from tensorpack_lite.dataflow import (BatchData, DataFromList, MapData, MultiProcessMapData,  # noqa: E402
                                      RepeatedData)

BATCH = 32
VARIANTS = [
    ('library defaults', {}),
    ('OpenCV with its own threads in workers', {'opencv_threads': None}),
    ('one datapoint per message', {'datapoints_per_message': 1}),
    ('no shared memory (results through ZeroMQ)', {'shared_memory_slots': 0}),
    ('buffer_size=64 (the benchmark before)', {'buffer_size': 64}),
    ('all of the above undone', {'opencv_threads': None, 'datapoints_per_message': 1,
                                 'shared_memory_slots': 0, 'buffer_size': 64}),
]


class TimedChain:
    """The augmentation chain, adding the CPU time of the calling thread to ``total``, a
    number shared with the worker processes."""

    def __init__(self):
        self.chain, self.total = DecodeAndAugment(), mp.get_context('fork').Value('d', 0.0)

    def __call__(self, datapoint):
        start = time.thread_time()
        out = self.chain(datapoint)
        spent = time.thread_time() - start
        with self.total.get_lock():
            self.total.value += spent
        return out


def open_variant(paths, workers, settings):
    """(iterator of image batches, processes, the map dataflow or None, the timed chain)."""
    files = RepeatedData(DataFromList([[p] for p in paths], shuffle=False), -1)
    chain = TimedChain()
    if settings is None:
        df = BatchData(MapData(files, chain), BATCH)
        df.reset_state()
        return iter(df), [psutil.Process()], None, chain
    settings = dict(settings)
    buffer_size = settings.pop('buffer_size', DEFAULT_BUFFER)
    mapped = MultiProcessMapData(files, workers, chain, buffer_size=buffer_size)
    for name, value in settings.items():
        setattr(mapped, name, value)
    before = set(psutil.Process().children())
    df = BatchData(mapped, BATCH)
    df.reset_state()
    return iter(df), [psutil.Process()] + list(set(psutil.Process().children()) - before), mapped, chain


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--workers', type=int, default=2)
    parser.add_argument('--rounds', type=int, default=9)
    parser.add_argument('--batches', type=int, default=10, help='batches of 32 per measurement')
    args = parser.parse_args()
    warmup = -(-DEFAULT_BUFFER // BATCH) + 2   # drains what the workers buffered while others ran
    with tempfile.TemporaryDirectory(prefix='map-overhead-') as directory:
        paths = write_jpegs(directory, 64)
        opened = [(name, open_variant(paths, args.workers, settings)) for name, settings in VARIANTS]
        opened.append(('in process (MapData), no workers', open_variant(paths, args.workers, None)))
        everyone = [psutil.Process()] + psutil.Process().children(recursive=True)
        results = {name: [] for name, _ in opened}
        try:
            for _ in range(args.rounds):
                for name, (itr, procs, _, chain) in opened:
                    settle(everyone)

                    def outside_chain(procs=procs, chain=chain):
                        return sum(sum(p.cpu_times()[:2]) for p in procs) - chain.total.value
                    results[name].append(measure(lambda: next(itr)[0], args.batches, outside_chain, warmup))
        finally:
            for _, (_, _, mapped, _) in opened:
                if mapped is not None:
                    mapped.close()
    images = args.batches * BATCH
    print("load average {}; {} workers, {} images per measurement, {} rounds".format(
        ', '.join('{:.2f}'.format(x) for x in os.getloadavg()), args.workers, images, args.rounds))
    print("{:<46}{:>10}{:>34}".format("variant (median)", "images/s", "CPU ms / image outside the chain"))
    for name, rs in results.items():
        rate = images / statistics.median(r[0] for r in rs)
        outside = 1000 * statistics.median(r[1] for r in rs) / images
        print("{:<46}{:>10.1f}{:>34.3f}".format(name, rate, outside))


if __name__ == '__main__':
    main()
