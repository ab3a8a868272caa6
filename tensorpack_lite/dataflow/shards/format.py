"""The files of a sharded dataset: numbered shard files and the index that lists them.

A shard file holds serialized datapoints (:func:`~tensorpack_lite.utils.serialize.dumps`),
each after its length, then a table of where each record starts, then a footer::

    record 0: uint64 length, bytes
    record 1: uint64 length, bytes
    ...
    table:  uint64 offset of each record (count of them)
    footer: b'TPLS', uint32 format version, uint64 count, uint64 offset of the table

so a record is read without reading the ones before it (:class:`ShardFile`). All numbers are
little-endian. The index, ``index.json``, is written last (a dataset without it is incomplete)::

    {"format": "tensorpack_lite.shards", "version": 1, "total": 1797,
     "shards": [{"name": "shard-00000.tpls", "count": 1000, "bytes": 8652312,
                 "sha256": "..."}, ...]}
"""

import hashlib
import json
import struct

__all__ = ['FORMAT', 'VERSION', 'INDEX_NAME', 'shard_name', 'encode_shard', 'ShardFile',
           'shard_entry', 'make_index', 'parse_index', 'index_bytes', 'ShardError']

FORMAT = 'tensorpack_lite.shards'
"""The ``format`` field of an index."""

VERSION = 1
"""The version of the shard and index layout this code writes and reads."""

INDEX_NAME = 'index.json'
"""The name of the index file in a dataset's directory."""

_MAGIC = b'TPLS'
_LENGTH = struct.Struct('<Q')
_FOOTER = struct.Struct('<4sIQQ')  # magic, version, count, offset of the table


class ShardError(RuntimeError):
    """A shard cannot be used (missing, corrupt, or storage unreachable for too long); the
    message names the shard and the cause."""


def shard_name(number):
    """The file name of shard ``number``: ``shard-00042.tpls``."""
    return 'shard-{:05d}.tpls'.format(number)


def encode_shard(records):
    """The bytes of a shard file holding ``records`` (a list of ``bytes``)."""
    parts, offsets, offset = [], [], 0
    for record in records:
        offsets.append(offset)
        parts.append(_LENGTH.pack(len(record)))
        parts.append(record)
        offset += _LENGTH.size + len(record)
    parts.append(struct.pack('<{}Q'.format(len(offsets)), *offsets))
    parts.append(_FOOTER.pack(_MAGIC, VERSION, len(offsets), offset))
    return b''.join(parts)


class ShardFile(object):
    """A shard file open for reading records by their number (``f`` is a binary file object
    with ``seek``; ``name`` is for messages)."""

    def __init__(self, f, name):
        self.f, self.name = f, name
        f.seek(0, 2)
        size = f.tell()
        if size < _FOOTER.size:
            raise ShardError("{}: not a shard file ({} bytes)".format(name, size))
        f.seek(size - _FOOTER.size)
        magic, version, count, table = _FOOTER.unpack(f.read(_FOOTER.size))
        if magic != _MAGIC or version != VERSION or table + 8 * count + _FOOTER.size != size:
            raise ShardError("{}: not a shard file of version {} (footer {!r}, version {})".format(
                name, VERSION, magic, version))
        f.seek(table)
        self.offsets = struct.unpack('<{}Q'.format(count), f.read(8 * count))

    def __len__(self):
        return len(self.offsets)

    def record(self, i):
        """The bytes of record ``i``."""
        self.f.seek(self.offsets[i])
        (length,) = _LENGTH.unpack(self.f.read(_LENGTH.size))
        return self.f.read(length)

    def close(self):
        self.f.close()


def shard_entry(name, count, data):
    """The index's entry of the shard file ``name`` of ``count`` records and bytes ``data``."""
    return {'name': name, 'count': int(count), 'bytes': len(data), 'sha256': hashlib.sha256(data).hexdigest()}


def make_index(entries):
    """The index of the shards of ``entries`` (values of :func:`shard_entry`, in order)."""
    return {'format': FORMAT, 'version': VERSION, 'total': sum(e['count'] for e in entries),
            'shards': entries}


def index_bytes(index):
    """The bytes of ``index`` as stored in ``index.json``."""
    return (json.dumps(index, indent=1, sort_keys=True) + '\n').encode('utf-8')


def parse_index(data, where):
    """The index in ``data`` (the bytes of ``index.json``), checked; ``where`` names it in errors."""
    try:
        index = json.loads(data.decode('utf-8'))
        ok = (index.get('format') == FORMAT and isinstance(index.get('shards'), list)
              and index['total'] == sum(int(e['count']) for e in index['shards']))
    except (ValueError, KeyError, TypeError, AttributeError) as err:
        raise ShardError("{}: not an index of shards ({})".format(where, err)) from None
    if not ok:
        raise ShardError("{}: not an index of shards (format {!r}, or its total is not the sum of its "
                         "counts)".format(where, index.get('format')))
    if index.get('version') != VERSION:
        raise ShardError("{}: index version {!r}; this library reads version {}".format(
            where, index.get('version'), VERSION))
    return index
