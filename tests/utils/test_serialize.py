"""utils/serialize.py: msgpack round trips of numpy data, zero-copy loads, clear TypeErrors."""

import collections

import numpy as np
import pytest

from tensorpack_lite.utils.serialize import dumps, dumps_frames, loads, loads_frames
from helpers.dataflows import Opaque

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


# ---------------------------------------------------------------- object arrays of strings

@pytest.mark.parametrize('arr', [
    np.array([[b'ab', b''], [b'\x00\xff', b'xyz']], dtype=object),  # what TF gives for tf.string
    np.array(['é', 'text'], dtype=object),
    np.empty((0, 3), dtype=object),
], ids=['bytes', 'str', 'empty'])
def test_object_arrays_of_strings_round_trip(arr):
    for out in (loads(dumps([arr]))[0], loads_frames(dumps_frames([arr], min_frame_bytes=1))[0]):
        assert out.dtype == object and out.shape == arr.shape
        assert out.tolist() == arr.tolist()


def test_mixed_object_array_is_refused():
    with pytest.raises(TypeError, match=r'datapoint\[0\].*object arrays of only bytes or only str'):
        dumps([np.array([b'a', 'b'], dtype=object)])


# ---------------------------------------------------------------- frames

def test_frames_carry_big_arrays_without_copies():
    big = np.arange(64 * 64, dtype='float32').reshape(64, 64)        # 16 KiB: its own frame
    strided = np.arange(20000, dtype='int64').reshape(100, 200)[:, ::2]  # copied once, then framed
    small = np.arange(10, dtype='int16')                              # inline in the header
    dp = [big, {'s': strided, 'small': small, 'n': 3}, np.float16(2.5)]
    frames = dumps_frames(dp)
    assert len(frames) == 3 and isinstance(frames[0], bytes)
    assert np.shares_memory(np.frombuffer(frames[1], np.uint8), big)  # a view, not a copy
    out = loads_frames([bytes(f) for f in frames])
    np.testing.assert_array_equal(out[0], big)
    np.testing.assert_array_equal(out[1]['s'], strided)
    assert out[1]['s'].flags.c_contiguous and out[1]['s'].dtype == np.int64
    np.testing.assert_array_equal(out[1]['small'], small)
    assert out[1]['n'] == 3 and type(out[2]) is np.float16 and out[2] == 2.5
    # zero-copy loads: the array is a view of the frame it came in
    frame = bytearray(frames[1])
    view = loads_frames([frames[0], frame, bytes(frames[2])])[0]
    frame[:4] = np.float32(-1).tobytes()
    assert view[0, 0] == -1


def test_frames_without_big_arrays_are_a_plain_dumps_message():
    dp = [np.arange(5), 'x', {'k': np.bool_(True)}]
    frames = dumps_frames(dp)
    assert frames == [dumps(dp)]
    assert loads_frames(frames)[2]['k'] == np.bool_(True)


@pytest.mark.parametrize('dtype', DTYPES)
def test_frames_round_trip_every_dtype(dtype):
    arr = np.resize(_sample(dtype), (50, 40))
    out = loads_frames(dumps_frames([arr], min_frame_bytes=1))[0]
    assert out.dtype == arr.dtype and out.shape == arr.shape
    np.testing.assert_array_equal(out, arr)


def test_frames_name_what_cannot_be_serialized():
    with pytest.raises(TypeError, match=r"dumps_frames\(\).*Opaque at datapoint\[1\]\['k'\]"):
        dumps_frames([np.zeros(10000), {'k': Opaque()}])
    with pytest.raises(ValueError, match='refers to frame 1 of 1'):
        loads_frames(dumps_frames([np.zeros(10000)])[:1])


def test_dumps_keeps_big_arrays_out_of_the_document():
    big = np.arange(10000, dtype='float64').reshape(100, 100)
    dp = [big, {'half': big[::2].astype('float32'), 'small': np.arange(3)}, 'x']
    buf = dumps(dp)
    assert buf[:4] == b'TPLF' and len(buf) < big.nbytes + big.nbytes // 4 + 1000  # one copy each
    out = loads(buf)
    np.testing.assert_array_equal(out[0], big)
    np.testing.assert_array_equal(out[1]['half'], big[::2].astype('float32'))
    assert out[1]['small'].tolist() == [0, 1, 2] and out[2] == 'x'
    for arr in (out[0], out[1]['half']):  # aligned, read-only views of the message
        assert arr.flags.aligned and not arr.flags.writeable
        assert np.shares_memory(arr, np.frombuffer(buf, np.uint8))
    with pytest.raises(ValueError, match='truncated'):
        loads(buf[:-10])
