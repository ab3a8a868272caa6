"""Serialize datapoints to bytes with msgpack, numpy arrays included.

:func:`dumps` accepts what msgpack packs natively (None, bool, int, float, str, bytes, lists,
tuples, dicts) plus numpy arrays and numpy scalars, nested in any way. An array travels as a
msgpack extension holding its dtype, its shape and its raw bytes, so any non-object dtype
(bool, float16, int64, complex, fixed-width strings...) round-trips exactly.

:func:`loads` does not copy array data: each array is a read-only view
(``np.frombuffer``) of the bytes msgpack extracted for it. Call ``.copy()`` to get a writable
array. Tuples come back as lists, as usual with msgpack.

Example::

    buf = dumps([np.arange(6, dtype='int64').reshape(2, 3), {'label': np.float32(1.5)}])
    image, extra = loads(buf)   # image: int64 (2, 3), read-only; extra['label']: np.float32
"""

import struct

import msgpack
import numpy as np

__all__ = ['dumps', 'loads']

_EXT_ARRAY = 1
_EXT_SCALAR = 2
_PREFIX = struct.Struct('<II')  # length of the msgpack header, offset of the array data
_DATA_ALIGNMENT = 16

_NATIVE_LEAVES = (type(None), bool, int, float, str, bytes, bytearray, memoryview)


def _check_dtype(dtype, what):
    if dtype.hasobject or dtype.fields is not None:
        raise TypeError("Cannot serialize {} of dtype {}: only plain (non-object, non-structured) "
                        "dtypes are supported".format(what, dtype))


def _pack_array(arr, code):
    header = msgpack.packb([arr.dtype.str, list(arr.shape)])
    offset = _PREFIX.size + len(header)
    padding = -offset % _DATA_ALIGNMENT  # keep the data aligned for the view made by loads()
    return msgpack.ExtType(code, _PREFIX.pack(len(header), offset + padding) + header
                           + b'\0' * padding + np.ascontiguousarray(arr).tobytes())


def _encode(obj):
    """msgpack's ``default`` hook: numpy arrays and scalars become extensions."""
    if isinstance(obj, np.ndarray):
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


def dumps(obj):
    """Serialize ``obj`` (nested lists/tuples/dicts of msgpack-native values, numpy arrays and
    numpy scalars) to bytes.

    Raises:
        TypeError: naming the type and the position (e.g. ``datapoint[1]['mask']``) of the
            first component that cannot be serialized.
    """
    try:
        return msgpack.packb(obj, default=_encode, use_bin_type=True, strict_types=True)
    except TypeError:
        found = _find_unserializable(obj, 'datapoint')
        if found is None:
            raise
        path, culprit = found
        if isinstance(culprit, (np.ndarray, np.generic)):
            raise TypeError("dumps(): cannot serialize the {} of dtype {} at {}: only plain "
                            "(non-object, non-structured) dtypes are supported".format(
                                type(culprit).__name__, culprit.dtype, path)) from None
        raise TypeError("dumps(): cannot serialize an object of type {} at {}".format(
            type(culprit).__name__, path)) from None


def loads(buf):
    """Rebuild the object serialized by :func:`dumps` from ``buf`` (bytes, bytearray,
    memoryview or anything with the buffer protocol, e.g. a ``zmq.Frame.buffer``).

    Arrays are read-only views of the data msgpack extracted (no further copy)."""
    return msgpack.unpackb(buf, raw=False, ext_hook=_decode, strict_map_key=False)
