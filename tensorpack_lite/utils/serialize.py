"""Serialize datapoints to bytes with msgpack, numpy arrays included.

:func:`dumps` accepts what msgpack packs natively (None, bool, int, float, str, bytes, lists,
tuples, dicts) plus numpy arrays and numpy scalars, nested in any way. An array travels as a
msgpack extension holding its dtype, its shape and its raw bytes, so any non-object dtype
(bool, float16, int64, complex, fixed-width strings...) round-trips exactly. Object arrays
whose elements are all ``bytes`` (what TensorFlow returns for string tensors) or all ``str``
round-trip too; other object arrays and structured dtypes are refused.

:func:`loads` does not copy array data: each array is a read-only view
(``np.frombuffer``) of the bytes msgpack extracted for it. Call ``.copy()`` to get a writable
array. Tuples come back as lists, as usual with msgpack.

Example::

    buf = dumps([np.arange(6, dtype='int64').reshape(2, 3), {'label': np.float32(1.5)}])
    image, extra = loads(buf)   # image: int64 (2, 3), read-only; extra['label']: np.float32

:func:`dumps_frames` / :func:`loads_frames` are the multi-part form used between processes
(e.g. ``zmq`` ``send_multipart(frames, copy=False)``): big arrays are not copied into the
message but travel as separate frames that point at the arrays' own memory.
"""

import struct

import msgpack
import numpy as np

__all__ = ['dumps', 'loads', 'dumps_frames', 'loads_frames']

_EXT_ARRAY = 1
_EXT_SCALAR = 2
_EXT_FRAME = 3  # an array whose data is in a separate frame (dumps_frames)
_EXT_STRINGS = 4  # an object array of bytes or of str
_PREFIX = struct.Struct('<II')  # length of the msgpack header, offset of the array data
_DATA_ALIGNMENT = 16

_NATIVE_LEAVES = (type(None), bool, int, float, str, bytes, bytearray, memoryview)


def _check_dtype(dtype, what):
    if dtype.hasobject or dtype.fields is not None:
        raise TypeError("Cannot serialize {} of dtype {}: only plain (non-object, non-structured) "
                        "dtypes are supported".format(what, dtype))


def _is_string_array(arr):
    """Whether ``arr`` is an object array of only bytes or only str (possibly empty)."""
    if arr.dtype != np.object_:
        return False
    kinds = {type(x) for x in arr.flat}
    return kinds in ({bytes}, {str}, set())


def _pack_strings(arr):
    return msgpack.ExtType(_EXT_STRINGS, msgpack.packb([list(arr.shape), arr.ravel().tolist()],
                                                       use_bin_type=True))


def _unpack_strings(data):
    shape, items = msgpack.unpackb(data, raw=False)
    arr = np.empty(len(items), dtype=object)
    arr[:] = items
    return arr.reshape(shape)


def _pack_array(arr, code):
    header = msgpack.packb([arr.dtype.str, list(arr.shape)])
    offset = _PREFIX.size + len(header)
    padding = -offset % _DATA_ALIGNMENT  # keep the data aligned for the view made by loads()
    return msgpack.ExtType(code, _PREFIX.pack(len(header), offset + padding) + header
                           + b'\0' * padding + np.ascontiguousarray(arr).tobytes())


def _encode(obj):
    """msgpack's ``default`` hook: numpy arrays and scalars become extensions."""
    if isinstance(obj, np.ndarray):
        if _is_string_array(obj):
            return _pack_strings(obj)
        _check_dtype(obj.dtype, 'a numpy array')
        return _pack_array(obj, _EXT_ARRAY)
    if isinstance(obj, np.generic):
        _check_dtype(obj.dtype, 'a numpy scalar')
        return _pack_array(np.asarray(obj), _EXT_SCALAR)
    # Packing with strict_types (so that np.float64, a float subclass, stays a numpy scalar)
    # sends tuples and subclasses of the native types here.
    for base in (list, tuple, dict, str, bytes, bool, int, float):
        if isinstance(obj, base):
            return list(obj) if isinstance(obj, tuple) else base(obj)
    raise TypeError("Cannot serialize an object of type {}".format(type(obj).__name__))


def _decode(code, data):
    """msgpack's ``ext_hook``: rebuild arrays (views of ``data``) and scalars."""
    if code == _EXT_STRINGS:
        return _unpack_strings(data)
    if code not in (_EXT_ARRAY, _EXT_SCALAR):
        return msgpack.ExtType(code, data)
    view = memoryview(data)
    header_len, start = _PREFIX.unpack_from(view)
    dtype_str, shape = msgpack.unpackb(view[_PREFIX.size:_PREFIX.size + header_len])
    dtype = np.dtype(dtype_str)
    if dtype.itemsize == 0:  # e.g. '<U0': frombuffer refuses it, and there is no data anyway
        arr = np.zeros(shape, dtype=dtype)
        arr.flags.writeable = False
    else:
        arr = np.frombuffer(view[start:], dtype=dtype).reshape(shape)
    return arr[()] if code == _EXT_SCALAR else arr


def _find_unserializable(obj, path):
    """The (path, object) of the first component :func:`dumps` cannot handle, or None."""
    if isinstance(obj, _NATIVE_LEAVES):
        return None
    if isinstance(obj, np.ndarray) and _is_string_array(obj):
        return None
    if isinstance(obj, (np.ndarray, np.generic)):
        return (path, obj) if obj.dtype.hasobject or obj.dtype.fields is not None else None
    if isinstance(obj, (list, tuple)):
        for index, item in enumerate(obj):
            found = _find_unserializable(item, '{}[{}]'.format(path, index))
            if found is not None:
                return found
        return None
    if isinstance(obj, dict):
        for key, value in obj.items():
            found = (_find_unserializable(key, '{} (key {!r})'.format(path, key))
                     or _find_unserializable(value, '{}[{!r}]'.format(path, key)))
            if found is not None:
                return found
        return None
    return path, obj


def _packb(obj, encode, caller):
    try:
        return msgpack.packb(obj, default=encode, use_bin_type=True, strict_types=True)
    except TypeError:
        found = _find_unserializable(obj, 'datapoint')
        if found is None:
            raise
        path, culprit = found
        if isinstance(culprit, (np.ndarray, np.generic)):
            raise TypeError("{}(): cannot serialize the {} of dtype {} at {}: only plain "
                            "(non-object, non-structured) dtypes and object arrays of only "
                            "bytes or only str are supported".format(
                                caller, type(culprit).__name__, culprit.dtype, path)) from None
        raise TypeError("{}(): cannot serialize an object of type {} at {}".format(
            caller, type(culprit).__name__, path)) from None


def dumps(obj):
    """Serialize ``obj`` (nested lists/tuples/dicts of msgpack-native values, numpy arrays and
    numpy scalars) to bytes.

    Raises:
        TypeError: naming the type and the position (e.g. ``datapoint[1]['mask']``) of the
            first component that cannot be serialized.
    """
    return _packb(obj, _encode, 'dumps')


MIN_FRAME_BYTES = 16384
"""Arrays of at least this many bytes get their own frame in :func:`dumps_frames`."""


def dumps_frames(obj, min_frame_bytes=MIN_FRAME_BYTES):
    """Serialize ``obj`` like :func:`dumps`, without copying big arrays.

    Returns:
        list: ``[header, data, data, ...]``: ``header`` is bytes; each ``data`` is a
        ``memoryview`` of a C-contiguous array of ``obj`` holding at least
        ``min_frame_bytes`` bytes (a non-contiguous array is copied once). The views share
        memory with ``obj``: do not modify its arrays until the frames have been sent.

    Raises:
        TypeError: as :func:`dumps`.

    Example::

        sock.send_multipart(dumps_frames(dp), copy=False)
        dp = loads_frames(sock.recv_multipart(copy=False))
    """
    frames = [None]

    def encode(value):
        if (isinstance(value, np.ndarray) and value.nbytes >= min_frame_bytes
                and not value.dtype.hasobject):
            _check_dtype(value.dtype, 'a numpy array')
            data = np.ascontiguousarray(value)
            frames.append(memoryview(data.reshape(-1).view(np.uint8)))
            return msgpack.ExtType(_EXT_FRAME, msgpack.packb(
                [data.dtype.str, list(data.shape), len(frames) - 1]))
        return _encode(value)

    frames[0] = _packb(obj, encode, 'dumps_frames')
    return frames


def _frame_buffer(frame):
    buf = getattr(frame, 'buffer', frame)  # a zmq.Frame exposes its memory as .buffer
    return memoryview(buf)


def loads_frames(frames):
    """Rebuild the object serialized by :func:`dumps_frames` from its frames (bytes,
    memoryviews or ``zmq.Frame`` s). Arrays are read-only views of the frames (no copy)."""
    if not frames:
        raise ValueError("loads_frames() needs at least the header frame")

    def decode(code, data):
        if code != _EXT_FRAME:
            return _decode(code, data)
        dtype_str, shape, index = msgpack.unpackb(data)
        if not 0 < index < len(frames):
            raise ValueError("loads_frames(): the header refers to frame {} of {}".format(
                index, len(frames)))
        return np.frombuffer(_frame_buffer(frames[index]), dtype=np.dtype(dtype_str)).reshape(shape)

    return msgpack.unpackb(_frame_buffer(frames[0]), raw=False, ext_hook=decode,
                           strict_map_key=False)


def loads(buf):
    """Rebuild the object serialized by :func:`dumps` from ``buf`` (bytes, bytearray,
    memoryview or anything with the buffer protocol, e.g. a ``zmq.Frame.buffer``).

    Arrays are read-only views of the data msgpack extracted (no further copy)."""
    return msgpack.unpackb(buf, raw=False, ext_hook=_decode, strict_map_key=False)
