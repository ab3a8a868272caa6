"""Images/s of a typical ImageNet augmentation chain: imgaug in DataFlows against tf.data + tf.image.

The chain, on JPEGs this script writes (ImageNet-like sizes, 300-500 pixels a side):
read the file, decode the JPEG, resize the shortest edge to 256, crop a random 224x224
window, flip horizontally at random, change brightness, contrast and saturation by random
amounts (in float32), back to uint8; then batches of ``--batch``.

* DataFlow in this process: ``MapData``, with OpenCV on 1 thread (one image at a time on one
  core: the unit a worker is compared with), and with OpenCV's own threads (information).
* N independent processes, each running that in-process DataFlow with nothing to send
  anywhere: what N cores give for this chain on this machine, the bound of N workers.
* ``MultiProcessMapData`` with each of ``--workers`` worker processes (default: 1 up to the
  number of cores), with the library's defaults (buffer, datapoints per message, shared
  memory, OpenCV on 1 thread in each worker).
* tf.data: ``map`` with ``num_parallel_calls`` equal to each of ``--workers``, of
  ``tf.io.decode_jpeg``, ``tf.image.resize``, ``random_crop``, ``random_flip_left_right``,
  ``adjust_brightness``, ``adjust_contrast``, ``adjust_saturation``, pulled through a
  graph-mode session (TensorFlow's default thread pools), in a process of its own.

The two chains do the same work, not the same arithmetic: OpenCV and TensorFlow decode and
resize differently, and tf.image changes saturation in HSV while imgaug blends with the grey
image.

How it is measured: every path is opened first (processes started, sessions made), then
timed ``--rounds`` times, interleaved (one measurement of each path per round), so that a
change of speed of the machine touches all paths alike; the medians are printed. Before each
measurement the script waits until its processes are idle (the workers of a path fill their
buffer ahead while the other paths run), and a path's warm-up drains that buffer, so a
measurement counts only work done during it. Images/s is what the consumer receives. CPU
time per image counts every process doing the path's work: this one (which, for the
parallel paths, receives and batches the images) and the path's workers; TensorFlow lives in
its own process, so its thread pools neither run nor count during the other paths. The
parallel paths pay for the parent's receiving out of the same cores, as training would.
Also printed: the load average, and the share of the cores other processes used during the
measurements (a run where it is high compared paths that did not get the same machine).

Run: python benchmarks/augment.py [--images 64 --count 320 --batch 32 --rounds 5 --workers 1 2]
(the numbers in docs/efficiency.md: --rounds 9 --count 640)
"""

import argparse
import inspect
import multiprocessing as mp
import os
import statistics
import sys
import tempfile
import time

import numpy as np
import psutil

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tensorpack_lite.dataflow import (BatchData, DataFromList, MapData, MultiProcessMapData,  # noqa: E402
                                      RepeatedData)
from tensorpack_lite.dataflow import imgaug  # noqa: E402
from tensorpack_lite.utils.develop import import_optional  # noqa: E402

cv2 = import_optional('cv2', extra='image', purpose='benchmarks/augment.py')

SHORT_EDGE, CROP = 256, 224
DEFAULT_BUFFER = inspect.signature(MultiProcessMapData).parameters['buffer_size'].default
BRIGHTNESS, CONTRAST, SATURATION = 32.0, (0.6, 1.4), 0.4   # the random ranges of both chains


def write_jpegs(directory, count, seed=0):
    """``count`` JPEGs of 300-500 pixels a side: smooth colour fields with fine noise (so
    that they compress like photographs, to 20-60 KB); their paths."""
    rng = np.random.RandomState(seed)
    paths = []
    for k in range(count):
        height, width = rng.randint(300, 501, size=2)
        coarse = rng.randint(0, 256, size=(height // 32 + 1, width // 32 + 1, 3)).astype(np.uint8)
        image = cv2.resize(coarse, (width, height), interpolation=cv2.INTER_CUBIC).astype(np.int16)
        image = np.clip(image + rng.randint(-12, 13, size=image.shape), 0, 255).astype(np.uint8)
        path = os.path.join(directory, '{:04d}.jpg'.format(k))
        cv2.imwrite(path, image, [cv2.IMWRITE_JPEG_QUALITY, 90])
        paths.append(path)
    return paths


# ----------------------------------------------------------------- DataFlow + imgaug

class DecodeAndAugment:
    """[path] -> [augmented uint8 image]: the chain on one file."""

    def __init__(self):
        self.augmentor = imgaug.AugmentorList([
            imgaug.ResizeShortestEdge(SHORT_EDGE),
            imgaug.RandomCrop(CROP),
            imgaug.Flip(horiz=True),
            imgaug.ToFloat32(),
            imgaug.Brightness(BRIGHTNESS, clip=False),
            imgaug.Contrast(CONTRAST, rgb=False, clip=False),
            imgaug.Saturation(SATURATION, rgb=False, clip=False),
            imgaug.ToUint8(),
        ])

    def __call__(self, datapoint):
        with open(datapoint[0], 'rb') as f:
            image = cv2.imdecode(np.frombuffer(f.read(), np.uint8), cv2.IMREAD_COLOR)
        return [self.augmentor.augment(image)]


def dataflow_batches(paths, batch, num_proc):
    """(the mapping DataFlow, an endless iterator of batches); ``num_proc`` 0 maps in this
    process."""
    files = RepeatedData(DataFromList([[p] for p in paths], shuffle=False), -1)
    if num_proc == 0:
        images = MapData(files, DecodeAndAugment())
    else:
        images = MultiProcessMapData(files, num_proc, DecodeAndAugment())   # the library's defaults
    df = BatchData(images, batch)
    df.reset_state()
    return images, iter(df)


# ----------------------------------------------------------------- tf.data + tf.image

def tf_data_batches(paths, batch, num_parallel_calls):
    """The same chain with tf.data, in its own graph and session: (session, next batch op)."""
    from tensorpack_lite.compat import tf, tfv1

    def decode_and_augment(path):
        image = tf.io.decode_jpeg(tf.io.read_file(path), channels=3)
        shape = tf.cast(tf.shape(image)[:2], tf.float32)
        new_shape = tf.cast(tf.round(shape * (SHORT_EDGE / tf.reduce_min(shape))), tf.int32)
        image = tf.image.resize(image, new_shape)                  # float32, bilinear
        image = tf.image.random_crop(image, [CROP, CROP, 3])
        image = tf.image.random_flip_left_right(image)
        image = tf.image.adjust_brightness(image, tf.random.uniform([], -BRIGHTNESS, BRIGHTNESS))
        image = tf.image.adjust_contrast(image, tf.random.uniform([], *CONTRAST))
        image = tf.image.adjust_saturation(image, tf.random.uniform([], 1 - SATURATION, 1 + SATURATION))
        return tf.cast(tf.clip_by_value(image, 0, 255), tf.uint8)

    graph = tf.Graph()
    with graph.as_default():
        ds = tf.data.Dataset.from_tensor_slices(paths).repeat()
        ds = ds.map(decode_and_augment, num_parallel_calls=num_parallel_calls).batch(batch)
        next_batch = tfv1.data.make_one_shot_iterator(ds).get_next()
    sess = tfv1.Session(graph=graph)
    return sess, next_batch


def _tf_data_server(conn, paths, batch, calls):
    """In the tf.data process: a session per number of parallel calls, then measurements on
    demand (``(calls, count)`` -> ``(wall seconds, CPU seconds of this process)``)."""
    opened = {n: tf_data_batches(paths, batch, n) for n in calls}
    conn.send('ready')
    me = psutil.Process()
    while True:
        request = conn.recv()
        if request is None:
            break
        sess, op = opened[request[0]]
        conn.send(measure(lambda: sess.run(op), request[1], lambda: sum(me.cpu_times()[:2])))
    for sess, _ in opened.values():
        sess.close()


class TFDataProcess:
    """The tf.data paths, in a process of their own (spawned): TensorFlow's thread pools then
    neither run nor count in this process, and their CPU time is that of the process."""

    def __init__(self, paths, batch, calls):
        ctx = mp.get_context('spawn')
        self.conn, theirs = ctx.Pipe()
        self.proc = ctx.Process(target=_tf_data_server, args=(theirs, paths, batch, calls), daemon=True)
        self.proc.start()
        if self.conn.recv() != 'ready':
            raise RuntimeError("the tf.data process did not start")
        self.processes = [psutil.Process(self.proc.pid)]

    def path(self, calls):
        def run(count):
            self.conn.send((calls, count))
            return self.conn.recv()
        return Path(tf_data_name(calls), None, lambda: None, run=run)

    def close(self):
        self.conn.send(None)
        self.proc.join(60)


def _chain_server(conn, paths, batch):
    """In one of the independent processes: the in-process DataFlow (OpenCV sequential),
    measured on demand, the processes starting their timed batches together."""
    cv2.setNumThreads(0)   # 1 thread; setNumThreads(1) in a forked process can hang OpenCV
    _, itr = dataflow_batches(paths, batch, 0)
    while True:
        count = conn.recv()
        if count is None:
            break
        for _ in range(2):
            next(itr)
        conn.send('warm')
        conn.recv()
        conn.send(measure(lambda: next(itr)[0], count, time.process_time, warmup=0))


class IndependentChains:
    """``n`` processes each running the in-process DataFlow on its own, with nothing to
    send anywhere: what ``n`` cores give for this chain on this machine (the bound of ``n``
    workers, which also pay for sending images to a parent)."""

    def __init__(self, n, paths, batch):
        ctx = mp.get_context('fork')
        self.conns, self.procs = [], []
        for _ in range(n):
            mine, theirs = ctx.Pipe()
            proc = ctx.Process(target=_chain_server, args=(theirs, paths, batch), daemon=True)
            proc.start()
            self.conns.append(mine)
            self.procs.append(proc)
        self.name = '{} independent in-process DataFlows'.format(n)

    def run(self, count):
        for conn in self.conns:
            conn.send(count)
        for conn in self.conns:
            conn.recv()
        for conn in self.conns:
            conn.send('go')
        results = [conn.recv() for conn in self.conns]
        # as many batches in all as the other paths take, at the pace of the slowest process
        return max(r[0] for r in results) / len(results), sum(r[1] for r in results) / len(results)

    def close(self):
        for conn in self.conns:
            conn.send(None)
        for proc in self.procs:
            proc.join(60)


# ----------------------------------------------------------------- timing

def measure(next_batch, count, cpu_seconds, warmup=2):
    """(wall seconds, CPU seconds) to take ``count`` batches after ``warmup``."""
    for _ in range(warmup):
        next_batch()
    wall, cpu = time.perf_counter(), cpu_seconds()
    for _ in range(count):
        images = next_batch()
        assert images.shape[1:] == (CROP, CROP, 3) and images.dtype == np.uint8, images.shape
    return time.perf_counter() - wall, cpu_seconds() - cpu


class Path:
    """One way of producing batches in this process: ``next_batch()``, ``close()``, the
    processes that do its work (this one, plus its workers), whose CPU time is counted, and
    ``prepare()``, called before each measurement (OpenCV's threads in this process). A path
    measured elsewhere gives ``run(count)`` instead."""

    def __init__(self, name, next_batch, close, workers=(), prepare=lambda: None, run=None, warmup=2):
        self.name, self.next_batch, self.close, self.prepare = name, next_batch, close, prepare
        self.processes = [psutil.Process()] + list(workers)
        self.run, self.warmup = run, warmup

    def cpu_seconds(self):
        return sum(sum(p.cpu_times()[:2]) for p in self.processes)

    def measure(self, count):
        if self.run is not None:
            return self.run(count)
        self.prepare()
        return measure(self.next_batch, count, self.cpu_seconds, self.warmup)


def cpu_seconds_of(processes):
    """User and system CPU seconds of the ``psutil.Process``es still running (an ended one
    counts nothing)."""
    total = 0.0
    for p in processes:
        try:
            total += sum(p.cpu_times()[:2])
        except psutil.NoSuchProcess:
            pass   # ended: its time is no longer known
    return total


def settle(processes, quiet=0.05, longest=2.0):
    """Wait (at most ``longest`` seconds) until ``processes`` use less than 10% of a core
    over ``quiet`` seconds: the work a path buffered ahead (its workers fill their buffers)
    then does not run during the next path's measurement."""
    deadline = time.monotonic() + longest
    while time.monotonic() < deadline:
        before = cpu_seconds_of(processes)
        time.sleep(quiet)
        if cpu_seconds_of(processes) - before < 0.1 * quiet:
            return


IN_PROCESS = 'DataFlow in process, OpenCV 1 thread'


def workers_name(n):
    return 'MultiProcessMapData, {} worker{}'.format(n, 's' if n > 1 else '')


def tf_data_name(n):
    return 'tf.data, num_parallel_calls={}'.format(n)


def open_paths(paths, batch, workers, tf_data):
    """The DataFlow paths, ready to produce batches, then those of ``tf_data``."""
    opened = []
    for n in workers:
        if n > 1:
            chains = IndependentChains(n, paths, batch)
            opened.append(Path(chains.name, None, chains.close, run=chains.run))
    for num_proc in workers:
        before = set(psutil.Process().children(recursive=True))
        df, itr = dataflow_batches(paths, batch, num_proc)
        procs = set(psutil.Process().children(recursive=True)) - before
        # the warm-up drains what the workers buffered ahead while the other paths ran
        opened.append(Path(workers_name(num_proc), lambda itr=itr: next(itr)[0], df.close, procs,
                           warmup=-(-DEFAULT_BUFFER // batch) + 2))
    own = cv2.getNumThreads()
    for name, threads in ((IN_PROCESS, 1), ('DataFlow in process, OpenCV {} threads'.format(own), own)):
        df, itr = dataflow_batches(paths, batch, 0)
        opened.append(Path(name, lambda itr=itr: next(itr)[0], lambda: None,
                           prepare=lambda threads=threads: cv2.setNumThreads(threads)))
    return opened + [tf_data.path(calls) for calls in workers]


def load_average():
    return ', '.join('{:.2f}'.format(x) for x in os.getloadavg())


class OtherLoad:
    """How much of the machine other processes used while the paths were measured (from
    ``/proc/stat``, less the CPU time of this process tree): a run where it is high compared
    paths that did not get the same machine."""

    def __init__(self, processes):
        self.processes = processes
        self.start = self._sample()

    def _sample(self):
        machine = psutil.cpu_times()  # guest time is part of user time: not added again
        busy = machine.user + machine.nice + machine.system + machine.irq + machine.softirq
        return time.monotonic(), busy, cpu_seconds_of(self.processes)

    def cores(self):
        """Cores used on average by other processes since the start."""
        (t0, busy0, ours0), (t1, busy1, ours1) = self.start, self._sample()
        return max(0.0, (busy1 - busy0) - (ours1 - ours0)) / (t1 - t0)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--images', type=int, default=64, help='JPEG files to write (default 64)')
    parser.add_argument('--batch', type=int, default=32, help='images per batch (default 32)')
    parser.add_argument('--count', type=int, default=320, help='images per measurement (default 320)')
    parser.add_argument('--rounds', type=int, default=5, help='measurements of each path (default 5)')
    parser.add_argument('--workers', type=int, nargs='+', default=list(range(1, (os.cpu_count() or 1) + 1)),
                        help='numbers of workers and of parallel calls (default: 1 to the number of cores)')
    args = parser.parse_args()
    batches = max(1, args.count // args.batch)
    images = batches * args.batch

    with tempfile.TemporaryDirectory(prefix='augment-bench-') as directory:
        paths = write_jpegs(directory, args.images)
        kbytes = np.mean([os.path.getsize(p) for p in paths]) / 1024
        print("{} JPEGs of {:.0f} KB on average; {} batches of {} x {} rounds; {} cores; OpenCV threads "
              "{} in this process; load average {}".format(
                  args.images, kbytes, batches, args.batch, args.rounds, os.cpu_count(), cv2.getNumThreads(),
                  load_average()))
        tf_data = TFDataProcess(paths, args.batch, args.workers)
        opened = open_paths(paths, args.batch, args.workers, tf_data)
        everyone = [psutil.Process()] + psutil.Process().children(recursive=True)
        others = OtherLoad(everyone)
        try:
            results = {path.name: [] for path in opened}
            for _ in range(args.rounds):
                for path in opened:
                    settle(everyone)
                    results[path.name].append(path.measure(batches))
            other_cores = others.cores()  # while every process of ours is still there
        finally:
            for path in opened:
                path.close()
            tf_data.close()
    print("load average after: {}; other processes used {:.2f} of the {} cores during the "
          "measurements".format(load_average(), other_cores, os.cpu_count()))

    rate = {name: images / statistics.median(r[0] for r in rs) for name, rs in results.items()}
    cpu_ms = {name: 1000 * statistics.median(r[1] for r in rs) / images for name, rs in results.items()}
    print("\n{:<44}{:>12}{:>18}".format('path (median)', 'images/s', 'CPU ms / image'))
    for name in results:
        print("{:<44}{:>12.1f}{:>18.2f}".format(name, rate[name], cpu_ms[name]))
    print("\n{:<72}{:>10}{:>14}".format('ratio', 'images/s', 'CPU / image'))
    for n in args.workers:
        bound = ['{} independent in-process DataFlows'.format(n)] if n > 1 else []
        for theirs in [IN_PROCESS, tf_data_name(n)] + bound:
            ours = workers_name(n)
            print("{:<30} / {:<39}{:>9.2f}x{:>13.2f}x".format(
                ours, theirs, rate[ours] / rate[theirs], cpu_ms[ours] / cpu_ms[theirs]))
        print("{:<72}{:>9.2f}x".format('  target: {} x 0.9 (N workers / in process)'.format(n), 0.9 * n))


if __name__ == '__main__':
    main()
