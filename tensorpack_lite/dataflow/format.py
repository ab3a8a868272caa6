"""DataFlows that read dataset files written by other tools: LMDB databases (raw key/value
pairs, or Caffe's ``Datum`` records), HDF5 files and SVMlight text files.

The packages each format needs (``lmdb``, ``h5py``, ``scikit-learn``) are imported when a
DataFlow is created, not when this module is imported. Example::

    df = LMDBDataDecoder(LMDBData('/data/train.lmdb', shuffle=True),
                         lambda key, value: [decode_jpeg(value), labels[key]])
    df = HDF5Data('/data/train.h5', ['images', 'labels'], shuffle=True)

To save a DataFlow in LMDB or HDF5, see :class:`~tensorpack_lite.dataflow.serialize.LMDBSerializer`
and :class:`~tensorpack_lite.dataflow.serialize.HDF5Serializer`.
"""

import os
import platform
import weakref

import msgpack
import numpy as np

from ..utils import logger
from ..utils.develop import import_optional
from ..utils.protowire import int32, message_fields
from .base import DataFlowReentrantGuard, RNGDataFlow
from .common import MapData
from .raw import IndexedData
from .state import IterationCursor

__all__ = ['HDF5Data', 'LMDBData', 'LMDBDataDecoder', 'CaffeLMDB', 'SVMLightData']

LMDB_KEYS_ENTRY = b'__keys__'
"""The LMDB entry in which tensorpack's ``LMDBSerializer`` stores the list of all other keys."""

BYTES_ATTRIBUTE = 'tensorpack_lite_bytes'
"""Attribute of an HDF5 dataset of variable-length uint8 arrays that are ``bytes`` objects
(HDF5 strings cannot hold NUL bytes, encoded images can): see :func:`bytes_to_hdf5`."""


# ------------------------------------------------------------------ LMDB

def _lmdb(purpose):
    return import_optional('lmdb', extra='lmdb', purpose=purpose)


def lmdb_map_size():
    """The map size new LMDB databases are opened with: 1 TiB on Linux (address space only;
    the file grows as needed), 128 MB elsewhere (writers double it when full)."""
    return 1 << 40 if platform.system() == 'Linux' else 128 * 10 ** 6


_READ_ENVIRONMENTS = weakref.WeakValueDictionary()  # (pid, st_dev, st_ino of the data file) -> env


def open_lmdb_readonly(path, purpose):
    """An ``lmdb.Environment`` on the database ``path`` (a directory holding ``data.mdb``, or
    a single file), opened read-only without a lock file.

    py-lmdb refuses to open one database twice in a process, so the readers of a process
    share one environment; it closes when the last of them lets it go. Do not close it.
    Environments inherited through ``fork`` are closed in the child (they cannot be used
    there, and would prevent a new one from opening).

    Raises:
        FileNotFoundError: ``path`` does not exist.
        ValueError: ``path`` is not an LMDB database.
    """
    lmdb = _lmdb(purpose)
    if not os.path.exists(path):
        raise FileNotFoundError("{}: the LMDB database {} does not exist".format(purpose, path))
    subdir = os.path.isdir(path)
    data_file = os.path.join(path, 'data.mdb') if subdir else path
    if not os.path.isfile(data_file):
        raise ValueError("{}: {} is not an LMDB database (it has no data.mdb)".format(purpose, path))
    pid = os.getpid()
    for key in [key for key in list(_READ_ENVIRONMENTS.keys()) if key[0] != pid]:
        inherited = _READ_ENVIRONMENTS.pop(key, None)
        if inherited is not None:
            inherited.close()
    stat = os.stat(data_file)
    key = (pid, stat.st_dev, stat.st_ino)
    env = _READ_ENVIRONMENTS.get(key)
    if env is None:
        try:
            env = lmdb.open(path, subdir=subdir, readonly=True, lock=False, readahead=True,
                            max_readers=100)
        except lmdb.Error as err:
            raise ValueError("{}: {} is not a readable LMDB database ({})".format(
                purpose, path, err)) from None
        _READ_ENVIRONMENTS[key] = env
    return env


def _as_key(key, path):
    if isinstance(key, str):
        return key.encode('utf-8')
    if isinstance(key, (bytes, bytearray, memoryview)):
        return bytes(key)
    raise TypeError("LMDBData({}): keys must be str or bytes, got a {}".format(path, type(key).__name__))


def _decode_stored_keys(value):
    """The keys in a ``__keys__`` entry written with msgpack, or None if it is something else
    (tensorpack writes it with pickle by default, which is not read here)."""
    try:
        keys = msgpack.unpackb(value, raw=False)
    except Exception:
        return None
    if not isinstance(keys, list) or not all(isinstance(k, (bytes, str)) for k in keys):
        return None
    return [k.encode('utf-8') if isinstance(k, str) else k for k in keys]


class LMDBData(RNGDataFlow):
    """The ``[key, value]`` pairs (both ``bytes``) of an LMDB database.

    The values are usually serialized datapoints: decode them with :class:`LMDBDataDecoder`
    or a :class:`MapData`. The database is opened in :meth:`reset_state` (in the process that
    iterates, so it can be used under :class:`MultiProcessRunnerZMQ`); the ``__keys__`` entry
    written by ``LMDBSerializer`` is never produced and does not count in ``len()``. Its state
    is how many pairs the iteration in progress produced, and the RNG's state before its shuffle.

    Args:
        lmdb_path (str): a directory holding ``data.mdb``, or a database in a single file.
        shuffle (bool): produce the pairs in a new random order every epoch (looked up by
            key); otherwise in the database's (sorted) key order.
        keys (list or str): with ``shuffle``, the keys to produce: a list of str/bytes, or a
            format string such as ``'{:08}'`` formatted with ``0 .. len - 1``. By default the
            keys are those listed in the ``__keys__`` entry, or else all keys of the database
            (found by a slower scan).

    Example::

        df = LMDBData('/data/val.lmdb', shuffle=False)
        df.reset_state()
        for key, value in df:
            ...
    """

    def __init__(self, lmdb_path, shuffle=True, keys=None):
        self._lmdb_path = os.fspath(lmdb_path)
        self._shuffle = bool(shuffle)
        self._guard = DataFlowReentrantGuard('LMDBData')
        self._env = self._txn = None
        self._cursor = IterationCursor()
        # the environment closes as this returns (unless other readers use it), so that forked
        # workers do not inherit it: reset_state opens it again
        with open_lmdb_readonly(self._lmdb_path, 'LMDBData').begin() as txn:
            stored = txn.get(LMDB_KEYS_ENTRY)
            self._size = txn.stat()['entries'] - (stored is not None)
            self.keys = self._choose_keys(txn, keys, stored) if self._shuffle else None
        logger.info("LMDBData: {} entries in {}".format(self._size, self._lmdb_path))

    def _choose_keys(self, txn, keys, stored):
        if isinstance(keys, str):
            return [keys.format(k).encode('utf-8') for k in range(self._size)]
        if keys is not None:
            return [_as_key(k, self._lmdb_path) for k in keys]
        if stored is not None:
            found = _decode_stored_keys(stored)
            if found is not None:
                return found
            logger.warn("LMDBData: the {!r} entry of {} is not a msgpack list of keys (tensorpack "
                        "writes it with pickle by default); scanning the database for its keys "
                        "instead".format(LMDB_KEYS_ENTRY, self._lmdb_path))
        return [k for k in txn.cursor().iternext(keys=True, values=False) if k != LMDB_KEYS_ENTRY]

    def reset_state(self):
        """Open the database (again) and renew the RNG."""
        super(LMDBData, self).reset_state()
        self._txn = None  # a transaction inherited through fork is unusable, and dropped
        self._env = open_lmdb_readonly(self._lmdb_path, 'LMDBData')
        self._txn = self._env.begin()

    def __len__(self):
        return self._size

    def __iter__(self):
        if self._txn is None:
            raise RuntimeError("LMDBData: call reset_state() before iterating")
        if self._shuffle:
            positions = self._cursor.follow(self._cursor.order(len(self.keys), self.rng))
            return self._guarded(self._pair(self.keys[k]) for k in positions)
        pairs = ([key, value] for key, value in self._txn.cursor() if key != LMDB_KEYS_ENTRY)
        return self._guarded(self._cursor.follow(pairs))

    def _guarded(self, pairs):
        with self._guard:
            yield from pairs

    def _pair(self, key):
        value = self._txn.get(key)
        if value is None:
            raise KeyError("LMDBData: the key {!r} is not in {}".format(key, self._lmdb_path))
        return [key, value]

    def _order_rng(self):
        return self.rng if self._shuffle else None

    # the position is kept as the DataFlows read by index keep it (self._cursor, self._order_rng)
    get_state = IndexedData.get_state
    set_state = IndexedData.set_state

    def __getstate__(self):  # an open environment cannot be pickled; a copy reopens it on reset
        state = self.__dict__.copy()
        state['_env'] = state['_txn'] = None
        return state


class LMDBDataDecoder(MapData):
    """Decode the values of an :class:`LMDBData` with ``decoder(key, value)``, which returns
    a datapoint, or None to skip the pair.

    Args:
        lmdb_data (LMDBData): the pairs to decode.
        decoder (callable): ``(key: bytes, value: bytes) -> datapoint or None``.
    """

    def __init__(self, lmdb_data, decoder):
        self.decoder = decoder
        super(LMDBDataDecoder, self).__init__(lmdb_data, self._decode_pair)

    def _decode_pair(self, dp):
        return self.decoder(dp[0], dp[1])


# ------------------------------------------------------------------ Caffe Datum

class _CaffeDatum(object):
    """The fields of a ``caffe.Datum`` (caffe.proto: channels=1, height=2, width=3, data=4,
    label=5, float_data=6, encoded=7), read from its serialized bytes with :meth:`parse`."""

    _INT_FIELDS = {1: 'channels', 2: 'height', 3: 'width', 5: 'label'}

    def __init__(self):
        self.channels = self.height = self.width = self.label = 0
        self.data = b''
        self.float_data = []
        self.encoded = False

    @classmethod
    def parse(cls, buf):
        datum = cls()
        for number, wire, value in message_fields(memoryview(buf).cast('B')):
            if number > 7:
                continue  # an unknown field: skipped, as protobuf does
            expected = {4: (2,), 6: (2, 5)}.get(number, (0,))
            if wire not in expected:
                raise ValueError("field {} has wire type {}, expected {}".format(number, wire, expected[0]))
            if number in cls._INT_FIELDS:
                setattr(datum, cls._INT_FIELDS[number], int32(value))
            elif number == 4:
                datum.data = bytes(value)
            elif number == 6:  # packed (wire type 2) or one float per field (5)
                datum.float_data.extend(np.frombuffer(value, '<f4').tolist())
            else:
                datum.encoded = bool(value)
        return datum

    def image(self):
        """The HWC image: uint8 from ``data``, else float32 from ``float_data``."""
        if self.encoded:
            raise ValueError("it holds an encoded (compressed) image, and only raw pixel data is read")
        shape = (self.channels, self.height, self.width)
        if self.data:
            pixels = np.frombuffer(self.data, np.uint8)
        else:
            pixels = np.asarray(self.float_data, np.float32)
        if pixels.size != int(np.prod(shape)) or pixels.size == 0:
            raise ValueError("it holds {} values for channels x height x width = {}".format(
                pixels.size, ' x '.join(map(str, shape))))
        return pixels.reshape(shape).transpose(1, 2, 0)


def CaffeLMDB(lmdb_path, shuffle=True, keys=None):
    """The ``[image, label]`` datapoints of a Caffe LMDB, whose values are ``caffe.Datum``
    protobufs: ``image`` is HWC (uint8, or float32 for a datum with ``float_data``) and
    ``label`` an int. Caffe is not needed: the protobuf is read here.

    Args:
        lmdb_path, shuffle, keys: as for :class:`LMDBData`.

    Raises (while iterating):
        ValueError: naming the key and the database, for a value that is not a Datum of raw
            pixels (e.g. an ``encoded`` JPEG datum).

    Example::

        df = CaffeLMDB('/data/ilsvrc12_val_lmdb', shuffle=False)
    """
    lmdb_path = os.fspath(lmdb_path)

    def decode(key, value):
        try:
            datum = _CaffeDatum.parse(value)
            return [datum.image(), datum.label]
        except ValueError as err:
            raise ValueError("CaffeLMDB: the value of key {!r} in {} is not a usable caffe Datum: {}"
                             .format(key, lmdb_path, err)) from None
    return LMDBDataDecoder(LMDBData(lmdb_path, shuffle, keys), decode)


# ------------------------------------------------------------------ HDF5

def _h5py(purpose):
    return import_optional('h5py', extra='hdf5', purpose=purpose)


def _object_array(items, shape):
    out = np.empty(len(items), dtype=object)
    for k, item in enumerate(items):  # one by one: numpy would turn a list of arrays into one array
        out[k] = item
    return out.reshape(shape)


def bytes_to_hdf5(values):
    """An object array of ``bytes`` as the object array of uint8 arrays stored in HDF5 (with
    the dtype ``h5py.vlen_dtype(np.uint8)`` and the attribute :data:`BYTES_ATTRIBUTE`)."""
    return _object_array([np.frombuffer(x, np.uint8) for x in values.flat], values.shape)


def bytes_from_hdf5(values):
    """The inverse of :func:`bytes_to_hdf5`."""
    return _object_array([np.asarray(x, np.uint8).tobytes() for x in values.flat], values.shape)


def _read_hdf5_dataset(h5py, f, data_path, filename):
    if data_path not in f or not isinstance(f[data_path], h5py.Dataset):
        found = []
        f.visititems(lambda name, obj: found.append(name) if isinstance(obj, h5py.Dataset) else None)
        raise KeyError("HDF5Data: {} has no dataset {!r}; its datasets are {}".format(
            filename, data_path, found))
    dataset = f[data_path]
    if dataset.ndim == 0:
        raise ValueError("HDF5Data: the dataset {!r} of {} is a scalar; it needs a first dimension "
                         "(one entry per datapoint)".format(data_path, filename))
    string_info = h5py.check_string_dtype(dataset.dtype)
    if string_info is not None and string_info.length is None and string_info.encoding == 'utf-8':
        return dataset.asstr()[...]
    values = dataset[...]
    return bytes_from_hdf5(values) if dataset.attrs.get(BYTES_ATTRIBUTE, False) else values


class HDF5Data(IndexedData):
    """Zip datasets of an HDF5 file along their first dimension: datapoint ``i`` is
    ``[f[path][i] for path in data_paths]``. The datasets are read into memory at once.

    Variable-length UTF-8 strings come back as ``str``, the bytes written by
    :class:`~tensorpack_lite.dataflow.serialize.HDF5Serializer` as ``bytes``.

    Args:
        filename (str): the HDF5 file.
        data_paths (list[str]): paths of datasets in the file, e.g. ``['images', 'labels']``;
            they must have the same first dimension.
        shuffle (bool): produce the datapoints in a new random order every epoch.
    """

    def __init__(self, filename, data_paths, shuffle=True):
        h5py = _h5py('HDF5Data')
        filename = os.fspath(filename)
        if not os.path.isfile(filename):
            raise FileNotFoundError("HDF5Data: the file {} does not exist".format(filename))
        if isinstance(data_paths, str) or not len(data_paths):
            raise ValueError("HDF5Data: data_paths must be a non-empty list of dataset paths, got {!r}"
                             .format(data_paths))
        try:
            f = h5py.File(filename, 'r')
        except OSError as err:
            raise ValueError("HDF5Data: {} is not a readable HDF5 file ({})".format(filename, err)) from None
        logger.info("HDF5Data: loading {} from {} into memory".format(list(data_paths), filename))
        with f:
            self.dps = [_read_hdf5_dataset(h5py, f, path, filename) for path in data_paths]
        lengths = [len(values) for values in self.dps]
        if len(set(lengths)) > 1:
            raise ValueError("HDF5Data: the datasets of {} have different lengths: {}".format(
                filename, dict(zip(data_paths, lengths))))
        self._size = lengths[0]
        self.shuffle = shuffle

    def __len__(self):
        return self._size

    def _datapoint_at(self, k):
        return [values[k] for values in self.dps]


# ------------------------------------------------------------------ SVMlight

class SVMLightData(IndexedData):
    """The ``[x, y]`` pairs of an SVMlight / libsvm text file, read with scikit-learn's
    ``load_svmlight_file``: ``x`` is a dense float64 vector, ``y`` a float64 number.

    Args:
        filename (str): the file.
        shuffle (bool): produce the pairs in a new random order every epoch.
    """

    def __init__(self, filename, shuffle=True):
        import_optional('sklearn', purpose='SVMLightData')
        from sklearn.datasets import load_svmlight_file
        filename = os.fspath(filename)
        if not os.path.isfile(filename):
            raise FileNotFoundError("SVMLightData: the file {} does not exist".format(filename))
        try:
            X, self.y = load_svmlight_file(filename)
        except ValueError as err:
            raise ValueError("SVMLightData: cannot read {} as an SVMlight file: {}".format(
                filename, err)) from None
        self.X = np.asarray(X.todense())
        self.shuffle = shuffle

    def __len__(self):
        return len(self.y)

    def _datapoint_at(self, k):
        return [self.X[k], self.y[k]]
