"""The library's DataFlows as cases of the state tests (dataflow/test_state.py), importable by the
new process that restores their states: CASES (a factory of each, from the directory of the files
the readers read, which :func:`write_data` writes, and the points to take its state at), building
and closing a case, what a DataFlow gives after a state (:func:`epochs_after`), and
:func:`restore_jobs`, which restores states in a new process.

Example::

    df, limit = build('BatchData', data_dir)
    df.reset_state()
    df.set_state(state)
    epochs_after(df, limit)     # the rest of the epoch and the two that follow
"""

import itertools
import os

import numpy as np

from tensorpack_lite.dataflow import (BatchData, BatchDataByShape, CacheData, ConcatData, DataFlow,
                                      DataFromIterable, DataFromList, FakeData, FixedSizeData, HDF5Serializer,
                                      ImageFromFile, JoinData, LMDBData, LMDBSerializer, LocallyShuffleData,
                                      MapData, MapDataComponent, MsgpackSerializer, MultiProcessMapData,
                                      MultiThreadMapData, NumpySerializer, PrintData, RandomChooseData,
                                      RandomMixData, RepeatedData, RepeatedDataPoint, SelectComponent,
                                      ShardedData, SVMLightData, TestDataSpeed, TFRecordSerializer, imgaug,
                                      save_shards)
from tensorpack_lite.dataflow.dataset import Digits, Mnist, Places365Standard
from tensorpack_lite.dataflow.image import (AugmentImageComponent, AugmentImageComponents,
                                            AugmentImageCoordinates)
from tensorpack_lite.utils.serialize import dumps, loads

__all__ = ['numbers', 'images', 'augmentors', 'Squares', 'double_first', 'map_image', 'AT', 'CASES', 'JOBS',
           'write_data', 'close', 'build', 'epochs_after', 'restore_jobs']


def numbers(n=7, shuffle=True):
    return DataFromList([[i, i * i] for i in range(n)], shuffle=shuffle)


def images(n=6):
    rng = np.random.RandomState(0)
    return DataFromList([[rng.randint(0, 255, (8, 10, 3)).astype('uint8'), np.int32(i),
                          np.array([[1.5, 2.0], [7.0, 3.5]], 'float32')] for i in range(n)], shuffle=True)


def augmentors():
    return [imgaug.Flip(horiz=True), imgaug.RandomCrop((6, 7)),
            imgaug.RandomApplyAug(imgaug.Brightness(30), 0.5),
            imgaug.RandomChooseAug([imgaug.Identity(), imgaug.GaussianNoise(3)])]


def by_shape():
    rng = np.random.RandomState(1)
    return DataFromList([[np.zeros((1 + i % 2, 2)), rng.rand()] for i in range(11)], shuffle=True)


class Squares(DataFlow):
    """A user DataFlow written as docs/dataflow.md shows."""

    def __init__(self, n):
        self.n = n
        self._done = None
        self._resume = None

    def __iter__(self):
        start, self._resume = self._resume or 0, None
        return self._squares(start)

    def _squares(self, start):
        try:
            for i in range(start, self.n):
                self._done = i + 1
                yield [i * i]
        finally:
            self._done = None

    def get_state(self):
        return {'done': self._done if self._done is not None else self._resume}

    def set_state(self, state):
        self._resume = state['done']


def double_first(dp):
    return [dp[0] * 2, dp[1]]


def map_image(dp):
    return [dp[0][::2].copy(), dp[1]]


AT = [('at', 3), ('end', 1), ('between', 1)]   # mid-epoch, after the last datapoint, between epochs


def case(factory, points=AT, limit=None):
    """factory(data_dir) -> DataFlow; the points to take the state at; for an endless DataFlow,
    how many datapoints to compare after the state."""
    return factory, points, limit


def in_dir(name):
    return lambda d: os.path.join(d, name)


CASES = {
    'DataFromList': case(lambda d: numbers()),
    'DataFromList-in-order': case(lambda d: numbers(shuffle=False), [('at', 2)]),
    'FakeData': case(lambda d: FakeData([[2, 3], [1]], size=5, dtype=['float32', 'int32'],
                                        domain=[(0, 1), (0, 9)])),
    'FakeData-fixed': case(lambda d: FakeData([[2]], size=4, random=False), [('at', 2), ('between', 1)]),
    'DataFromIterable': case(lambda d: DataFromIterable([[i] for i in range(5)]), [('at', 2), ('end', 1)]),
    'BatchData': case(lambda d: BatchData(numbers(), 3, remainder=True), [('at', 2)] + AT[1:]),
    'BatchDataByShape': case(lambda d: BatchDataByShape(by_shape(), 2, idx=0), AT[:2] + [('at', 7)]),
    'FixedSizeData-keep': case(lambda d: FixedSizeData(numbers(5), 3), AT + [('at', 5)]),
    'FixedSizeData-new-pass': case(lambda d: FixedSizeData(numbers(5), 3, keep_state=False),
                                   [('at', 2)] + AT[1:]),
    'FixedSizeData-longer': case(lambda d: FixedSizeData(numbers(4), 6, keep_state=False),
                                 [('at', 5), ('end', 1)]),
    'user-DataFlow': case(lambda d: RandomChooseData([(Squares(4), 0.8), (Squares(6), 0.2)]),
                          [('at', 1), ('at', 3), ('between', 1)]),
    'MapData': case(lambda d: MapData(numbers(), double_first), AT[:2]),
    'MapDataComponent': case(lambda d: MapDataComponent(numbers(), lambda x: x + 100, index=1), AT[:1]),
    'SelectComponent': case(lambda d: SelectComponent(numbers(), [1, 0]), [('at', 3), ('between', 1)]),
    'RepeatedData': case(lambda d: RepeatedData(numbers(4), 2), [('at', 5)] + AT[1:]),
    'RepeatedData-forever': case(lambda d: RepeatedData(numbers(4), -1), [('at', 6)], limit=9),
    'RepeatedDataPoint': case(lambda d: RepeatedDataPoint(numbers(4), 3), [('at', 4)] + AT[1:]),
    'RandomChooseData': case(lambda d: RandomChooseData([(numbers(5), 0.3), (numbers(6), 0.7)])),
    'RandomChooseData-skewed': case(lambda d: RandomChooseData([(numbers(3), 0.85), (numbers(9), 0.15)]),
                                    [('at', 1), ('at', 2), ('at', 4)]),
    'RandomMixData': case(lambda d: RandomMixData([numbers(2), numbers(5)]), [('at', 1)] + AT),
    'ConcatData': case(lambda d: ConcatData([numbers(3), numbers(4)]), [('at', 2), ('at', 5)] + AT[1:]),
    'JoinData': case(lambda d: JoinData([numbers(4), SelectComponent(numbers(4), [0])])),
    'JoinData-unequal': case(lambda d: JoinData([numbers(3), numbers(5)]), [('at', 1), ('end', 1)]),
    'LocallyShuffleData': case(lambda d: LocallyShuffleData(numbers(6), 4, num_reuse=2, shuffle_interval=2),
                               [('at', 1), ('at', 9)], limit=20),
    'CacheData': case(lambda d: CacheData(numbers(5), shuffle=True), AT + [('at', 7), ('between', 2)]),
    'PrintData': case(lambda d: PrintData(numbers()), [('at', 3), ('between', 1)]),
    'TestDataSpeed': case(lambda d: TestDataSpeed(numbers(), size=3)),
    'AugmentImageComponent': case(lambda d: AugmentImageComponent(images(), augmentors())),
    'AugmentImageComponents': case(lambda d: AugmentImageComponents(images(), augmentors(), index=(0,),
                                                                    coords_index=(2,)), [('at', 4)]),
    'AugmentImageCoordinates': case(lambda d: AugmentImageCoordinates(images(), augmentors(), coords_index=2),
                                    [('at', 3), ('between', 1)]),
    'LMDBSerializer': case(lambda d: LMDBSerializer.load(in_dir('data.lmdb')(d), shuffle=True)),
    'LMDBData-in-order': case(lambda d: LMDBData(in_dir('data.lmdb')(d), shuffle=False), AT[:2]),
    'HDF5Serializer': case(lambda d: HDF5Serializer.load(in_dir('data.h5')(d), ['a', 'b']),
                           [('at', 3), ('between', 1)]),
    'MsgpackSerializer': case(lambda d: MsgpackSerializer.load(in_dir('data.msgpack')(d)), AT[:2]),
    'NumpySerializer': case(lambda d: NumpySerializer.load(in_dir('data.npz')(d)), AT[:1]),
    'SVMLightData': case(lambda d: SVMLightData(in_dir('data.svm')(d)), [('at', 2), ('between', 1)]),
    'ShardedData': case(lambda d: ShardedData(in_dir('shards')(d), rank=1, world=2, window=2, lanes=2)),
    'ImageFromFile': case(lambda d: ImageFromFile(_image_files(d), channel=3, shuffle=True), [('at', 2)]),
    'Digits': case(lambda d: Digits('test'), [('at', 100), ('between', 1)]),
    'Mnist': case(lambda d: Mnist('train', dir=in_dir('mnist')(d)), [('at', 4), ('end', 1), ('between', 1)]),
    'Places365Standard': case(lambda d: Places365Standard(in_dir('places')(d), 'train'), [('at', 2)]),
    'MultiThreadMapData': case(lambda d: MultiThreadMapData(numbers(9), 2, double_first, buffer_size=4,
                                                            strict=True)),
    'MultiProcessMapData': case(lambda d: MultiProcessMapData(images(), 2, map_image, buffer_size=4,
                                                              strict=True), [('at', 2)] + AT[1:]),
    'nested': case(lambda d: BatchData(MultiThreadMapData(AugmentImageComponent(images(8), augmentors()), 2,
                                                          map_image, buffer_size=3, strict=True), 3),
                   [('at', 1), ('between', 1)]),
    # last: loading a TFRecord file imports TensorFlow
    'TFRecordSerializer': case(lambda d: TFRecordSerializer.load(in_dir('data.tfrecord')(d)), AT[:1]),
}

JOBS = [(name, point) for name, (_, points, _) in CASES.items() for point in points]


def _image_files(data_dir):
    return [os.path.join(data_dir, 'img{}.png'.format(k)) for k in range(3)]


def write_data(data_dir):
    """The files the readers read: written with the library's own serializers, or in the format."""
    import cv2
    from sklearn.datasets import dump_svmlight_file
    records = DataFromList([[np.arange(4) * i, 'dp{}'.format(i)] for i in range(6)], shuffle=False)
    LMDBSerializer.save(records, os.path.join(data_dir, 'data.lmdb'))
    MsgpackSerializer.save(records, os.path.join(data_dir, 'data.msgpack'))
    NumpySerializer.save(records, os.path.join(data_dir, 'data.npz'))
    save_shards(records, os.path.join(data_dir, 'shards'), shard_bytes=40)
    TFRecordSerializer.save(records, os.path.join(data_dir, 'data.tfrecord'))
    HDF5Serializer.save(DataFromList([[np.full(3, i), i * 0.5] for i in range(5)], shuffle=False),
                        os.path.join(data_dir, 'data.h5'), ['a', 'b'])
    dump_svmlight_file(np.arange(12.).reshape(4, 3), np.arange(4.), os.path.join(data_dir, 'data.svm'))
    for k, path in enumerate(_image_files(data_dir)):
        cv2.imwrite(path, np.full((4, 5, 3), 40 * k, np.uint8))
    _write_mnist(os.path.join(data_dir, 'mnist'), n=9)
    _write_places(os.path.join(data_dir, 'places'))


def _write_mnist(directory, n):
    os.makedirs(directory)
    pixels = np.random.RandomState(2).randint(0, 255, (n, 28, 28)).astype('uint8')
    with open(os.path.join(directory, 'train-images-idx3-ubyte'), 'wb') as f:
        f.write(np.array([2051, n, 28, 28], '>u4').tobytes() + pixels.tobytes())
    with open(os.path.join(directory, 'train-labels-idx1-ubyte'), 'wb') as f:
        f.write(np.array([2049, n], '>u4').tobytes() + (np.arange(n) % 10).astype('uint8').tobytes())


def _write_places(directory):
    import cv2
    lines = []
    for k, category in enumerate(['beach', 'forest', 'beach', 'airfield']):
        relative = 'train/{}/{:03}.png'.format(category, k)
        os.makedirs(os.path.join(directory, os.path.dirname(relative)), exist_ok=True)
        cv2.imwrite(os.path.join(directory, relative), np.full((3, 3, 3), 10 * k, np.uint8))
        lines.append(relative + '\n')
    with open(os.path.join(directory, 'train.txt'), 'w') as f:
        f.writelines(lines)


def close(df):
    """Stop the workers of ``df`` and of the DataFlows it wraps."""
    while df is not None:
        if hasattr(df, 'close'):
            df.close()
        df = getattr(df, 'ds', None)


def build(name, data_dir):
    factory, _, limit = CASES[name]
    return factory(data_dir), limit


def epochs_after(df, limit, iterator=None):
    """What ``df`` produces next: the rest of ``iterator`` (or a new iteration) and two more
    iterations; for an endless ``df``, its next ``limit`` datapoints."""
    first = iter(df) if iterator is None else iterator
    if limit is not None:
        return list(itertools.islice(first, limit))
    return list(first) + list(df) + list(df)


def restore_jobs(jobs_path, out_path):
    """In a new process, without a fixed seed: restore every job's state and write what follows."""
    with open(jobs_path, 'rb') as f:
        jobs = loads(f.read())
    results = []
    for name, data_dir, state in jobs:
        df = None
        try:
            df, limit = build(name, data_dir)
            df.reset_state()
            df.set_state(loads(state))
            results.append(epochs_after(df, limit))
        except Exception as err:
            results.append('{}: {}'.format(type(err).__name__, err))
        finally:
            if df is not None:
                close(df)
    with open(out_path, 'wb') as f:
        f.write(dumps(results))
