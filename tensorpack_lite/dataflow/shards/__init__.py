"""Sharded datasets on a local disk or object storage, streamed by each worker (its share only),
in one global order per (seed, epoch) whatever the number of workers, resumed at the sample.

Example::

    from tensorpack_lite.dataflow import ShardedData, save_shards

    save_shards(my_dataflow, 's3://bucket/digits', shard_bytes=64 << 20)
    df = ShardedData('s3://bucket/digits', rank=k, world=n, seed=0, cache_bytes=4 << 30)

See docs/dataflow.md, "Sharded datasets on object storage".
"""

from .format import ShardError
from .order import GlobalOrder
from .stream import ShardedData
from .writer import save_shards

__all__ = ['save_shards', 'ShardedData', 'GlobalOrder', 'ShardError']
