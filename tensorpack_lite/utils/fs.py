"""Files written so that a reader (or a run killed half-way) never sees half of one.

Example::

    write_atomically('stats.json', lambda f: json.dump(stats, f), mode='w')

    with atomic_path('data.tfrecord') as tmp:     # for writers that want a path
        write_records(tmp)
"""

import contextlib
import os
import uuid

__all__ = ['atomic_path', 'write_atomically']


def _fsync_path(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError:  # e.g. a directory on a file system that cannot sync one
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_path(path, durable=True):
    """Yield a fresh temporary path next to ``path``. When the block ends without an error,
    the file written there replaces ``path`` in one rename; when it raises, the temporary
    file is removed and ``path`` is left as it was.

    Args:
        path (str): the file to (re)write.
        durable (bool): also sync the file's data before the rename and the directory after
            it, so that the new content survives a power loss, not only a killed process.
    """
    path = os.fspath(path)
    tmp = '{}.{}.tmp'.format(path, uuid.uuid4().hex[:12])
    try:
        yield tmp
        if durable:
            _fsync_path(tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    if durable:
        try:
            _fsync_path(os.path.dirname(os.path.abspath(path)))
        except OSError:
            pass


def write_atomically(path, write, mode='wb', durable=True):
    """Call ``write(file_object)`` on a temporary file opened with ``mode``, then put it in
    place of ``path`` as :func:`atomic_path` does."""
    with atomic_path(path, durable=durable) as tmp:
        with open(tmp, mode) as f:
            write(f)
