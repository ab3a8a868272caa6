"""The local cache of a stream's shards: fetched ahead of use in a thread, bounded in bytes,
each checked against the index's checksum, and removed once read.

The fetching thread takes the shards in the order of their first use and reserves a shard's
full size before it writes a byte of it, so the files in the cache directory never add up to
more than ``limit`` bytes: it waits for the reader to release shards when the next one does not
fit. A storage error other than a missing file is retried with backoff (doubling up to
:attr:`ShardCache.max_backoff` seconds) for ``retry_seconds``, said in one log line when it
starts; a missing shard, a shard whose size or sha256 is not the index's, and a storage still
failing after ``retry_seconds`` raise :class:`~tensorpack_lite.dataflow.shards.format.ShardError`
from :meth:`ShardCache.open`, naming the shard and the cause.
"""

import hashlib
import os
import threading
import time

from ...utils import logger
from ...utils.fs import mkdir_p
from .format import ShardError, ShardFile

__all__ = ['ShardCache']

_CHUNK = 1 << 20


class _Corrupt(Exception):
    """The bytes read are not the index's (a permanent error, not retried)."""


class ShardCache(object):
    """The shards of ``index`` (a parsed index) from ``store`` (a
    :class:`~tensorpack_lite.dataflow.shards.store.ShardStore`) in ``directory``, at most
    ``limit`` bytes of them at a time."""

    first_backoff = 0.2
    """Seconds before the first retry of a failing read."""

    max_backoff = 5.0
    """The longest wait between two retries."""

    def __init__(self, store, index, directory, limit, retry_seconds=120.0):
        self.store, self.entries, self.directory = store, index['shards'], directory
        self.limit, self.retry_seconds = int(limit), float(retry_seconds)
        self._cond = threading.Condition()
        self._ready, self._errors = {}, {}
        self._used = 0
        self.fetched_bytes = 0      # read from the storage, failed reads included
        self._waiting_for = None    # the shard the fetcher waits to have room for
        self._stop = threading.Event()
        self._thread = None
        mkdir_p(directory)
        for name in os.listdir(directory):   # what a killed process left: this cache is the only user
            if name.startswith('shard-'):
                os.remove(os.path.join(directory, name))

    def start(self, shards):
        """Fetch ``shards`` (shard numbers, in the order they will be opened) in a thread."""
        too_big = [s for s in shards if self.entries[s]['bytes'] > self.limit]
        if too_big:
            entry = self.entries[too_big[0]]
            raise ValueError("The cache's limit, {} bytes, is smaller than {} ({} bytes): raise "
                             "cache_bytes".format(self.limit, entry['name'], entry['bytes']))
        self._thread = threading.Thread(target=self._fetch_all, args=(list(shards),),
                                        name='ShardCache fetch', daemon=True)
        self._thread.start()

    def _fetch_all(self, shards):
        for shard in shards:
            size = self.entries[shard]['bytes']
            with self._cond:
                while self._used + size > self.limit and not self._stop.is_set():
                    self._waiting_for = shard
                    self._cond.notify_all()
                    self._cond.wait()
                self._waiting_for = None
                if self._stop.is_set():
                    return
                self._used += size
            try:
                path = self._fetch(shard)
            except ShardError as err:
                with self._cond:
                    self._used -= size
                    self._errors[shard] = err
                    self._cond.notify_all()
                return
            with self._cond:
                self._ready[shard] = path
                self._cond.notify_all()

    def _fetch(self, shard):
        entry = self.entries[shard]
        where = self.store.where(entry['name'])
        delay, deadline, said = self.first_backoff, None, False
        while True:
            try:
                return self._fetch_once(entry)
            except FileNotFoundError as err:
                raise ShardError("{}: missing ({})".format(where, err)) from err
            except _Corrupt as err:
                raise ShardError("{}: corrupt: {}".format(where, err)) from None
            except Exception as err:    # noqa: B902 -- any other storage error is taken as transient
                if self._stop.is_set():
                    raise ShardError("{}: not fetched, the stream stopped".format(where)) from err
                now = time.monotonic()
                deadline = deadline or now + self.retry_seconds
                if now >= deadline:
                    raise ShardError("{}: the storage failed for {:.0f} s: {}: {}".format(
                        where, self.retry_seconds, type(err).__name__, err)) from err
                if not said:
                    logger.warn("Reading {} failed ({}: {}); retrying with backoff for up to {:.0f} s".format(
                        where, type(err).__name__, err, self.retry_seconds))
                    said = True
                self._stop.wait(delay)
                delay = min(delay * 2, self.max_backoff)

    def _fetch_once(self, entry):
        path = os.path.join(self.directory, entry['name'])
        part = path + '.part'
        digest, size = hashlib.sha256(), 0
        try:
            with self.store.open(entry['name']) as src, open(part, 'wb') as dst:
                while not self._stop.is_set():   # a stream closed mid-download stops it
                    chunk = src.read(min(_CHUNK, entry['bytes'] + 1 - size))
                    if not chunk:
                        break
                    size += len(chunk)
                    self.fetched_bytes += len(chunk)
                    if size > entry['bytes']:
                        raise _Corrupt("more than the index's {} bytes".format(entry['bytes']))
                    digest.update(chunk)
                    dst.write(chunk)
            if self._stop.is_set():
                raise InterruptedError("the stream stopped")
            if size != entry['bytes']:
                raise _Corrupt("{} bytes, the index says {}".format(size, entry['bytes']))
            if digest.hexdigest() != entry['sha256']:
                raise _Corrupt("sha256 {}, the index says {}".format(digest.hexdigest(), entry['sha256']))
            os.replace(part, path)
            return path
        finally:
            if os.path.exists(part):
                os.remove(part)

    def open(self, shard):
        """Shard ``shard`` as a :class:`~tensorpack_lite.dataflow.shards.format.ShardFile`, once
        fetched and checked; :class:`~tensorpack_lite.dataflow.shards.format.ShardError` if it
        cannot be."""
        with self._cond:
            while shard not in self._ready:
                if shard in self._errors:
                    raise self._errors[shard]
                if self._waiting_for == shard and self._used + self.entries[shard]['bytes'] > self.limit:
                    raise ShardError(
                        "{}: does not fit in the cache ({} bytes, {} in use by the shards being read): "
                        "raise cache_bytes".format(
                            self.entries[shard]['name'], self.limit, self._used))
                if not self._thread.is_alive():
                    raise ShardError("{}: not fetched (the cache's thread ended)".format(
                        self.entries[shard]['name']))
                self._cond.wait()
            path = self._ready[shard]
        return ShardFile(open(path, 'rb'), self.store.where(self.entries[shard]['name']))

    def release(self, shard):
        """Remove shard ``shard``, read: its room goes to the next ones."""
        with self._cond:
            path = self._ready.pop(shard)
            os.remove(path)
            self._used -= self.entries[shard]['bytes']
            self._cond.notify_all()

    def stop(self):
        """Stop fetching and remove every file of the cache."""
        self._stop.set()
        with self._cond:
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join()
        for shard in list(self._ready):
            self.release(shard)
