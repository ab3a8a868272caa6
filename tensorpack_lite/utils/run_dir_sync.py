"""A run's directory on object storage (``s3://bucket/run``, ``gs://bucket/run``) and its local
mirror: the run writes in the mirror (:func:`~tensorpack_lite.utils.object_store.local_mirror_dir`)
and :class:`RunDirectorySync` moves its files (``stats.json``, event files, ``log.log``,
``graph-*.meta``...) to the URL. fsspec is imported on first use.

The checkpoints of such a directory, which need an order of uploads and a commit marker, are
:class:`~tensorpack_lite.checkpoint.remote.RemoteMirror`'s, which extends this class.

Example::

    sync = RunDirectorySync('s3://bucket/run')   # local: ~/.cache/tensorpack_lite/remote/s3/bucket/run
    ...                                          # the run writes in sync.local_dir
    sync.push_files_in_background()              # at an epoch's end
    sync.finish()                                # when training ends
"""

import json
import os
import re
import threading

from . import logger
from .fs import write_atomically
from .object_store import is_remote_url, local_mirror_dir, remote_filesystem

__all__ = ['RunDirectorySync', 'is_transient_file', 'SYNC_RECORD']

SYNC_RECORD = '.remote-sync.json'
"""The file of a mirror directory that keeps what is known equal on both sides."""

_NOT_PULLED = re.compile(r'^(events\.out\.tfevents\..*|log\.log.*|graph-.*\.meta)$')


def is_transient_file(name):
    """Whether file ``name`` of a run directory is never moved: a hidden file, or the temporary of
    an atomic write (``*.tmp``)."""
    return name.startswith('.') or name.endswith('.tmp')


def _version(entry):
    """What changes when a remote object is rewritten: its size and ETag (or generation, md5...)."""
    for key in ('ETag', 'etag', 'md5Hash', 'generation', 'mtime', 'LastModified', 'updated'):
        if entry.get(key) is not None:
            return [int(entry.get('size') or 0), str(entry[key])]
    return [int(entry.get('size') or 0), None]


def _signature(path):
    info = os.stat(path)
    return [info.st_size, info.st_mtime_ns]


class RunDirectorySync:
    """The local mirror directory ``local_dir`` of the run directory ``url`` of object storage, and
    the upload of the run's files to it. Safe to use from several threads (one transfer at a
    time).

    What is known equal on both sides (the local file's size and mtime, the object's size and
    ETag when it was last moved) is kept in ``<local_dir>/.remote-sync.json``, so nothing is
    moved twice, also across runs on one machine.

    A subclass that moves some files of the directory its own way leaves them out of
    :meth:`push_files` (:meth:`_is_run_file`), and pushes what it holds when training ends
    (:meth:`_finish_own_files`).

    Args:
        url (str): ``s3://bucket/path``, ``gs://bucket/path``...
        local_dir (str): the mirror; default :func:`local_mirror_dir` of ``url``.
        storage_options (dict): passed to fsspec (credentials, ``endpoint_url``...); by default
            fsspec's own configuration (environment variables) is used.
    """

    def __init__(self, url, local_dir=None, storage_options=None):
        if not is_remote_url(url):
            raise ValueError("{} needs a URL of object storage (s3://, gs://), got {!r}".format(
                type(self).__name__, url))
        self.url = url.rstrip('/')
        self.local_dir = os.path.abspath(local_dir or local_mirror_dir(self.url))
        self.storage_options = dict(storage_options or {})
        self._fs = self._path = None
        self._lock = threading.RLock()
        self._record = None
        self._pending_signatures = {}        # name -> local signature before its upload
        self._files_thread = None
        self._files_again = False
        self._thread_lock = threading.Lock()   # never held during a transfer: the trainer's thread takes it
        self._warned = set()

    def __repr__(self):
        return '{}({!r}, {!r})'.format(type(self).__name__, self.url, self.local_dir)

    # ----- the two sides -------------------------------------------------------------------------

    @property
    def fs(self):
        """The fsspec file system of :attr:`url` (ImportError naming the extra when missing)."""
        if self._fs is None:
            self._fs, self._path = remote_filesystem(self.url, self.storage_options)
        return self._fs

    def _remote(self, name):
        """The file system's path of object ``name`` under the URL."""
        return '{}/{}'.format(self.fs and self._path, name)

    def _listing(self):
        """``{name: [size, version]}`` of the objects directly under the URL ({} when none)."""
        fs = self.fs
        fs.invalidate_cache(self._path)
        try:
            entries = fs.ls(self._path, detail=True)
        except FileNotFoundError:
            return {}
        return {os.path.basename(e['name'].rstrip('/')): _version(e)
                for e in entries if e.get('type') == 'file'}

    def _local(self, name):
        return os.path.join(self.local_dir, name)

    def _local_names(self):
        try:
            return sorted(f for f in os.listdir(self.local_dir) if os.path.isfile(self._local(f)))
        except FileNotFoundError:
            return []

    def _is_run_file(self, name):
        """Whether :meth:`push_files` uploads file ``name`` (and a pull fetches it): every file but
        the transient ones (:func:`is_transient_file`). A subclass leaves out what it moves itself."""
        return not is_transient_file(name)

    def _files_to_pull(self, remote):
        """The run's files among the objects ``remote`` that a pull fetches: not the event files,
        logs and graphs (a run writes its own)."""
        return sorted(n for n in remote if self._is_run_file(n) and not _NOT_PULLED.match(n))

    # ----- what is known equal -------------------------------------------------------------------

    def _known(self):
        if self._record is None:
            try:
                with open(self._local(SYNC_RECORD)) as f:
                    self._record = json.load(f)
            except (OSError, ValueError):
                self._record = {}
        return self._record

    def _remember(self, name, local_signature, remote_version):
        self._known()[name] = {'local': local_signature, 'remote': remote_version}

    def _remember_local(self, name, remote_version):
        """Local file ``name``, as it is now, is known equal to the remote object of ``remote_version``."""
        self._remember(name, _signature(self._local(name)), remote_version)

    def _remember_uploads(self, names, remote):
        """The uploaded files ``names`` are known equal to their objects in listing ``remote``
        (as they were before their upload); the record is saved."""
        for name in names:
            self._remember(name, self._pending_signatures.pop(name), remote.get(name))
        self._save_record()

    def _forget(self, name):
        self._known().pop(name, None)

    def _save_record(self):
        record = {name: entry for name, entry in self._known().items() if os.path.exists(self._local(name))}
        self._record = record
        write_atomically(self._local(SYNC_RECORD), lambda f: json.dump(record, f), mode='w', durable=False)

    def _same(self, name, remote):
        """Whether local file ``name`` and the remote object of that name are known equal."""
        entry = self._known().get(name)
        path = self._local(name)
        if entry is None or name not in remote or not os.path.isfile(path):
            return False
        return entry['local'] == _signature(path) and entry['remote'] == remote[name]

    # ----- transfers -----------------------------------------------------------------------------

    def _download(self, name, version, staging):
        """Fetch object ``name`` through ``staging`` into the mirror (one rename); its size."""
        tmp = os.path.join(staging, name)
        self.fs.get_file(self._remote(name), tmp)
        os.replace(tmp, self._local(name))
        self._remember_local(name, version)
        return version[0]

    def _upload(self, names):
        """Upload the local files ``names`` in that order; their total size. The signature of each
        file before its upload waits in ``_pending_signatures`` until the remote's version is read."""
        size = 0
        for name in names:
            path = self._local(name)
            signature = _signature(path)
            self.fs.put_file(path, self._remote(name))
            self._pending_signatures[name] = signature
            size += signature[0]
        return size

    def push_files(self):
        """Upload the run's files that changed (``stats.json``, event files, ``log.log``,
        ``graph-*.meta``...: :meth:`_is_run_file`). Never raises: a failure is one warning, tried
        again next time. Returns whether it uploaded everything."""
        with self._lock:
            try:
                remote = self._listing()
                uploads = [n for n in self._local_names()
                           if self._is_run_file(n) and not self._same(n, remote)]
                self._upload(uploads)
                self._remember_uploads(uploads, self._listing())
            except (OSError, ValueError) as err:
                self._warn('files', "Cannot upload the files of {} to {} ({}: {}); tried again at the next "
                           "epoch's end and when training ends.".format(
                               self.local_dir, self.url, type(err).__name__, err))
                return False
            self._warned.discard('files')
            return True

    def push_files_in_background(self):
        """:meth:`push_files` in a thread, returning at once (never waiting for a transfer); when
        one is running, it runs once more after it."""
        with self._thread_lock:
            if self._files_thread is not None and self._files_thread.is_alive():
                self._files_again = True
                return
            self._files_thread = threading.Thread(target=self._files_loop, name=type(self).__name__,
                                                  daemon=True)
            self._files_thread.start()

    def _files_loop(self):
        while True:
            self.push_files()
            with self._thread_lock:
                if not self._files_again:
                    return
                self._files_again = False

    def finish(self):
        """When training ends: wait for the upload in the background, push what a subclass holds
        (:meth:`_finish_own_files`), then upload the files that changed. Returns whether the
        remote has everything."""
        with self._thread_lock:
            thread, self._files_again = self._files_thread, False
        if thread is not None:
            thread.join()
        own_files_done = self._finish_own_files()
        return self.push_files() and own_files_done

    def _finish_own_files(self):
        """What a subclass pushes when training ends, before the run's files; whether the remote
        has it. Nothing here."""
        return True

    def _warn(self, key, message):
        """One warning per kind of failure until that kind succeeds again."""
        if key not in self._warned:
            self._warned.add(key)
            logger.warn(message)
