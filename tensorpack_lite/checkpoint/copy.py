"""A crash-safe copy of a checkpoint onto another prefix, together with a small JSON record (what
:class:`~tensorpack_lite.callbacks.MinSaver` keeps of its best checkpoint).

All or nothing: the files are written under temporary names (``<file>.tmp``: the slow part,
which leaves the previous copy untouched), then a marker ``<dst>.commit`` listing them, then
they are renamed into place and the marker removed. A crash before the marker leaves the
previous copy and record; one after it is completed by :func:`recover_copy` at the next start.

Example::

    copy_checkpoint('train_log/run/model-45', 'train_log/run/min-val-error',
                    'train_log/run/best-min-val-error.json', {'global_step': 45, 'value': 0.12})
"""

import json
import os
import shutil

from ..utils import logger
from .files import checkpoint_files

__all__ = ['copy_checkpoint', 'recover_copy']

_TMP = '.tmp'
_COMMIT = '.commit'


def _finish_copy(dst, names):
    """Move the complete temporary files named ``names`` into place (in that order: the data
    shards, the index, the record), remove data shards of the previous copy that the new one
    does not have, drop the marker."""
    dirname = os.path.dirname(dst)
    for name in names:
        path = os.path.join(dirname, name)
        if os.path.exists(path + _TMP):
            os.replace(path + _TMP, path)
    for path in checkpoint_files(dst):
        if os.path.basename(path) not in names:
            os.remove(path)
    os.remove(dst + _COMMIT)


def recover_copy(dst, record):
    """Complete a copy onto ``dst`` that was interrupted after every file was written (the
    marker exists), or discard the leftovers of one interrupted earlier (the temporary
    files of ``dst`` and of its ``record``)."""
    if os.path.isfile(dst + _COMMIT):
        with open(dst + _COMMIT) as f:
            names = json.load(f)
        logger.info("Completing the interrupted update of checkpoint {}.".format(dst))
        _finish_copy(dst, names)
        return
    dirname, base = os.path.split(dst)
    for fname in os.listdir(dirname or '.'):
        if fname.startswith(base + '.') and fname.endswith(_TMP):
            os.remove(os.path.join(dirname, fname))
    if os.path.exists(record + _TMP):
        os.remove(record + _TMP)


def _write_synced(path, write, mode):
    with open(path, mode) as f:
        write(f)
        f.flush()
        os.fsync(f.fileno())


def copy_checkpoint(src, dst, record, content):
    """Copy checkpoint ``src`` (its data shards and index) to prefix ``dst`` and write ``content``
    (a JSON-able dict) to the file ``record``, all or nothing (see the module's docstring)."""
    recover_copy(dst, record)
    sources = checkpoint_files(src)
    names = [os.path.basename(dst) + path[len(src):] for path in sources] + [os.path.basename(record)]
    try:
        for path in sources:
            target = dst + path[len(src):] + _TMP
            shutil.copyfile(path, target)
            with open(target, 'rb+') as f:
                os.fsync(f.fileno())
        _write_synced(record + _TMP, lambda f: json.dump(content, f), 'w')
        _write_synced(dst + _COMMIT + _TMP, lambda f: json.dump(names, f), 'w')
        os.replace(dst + _COMMIT + _TMP, dst + _COMMIT)
    except BaseException:
        recover_copy(dst, record)  # no marker yet: removes the partial copies
        raise
    _finish_copy(dst, names)
