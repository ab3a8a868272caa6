"""dataflow.format and the LMDB / HDF5 serializers: tensorpack's LMDB layout read and written
(checked with an independent msgpack-numpy codec written here from its documented layout),
round trips of every dtype TF feeds, Caffe Datum records, SVMlight files, shuffling and errors."""

import logging
import os
import pickle

import h5py
import lmdb
import msgpack
import numpy as np
import pytest

from tensorpack_lite.dataflow import DataFromList, MapData, MultiProcessRunnerZMQ
from tensorpack_lite.dataflow import serialize as serialize_module
from tensorpack_lite.dataflow.format import CaffeLMDB, HDF5Data, LMDBData, LMDBDataDecoder, SVMLightData
from tensorpack_lite.dataflow.serialize import HDF5Serializer, LMDBSerializer
from tensorpack_lite.utils import utils as rng_utils
from helpers.protobuf import varint
from helpers.dataflows import Opaque, loaded

TF_DTYPES = ['bool', 'float16', 'float32', 'float64', 'int8', 'int16', 'int32', 'int64', 'uint8',
             'uint16', 'uint32', 'uint64', 'complex64', 'complex128']


@pytest.fixture
def fixed_seed(monkeypatch):
    """fix_rng_seed(123) for this test only."""
    monkeypatch.setattr(rng_utils, '_RNG_SEED', None)
    rng_utils.fix_rng_seed(123)


# ----- an independent msgpack-numpy 0.4.x codec (what tensorpack's msgpack `dumps` uses) -------

def mn_encode(obj):
    """msgpack's `default`: ndarray -> {nd, type, kind, shape, data}; numpy scalar -> {nd: False,
    type, data}; complex -> {complex, data: repr}."""
    if isinstance(obj, np.ndarray):
        return {b'nd': True, b'type': obj.dtype.str, b'kind': b'', b'shape': obj.shape,
                b'data': obj.tobytes()}
    if isinstance(obj, (np.bool_, np.number)):
        return {b'nd': False, b'type': obj.dtype.str, b'data': obj.tobytes()}
    if isinstance(obj, complex):
        return {b'complex': True, b'data': obj.__repr__()}
    raise TypeError(type(obj))


def mn_decode(obj):
    if b'nd' in obj:
        dtype = np.dtype(obj[b'type'])
        if obj[b'nd'] is True:
            return np.ndarray(buffer=obj[b'data'], dtype=dtype, shape=obj[b'shape'])
        return np.frombuffer(obj[b'data'], dtype=dtype)[0]
    if b'complex' in obj:
        return complex(obj[b'data'])
    return obj


def tp_dumps(obj):
    return msgpack.packb(obj, default=mn_encode, use_bin_type=True)


def tp_loads(buf):
    return msgpack.unpackb(buf, raw=False, object_hook=mn_decode)


def tp_key(i):
    return '{:08}'.format(i).encode('ascii')


def write_raw_lmdb(path, items, subdir=False):
    """An LMDB holding the (key, value) pairs ``items``, written with the lmdb package."""
    env = lmdb.open(path, subdir=subdir, map_size=1 << 26)
    with env.begin(write=True) as txn:
        for key, value in items:
            txn.put(key, value)
    env.close()


def write_tensorpack_lmdb(path, datapoints, subdir=False, keys_value=None):
    """What tensorpack's LMDBSerializer.save writes with TENSORPACK_SERIALIZE=msgpack."""
    keys = [tp_key(i) for i in range(len(datapoints))]
    items = [(k, tp_dumps(dp)) for k, dp in zip(keys, datapoints)]
    write_raw_lmdb(path, items + [(b'__keys__', keys_value or tp_dumps(keys))], subdir)


def read_raw_lmdb(path):
    env = lmdb.open(path, subdir=os.path.isdir(path), readonly=True, lock=False)
    with env.begin() as txn:
        items = dict(txn.cursor())
    env.close()
    return items


# ----- data -------------------------------------------------------------------------------------

def component(dtype, i):
    values = (np.arange(6).reshape(2, 3) + i) % 5
    return (values > 1) if dtype == 'bool' else values.astype(dtype)


def typed_datapoints(n=3):
    return [[component(dt, i) for dt in TF_DTYPES]
            + [np.float32(i / 2), np.int64(-i), np.bool_(i % 2), np.zeros((0, 4), np.int64),
               np.array(['ab', 'c'])[i % 2:], i, i / 4, 'text%d' % i, b'\x00bytes', None, complex(i, 1)]
            for i in range(n)]


def assert_same_datapoint(got, expected):
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        if isinstance(e, (np.ndarray, np.generic)):
            assert type(g) is type(e) and g.dtype == e.dtype, (g, e)
            assert np.shape(g) == np.shape(e)
            np.testing.assert_array_equal(g, e)
        else:
            assert type(g) is type(e) and g == e, (g, e)


# ----- LMDB: tensorpack's layout ----------------------------------------------------------------

@pytest.mark.parametrize('subdir', [False, True], ids=['file', 'directory'])
def test_lmdb_written_in_tensorpack_layout_loads(tmp_path, subdir):
    dps = typed_datapoints()
    path = str(tmp_path / 'tp.lmdb')
    write_tensorpack_lmdb(path, dps, subdir=subdir)
    df = LMDBSerializer.load(path, shuffle=False)
    assert len(df) == len(dps)
    out = loaded(df)
    assert len(out) == len(dps)
    for got, expected in zip(out, dps):
        assert_same_datapoint(got, expected)


@pytest.mark.parametrize('as_directory', [False, True], ids=['file', 'directory'])
def test_lmdb_save_writes_tensorpack_layout(tmp_path, as_directory):
    dps = typed_datapoints()
    path = tmp_path / 'out'
    if as_directory:
        path.mkdir()
    LMDBSerializer.save(DataFromList(dps, shuffle=False), str(path))
    if as_directory:
        assert sorted(os.listdir(path)) == ['data.mdb']
    else:
        assert sorted(os.listdir(tmp_path)) == ['out']  # no lock file, no temporary left
    items = read_raw_lmdb(str(path))
    keys = [tp_key(i) for i in range(len(dps))]
    assert sorted(items) == sorted(keys + [b'__keys__'])
    assert tp_loads(items[b'__keys__']) == keys
    for key, expected in zip(keys, dps):
        assert_same_datapoint(tp_loads(items[key]), expected)


def test_lmdb_round_trip_of_nested_structures_and_string_arrays(tmp_path):
    dps = [{'image': np.ones((2, 2), np.float16), 'meta': {'id': 7, 'tags': ['a', 'b']},
            'names': np.array([[b'x\x00', b'y'], [b'', b'z']], dtype=object), 'pair': (1, 2.5)}]
    path = str(tmp_path / 'nested.lmdb')
    LMDBSerializer.save(DataFromList(dps, shuffle=False), path)
    (got,) = loaded(LMDBSerializer.load(path, shuffle=False))
    assert got['image'].dtype == np.float16 and got['image'].tolist() == [[1, 1], [1, 1]]
    assert got['meta'] == {'id': 7, 'tags': ['a', 'b']}
    assert got['names'] == [[b'x\x00', b'y'], [b'', b'z']]  # string arrays come back as lists
    assert got['pair'] == [1, 2.5]


def test_lmdb_shuffle_is_reproducible_and_keeps_every_datapoint(tmp_path, fixed_seed):
    path = str(tmp_path / 'numbers.lmdb')
    LMDBSerializer.save(DataFromList([[i] for i in range(40)], shuffle=False), path)
    assert [dp[0] for dp in loaded(LMDBSerializer.load(path, shuffle=False))] == list(range(40))
    df = LMDBSerializer.load(path, shuffle=True)
    df.reset_state()
    first, second = [dp[0] for dp in df], [dp[0] for dp in df]
    assert sorted(first) == sorted(second) == list(range(40))
    assert first != list(range(40)) and first != second
    again = LMDBSerializer.load(path, shuffle=True)
    again.reset_state()
    assert [dp[0] for dp in again] == first  # the same seed, the same order


def test_lmdb_opened_in_the_parent_is_read_by_forked_workers(tmp_path):
    path = str(tmp_path / 'shared.lmdb')
    LMDBSerializer.save(DataFromList([[i] for i in range(6)], shuffle=False), path)
    in_parent = LMDBSerializer.load(path, shuffle=False)
    in_parent.reset_state()  # the database stays open here while workers open it again
    runner = MultiProcessRunnerZMQ(LMDBSerializer.load(path, shuffle=False), num_proc=1)
    try:
        runner.reset_state()
        assert [dp[0] for dp in runner] == list(range(6))
    finally:
        runner.close()
    assert [dp[0] for dp in in_parent] == list(range(6))


def test_lmdb_save_grows_a_full_map_without_losing_entries(tmp_path, monkeypatch):
    monkeypatch.setattr(serialize_module, 'lmdb_map_size', lambda: 1 << 15)  # 32 KiB
    dps = [[np.full(1000, i, np.int32)] for i in range(60)]  # 240 KB of data
    path = str(tmp_path / 'grown.lmdb')
    LMDBSerializer.save(DataFromList(dps, shuffle=False), path, write_frequency=7)
    out = loaded(LMDBSerializer.load(path, shuffle=False))
    assert [int(dp[0][0]) for dp in out] == list(range(60))
    assert all(dp[0].shape == (1000,) and (dp[0] == dp[0][0]).all() for dp in out)


def test_lmdbdata_produces_raw_pairs_and_decodes_in_a_mapper(tmp_path):
    dps = [[np.arange(3) + i, 'n%d' % i] for i in range(4)]
    path = str(tmp_path / 'raw.lmdb')
    write_tensorpack_lmdb(path, dps)
    pairs = loaded(LMDBData(path, shuffle=False))
    assert [k for k, _ in pairs] == [tp_key(i) for i in range(4)]  # __keys__ is not produced
    assert all(isinstance(v, bytes) for _, v in pairs)
    decoded = loaded(MapData(LMDBData(path, shuffle=False), LMDBSerializer._deserialize_lmdb))
    assert [dp[1] for dp in decoded] == ['n0', 'n1', 'n2', 'n3']
    lengths = loaded(LMDBDataDecoder(LMDBData(path, shuffle=False), lambda k, v: [k, len(v)]))
    assert lengths == [[k, len(v)] for k, v in pairs]
    skip_one = LMDBDataDecoder(LMDBData(path, shuffle=False), lambda k, v: None if k.endswith(b'1') else [k])
    skipped = loaded(skip_one)
    assert skipped == [[tp_key(0)], [tp_key(2)], [tp_key(3)]]


def test_lmdbdata_keys_from_a_format_a_list_or_a_scan(tmp_path, fixed_seed):
    path = str(tmp_path / 'nokeys.lmdb')
    write_raw_lmdb(path, [('{:03d}'.format(i).encode(), b'v%d' % i) for i in range(5)])  # no __keys__
    scanned = LMDBData(path, shuffle=True)
    assert len(scanned) == 5
    assert sorted(loaded(scanned)) == [[b'%03d' % i, b'v%d' % i] for i in range(5)]
    formatted = LMDBData(path, shuffle=True, keys='{:03d}')
    assert sorted(loaded(formatted)) == sorted(loaded(scanned))
    subset = LMDBData(path, shuffle=True, keys=['001', b'003'])
    assert sorted(loaded(subset)) == [[b'001', b'v1'], [b'003', b'v3']]
    missing = LMDBData(path, shuffle=True, keys=['001', '042'])
    missing.reset_state()
    with pytest.raises(KeyError, match=r"b'042'.*nokeys\.lmdb"):
        list(missing)


def test_lmdb_with_pickles_is_refused_without_unpickling(tmp_path, log_records):
    path = str(tmp_path / 'pickled.lmdb')
    keys = [tp_key(i) for i in range(2)]
    write_raw_lmdb(path, [(k, pickle.dumps([np.arange(3)], protocol=2)) for k in keys]
                   + [(b'__keys__', pickle.dumps(keys, protocol=4))])
    with pytest.raises(ValueError, match=r"pickled\.lmdb holds pickles.*b'00000000'"):
        LMDBSerializer.load(path)
    # the raw pairs are still readable (the keys are found by a scan, with a warning)
    pairs = loaded(LMDBData(path, shuffle=True))
    assert sorted(k for k, _ in pairs) == keys
    assert any('__keys__' in m and 'scanning' in m for m in log_records.messages(logging.WARNING))


def test_lmdb_object_array_value_is_an_error_naming_the_key(tmp_path):
    path = str(tmp_path / 'object.lmdb')
    good = tp_dumps([np.arange(2)])
    bad = msgpack.packb([{b'nd': True, b'type': '|O', b'kind': b'O', b'shape': [1],
                          b'data': pickle.dumps(np.array([None], dtype=object))}], use_bin_type=True)
    write_raw_lmdb(path, [(tp_key(0), good), (tp_key(1), bad),
                          (b'__keys__', tp_dumps([tp_key(0), tp_key(1)]))])
    df = LMDBSerializer.load(path, shuffle=False)
    df.reset_state()
    itr = iter(df)
    np.testing.assert_array_equal(next(itr)[0], [0, 1])
    with pytest.raises(ValueError, match=r"key b'00000001' in .*object\.lmdb.*object array"):
        next(itr)


def test_lmdb_errors_name_the_file(tmp_path):
    missing = str(tmp_path / 'missing.lmdb')
    with pytest.raises(FileNotFoundError, match='missing.lmdb'):
        LMDBSerializer.load(missing)
    with pytest.raises(FileNotFoundError, match='missing.lmdb'):
        LMDBData(missing)
    junk = tmp_path / 'junk.lmdb'
    junk.write_bytes(b'not an lmdb' * 1000)
    with pytest.raises(ValueError, match='junk.lmdb is not a readable LMDB'):
        LMDBData(str(junk))
    with pytest.raises(FileExistsError, match='junk.lmdb'):
        LMDBSerializer.save(DataFromList([[1]]), str(junk))


def test_lmdb_unserializable_datapoint_is_named_and_no_file_is_left(tmp_path):
    with pytest.raises(TypeError, match=r'datapoint #1: .*Opaque at datapoint\[1\]'):
        LMDBSerializer.save(DataFromList([[np.zeros(2), 1], [np.zeros(2), Opaque()]], shuffle=False),
                            str(tmp_path / 'x.lmdb'))
    with pytest.raises(TypeError, match=r'object array at datapoint\[0\]'):
        LMDBSerializer.save(DataFromList([[np.array([1, 'a'], dtype=object)]]), str(tmp_path / 'y.lmdb'))
    assert list(tmp_path.iterdir()) == []


# ----- Caffe ------------------------------------------------------------------------------------

def field(number, wire, payload):
    tag = varint(number << 3 | wire)
    if wire == 0:
        return tag + varint(payload)
    if wire == 2:
        return tag + varint(len(payload)) + payload
    return tag + payload


def datum(channels, height, width, label, data=None, floats=None, encoded=None):
    """A caffe.Datum encoded by hand from caffe.proto (fields 1-7), with an unknown field 99."""
    msg = field(1, 0, channels) + field(2, 0, height) + field(3, 0, width)
    if data is not None:
        msg += field(4, 2, data)
    msg += field(99, 2, b'ignored') + field(5, 0, label)
    if floats is not None:
        msg += field(6, 2, np.asarray(floats, '<f4').tobytes())
    if encoded is not None:
        msg += field(7, 0, int(encoded))
    return msg


def test_caffe_lmdb_decodes_datums(tmp_path):
    pixels = np.arange(24, dtype=np.uint8)
    floats = np.linspace(-1, 1, 6)
    path = str(tmp_path / 'caffe.lmdb')
    write_raw_lmdb(path, [(b'a', datum(3, 2, 4, label=7, data=pixels.tobytes())),
                          (b'b', datum(1, 2, 3, label=-3, floats=floats))], subdir=True)
    (image, label), (float_image, float_label) = loaded(CaffeLMDB(path, shuffle=False))
    assert image.dtype == np.uint8 and image.shape == (2, 4, 3)  # CHW -> HWC
    assert image[1, 2].tolist() == [pixels[0 * 8 + 1 * 4 + 2], pixels[8 + 6], pixels[16 + 6]]
    np.testing.assert_array_equal(image, pixels.reshape(3, 2, 4).transpose(1, 2, 0))
    assert label == 7 and float_label == -3
    assert float_image.dtype == np.float32 and float_image.shape == (2, 3, 1)
    np.testing.assert_allclose(float_image[:, :, 0], floats.reshape(2, 3), rtol=1e-6)


@pytest.mark.parametrize('value, reason', [
    (datum(1, 1, 1, label=0, data=b'\x01', encoded=True), 'encoded'),
    (datum(3, 2, 2, label=0, data=b'\x01' * 5), '5 values for channels x height x width = 3 x 2 x 2'),
    (datum(1, 1, 4, label=0, data=b'\x01' * 4)[:-3], 'truncated'),
])
def test_caffe_lmdb_bad_datum_is_named(tmp_path, value, reason):
    path = str(tmp_path / 'bad.lmdb')
    write_raw_lmdb(path, [(b'k1', value)])
    df = CaffeLMDB(path, shuffle=False)
    df.reset_state()
    with pytest.raises(ValueError, match=r"key b'k1' in .*bad\.lmdb is not a usable caffe Datum: .*"
                       + reason):
        list(df)


# ----- HDF5 -------------------------------------------------------------------------------------

def test_hdf5_round_trip_of_every_dtype(tmp_path):
    dps = [[component(dt, i) for dt in TF_DTYPES]
           + [b'\x00raw%d\x00' % i, 'h\u00e9%d' % i, np.array([b'a\x00', b''], dtype=object),
              i, i / 4, bool(i)]
           for i in range(3)]
    paths = ['c/{}'.format(dt) for dt in TF_DTYPES] + ['bytes', 'text', 'byte_array', 'int', 'float', 'flag']
    path = str(tmp_path / 'data.h5')
    HDF5Serializer.save(DataFromList(dps, shuffle=False), path, paths)
    with h5py.File(path, 'r') as f:  # one stacked dataset per component
        for dt in TF_DTYPES:
            assert f['c/' + dt].shape == (3, 2, 3) and f['c/' + dt].dtype == np.dtype(dt)
        assert f['int'].dtype == np.int64 and f['float'].dtype == np.float64 and f['flag'].dtype == bool
    out = loaded(HDF5Serializer.load(path, paths, shuffle=False))
    assert len(out) == 3
    n = len(TF_DTYPES)
    for i, (got, expected) in enumerate(zip(out, dps)):
        for g, e in zip(got[:n], expected):
            assert g.dtype == e.dtype and g.shape == e.shape
            np.testing.assert_array_equal(g, e)
        raw, text, byte_array, integer, number, flag = got[n:]
        assert type(raw) is bytes and raw == b'\x00raw%d\x00' % i  # NULs kept
        assert type(text) is str and text == 'h\u00e9%d' % i
        assert byte_array.dtype == object and byte_array.tolist() == [b'a\x00', b'']
        assert integer.dtype == np.int64 and integer == i
        assert number.dtype == np.float64 and number == i / 4
        assert flag.dtype == np.bool_ and flag == bool(i)


def test_hdf5data_reads_any_file_and_shuffles(tmp_path, fixed_seed):
    path = str(tmp_path / 'plain.h5')
    with h5py.File(path, 'w') as f:
        f['images'] = np.arange(40, dtype=np.float32).reshape(10, 4)
        f['group/labels'] = np.arange(10, dtype=np.int32) * 10
    df = HDF5Data(path, ['images', 'group/labels'], shuffle=True)
    assert len(df) == 10
    out = loaded(df)
    assert sorted(int(label) for _, label in out) == list(range(0, 100, 10))
    assert all(image[0] == 4 * (label // 10) for image, label in out)
    assert [int(label) for _, label in out] != list(range(0, 100, 10))


def test_hdf5_errors_name_the_file_and_the_dataset(tmp_path):
    path = str(tmp_path / 'small.h5')
    with h5py.File(path, 'w') as f:
        f['a'] = np.zeros(3)
        f['b'] = np.zeros(4)
        f['scalar'] = 1.0
    with pytest.raises(KeyError, match=r"small\.h5 has no dataset 'nope'; its datasets are "
                                       r"\['a', 'b', 'scalar'\]"):
        HDF5Data(path, ['a', 'nope'])
    with pytest.raises(ValueError, match=r"different lengths: \{'a': 3, 'b': 4\}"):
        HDF5Data(path, ['a', 'b'])
    with pytest.raises(ValueError, match="'scalar' of .*small.h5 is a scalar"):
        HDF5Data(path, ['scalar'])
    with pytest.raises(FileNotFoundError, match='absent.h5'):
        HDF5Data(str(tmp_path / 'absent.h5'), ['a'])
    junk = tmp_path / 'junk.h5'
    junk.write_bytes(b'junk' * 100)
    with pytest.raises(ValueError, match='junk.h5 is not a readable HDF5 file'):
        HDF5Data(str(junk), ['a'])


def test_hdf5_save_errors_name_the_datapoint(tmp_path):
    out = str(tmp_path / 'out.h5')
    with pytest.raises(ValueError, match=r'datapoint #1 is a list of 1 components, but 2 data_paths'):
        HDF5Serializer.save(DataFromList([[1, 2], [3]], shuffle=False), out, ['x', 'y'])
    with pytest.raises(ValueError, match=r"'y' of datapoint #2 has shape \(3,\), but that of "
                                         r"datapoint #0 has shape \(2,\)"):
        HDF5Serializer.save(DataFromList([[0, np.zeros(2)], [1, np.zeros(2)], [2, np.zeros(3)]],
                                         shuffle=False), out, ['x', 'y'])
    with pytest.raises(TypeError, match=r"components for 'x' are objects .*\['dict'\]"):
        HDF5Serializer.save(DataFromList([[{'a': 1}]]), out, ['x'])
    assert list(tmp_path.iterdir()) == []


# ----- SVMlight ---------------------------------------------------------------------------------

def test_svmlight_data(tmp_path, fixed_seed):
    path = tmp_path / 'data.svm'
    path.write_text("1 1:0.5 3:2\n-1 2:1.5\n2 1:1 2:2 3:3\n")
    out = loaded(SVMLightData(str(path), shuffle=False))
    assert [x.tolist() for x, _ in out] == [[0.5, 0, 2], [0, 1.5, 0], [1, 2, 3]]
    assert [y for _, y in out] == [1, -1, 2]
    assert out[0][0].dtype == np.float64
    shuffled = SVMLightData(str(path), shuffle=True)
    assert len(shuffled) == 3
    assert sorted(y for _, y in loaded(shuffled)) == [-1, 1, 2]
    with pytest.raises(FileNotFoundError, match='absent.svm'):
        SVMLightData(str(tmp_path / 'absent.svm'))
    junk = tmp_path / 'junk.svm'
    junk.write_text("1 a:b:c\n")
    with pytest.raises(ValueError, match='cannot read .*junk.svm'):
        SVMLightData(str(junk))
