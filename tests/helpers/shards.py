"""Sharded datasets for the tests of ``tensorpack_lite.dataflow.shards``: numbered datapoints
written to a directory or a bucket, what a stream yields, and the bytes of a cache directory."""

import os

import numpy as np

from tensorpack_lite.dataflow import DataFromList, save_shards

__all__ = ['numbered', 'write_numbered', 'numbers', 'directory_bytes']


def numbered(count):
    """A DataFlow of ``count`` datapoints ``[i, array of i % 7 + 1 float32 values i]``, in order."""
    return DataFromList([[i, np.full(i % 7 + 1, i, dtype='float32')] for i in range(count)], shuffle=False)


def write_numbered(url, count, shard_bytes=400, storage_options=None):
    """:func:`numbered` of ``count`` written to ``url``; its index."""
    return save_shards(numbered(count), url, shard_bytes=shard_bytes, storage_options=storage_options)


def numbers(datapoints):
    """The numbers of :func:`numbered` datapoints, checking each one's array."""
    out = []
    for number, values in datapoints:
        assert values.tolist() == [float(number)] * (number % 7 + 1), (number, values)
        out.append(int(number))
    return out


def directory_bytes(path):
    """Bytes of the files under ``path`` (0 if it does not exist)."""
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files)
