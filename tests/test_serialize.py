"""utils/serialize.py: msgpack round trips of numpy data, zero-copy loads, clear TypeErrors."""

import collections

import numpy as np
import pytest

from tensorpack_lite.utils.serialize import dumps, loads

DTYPES = ['bool', 'float16', 'float32', 'float64', 'int8', 'int16', 'int32', 'int64', 'uint8',
          'uint16', 'uint32', 'uint64', 'complex64', 'complex128', '>i4', '>f8']


def _sample(dtype, shape=(2, 3)):
    rng = np.random.RandomState(0)
    dtype = np.dtype(dtype)
    if dtype.kind == 'b':
        return rng.rand(*shape) > 0.5
    if dtype.kind in 'iu':
        info = np.iinfo(dtype)
        # include the extremes: a lossy path (e.g. through float64) would change them
        values = rng.randint(-100 if info.min < 0 else 0, 100, size=shape).astype(dtype)
        values.flat[0], values.flat[-1] = info.min, info.max
        return values
    if dtype.kind == 'c':
        return (rng.randn(*shape) + 1j * rng.randn(*shape)).astype(dtype)
    return rng.randn(*shape).astype(dtype)


@pytest.mark.parametrize('dtype', DTYPES)
def test_array_round_trip_keeps_dtype_shape_values(dtype):
    arr = _sample(dtype)
    out = loads(dumps(arr))
    assert isinstance(out, np.ndarray)
    assert out.dtype == arr.dtype and out.shape == arr.shape
    np.testing.assert_array_equal(out, arr)


@pytest.mark.parametrize('arr', [
    np.arange(24, dtype='float32').reshape(2, 3, 4)[:, ::2, 1:],    # non-contiguous view
    np.asfortranarray(np.arange(12, dtype='int64').reshape(3, 4)),   # Fortran order
    np.array(7, dtype='int16'),                                      # 0-d array
    np.zeros((0, 5), dtype='float64'),                               # empty
    np.array([b'ab', b'c'], dtype='S2'),                             # fixed-width bytes
    np.array(['xyz', 'é'], dtype='U3'),                              # fixed-width unicode
], ids=['strided', 'fortran', '0-d', 'empty', 'bytes', 'unicode'])
def test_array_layouts_round_trip(arr):
    out = loads(dumps(arr))
    assert isinstance(out, np.ndarray)
    assert out.dtype == arr.dtype and out.shape == arr.shape
    np.testing.assert_array_equal(out, arr)


@pytest.mark.parametrize('value', [np.float16(1.5), np.float32(-2.25), np.float64(1e300),
                                   np.int64(-2 ** 62), np.uint8(255), np.bool_(True),
                                   np.complex64(1 - 2j)])
def test_numpy_scalars_keep_their_type(value):
    out = loads(dumps(value))
    assert type(out) is type(value)
    assert out == value


def test_nested_structures():
    dp = [np.arange(4, dtype='uint8'), (1, 2.5, 'text', b'raw', None, True),
          {'label': np.int32(3), 7: [np.ones((2, 2), 'float32'), {'deep': np.bool_(False)}]},
          collections.OrderedDict(a=1)]
    out = loads(dumps(dp))
    assert isinstance(out, list) and len(out) == 4
    np.testing.assert_array_equal(out[0], dp[0])
    assert out[1] == [1, 2.5, 'text', b'raw', None, True]  # tuples come back as lists
    assert type(out[2]['label']) is np.int32 and out[2]['label'] == 3
    np.testing.assert_array_equal(out[2][7][0], np.ones((2, 2), 'float32'))
    assert out[2][7][1] == {'deep': False} and type(out[2][7][1]['deep']) is np.bool_
    assert out[3] == {'a': 1}


def test_loads_is_zero_copy_and_read_only():
    arr = np.arange(1000, dtype='float64').reshape(10, 100)
    out = loads(dumps([arr]))[0]
    assert not out.flags.owndata  # a view of the message data, not a copy
    assert not out.flags.writeable
    assert out.flags.c_contiguous and out.flags.aligned
    base = out
    while isinstance(base, np.ndarray):
        base = base.base
    assert isinstance(base, memoryview)  # the buffer msgpack extracted
    assert np.shares_memory(out, np.frombuffer(base, dtype=np.uint8))
    with pytest.raises(ValueError):
        out[0, 0] = 1.0
    writable = out.copy()
    writable[0, 0] = -1.0
    assert writable[0, 0] == -1.0 and out[0, 0] == 0.0


@pytest.mark.parametrize('buffer_type', [bytes, bytearray, memoryview])
def test_loads_accepts_buffers(buffer_type):
    arr = np.arange(6, dtype='int32')
    out = loads(buffer_type(dumps({'a': arr})))
    np.testing.assert_array_equal(out['a'], arr)


class Opaque(object):
    pass


@pytest.mark.parametrize('obj, where, what', [
    ([np.zeros(2), {'k': [1, Opaque()]}], "datapoint[1]['k'][1]", 'Opaque'),
    ([1, np.array([None, 1], dtype=object)], 'datapoint[1]', 'dtype object'),
    ({'mask': {1, 2}}, "datapoint['mask']", 'set'),
    ([np.zeros(2, dtype=[('a', 'f4')])], 'datapoint[0]', "dtype [('a', '<f4')]"),
], ids=['object', 'object-array', 'set', 'structured'])
def test_unserializable_component_is_named(obj, where, what):
    with pytest.raises(TypeError) as info:
        dumps(obj)
    message = str(info.value)
    assert where in message and what in message
