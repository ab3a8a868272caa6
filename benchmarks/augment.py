"""Images/s of a typical ImageNet augmentation chain: imgaug in DataFlows against tf.data + tf.image.

The chain, on JPEGs this script writes (ImageNet-like sizes, 300-500 pixels a side):
read the file, decode the JPEG, resize the shortest edge to 256, crop a random 224x224
window, flip horizontally at random, change brightness, contrast and saturation by random
amounts (in float32), back to uint8; then batches of ``--batch``.

* DataFlow: ``MapData`` in this process, and ``MultiProcessMapData`` with 1 and 2 worker
  processes; decoding with ``cv2.imdecode``, augmenting with ``imgaug.ResizeShortestEdge``,
  ``RandomCrop``, ``Flip``, ``Brightness``, ``Contrast``, ``Saturation``, ``ToUint8``.
* tf.data: ``map`` with ``num_parallel_calls`` 1 and 2 of ``tf.io.decode_jpeg``,
  ``tf.image.resize``, ``random_crop``, ``random_flip_left_right``, ``adjust_brightness``,
  ``adjust_contrast``, ``adjust_saturation``, pulled through a graph-mode session.

The two chains do the same work, not the same arithmetic: OpenCV and TensorFlow decode and
resize differently, and tf.image changes saturation in HSV while imgaug blends with the grey
image. Neither side is confined to one core: TensorFlow runs the ops of a map call in its
thread pools and OpenCV threads some functions (``cv2.getNumThreads()`` is printed), so
``num_parallel_calls=1`` or one worker means one image at a time. Each path is timed
``--rounds`` times (interleaved) after a warm-up; the medians and their ratios are printed:
images/s, and the CPU time per image of the processes doing the work (this one and the
path's workers), which a busy machine disturbs much less.

Run: python benchmarks/augment.py [--images 64 --count 320 --batch 32 --rounds 5]
"""

import argparse
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
    """An endless stream of batches; ``num_proc`` 0 maps in this process."""
    files = RepeatedData(DataFromList([[p] for p in paths], shuffle=False), -1)
    if num_proc == 0:
        images = MapData(files, DecodeAndAugment())
    else:
        images = MultiProcessMapData(files, num_proc, DecodeAndAugment(), buffer_size=2 * batch)
    df = BatchData(images, batch)
    df.reset_state()
    return df, iter(df)


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


# ----------------------------------------------------------------- timing

class Path:
    """One way of producing batches: ``next_batch()``, ``close()`` and the processes that
    do its work (this one, plus its workers), whose CPU time is counted."""

    def __init__(self, name, next_batch, close, workers=()):
        self.name, self.next_batch, self.close = name, next_batch, close
        self.processes = [psutil.Process()] + list(workers)

    def cpu_seconds(self):
        return sum(sum(p.cpu_times()[:2]) for p in self.processes)

    def measure(self, count, warmup=2):
        """(wall seconds, CPU seconds) to take ``count`` batches after ``warmup``."""
        for _ in range(warmup):
            self.next_batch()
        wall, cpu = time.perf_counter(), self.cpu_seconds()
        for _ in range(count):
            images = self.next_batch()
            assert images.shape[1:] == (CROP, CROP, 3) and images.dtype == np.uint8, images.shape
        return time.perf_counter() - wall, self.cpu_seconds() - cpu


def open_paths(paths, batch):
    """The five paths, ready to produce batches."""
    opened = []
    for name, num_proc in (('DataFlow, 1 process', 0), ('MultiProcessMapData, 1 worker', 1),
                           ('MultiProcessMapData, 2 workers', 2)):
        before = set(psutil.Process().children(recursive=True))
        df, itr = dataflow_batches(paths, batch, num_proc)
        workers = set(psutil.Process().children(recursive=True)) - before
        opened.append(Path(name, lambda itr=itr: next(itr)[0], getattr(df, 'close', lambda: None), workers))
    for calls in (1, 2):
        sess, op = tf_data_batches(paths, batch, calls)
        opened.append(Path('tf.data, num_parallel_calls={}'.format(calls),
                           lambda sess=sess, op=op: sess.run(op), sess.close))
    return opened


RATIOS = [('DataFlow, 1 process', 'tf.data, num_parallel_calls=1'),
          ('MultiProcessMapData, 1 worker', 'tf.data, num_parallel_calls=1'),
          ('MultiProcessMapData, 2 workers', 'tf.data, num_parallel_calls=2'),
          ('MultiProcessMapData, 2 workers', 'DataFlow, 1 process')]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--images', type=int, default=64, help='JPEG files to write (default 64)')
    parser.add_argument('--batch', type=int, default=32, help='images per batch (default 32)')
    parser.add_argument('--count', type=int, default=320, help='images per measurement (default 320)')
    parser.add_argument('--rounds', type=int, default=5, help='measurements of each path (default 5)')
    args = parser.parse_args()
    batches = max(1, args.count // args.batch)
    images = batches * args.batch

    with tempfile.TemporaryDirectory(prefix='augment-bench-') as directory:
        paths = write_jpegs(directory, args.images)
        kbytes = np.mean([os.path.getsize(p) for p in paths]) / 1024
        load = ', '.join('{:.2f}'.format(x) for x in os.getloadavg())
        print("{} JPEGs of {:.0f} KB on average; {} batches of {} x {} rounds; OpenCV threads {}; "
              "load average {}".format(args.images, kbytes, batches, args.batch, args.rounds,
                                       cv2.getNumThreads(), load))
        opened = open_paths(paths, args.batch)
        try:
            results = {path.name: [] for path in opened}
            for _ in range(args.rounds):
                for path in opened:
                    results[path.name].append(path.measure(batches))
        finally:
            for path in opened:
                path.close()

    rate = {name: images / statistics.median(r[0] for r in rs) for name, rs in results.items()}
    cpu_ms = {name: 1000 * statistics.median(r[1] for r in rs) / images for name, rs in results.items()}
    print("\n{:<36}{:>12}{:>18}".format('path (median)', 'images/s', 'CPU ms / image'))
    for name in results:
        print("{:<36}{:>12.1f}{:>18.2f}".format(name, rate[name], cpu_ms[name]))
    print("\n{:<68}{:>10}{:>14}".format('ratio', 'images/s', 'CPU / image'))
    for ours, theirs in RATIOS:
        print("{:<32} / {:<33}{:>9.2f}x{:>13.2f}x".format(
            ours, theirs, rate[ours] / rate[theirs], cpu_ms[ours] / cpu_ms[theirs]))


if __name__ == '__main__':
    main()
