"""Checkpoints on object storage (``s3://bucket/run``, ``gs://bucket/run``) through fsspec.

A run whose directory is a URL works in a local mirror directory
(:func:`~tensorpack_lite.utils.object_store.local_mirror_dir`): TensorFlow writes there and the
local commit protocol holds there. :class:`RemoteMirror` moves the files:

* :meth:`RemoteMirror.pull`, before a run reads its directory: the remote ``checkpoint`` state
  file, the checkpoints it lists (data shards, index, resume states), ``stats.json`` and the
  other small records come into the mirror, which is made to agree with the remote (a local
  checkpoint the remote does not list is removed): a machine with an empty disk resumes.
* :meth:`RemoteMirror.push_checkpoints`, after each local commit (in the background writer's
  thread): the listed checkpoints' files the remote lacks (data shards, then index, then
  resume states), the records (``stats.json``, ``*.json``), then the state file LAST. An
  object store cannot rename: the state file object is the commit marker, so the remote lists
  a checkpoint only once all its parts are there. Then the remote objects of checkpoints it no
  longer lists are deleted (a failure is one warning).
* ``RemoteMirror.push_files`` (at epoch ends, in a thread; and when training ends): the other
  files (``stats.json``, event files, ``log.log``, ``graph-*.meta``...). That is the run
  directory's sync, which :class:`RemoteMirror` extends with the checkpoints: see
  :meth:`~tensorpack_lite.utils.run_dir_sync.RunDirectorySync.push_files`.

What an upload killed midway leaves (parts of a checkpoint the state file does not list) is
removed by the next run's start (:meth:`RemoteMirror.remove_leftovers`).

Example::

    mirror = RemoteMirror('s3://bucket/run')    # local: ~/.cache/tensorpack_lite/remote/s3/bucket/run
    mirror.pull()
    ...                                         # a checkpoint is committed in mirror.local_dir
    mirror.push_checkpoints()
"""

import contextlib
import os
import re
import shutil
import tempfile
import threading

from ..utils import logger
from ..utils.object_store import is_remote_url, local_mirror_dir, remote_filesystem
from ..utils.run_dir_sync import RunDirectorySync, is_transient_file
from .files import file_of_checkpoint, prefix_of_file, remove_checkpoint, resume_files
from .state_file import STATE_FILE, CheckpointStateError, read_checkpoint_state, write_checkpoint_state

__all__ = ['RemoteMirror', 'RemoteMirrorError', 'is_remote_url', 'local_mirror_dir', 'mirror_for',
           'mirror_of_url', 'fetch']

_UPLOAD_RANK = {'data': 0, 'index': 1, 'resume': 2}   # the order a checkpoint's files are uploaded in
_STEP_NAMED = re.compile(r'-\d+$')
_PULL_DIR = '.remote-pull'


class RemoteMirrorError(OSError):
    """A transfer between a local mirror directory and its URL failed (the cause is chained)."""


def _is_transient(name):
    """Names never moved: hidden files, temporaries of writes (also of a checkpoint's commit and
    TensorFlow's), checkpoints set aside as damaged."""
    return (is_transient_file(name) or name.endswith('.commit') or '.tempstate' in name
            or '_temp' in name or '.damaged' in name)


def _part_of(name):
    """``(base, rank)`` when ``name`` is a file of checkpoint ``<name>-<step>`` (rank: data 0, index
    1, resume state 2: the order of uploads), else None."""
    part = None if _is_transient(name) else file_of_checkpoint(name)
    if part is None or not _STEP_NAMED.search(part[0]):
        return None
    return part[0], _UPLOAD_RANK[part[1]]


def _parts_in_order(names, bases):
    """The names of the files of checkpoints ``bases`` among ``names``: per checkpoint (in the
    order of ``bases``) its data shards, then its index, then its resume states."""
    ordered = []
    for base in bases:
        mine = [(part[1], name) for name in names for part in [_part_of(name)] if part and part[0] == base]
        ordered += [name for _, name in sorted(mine)]
    return ordered


def _size_text(size):
    if size < 1e3:
        return '{} bytes'.format(size)
    return '{:.1f} KB'.format(size / 1e3) if size < 1e6 else '{:.1f} MB'.format(size / 1e6)


class RemoteMirror(RunDirectorySync):
    """The local mirror directory ``local_dir`` of the directory ``url`` of object storage, and the
    transfers between them (see the module's docstring for the order): the run directory's sync
    (:class:`~tensorpack_lite.utils.run_dir_sync.RunDirectorySync`: the record of what is known
    equal, :meth:`push_files`), with the checkpoints and their state file. Safe to use from
    several threads (one transfer at a time). fsspec is imported on first use. The arguments
    (``url``, ``local_dir``: the mirror, ``storage_options``: fsspec's) are those of
    :class:`~tensorpack_lite.utils.run_dir_sync.RunDirectorySync`.
    """

    def __init__(self, url, local_dir=None, storage_options=None):
        super().__init__(url, local_dir, storage_options)
        self.pulled = False
        self._prepared = False
        self._checkpoints_pending = False    # a push of checkpoints failed: tried again next time

    def _is_run_file(self, name):
        """Every file but the transient ones and the checkpoints' (theirs is :meth:`push_checkpoints`)."""
        return name != STATE_FILE and _part_of(name) is None and not _is_transient(name)

    # ----- pull ----------------------------------------------------------------------------------

    def pull(self, newest=None):
        """Make the mirror agree with the remote before a run reads it: fetch the remote state
        file, the checkpoints it lists (the ``newest`` last ones only, when given) with their
        resume states, and the other files but the event files, logs and graphs; remove the
        local checkpoints (and ``stats.json``, state file) the remote does not have. The state
        file comes last. Files known equal are not fetched again. Returns the checkpoint names
        the remote lists. RemoteMirrorError when the remote cannot be read."""
        with self._lock:
            try:
                listed = self._pull(newest)
            except (OSError, ValueError) as err:
                if isinstance(err, RemoteMirrorError):
                    raise
                raise RemoteMirrorError("Cannot pull {} into '{}' ({}: {})".format(
                    self.url, self.local_dir, type(err).__name__, err)) from err
            self.pulled = self.pulled or newest is None
            return listed

    def pull_once(self):
        """:meth:`pull` unless this mirror was pulled already."""
        with self._lock:
            if not self.pulled:
                self.pull()

    def prepare(self):
        """Before a run writes into the URL (once per process): :meth:`pull` unless done, then
        :meth:`remove_leftovers`."""
        with self._lock:
            if not self._prepared:
                self.pull_once()
                self.remove_leftovers()
                self._prepared = True

    def _pull(self, newest):
        os.makedirs(self.local_dir, exist_ok=True)
        staging = self._local(_PULL_DIR)
        shutil.rmtree(staging, ignore_errors=True)    # an interrupted pull's
        os.makedirs(staging)
        try:
            remote = self._listing()
            listed = self._remote_listed(remote, staging)
            chosen = listed if newest is None else listed[-newest:]
            names = _parts_in_order(remote, chosen)
            names += self._files_to_pull(remote)
            fetched, size = [], 0
            for name in names:
                if not self._same(name, remote):
                    size += self._download(name, remote[name], staging)
                    fetched.append(name)
            removed = self._remove_unlisted_locally(chosen, remote)
            if STATE_FILE in remote:
                os.replace(os.path.join(staging, STATE_FILE), self._local(STATE_FILE))
                self._remember_local(STATE_FILE, remote[STATE_FILE])
            self._save_record()
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        logger.info("Pulled {} into {}: {}; {} file(s) fetched ({}), {} already here{}.".format(
            self.url, self.local_dir,
            "its state file lists {}".format(', '.join(listed)) if listed else "no checkpoint listed",
            len(fetched), _size_text(size), len(names) - len(fetched),
            "; removed from the mirror what the remote does not have: {}".format(', '.join(removed))
            if removed else ""))
        return listed

    def _remote_listed(self, remote, staging):
        """The names of the checkpoints the remote state file lists, oldest first (fetched into
        ``staging``); [] when there is none."""
        if STATE_FILE not in remote:
            return []
        self.fs.get_file(self._remote(STATE_FILE), os.path.join(staging, STATE_FILE))
        try:
            return [os.path.basename(p) for p in read_checkpoint_state(staging)]
        except CheckpointStateError as err:
            raise RemoteMirrorError("The state file of {} cannot be read: {}".format(self.url, err)) from err

    def _remove_unlisted_locally(self, chosen, remote):
        """Remove the mirror's checkpoints that are not among ``chosen``, and its state file and
        ``stats.json`` when the remote has none. Returns the names removed."""
        removed = []
        local_bases = {part[0] for name in self._local_names() for part in [_part_of(name)] if part}
        for base in sorted(local_bases - set(chosen)):
            prefix = self._local(base)
            removed += [os.path.basename(p) for p in remove_checkpoint(prefix, resume_files(prefix))]
        for name in (STATE_FILE, 'stats.json'):
            if name not in remote and os.path.exists(self._local(name)):
                os.remove(self._local(name))
                removed.append(name)
        for name in removed:
            self._forget(name)
        return removed

    def fetch_checkpoint(self, base):
        """Fetch the files of checkpoint ``base`` (e.g. ``'model-45'``, listed or not) into the
        mirror; returns its local prefix. FileNotFoundError when the remote has no index of it."""
        with self._lock:
            remote = self._listing()
            if base + '.index' not in remote:
                raise FileNotFoundError("Checkpoint '{0}/{1}' not found: there is no object "
                                        "'{0}/{1}.index'.".format(self.url, base))
            os.makedirs(self.local_dir, exist_ok=True)
            staging = tempfile.mkdtemp(prefix=_PULL_DIR, dir=self.local_dir)
            try:
                for name in _parts_in_order(remote, [base]):
                    if not self._same(name, remote):
                        self._download(name, remote[name], staging)
                self._save_record()
            finally:
                shutil.rmtree(staging, ignore_errors=True)
            return self._local(base)

    def remove_leftovers(self):
        """Delete the remote files of checkpoints the remote state file does not list: what an
        upload killed midway left (call before writing into the URL). One line names them; a
        failure is one warning. Returns the names deleted."""
        with self._lock:
            try:
                remote = self._listing()
                os.makedirs(self.local_dir, exist_ok=True)
                staging = tempfile.mkdtemp(prefix=_PULL_DIR, dir=self.local_dir)
                try:
                    listed = self._remote_listed(remote, staging)
                finally:
                    shutil.rmtree(staging, ignore_errors=True)
            except (OSError, ValueError) as err:
                self._warn('leftovers', "Cannot look for leftovers of interrupted uploads in {} ({}: {}).".
                           format(self.url, type(err).__name__, err))
                return []
            deleted = self._delete_unlisted(remote, listed)
            if deleted:
                logger.info("Removed from {} what an interrupted upload left (not listed by its state file): "
                            "{}.".format(self.url, ', '.join(deleted)))
            return deleted

    # ----- push ----------------------------------------------------------------------------------

    def push_checkpoints(self):
        """After a local commit: upload the checkpoints the local state file lists that the
        remote lacks (data shards, index, resume states), the records (``*.json``), then the
        state file, then delete the remote checkpoints it no longer lists. Never raises: a
        failed upload is one warning and everything is tried again at the next push (until
        then the remote lists what it listed before); a failed delete is one warning. Returns
        whether the remote state file was written."""
        with self._lock:
            try:
                result = self._push_checkpoints()
            except (OSError, ValueError) as err:
                self._checkpoints_pending = True
                self._warn('checkpoints', "Cannot upload the checkpoints of {} to {} ({}: {}); the remote "
                           "keeps listing what it listed before, and the upload is tried again at the next "
                           "checkpoint and when training ends.".format(self.local_dir, self.url,
                                                                       type(err).__name__, err))
                return False
            self._checkpoints_pending = False
            self._warned.discard('checkpoints')
            return result

    def _push_checkpoints(self):
        staging = tempfile.mkdtemp(prefix=_PULL_DIR, dir=self.local_dir)
        try:
            return self._push_checkpoints_through(staging)
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    def _push_checkpoints_through(self, staging):
        """:meth:`push_checkpoints` from a copy of the local state file taken first (a commit may
        replace the file meanwhile) and a state file written in ``staging``."""
        if not os.path.isfile(self._local(STATE_FILE)):
            return False
        shutil.copyfile(self._local(STATE_FILE), os.path.join(staging, STATE_FILE))
        try:
            listed = [os.path.basename(p) for p in read_checkpoint_state(staging)]
        except CheckpointStateError as err:
            raise RemoteMirrorError(str(err)) from err
        remote = self._listing()
        names = self._local_names()
        complete = [base for base in listed if os.path.isfile(self._local(base) + '.index')]
        if not complete:
            return False
        uploads = [n for n in _parts_in_order(names, complete) if not self._same(n, remote)]
        uploads += [n for n in names if n.endswith('.json') and _part_of(n) is None
                    and not _is_transient(n) and not self._same(n, remote)]
        size = self._upload(uploads)
        write_checkpoint_state(staging, [os.path.join(staging, base) for base in complete])
        self.fs.put_file(os.path.join(staging, STATE_FILE), self._remote(STATE_FILE))
        remote = self._listing()
        self._remember_uploads(uploads, remote)
        deleted = self._delete_unlisted(remote, complete)
        new = [base for base in complete if any(_part_of(n) and _part_of(n)[0] == base for n in uploads)]
        logger.info("Uploaded {} to {} ({} file(s), {}); its state file lists {}{}.".format(
            ', '.join(new) if new else 'no checkpoint', self.url, len(uploads), _size_text(size),
            ', '.join(complete), "; deleted there: {}".format(', '.join(deleted)) if deleted else ""))
        return True

    def _delete_unlisted(self, remote, listed):
        """Delete the remote files of checkpoints not in ``listed``: per checkpoint its index first,
        then its resume states, then its data. A failure is one warning (training goes on); it is
        tried again at the next push. Returns the names deleted."""
        bases = sorted({part[0] for name in remote for part in [_part_of(name)] if part} - set(listed))
        deleted, failed = [], []
        deletion_order = {1: 0, 2: 1, 0: 2}   # index, resume states, data
        for base in bases:
            for name in sorted(_parts_in_order(remote, [base]), key=lambda n: deletion_order[_part_of(n)[1]]):
                try:
                    self.fs.rm_file(self._remote(name))
                    deleted.append(name)
                    self._forget(name)
                except FileNotFoundError:
                    pass
                except OSError as err:
                    failed.append('{} ({}: {})'.format(name, type(err).__name__, err))
                    break   # the others of this checkpoint stay: its index may still be there
        if failed:
            self._warn('delete', "Cannot delete from {}: {}; tried again at the next checkpoint, and "
                       "training goes on.".format(self.url, '; '.join(failed)))
        return deleted

    def _finish_own_files(self):
        """When training ends, before the other files: push the checkpoints again if their last
        push failed; whether the remote has them."""
        self.retry_checkpoints()
        return not self._checkpoints_pending

    def retry_checkpoints(self):
        """:meth:`push_checkpoints` when the last one failed; else nothing."""
        with self._lock:
            if self._checkpoints_pending:
                self.push_checkpoints()


# ----- the mirrors of a process --------------------------------------------------------------

_MIRRORS = {}
_MIRRORS_LOCK = threading.Lock()


def _registered(url, local_dir):
    """The mirror of this process for ``url`` in ``local_dir`` (made on first use)."""
    with _MIRRORS_LOCK:
        mirror = _MIRRORS.get(local_dir)
        if mirror is None or mirror.url != url:
            mirror = _MIRRORS[local_dir] = RemoteMirror(url, local_dir)
        return mirror


def mirror_of_url(url):
    """The :class:`RemoteMirror` of ``url`` in this process, in its mirror directory
    (:func:`local_mirror_dir`; made on first use)."""
    url = url.rstrip('/')
    return _registered(url, local_mirror_dir(url))


def mirror_for(directory):
    """The :class:`RemoteMirror` whose local mirror is ``directory``: the one made for a URL by
    :func:`mirror_of_url`, or the logger directory's when it mirrors a URL
    (:func:`~tensorpack_lite.utils.logger.get_logger_url`); None for a plain local directory."""
    if directory is None:
        return None
    directory = os.path.abspath(directory)
    url, logger_dir = logger.get_logger_url(), logger.get_logger_dir()
    if url is not None and logger_dir is not None and os.path.abspath(logger_dir) == directory:
        return _registered(url, directory)
    with _MIRRORS_LOCK:
        return _MIRRORS.get(directory)


def fetch(url):
    """The local path of ``url`` for reading a checkpoint: a directory is pulled (the newest
    checkpoint its state file lists, and the records) and its mirror returned; a checkpoint
    prefix or one of its files (``.../model-45``, ``.../model-45.index``) is fetched alone and its
    local path returned."""
    fs, path = remote_filesystem(url)
    fs.invalidate_cache(path)
    base = os.path.basename(path)
    prefix = prefix_of_file(base)
    with contextlib.suppress(FileNotFoundError):
        if fs.isfile('{}/{}.index'.format(os.path.dirname(path), prefix)) and prefix:
            parent = mirror_of_url(url.rstrip('/')[:-len(base)].rstrip('/'))
            return parent.fetch_checkpoint(prefix) + base[len(prefix):]
    mirror = mirror_of_url(url)
    if not mirror.pulled:   # else it is this process's own run: the mirror has it
        mirror.pull(newest=1)
    return mirror.local_dir
