"""The files of one checkpoint, in one place: which they are, whether they changed, and how they
are removed, moved aside and told apart from the leftovers of an interrupted write.

A checkpoint ``<prefix>`` (TensorFlow's V2 format) is ``<prefix>.data-<k>-of-<n>`` (its data
shards) and ``<prefix>.index``; this library adds ``<prefix>.resume`` (the resume state of the
chief, :mod:`~tensorpack_lite.checkpoint.resume_state`) and ``<prefix>.resume.<owner>`` (those of
the other processes of a job). While TensorFlow writes, the data go to
``<prefix>.data-...tempstate<n>`` (a sharded saver: ``<prefix>_temp/``) and the index to a
temporary name, each renamed into place; :func:`~tensorpack_lite.utils.fs.atomic_path` writes
``<file>.<hex>.tmp`` first. Those are the temporaries (:func:`temporary_files`).

Example::

    checkpoint_files('train_log/run/model-45')
    # ['.../model-45.data-00000-of-00001', '.../model-45.index']
    checkpoint_files('train_log/run/model-45', resume=True)   # + '.../model-45.resume'
"""

import contextlib
import os
import re
import shutil

__all__ = ['DATA_SHARD', 'RESUME_SUFFIX', 'resume_state_path', 'file_of_checkpoint', 'prefix_of_file',
           'data_shards', 'resume_files',
           'checkpoint_files', 'checkpoint_identity', 'is_temporary', 'temporary_files',
           'remove_path', 'remove_checkpoint', 'move_checkpoint_aside']

DATA_SHARD = re.compile(r'\.data-(\d+)-of-(\d+)$')
"""The suffix of a data shard: ``.data-00000-of-00001``."""

RESUME_SUFFIX = '.resume'
_TEMPSTATE = '.tempstate'
_ATOMIC_TMP = re.compile(r'\.[0-9a-f]{12}\.tmp$')   # utils.fs.atomic_path's temporary names
_FILE = re.compile(r'^(?P<base>.+?)(?P<suffix>\.index|\.data-\d+-of-\d+|\.resume(?:\.[^.]+)?)$')
_TENSORFLOW_SUFFIX = re.compile(r'\.(index|meta|data-\d+-of-\d+)$')


def resume_state_path(prefix, owner=None):
    """The file holding the resume state of checkpoint ``prefix``: ``<prefix>.resume`` for the
    chief (or a single process), ``<prefix>.resume.<owner>`` for another process of the job (e.g.
    ``worker-1``), so that processes writing into one directory never overwrite each other's."""
    return prefix + RESUME_SUFFIX + ('.' + owner if owner else '')


def file_of_checkpoint(name):
    """``(prefix basename, kind)`` when the file name ``name`` is one of a checkpoint's files, kind
    ``'data'``, ``'index'`` or ``'resume'`` (``model-45.resume.worker-1`` gives ``('model-45',
    'resume')``); None for anything else, the temporaries of a write among them."""
    match = _FILE.match(name)
    if match is None or _ATOMIC_TMP.search(name) or _TEMPSTATE in name:
        return None
    suffix = match.group('suffix')
    kind = 'index' if suffix == '.index' else 'resume' if suffix.startswith(RESUME_SUFFIX) else 'data'
    return match.group('base'), kind


def prefix_of_file(path):
    """The checkpoint prefix of one of TensorFlow's files of it (``model-45.index``,
    ``model-45.data-00000-of-00001``, ``model-45.meta``); ``path`` itself when it is none."""
    return _TENSORFLOW_SUFFIX.sub('', path)


def _names_in(dirname):
    try:
        return os.listdir(dirname or '.')
    except FileNotFoundError:
        return []


def data_shards(prefix):
    """The paths of the data shards of checkpoint ``prefix`` that exist, in order."""
    dirname, base = os.path.split(prefix)
    return sorted(os.path.join(dirname, f) for f in _names_in(dirname)
                  if f.startswith(base + '.data-') and DATA_SHARD.search(f)
                  and DATA_SHARD.search(f).start() == len(base))


def resume_files(prefix):
    """The paths of the resume states of checkpoint ``prefix`` that exist (the chief's
    ``.resume``, then the other processes' ``.resume.<owner>``)."""
    dirname, base = os.path.split(prefix)
    chief = base + RESUME_SUFFIX
    return sorted(os.path.join(dirname, f) for f in _names_in(dirname)
                  if (f == chief or f.startswith(chief + '.')) and not _ATOMIC_TMP.search(f))


def checkpoint_files(prefix, resume=False):
    """The paths of the files of checkpoint ``prefix`` that exist: its data shards, then its
    ``.index``; with ``resume``, then its resume states. Never the temporaries of a write."""
    index = [prefix + '.index'] if os.path.isfile(prefix + '.index') else []
    return data_shards(prefix) + index + (resume_files(prefix) if resume else [])


def checkpoint_identity(prefix):
    """What tells whether checkpoint ``prefix`` was rewritten: ``(name, inode, size, mtime)`` of
    its data shards and ``.index`` (empty when it does not exist)."""
    identity = []
    for path in checkpoint_files(prefix):
        with contextlib.suppress(FileNotFoundError):
            info = os.stat(path)
            identity.append((os.path.basename(path), info.st_ino, info.st_size, info.st_mtime_ns))
    return tuple(identity)


def is_temporary(base, fname):
    """Whether ``fname`` is a temporary of a write of checkpoint ``base`` (a basename):
    TensorFlow's (``.tempstate``, ``_temp/``) or an atomic write's (``.<hex>.tmp``) of one of
    its files."""
    if fname.startswith(base + '_temp'):
        return True
    if not fname.startswith(base + '.'):
        return False
    return _TEMPSTATE in fname or bool(_ATOMIC_TMP.search(fname))


def temporary_files(prefix):
    """The paths of the temporaries of checkpoint ``prefix`` (see :func:`is_temporary`)."""
    dirname, base = os.path.split(prefix)
    return sorted(os.path.join(dirname, f) for f in _names_in(dirname) if is_temporary(base, f))


def remove_path(path):
    """Remove a file or a directory tree; a missing one is fine. Other errors raise."""
    try:
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.remove(path)
    except FileNotFoundError:
        pass


def remove_checkpoint(prefix, companions=(), temporaries_only=False, on_error=None):
    """Delete checkpoint ``prefix``: its ``.index`` first (a half-deleted checkpoint is never
    taken for a complete one), then the ``companions`` (paths of files that belong to it, e.g.
    its ``.resume``), then its data shards and temporaries; only the temporaries with
    ``temporaries_only``.

    Every file is tried. A file that cannot be removed raises its OSError once all were tried,
    or, with ``on_error``, is handed to ``on_error(path, error)`` instead. Returns the paths
    removed."""
    paths = [] if temporaries_only else [prefix + '.index'] + list(companions) + data_shards(prefix)
    paths += temporary_files(prefix)
    removed, first_error = [], None
    for path in paths:
        if not os.path.lexists(path):
            continue
        try:
            remove_path(path)
            removed.append(path)
        except OSError as err:
            if on_error is None:
                first_error = first_error or err
            else:
                on_error(path, err)
    if first_error is not None:
        raise first_error
    return removed


def move_checkpoint_aside(prefix, tag):
    """Rename the data shards, resume states and ``.index`` of checkpoint ``prefix`` to the prefix
    ``<prefix><tag>`` (``<prefix><tag>2``... when taken) and return that prefix. The index goes
    last, so no new prefix ever has an index without its data."""
    suffixes = [path[len(prefix):] for path in data_shards(prefix) + resume_files(prefix)]
    suffixes += ['.index'] if os.path.exists(prefix + '.index') else []
    number, target = 1, prefix + tag
    while any(os.path.exists(target + suffix) for suffix in suffixes + ['.index']):
        number += 1
        target = '{}{}{}'.format(prefix, tag, number)
    for suffix in suffixes:
        os.replace(prefix + suffix, target + suffix)
    return target
