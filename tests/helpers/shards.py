"""Sharded datasets for the tests of ``tensorpack_lite.dataflow.shards``: numbered datapoints
written to a directory or a bucket, what a stream yields, and the bytes of a cache directory;
and for the training scripts that train from shards (distributed_scripts/, horovod_scripts/):
the samples with their ids, the ids each step trained on, and where each step's are in the
global order."""

import json
import os

import numpy as np

from tensorpack_lite.callbacks import Callback
from tensorpack_lite.compat import tf
from tensorpack_lite.dataflow import DataFromList, save_shards
from tensorpack_lite.dataflow.shards.order import GlobalOrder

__all__ = ['numbered', 'write_numbered', 'numbers', 'directory_bytes', 'SHARD_OPTIONS', 'with_ids',
           'SampleIdsInput', 'RecordIds', 'trained_ids', 'step_places']

SHARD_OPTIONS = dict(seed=3, window=16, lanes=12, cache_bytes=1 << 20)
"""The ShardedData of the training scripts' ``--data shards:URL`` (12 lanes: 2 and 3 workers
read whole lanes)."""


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
    """Bytes of the files under ``path`` (0 if it does not exist), as a cache that renames and
    removes its files meanwhile leaves them (a file gone before it is measured counts 0)."""
    total = 0
    for directory, _, files in os.walk(path):
        for name in files:
            try:
                total += os.path.getsize(os.path.join(directory, name))
            except FileNotFoundError:
                pass
    return total


def with_ids(samples):
    """``[x, y]`` samples as ``[x, y, id]``, the id its place in ``samples``: what a training
    script's ``--data shards:URL`` reads."""
    return [[x, y, i] for i, (x, y) in enumerate(samples)]


class SampleIdsInput:
    """Put before a ModelDesc of inputs ``(x, y)`` in a subclass's bases: a third input, each
    datapoint's id, named ``sample_ids`` in the graph (:class:`RecordIds` fetches it)."""

    def inputs(self):
        return super().inputs() + [tf.TensorSpec([None], tf.int32, 'id')]

    def build_graph(self, x, y, ids):
        tf.identity(ids, name='sample_ids')
        return super().build_graph(x, y)


class RecordIds(Callback):
    """On every process: appends ``{"step", "ids", "world"}`` (the global step after the step, the
    ids it trained on, the number of processes) to the file ``path`` after each step."""

    _chief_only = False

    def __init__(self, path):
        self.path, self._ids = path, None

    def _setup_graph(self):
        self._tensor = self.get_tensors_maybe_in_tower(['sample_ids'])[0]

    def _before_run(self, ctx):
        return [self._tensor]

    def _after_run(self, ctx, values):
        self._ids = values.results[0].tolist()

    def _trigger_step(self):
        with open(self.path, 'a') as f:
            record = {'step': self.global_step, 'ids': self._ids, 'world': self.trainer.protocol.size}
            f.write(json.dumps(record) + '\n')


def trained_ids(paths):
    """``{global step: {process: its ids}}`` from the files of :class:`RecordIds` of a job's
    processes (``paths``, process 0's first): the last run of each step (a restart runs again
    those after its checkpoint, maybe with fewer processes: those process 0 ran it with)."""
    records = []
    for path in paths:
        last = {}
        with open(str(path)) as f:
            for line in f:
                try:
                    record = json.loads(line)
                except ValueError:       # the line of a process ended while it wrote it
                    continue
                last[record['step']] = record
        records.append(last)
    return {step: {k: records[k][step]['ids'] for k in range(chief['world'])}
            for step, chief in records[0].items()}


def step_places(index, steps_per_epoch, batch):
    """``places(step)``: the ids at the places of the global order (of :data:`SHARD_OPTIONS`) that
    global step ``step`` (from 1) consumes, ``batch`` of them, in a run of ``steps_per_epoch``
    steps per epoch over the dataset of ``index``."""
    order = GlobalOrder([e['count'] for e in index['shards']],
                        **{key: SHARD_OPTIONS[key] for key in ('seed', 'window', 'lanes')})

    def places(step):
        epoch, local = divmod(step - 1, steps_per_epoch)
        return order.epoch(epoch)[local * batch:(local + 1) * batch]
    return places
