"""Where a sharded dataset's files live: a local directory or a URL of object storage
(``s3://bucket/data``, ``gs://bucket/data``, through fsspec as checkpoints are), read and
written by file name."""

import os

from ...utils.fs import mkdir_p, write_atomically
from ...utils.object_store import is_remote_url, remote_filesystem

__all__ = ['ShardStore']


class ShardStore(object):
    """The files of the dataset at ``url`` (a directory or an object-storage URL);
    ``storage_options`` go to fsspec (e.g. ``{'endpoint_url': ...}``)."""

    def __init__(self, url, storage_options=None):
        self.url = os.fspath(url)
        self.remote = is_remote_url(self.url)
        self.storage_options = storage_options
        self._fs = None

    def __getstate__(self):   # a file system is made again where it is used (another process)
        state = dict(self.__dict__)
        state['_fs'] = None
        return state

    def _remote(self):
        if self._fs is None:
            self._fs, self._root = remote_filesystem(self.url, self.storage_options)
        return self._fs

    def where(self, name):
        """The URL or path of the file ``name``."""
        return '{}/{}'.format(self.url.rstrip('/'), name) if self.remote else os.path.join(self.url, name)

    def open(self, name):
        """``name`` opened for reading bytes (FileNotFoundError when it is not there)."""
        if not self.remote:
            return open(self.where(name), 'rb')
        fs = self._remote()
        return fs.open('{}/{}'.format(self._root, name), 'rb')

    def read(self, name):
        """The bytes of ``name``."""
        with self.open(name) as f:
            return f.read()

    def write(self, name, data):
        """Write ``data`` as ``name``: a local file is written aside and renamed, an object is
        written in one request, so a reader never sees part of it."""
        if not self.remote:
            mkdir_p(self.url)
            write_atomically(self.where(name), lambda f: f.write(data))
            return
        fs = self._remote()
        fs.pipe_file('{}/{}'.format(self._root, name), data)

    def remove(self, name):
        """Remove ``name`` if it is there."""
        try:
            if not self.remote:
                os.remove(self.where(name))
            else:
                self._remote().rm_file('{}/{}'.format(self._root, name))
        except FileNotFoundError:
            pass
