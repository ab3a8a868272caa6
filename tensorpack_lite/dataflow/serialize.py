"""Save a DataFlow to a file and load it back as a DataFlow.

* :class:`LMDBSerializer` -- an LMDB database in tensorpack's layout (databases written by
  tensorpack with its msgpack serializer load here, and the other way round); random access,
  so ``shuffle=True`` costs nothing.
* :class:`MsgpackSerializer` -- one file of msgpack records with an index at its end; loads
  lazily (memory-mapped), with random access, so ``shuffle=True`` costs nothing.
* :class:`NumpySerializer` -- one ``.npz`` file, loaded entirely into memory.
* :class:`TFRecordSerializer` -- a TFRecord file of ``tf.train.Example`` s, readable by
  ``tf.data`` (:meth:`TFRecordSerializer.load_tf_dataset`) and as a DataFlow.
* :class:`HDF5Serializer` -- one HDF5 dataset per component, loaded entirely into memory.

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
from ..utils.develop import import_optional
from ..utils.fs import atomic_path, write_atomically
from ..utils.serialize import dumps, is_string_array, loads
from .base import DataFlow
from .format import (BYTES_ATTRIBUTE, LMDB_KEYS_ENTRY, HDF5Data, LMDBData, LMDBDataDecoder, bytes_to_hdf5,
                     lmdb_map_size, open_lmdb_readonly)
from .raw import IndexedData
from .state import IterationCursor

__all__ = ['LMDBSerializer', 'MsgpackSerializer', 'NumpySerializer', 'TFRecordSerializer', 'HDF5Serializer']


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


class _RecordsData(IndexedData):
    """Datapoints decoded by ``read(i)``, ``i < size``, in order or shuffled."""

    def __init__(self, size, read, shuffle):
        self._size, self._datapoint_at, self.shuffle = size, read, shuffle

    def __len__(self):
        return self._size


# ------------------------------------------------------------------ LMDB

def _to_msgpack_numpy(obj, path):
    """``obj`` with its numpy parts replaced by the maps of msgpack-numpy (what tensorpack's
    msgpack ``dumps`` writes): an array becomes ``{b'nd': True, b'type': dtype.str,
    b'kind': b'', b'shape': shape, b'data': raw bytes}``, a numpy scalar ``{b'nd': False,
    b'type', b'data'}``, a complex ``{b'complex': True, b'data': repr}``. Object arrays of only
    bytes or only str become nested lists (msgpack-numpy would pickle them)."""
    if obj is None or isinstance(obj, (bool, int, float, str, bytes, bytearray, memoryview)):
        return obj  # np.float64, a float, is packed as a float, as msgpack does
    if isinstance(obj, np.ndarray):
        if obj.dtype.hasobject:
            if is_string_array(obj):
                return obj.tolist()
            raise TypeError("cannot serialize the object array at {}: only object arrays of only "
                            "bytes or only str are supported".format(path))
        if obj.dtype.fields is not None or obj.dtype.kind == 'V':
            raise TypeError("cannot serialize the array of structured dtype {} at {}".format(
                obj.dtype, path))
        return {b'nd': True, b'type': obj.dtype.str, b'kind': b'', b'shape': list(obj.shape),
                b'data': obj.tobytes()}
    if isinstance(obj, (np.bool_, np.number)):
        return {b'nd': False, b'type': obj.dtype.str, b'data': obj.tobytes()}
    if isinstance(obj, complex):
        return {b'complex': True, b'data': repr(obj)}
    if isinstance(obj, (list, tuple)):
        return [_to_msgpack_numpy(x, '{}[{}]'.format(path, k)) for k, x in enumerate(obj)]
    if isinstance(obj, dict):
        return {_to_msgpack_numpy(key, '{} (key {!r})'.format(path, key)):
                _to_msgpack_numpy(value, '{}[{!r}]'.format(path, key)) for key, value in obj.items()}
    raise TypeError("cannot serialize an object of type {} at {}".format(type(obj).__name__, path))


def _text(value):
    return value.decode('ascii') if isinstance(value, bytes) else value


def _from_msgpack_numpy(obj):
    """msgpack's ``object_hook``: the array, scalar or complex a msgpack-numpy map stands for
    (without pickle: object arrays, which msgpack-numpy pickles, are refused)."""
    if b'nd' in obj:
        kind = obj.get(b'kind', b'')
        try:
            dtype = np.dtype(_text(obj[b'type']))
        except (TypeError, ValueError) as err:
            raise ValueError("a msgpack-numpy array of unknown dtype {!r} ({})".format(
                obj[b'type'], err)) from None
        if kind == b'O' or dtype.hasobject:
            raise ValueError("an object array, which msgpack-numpy stores as a pickle; pickles are not "
                             "loaded (unpickling can run arbitrary code)")
        if kind == b'V' or dtype.kind == 'V':
            raise ValueError("a structured array (dtype {}), which is not supported".format(obj[b'type']))
        data = obj[b'data']
        shape = tuple(obj[b'shape']) if obj[b'nd'] is True else ()
        if len(data) != dtype.itemsize * int(np.prod(shape)):
            raise ValueError("a msgpack-numpy array of dtype {} and shape {} with {} bytes of data".format(
                dtype, shape, len(data)))
        if dtype.itemsize == 0:  # e.g. '<U0': frombuffer refuses it, and there is no data anyway
            arr = np.zeros(shape, dtype)
        else:
            arr = np.frombuffer(data, dtype).reshape(shape)
        return arr if obj[b'nd'] is True else arr[()]
    if b'complex' in obj:
        return complex(_text(obj[b'data']))
    return obj


def _looks_like_pickle(value):
    """Whether ``value`` is a pickle of protocol 2 to 5 (as written by tensorpack's default
    serializer), rather than msgpack (where it would be an empty map followed by garbage)."""
    return len(value) > 2 and value[0] == 0x80 and 2 <= value[1] <= 5 and value[-1:] == b'.'


def _lmdb_key(index):
    return '{:08}'.format(index).encode('ascii')


class _LMDBWriter(object):
    """Puts entries into an LMDB in transactions of ``write_frequency`` entries. When the map
    is full, it doubles the map size and puts the entries of the current transaction again."""

    def __init__(self, lmdb, env, write_frequency):
        self._lmdb, self._env, self._write_frequency = lmdb, env, write_frequency
        self._pending = []
        self._txn = env.begin(write=True)

    def put(self, key, value):
        self._pending.append((key, value))
        try:
            self._txn.put(key, value)
        except self._lmdb.MapFullError:
            self._grow_and_replay()
        if len(self._pending) >= self._write_frequency:
            self.commit()

    def _grow_and_replay(self):
        while True:
            self._txn.abort()
            size = self._env.info()['map_size'] * 2
            logger.info("LMDBSerializer: growing the LMDB map to {:.3g} GB".format(size / 1e9))
            self._env.set_mapsize(size)
            self._txn = self._env.begin(write=True)
            try:
                for key, value in self._pending:
                    self._txn.put(key, value)
                return
            except self._lmdb.MapFullError:
                continue

    def commit(self):
        """Commit the current transaction and begin the next one."""
        try:
            self._txn.commit()
        except self._lmdb.MapFullError:
            self._grow_and_replay()
            self._txn.commit()
        self._pending = []
        self._txn = self._env.begin(write=True)

    def close(self):
        self._txn.abort()


def _first_entry(path):
    """The first ``(key, value)`` of the LMDB ``path`` other than ``__keys__``; ``(None, None)``
    if there is none."""
    with open_lmdb_readonly(path, 'LMDBSerializer').begin() as txn:
        for key, value in txn.cursor():
            if key != LMDB_KEYS_ENTRY:
                return key, value
    return None, None


def _msgpack_numpy_record(dp, index):
    try:
        return msgpack.packb(_to_msgpack_numpy(dp, 'datapoint'), use_bin_type=True)
    except TypeError as err:
        raise TypeError("LMDBSerializer.save(): datapoint #{}: {}".format(index, err)) from None


def _decode_lmdb_value(key, value, path):
    try:
        return msgpack.unpackb(value, raw=False, object_hook=_from_msgpack_numpy, strict_map_key=False)
    except Exception as err:
        if _looks_like_pickle(value):
            reason = "it is a pickle, which is not loaded (unpickling can run arbitrary code)"
        else:
            reason = "{}: {}".format(type(err).__name__, err)
        raise ValueError("LMDBSerializer: cannot decode the value of key {!r} in {}: {}".format(
            key, path, reason)) from None


class LMDBSerializer(object):
    """An LMDB database in tensorpack's layout: the datapoints under the keys ``b'00000000'``,
    ``b'00000001'``, ... and the list of those keys under ``b'__keys__'``, every value
    serialized with msgpack, numpy arrays and scalars as the maps of msgpack-numpy (what
    tensorpack's ``dumps`` writes when ``TENSORPACK_SERIALIZE=msgpack``). ``path`` is a
    database in a single file, or a directory that receives ``data.mdb``.

    Object arrays of only bytes or only str are written as (nested) lists and come back as
    such; other object arrays are refused (msgpack-numpy would pickle them). Loaded arrays are
    read-only views of the stored bytes. Databases tensorpack wrote with pickle (its default
    since 0.10) are refused at :meth:`load`: unpickling can run arbitrary code.

    Example::

        LMDBSerializer.save(df, '/data/train.lmdb')
        df = LMDBSerializer.load('/data/train.lmdb', shuffle=True)
    """

    @staticmethod
    def save(df, path, write_frequency=5000):
        """Write one epoch of ``df`` to ``path``, which must not hold a database yet.

        Args:
            write_frequency (int): datapoints per write transaction (a smaller value uses less
                memory).
        """
        lmdb = import_optional('lmdb', extra='lmdb', purpose='LMDBSerializer')
        if int(write_frequency) < 1:
            raise ValueError("LMDBSerializer.save(): write_frequency must be >= 1, got {}".format(
                write_frequency))
        path = os.fspath(path)
        target = os.path.join(path, 'data.mdb') if os.path.isdir(path) else path
        if os.path.exists(target):
            raise FileExistsError("LMDBSerializer.save(): {} already exists; remove it or choose another "
                                  "path".format(target))
        count = 0
        with atomic_path(target) as tmp:  # no lock file: lock=False
            env = lmdb.open(tmp, subdir=False, lock=False, map_size=lmdb_map_size(), meminit=False,
                            map_async=True)
            writer = _LMDBWriter(lmdb, env, int(write_frequency))
            try:
                for index, dp in _datapoints(df, 'LMDBSerializer'):
                    writer.put(_lmdb_key(index), _msgpack_numpy_record(dp, index))
                    count += 1
                keys = [_lmdb_key(k) for k in range(count)]
                writer.put(LMDB_KEYS_ENTRY, msgpack.packb(keys, use_bin_type=True))
                writer.commit()
                env.sync(True)
            finally:
                writer.close()
                env.close()
        logger.info("LMDBSerializer: wrote {} datapoints to {}".format(count, path))

    @staticmethod
    def load(path, shuffle=True):
        """A DataFlow of the datapoints in the database ``path``.

        Decoding runs in the DataFlow's process; to decode in parallel, read with
        :class:`LMDBData` and map :meth:`_deserialize_lmdb` with a parallel map.
        """
        path = os.fspath(path)
        key, value = _first_entry(path)
        if value is not None and _looks_like_pickle(value):
            raise ValueError(
                "LMDBSerializer: {} holds pickles (tensorpack's default serializer; the value of key {!r} "
                "is one), which are not loaded: unpickling can run arbitrary code. Rewrite it with "
                "TENSORPACK_SERIALIZE=msgpack, or, if you trust it, read it with "
                "LMDBDataDecoder(LMDBData(path), lambda k, v: pickle.loads(v))".format(path, key))
        return LMDBDataDecoder(LMDBData(path, shuffle=shuffle),
                               lambda key, value: _decode_lmdb_value(key, value, path))

    @staticmethod
    def _deserialize_lmdb(dp):
        """The datapoint stored in the ``[key, value]`` pair ``dp`` of an :class:`LMDBData`."""
        return _decode_lmdb_value(dp[0], dp[1], 'the LMDB')


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
    """The datapoints of a TFRecord file, in order; its state is how many records the iteration
    in progress produced (a restored iteration reads them again and drops them)."""

    def __init__(self, path, size):
        self._path, self._size = path, size
        self._cursor = IterationCursor()

    def __len__(self):
        return self._size

    def __iter__(self):
        return self._examples(self._cursor.follow(_read_records(self._path)))

    @staticmethod
    def _examples(records):
        tf = _tf()
        for record in records:
            yield _from_example(tf.train.Example.FromString(record))

    def get_state(self):
        return self._cursor.state()

    def set_state(self, state):
        self._cursor.restore(state)


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


# ------------------------------------------------------------------ HDF5

def _hdf5_column(h5py, values, data_path):
    """The values of one component stacked into ``(array, h5py dtype or None, is_bytes)``."""
    arrays = []
    for index, value in enumerate(values):
        if isinstance(value, (bytes, str)):
            arr = np.empty((), dtype=object)
            arr[()] = value
        else:
            arr = np.asarray(value)
        if arrays and arr.shape != arrays[0].shape:
            raise ValueError("HDF5Serializer.save(): the component for {!r} of datapoint #{} has shape {}, "
                             "but that of datapoint #0 has shape {}".format(
                                 data_path, index, arr.shape, arrays[0].shape))
        arrays.append(arr)
    column = np.stack(arrays) if arrays else np.zeros(0)
    if column.dtype.kind == 'U':
        column = column.astype(object)
    if not column.dtype.hasobject:
        return column, None, False
    if all(isinstance(x, bytes) for x in column.flat):
        return bytes_to_hdf5(column), h5py.vlen_dtype(np.uint8), True
    if all(isinstance(x, str) for x in column.flat):
        if any('\0' in x for x in column.flat):
            raise ValueError("HDF5Serializer.save(): a string for {!r} holds a NUL character, which HDF5 "
                             "strings cannot hold".format(data_path))
        return column, h5py.string_dtype('utf-8'), False
    raise TypeError("HDF5Serializer.save(): the components for {!r} are objects other than only bytes or "
                    "only str ({}), which HDF5 cannot hold".format(
                        data_path, sorted({type(x).__name__ for x in column.flat})))


class HDF5Serializer(object):
    """An HDF5 file with one dataset per component: the component ``k`` of every datapoint,
    stacked, is the dataset ``data_paths[k]``.

    Numbers and arrays keep their dtype (bool, intN, uintN, float16/32/64, complex); ``str``
    is stored as UTF-8 strings, ``bytes`` (which may hold NULs, unlike HDF5 strings) as
    variable-length uint8 arrays marked with an attribute; both come back as such through
    :meth:`load`. The whole DataFlow is held in memory while saving and after loading.

    Example::

        HDF5Serializer.save(df, '/data/train.h5', ['images', 'labels'])
        df = HDF5Serializer.load('/data/train.h5', ['images', 'labels'], shuffle=True)
    """

    @staticmethod
    def save(df, path, data_paths):
        """Write one epoch of ``df`` to ``path``.

        Args:
            data_paths (list[str]): one dataset path per component of the datapoints.
        """
        h5py = import_optional('h5py', extra='hdf5', purpose='HDF5Serializer')
        data_paths = [data_paths] if isinstance(data_paths, str) else list(data_paths)
        if not data_paths or len(set(data_paths)) != len(data_paths):
            raise ValueError("HDF5Serializer.save(): data_paths must be distinct dataset paths, one per "
                             "component, got {!r}".format(data_paths))
        columns = [[] for _ in data_paths]
        for index, dp in _datapoints(df, 'HDF5Serializer'):
            if not isinstance(dp, (list, tuple)) or len(dp) != len(data_paths):
                raise ValueError("HDF5Serializer.save(): datapoint #{} is {}, but {} data_paths were given"
                                 .format(index, _describe(dp), len(data_paths)))
            for column, value in zip(columns, dp):
                column.append(value)
        stacked = [_hdf5_column(h5py, column, data_path) for column, data_path in zip(columns, data_paths)]
        with atomic_path(path) as tmp:
            with h5py.File(tmp, 'w') as f:
                for data_path, (values, dtype, is_bytes) in zip(data_paths, stacked):
                    try:
                        dataset = f.create_dataset(data_path, data=values, dtype=dtype)
                    except (TypeError, ValueError) as err:
                        raise TypeError("HDF5Serializer.save(): cannot store the components for {!r} "
                                        "(dtype {}): {}".format(data_path, values.dtype, err)) from None
                    if is_bytes:
                        dataset.attrs[BYTES_ATTRIBUTE] = True
        logger.info("HDF5Serializer: wrote {} datapoints to {}".format(len(columns[0]), path))

    @staticmethod
    def load(path, data_paths, shuffle=True):
        """A DataFlow of the datapoints in ``path``: :class:`HDF5Data` ``(path, data_paths, shuffle)``."""
        return HDF5Data(path, data_paths, shuffle)


def _describe(dp):
    if isinstance(dp, (list, tuple)):
        return "a {} of {} components".format(type(dp).__name__, len(dp))
    return "a {}".format(type(dp).__name__)
