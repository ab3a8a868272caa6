"""Save a DataFlow to a file and load it back as a DataFlow.

* :class:`MsgpackSerializer` -- one file of msgpack records with an index at its end; loads
  lazily (memory-mapped), with random access, so ``shuffle=True`` costs nothing.
* :class:`NumpySerializer` -- one ``.npz`` file, loaded entirely into memory.
* :class:`TFRecordSerializer` -- a TFRecord file of ``tf.train.Example`` s, readable by
  ``tf.data`` (:meth:`TFRecordSerializer.load_tf_dataset`) and as a DataFlow.

Every ``save(df, path)`` resets ``df`` and writes one epoch of it; the file appears only once
complete (written under a temporary name, then renamed). Example::

    MsgpackSerializer.save(df, '/data/train.msgpack')
    df = MsgpackSerializer.load('/data/train.msgpack', shuffle=True)
"""

import mmap
import os
import struct

import msgpack
import numpy as np

from ..utils import logger
from ..utils.fs import atomic_path, write_atomically
from ..utils.serialize import dumps, loads
from .base import DataFlow, RNGDataFlow

__all__ = ['MsgpackSerializer', 'NumpySerializer', 'TFRecordSerializer']


def _datapoints(df, who):
    """One epoch of ``df`` (reset first), with a count of what was produced."""
    if not isinstance(df, DataFlow):
        raise TypeError("{}.save() takes a DataFlow, got {!r}".format(who, df))
    df.reset_state()
    for index, dp in enumerate(df):
        yield index, dp


def _serialize(dp, index, who):
    try:
        return dumps(dp)
    except TypeError as err:
        raise TypeError("{}.save(): datapoint #{}: {}".format(who, index, err)) from None


class _RecordsData(RNGDataFlow):
    """Datapoints decoded from ``records(i)``, ``i < size``, in order or shuffled."""

    def __init__(self, size, read, shuffle):
        self._size, self._read, self.shuffle = size, read, shuffle

    def __len__(self):
        return self._size

    def __iter__(self):
        order = np.arange(self._size)
        if self.shuffle:
            self.rng.shuffle(order)
        for k in order:
            yield self._read(int(k))


# ------------------------------------------------------------------ msgpack

class MsgpackSerializer(object):
    """One file: a magic string, the datapoints serialized by
    :func:`~tensorpack_lite.utils.serialize.dumps` one after the other, the offsets of the
    records (msgpack), and a footer giving where those offsets start."""

    MAGIC = b'TPLMSGP1'
    _FOOTER = struct.Struct('<Q8s')  # offset of the index, magic again

    @staticmethod
    def save(df, path):
        """Write one epoch of ``df`` to ``path``."""
        cls = MsgpackSerializer

        def write(f):
            f.write(cls.MAGIC)
            offsets = [f.tell()]
            for index, dp in _datapoints(df, 'MsgpackSerializer'):
                f.write(_serialize(dp, index, 'MsgpackSerializer'))
                offsets.append(f.tell())
            index_start = f.tell()
            f.write(msgpack.packb(offsets))
            f.write(cls._FOOTER.pack(index_start, cls.MAGIC))
            logger.info("MsgpackSerializer: wrote {} datapoints to {}".format(len(offsets) - 1, path))
        write_atomically(path, write)

    @staticmethod
    def load(path, shuffle=True):
        """A DataFlow of the datapoints in ``path`` (memory-mapped; random access).

        Args:
            shuffle (bool): a new random order every epoch (from the DataFlow's RNG).
        """
        cls = MsgpackSerializer
        with open(path, 'rb') as f:
            size = os.fstat(f.fileno()).st_size
            if size < len(cls.MAGIC) + cls._FOOTER.size:
                raise ValueError("{} is not a MsgpackSerializer file (too short)".format(path))
            buf = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        index_start, magic = cls._FOOTER.unpack_from(buf, size - cls._FOOTER.size)
        if buf[:len(cls.MAGIC)] != cls.MAGIC or magic != cls.MAGIC:
            raise ValueError("{} is not a MsgpackSerializer file (bad magic)".format(path))
        offsets = msgpack.unpackb(buf[index_start:size - cls._FOOTER.size])
        view = memoryview(buf)

        def read(k):
            return loads(view[offsets[k]:offsets[k + 1]])
        return _RecordsData(len(offsets) - 1, read, shuffle)


# ------------------------------------------------------------------ numpy

class NumpySerializer(object):
    """One ``.npz`` file holding the serialized datapoints (``records``, uint8) and their
    ``offsets``; no pickle. Loading reads the whole file into memory."""

    @staticmethod
    def save(df, path):
        """Write one epoch of ``df`` to ``path`` (an ``.npz`` file)."""
        records = [_serialize(dp, index, 'NumpySerializer')
                   for index, dp in _datapoints(df, 'NumpySerializer')]
        offsets = np.cumsum([0] + [len(r) for r in records], dtype=np.int64)
        data = np.frombuffer(b''.join(records), dtype=np.uint8)
        write_atomically(path, lambda f: np.savez(f, records=data, offsets=offsets))
        logger.info("NumpySerializer: wrote {} datapoints to {}".format(len(records), path))

    @staticmethod
    def load(path, shuffle=True):
        """A DataFlow of the datapoints in ``path`` (read entirely)."""
        with np.load(path, allow_pickle=False) as npz:
            data, offsets = npz['records'], npz['offsets']
        view = memoryview(data)

        def read(k):
            return loads(view[offsets[k]:offsets[k + 1]])
        return _RecordsData(len(offsets) - 1, read, shuffle)


# ------------------------------------------------------------------ TFRecord

def _tf():
    from ..compat import tf  # imported on use: the rest of the dataflow package is TF-free
    return tf


class TFRecordSerializer(object):
    """A TFRecord file of ``tf.train.Example`` s, one per datapoint.

    A datapoint is a list of components, each a number, a string or an array of a dtype TF
    knows (bool, intN, uintN, float16/32/64, complex, bytes/str). Component ``i`` is stored
    as the features ``'i/shape'`` (int64 list), ``'i/dtype'`` (bytes), and ``'i/data'``:
    the raw little-endian bytes of a numeric array, or the list of strings of a string array.

    Read it back with :meth:`load` (a DataFlow, no TF graph needed) or
    :meth:`load_tf_dataset` (a ``tf.data.Dataset`` of tuples of tensors).
    """

    @staticmethod
    def save(df, path):
        """Write one epoch of ``df`` to ``path``."""
        tf = _tf()
        count = 0
        with atomic_path(path) as tmp:
            with tf.io.TFRecordWriter(tmp) as writer:
                for index, dp in _datapoints(df, 'TFRecordSerializer'):
                    writer.write(_to_example(tf, dp, index).SerializeToString())
                    count += 1
        logger.info("TFRecordSerializer: wrote {} datapoints to {}".format(count, path))

    @staticmethod
    def load(path, size=None, shuffle=False):
        """A DataFlow of the datapoints in ``path``, read sequentially (``shuffle`` is not
        supported: TFRecord has no index).

        Args:
            size (int): the length of the DataFlow, if known (counted from the file if None).
        """
        if shuffle:
            raise ValueError("TFRecordSerializer.load(): a TFRecord file has no index, so it cannot "
                             "be shuffled; use LocallyShuffleData or MsgpackSerializer")
        if size is None:
            size = sum(1 for _ in _read_records(path))
        return _TFRecordData(path, int(size))

    @staticmethod
    def load_tf_dataset(path):
        """A ``tf.data.Dataset`` of the datapoints in ``path``: tuples of tensors of the
        components' dtypes and shapes (the dtypes and ranks come from the first record)."""
        tf = _tf()
        first = next(_read_records(path), None)
        if first is None:
            raise ValueError("TFRecordSerializer.load_tf_dataset(): {} holds no record".format(path))
        example = tf.train.Example.FromString(first)
        specs = []
        for i in range(_num_components(example)):
            feature = example.features.feature
            dtype = np.dtype(feature['{}/dtype'.format(i)].bytes_list.value[0].decode())
            specs.append((dtype, len(feature['{}/shape'.format(i)].int64_list.value)))
        return tf.data.TFRecordDataset(path).map(lambda record: _parse_example(tf, record, specs))


class _TFRecordData(DataFlow):
    def __init__(self, path, size):
        self._path, self._size = path, size

    def __len__(self):
        return self._size

    def __iter__(self):
        tf = _tf()
        for record in _read_records(self._path):
            yield _from_example(tf.train.Example.FromString(record))


_RECORD_HEADER = struct.Struct('<QI')  # length, masked CRC of the length


def _read_records(path):
    """The records of a TFRecord file (uncompressed), in Python; the CRCs are not checked,
    but a truncated file is an error."""
    with open(path, 'rb') as f:
        while True:
            header = f.read(_RECORD_HEADER.size)
            if not header:
                return
            if len(header) < _RECORD_HEADER.size:
                raise ValueError("{}: truncated TFRecord file".format(path))
            length = _RECORD_HEADER.unpack(header)[0]
            data = f.read(length + 4)  # the record, then the masked CRC of the record
            if len(data) < length + 4:
                raise ValueError("{}: truncated TFRecord file".format(path))
            yield data[:length]


def _to_example(tf, dp, index):
    if not isinstance(dp, (list, tuple)):
        raise TypeError("TFRecordSerializer.save(): datapoint #{} is a {}, not a list of components"
                        .format(index, type(dp).__name__))
    feature = {}
    for i, value in enumerate(dp):
        arr = np.asarray(value)
        if arr.dtype == np.object_ and all(isinstance(x, (bytes, str)) for x in arr.flat):
            arr = arr.astype(bytes) if arr.size else arr.astype('S1')
        kind = arr.dtype.kind
        if kind in 'SU':
            data = tf.train.Feature(bytes_list=tf.train.BytesList(value=[
                x if isinstance(x, bytes) else x.encode('utf-8') for x in arr.ravel().tolist()]))
            dtype = 'object' if kind == 'S' else 'str'
        elif kind in 'biufc':
            arr = arr.astype(arr.dtype.newbyteorder('<'), copy=False)
            data = tf.train.Feature(bytes_list=tf.train.BytesList(value=[arr.tobytes()]))
            dtype = arr.dtype.str
        else:
            raise TypeError("TFRecordSerializer.save(): component {} of datapoint #{} is a {} of "
                            "dtype {}, which TFRecord cannot hold".format(
                                i, index, type(value).__name__, arr.dtype))
        feature['{}/data'.format(i)] = data
        feature['{}/dtype'.format(i)] = tf.train.Feature(
            bytes_list=tf.train.BytesList(value=[dtype.encode()]))
        feature['{}/shape'.format(i)] = tf.train.Feature(int64_list=tf.train.Int64List(value=arr.shape))
    return tf.train.Example(features=tf.train.Features(feature=feature))


def _num_components(example):
    return sum(1 for key in example.features.feature if key.endswith('/dtype'))


def _from_example(example):
    feature = example.features.feature
    dp = []
    for i in range(_num_components(example)):
        dtype = feature['{}/dtype'.format(i)].bytes_list.value[0].decode()
        shape = list(feature['{}/shape'.format(i)].int64_list.value)
        values = feature['{}/data'.format(i)].bytes_list.value
        if dtype in ('object', 'str'):
            arr = np.empty(len(values), dtype=object)
            arr[:] = list(values) if dtype == 'object' else [v.decode('utf-8') for v in values]
            dp.append(arr.reshape(shape))
        else:
            dp.append(np.frombuffer(values[0], dtype=np.dtype(dtype)).reshape(shape))
    return dp


def _parse_example(tf, record, specs):
    features = {}
    for i, (dtype, _) in enumerate(specs):
        features['{}/shape'.format(i)] = tf.io.VarLenFeature(tf.int64)
        features['{}/data'.format(i)] = tf.io.VarLenFeature(tf.string)
        features['{}/dtype'.format(i)] = tf.io.FixedLenFeature([], tf.string)
    parsed = tf.io.parse_single_example(record, features)
    out = []
    for i, (dtype, rank) in enumerate(specs):
        expected = 'object' if dtype == np.object_ else ('str' if dtype.kind == 'U' else dtype.str)
        check = tf.debugging.assert_equal(
            parsed['{}/dtype'.format(i)], expected,
            message='TFRecordSerializer: component {} has another dtype than in the first record ({})'
            .format(i, expected))
        with tf.control_dependencies([check]):
            shape = tf.sparse.to_dense(parsed['{}/shape'.format(i)])
        data = tf.sparse.to_dense(parsed['{}/data'.format(i)], default_value=b'')
        if dtype == np.object_ or dtype.kind == 'U':
            tensor = data
        elif dtype == np.bool_:
            tensor = tf.cast(tf.io.decode_raw(data[0], tf.uint8), tf.bool)
        elif dtype.kind == 'u' and dtype.itemsize >= 4:  # decode_raw has no uint32/uint64
            signed = tf.io.decode_raw(data[0], tf.as_dtype(np.dtype('i{}'.format(dtype.itemsize))))
            tensor = tf.bitcast(signed, tf.as_dtype(dtype.newbyteorder('=')))
        else:
            tensor = tf.io.decode_raw(data[0], tf.as_dtype(dtype.newbyteorder('=')))
        tensor = tf.reshape(tensor, shape)
        tensor.set_shape([None] * rank)
        out.append(tensor)
    return tuple(out)
