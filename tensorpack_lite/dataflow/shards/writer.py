"""Writing a DataFlow as a sharded dataset (:func:`save_shards`)."""

from ...utils import logger
from ...utils.serialize import dumps
from ..base import DataFlow
from .format import INDEX_NAME, encode_shard, index_bytes, make_index, shard_entry, shard_name
from .store import ShardStore

__all__ = ['save_shards']


def save_shards(df, url, shard_bytes=64 << 20, storage_options=None):
    """Write one epoch of ``df`` (reset first) to ``url``, a directory or an ``s3://``/``gs://``
    URL, as numbered shard files of about ``shard_bytes`` each (a shard is closed once it holds
    ``shard_bytes`` or more) and the index, and return the index (a dict, see
    :mod:`~tensorpack_lite.dataflow.shards.format`).

    An index already at ``url`` is removed first and the new one is written last, once every
    shard is in place: a dataset whose writing was interrupted has no index and is never taken
    for a complete one. Shard files of an earlier, larger dataset beyond the new count are left.
    """
    if not isinstance(df, DataFlow):
        raise TypeError("save_shards() takes a DataFlow, got {!r}".format(df))
    if int(shard_bytes) < 1:
        raise ValueError("save_shards(): shard_bytes must be >= 1, got {}".format(shard_bytes))
    store = ShardStore(url, storage_options)
    store.remove(INDEX_NAME)
    written, records, size = [], [], 0

    def flush():
        name = shard_name(len(written))
        data = encode_shard(records)
        store.write(name, data)
        written.append(shard_entry(name, len(records), data))
        logger.debug("save_shards: {} ({} datapoints, {} bytes)".format(store.where(name), len(records),
                                                                        len(data)))

    df.reset_state()
    for number, dp in enumerate(df):
        try:
            record = dumps(dp)
        except TypeError as err:
            raise TypeError("save_shards(): datapoint #{}: {}".format(number, err)) from None
        records.append(record)
        size += len(record)
        if size >= shard_bytes:
            flush()
            records, size = [], 0
    if records or not written:
        flush()
    index = make_index(written)
    store.write(INDEX_NAME, index_bytes(index))
    logger.info("save_shards: {} datapoints in {} shards at {}".format(index['total'], len(written), url))
    return index
