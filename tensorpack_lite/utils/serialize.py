"""Serialize datapoints to bytes with msgpack, numpy arrays included.

:func:`dumps` accepts what msgpack packs natively (None, bool, int, float, str, bytes, lists,
tuples, dicts) plus numpy arrays and numpy scalars, nested in any way. An array travels with
its dtype, its shape and its raw bytes, so any non-object dtype (bool, float16, int64,
complex, fixed-width strings...) round-trips exactly. Object arrays whose elements are all
``bytes`` (what TensorFlow returns for string tensors) or all ``str`` round-trip too; other
object arrays and structured dtypes are refused.

The format: a small array is a msgpack extension inside the msgpack document. Arrays of
:data:`MIN_FRAME_BYTES` or more are stored after the document instead (copied once, 16-byte
aligned) and the document refers to them; such a message starts with ``b'TPLF'``, a uint32
count of arrays and a uint64 length of the document, followed by the document, one
(offset, length) uint64 pair per array, and the arrays' bytes. A message without big arrays
is a plain msgpack document.

:func:`loads` does not copy array data: each array is a view (``np.frombuffer``) of the
message (read-only when the message is ``bytes``) or of the bytes msgpack extracted for a
small array. Call ``.copy()`` to get an array of its own. Tuples come back as lists, as
usual with msgpack.

Example::

    buf = dumps([np.arange(6, dtype='int64').reshape(2, 3), {'label': np.float32(1.5)}])
    image, extra = loads(buf)   # image: int64 (2, 3), read-only; extra['label']: np.float32

:func:`dumps_frames` / :func:`loads_frames` are the multi-part form used between processes
(e.g. ``zmq`` ``send_multipart(frames, copy=False)``): big arrays are not copied at all but
travel as separate frames that point at the arrays' own memory.
"""

import struct

import msgpack
import numpy as np

__all__ = ['dumps', 'loads', 'dumps_frames', 'loads_frames', 'is_string_array']

_EXT_ARRAY = 1
_EXT_SCALAR = 2
_EXT_FRAME = 3  # an array whose data is in a separate frame (dumps_frames)
_EXT_STRINGS = 4  # an object array of bytes or of str
_PREFIX = struct.Struct('<II')  # length of the msgpack header, offset of the array data
_DATA_ALIGNMENT = 16
_CONTAINER_MAGIC = b'TPLF'
_CONTAINER = struct.Struct('<4sIQ')  # magic, number of big arrays, length of the msgpack document

_NATIVE_LEAVES = (type(None), bool, int, float, str, bytes, bytearray, memoryview)


def _check_dtype(dtype, what):
    if dtype.hasobject or dtype.fields is not None:
        raise TypeError("Cannot serialize {} of dtype {}: only plain (non-object, non-structured) "
                        "dtypes are supported".format(what, dtype))


def is_string_array(arr):
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
        if is_string_array(obj):
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


def _received_dtype(dtype_str):
    """The plain dtype named by a message; anything else (an object or structured dtype,
    which could only be filled by unpickling, or not a dtype string) is a ValueError."""
    if not isinstance(dtype_str, str):
        raise ValueError("loads(): a message declares dtype {!r}; only plain dtype strings "
                         "are accepted".format(dtype_str))
    try:
        dtype = np.dtype(dtype_str)
    except TypeError as err:
        raise ValueError("loads(): a message declares an unknown dtype {!r}".format(dtype_str)) from err
    if dtype.hasobject or dtype.fields is not None:
        raise ValueError("loads(): a message declares dtype {}; object and structured arrays "
                         "are refused (they would need unpickling)".format(dtype))
    return dtype


def _decode(code, data):
    """msgpack's ``ext_hook``: rebuild arrays (views of ``data``) and scalars."""
    if code == _EXT_STRINGS:
        return _unpack_strings(data)
    if code not in (_EXT_ARRAY, _EXT_SCALAR):
        return msgpack.ExtType(code, data)
    view = memoryview(data)
    header_len, start = _PREFIX.unpack_from(view)
    dtype_str, shape = msgpack.unpackb(view[_PREFIX.size:_PREFIX.size + header_len])
    dtype = _received_dtype(dtype_str)
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
    if isinstance(obj, np.ndarray) and is_string_array(obj):
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
    frames = _dumps_frames(obj, MIN_FRAME_BYTES, 'dumps')
    if len(frames) == 1:
        return frames[0]
    header, count = frames[0], len(frames) - 1
    position = _CONTAINER.size + len(header) + 16 * count
    pieces, table = [], []
    for frame in frames[1:]:
        padding = -position % _DATA_ALIGNMENT  # keep the data aligned for the view made by loads()
        pieces += [b'\0' * padding, frame]
        table += [position + padding, frame.nbytes]
        position += padding + frame.nbytes
    return b''.join([_CONTAINER.pack(_CONTAINER_MAGIC, count, len(header)), header,
                     struct.pack('<{}Q'.format(2 * count), *table)] + pieces)


def loads(buf):
    """Rebuild the object serialized by :func:`dumps` from ``buf`` (bytes, bytearray,
    memoryview or anything with the buffer protocol, e.g. a ``zmq.Frame.buffer``).

    Arrays are views of ``buf`` or of the bytes msgpack extracted (no further copy)."""
    return loads_frames(_split_container(memoryview(buf).cast('B')))


def _split_container(view):
    """The frames of a message made by :func:`dumps` (one frame if it is plain msgpack)."""
    if view.nbytes < _CONTAINER.size or view[:4] != _CONTAINER_MAGIC:
        return [view]
    _, count, header_len = _CONTAINER.unpack_from(view)
    table_start = _CONTAINER.size + header_len
    if table_start + 16 * count > view.nbytes:
        raise ValueError("loads(): truncated message ({} bytes)".format(view.nbytes))
    table = struct.unpack_from('<{}Q'.format(2 * count), view, table_start)
    frames = [view[_CONTAINER.size:table_start]]
    for start, length in zip(table[::2], table[1::2]):
        if start + length > view.nbytes:
            raise ValueError("loads(): truncated message ({} bytes)".format(view.nbytes))
        frames.append(view[start:start + length])
    return frames


MIN_FRAME_BYTES = 16384
"""Arrays of at least this many bytes are not packed into the msgpack document but carried
as separate frames (:func:`dumps_frames`) or after the document (:func:`dumps`)."""


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
    return _dumps_frames(obj, min_frame_bytes, 'dumps_frames')


def _dumps_frames(obj, min_frame_bytes, caller):
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

    frames[0] = _packb(obj, encode, caller)
    return frames


def _frame_buffer(frame):
    buf = getattr(frame, 'buffer', frame)  # a zmq.Frame exposes its memory as .buffer
    return memoryview(buf)


def loads_frames(frames):
    """Rebuild the object serialized by :func:`dumps_frames` from its frames (bytes,
    memoryviews or ``zmq.Frame`` s). Arrays are views of the frames (no copy): writable if
    the frames are (zmq frames are), read-only otherwise."""
    if not frames:
        raise ValueError("loads_frames() needs at least the header frame")

    def decode(code, data):
        if code != _EXT_FRAME:
            return _decode(code, data)
        dtype_str, shape, index = msgpack.unpackb(data)
        if not 0 < index < len(frames):
            raise ValueError("loads_frames(): the header refers to frame {} of {}".format(
                index, len(frames)))
        return np.frombuffer(_frame_buffer(frames[index]), dtype=_received_dtype(dtype_str)).reshape(shape)

    return msgpack.unpackb(_frame_buffer(frames[0]), raw=False, ext_hook=decode,
                           strict_map_key=False)
