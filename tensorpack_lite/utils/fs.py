"""File-system helpers: directories, atomic writes, downloads and the datasets' directory.

Example::

    write_atomically('stats.json', lambda f: json.dump(stats, f), mode='w')

    with atomic_path('data.tfrecord') as tmp:     # for writers that want a path
        write_records(tmp)

    path = download('https://example.com/data.bin', get_dataset_path('data'), expect_size=1024)
"""

import contextlib
import http.client
import os
import urllib.parse
import urllib.request
import uuid

from . import logger
from .utils import execute_only_once, get_tqdm

__all__ = ['atomic_path', 'write_atomically', 'mkdir_p', 'download', 'recursive_walk', 'normpath',
           'get_dataset_path', 'DATASET_ENV_VAR']

DATASET_ENV_VAR = 'TENSORPACK_DATASET'
"""Environment variable naming the directory that holds the datasets' directories."""

DOWNLOAD_TIMEOUT = 60
"""Seconds :func:`download` waits for the server to connect or to send more data."""

_DOWNLOAD_CHUNK = 1 << 16


def _fsync_path(path):
    """Sync the file (or directory) ``path`` to disk; an error raises."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
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
        except OSError:   # a file system that cannot sync a directory; the new file is in place
            pass


def write_atomically(path, write, mode='wb', durable=True):
    """Call ``write(file_object)`` on a temporary file opened with ``mode``, then put it in
    place of ``path`` as :func:`atomic_path` does."""
    with atomic_path(path, durable=durable) as tmp:
        with open(tmp, mode) as f:
            write(f)


def mkdir_p(dirname):
    """Create ``dirname`` and its missing parents, as ``mkdir -p``; nothing happens when it
    exists already (or is ``''``, the current directory)."""
    if dirname is None:
        raise ValueError("mkdir_p() needs a directory name, got None.")
    if dirname:
        os.makedirs(dirname, exist_ok=True)


def _file_name_of(url):
    name = os.path.basename(urllib.parse.urlparse(url).path)
    if not name:
        raise ValueError("download(): cannot tell a file name from the URL {!r}; pass filename=.".format(url))
    return name


def _fetch(url, target, desc):
    """Copy the body of ``url`` into the file ``target`` with a progress bar; its size in bytes."""
    with urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT) as response, open(target, 'wb') as out:
        length = response.headers.get('Content-Length') if response.headers else None
        total = int(length) if length and length.isdigit() else None
        size = 0
        with get_tqdm(total=total, unit='B', unit_scale=True, desc=desc) as bar:
            for chunk in iter(lambda: response.read(_DOWNLOAD_CHUNK), b''):
                out.write(chunk)
                size += len(chunk)
                bar.update(len(chunk))
    if total is not None and size != total:
        raise OSError("the transfer ended after {} of the {} bytes announced".format(size, total))
    return size


def download(url, dir, filename=None, expect_size=None):
    """Download ``url`` into the directory ``dir`` (created when missing) and return the
    file's path. The library never downloads anything by itself: this is for user code.

    The data goes to a temporary file that takes its final name only when complete and of
    the expected size, so an interrupted or broken download never looks like a good file.
    A file already there with ``expect_size`` bytes is kept and not downloaded again.

    Args:
        url (str): what to fetch (``http(s)://``, ``ftp://`` or ``file://``).
        dir (str): the directory to put the file in.
        filename (str): the file's name; by default the last part of the URL's path.
        expect_size (int): the size the file must have, in bytes.

    Raises:
        OSError: naming the URL, when it cannot be fetched, is empty or has a size other
            than ``expect_size``.

    Example::

        path = download('https://example.com/files/weights.npz', '/tmp/models', expect_size=2048)
        # '/tmp/models/weights.npz'
    """
    filename = filename or _file_name_of(url)
    mkdir_p(dir)
    path = os.path.join(dir, filename)
    if os.path.isfile(path):
        if expect_size is not None and os.path.getsize(path) == expect_size:
            logger.info("File {} exists with the expected size; not downloading it again.".format(path))
            return path
        logger.warn("File {} exists; downloading it again from {}.".format(path, url))
    with atomic_path(path) as tmp:
        try:
            size = _fetch(url, tmp, filename)
        except (OSError, http.client.HTTPException) as err:   # URLError, HTTPError; IncompleteRead
            raise OSError("download(): failed to download {}: {}".format(url, err)) from err
        if size == 0:
            raise OSError("download(): {} gave an empty file.".format(url))
        if expect_size is not None and size != expect_size:
            raise OSError("download(): {} gave {} bytes, but {} were expected (a broken download, or the "
                          "file changed upstream); {} was not written.".format(url, size, expect_size, path))
    logger.info("Downloaded {} ({} bytes) to {}.".format(url, size, path))
    return path


def recursive_walk(rootdir):
    """Yield the path of every file under ``rootdir``, in all its subdirectories."""
    for dirpath, _, filenames in os.walk(rootdir):
        for name in filenames:
            yield os.path.join(dirpath, name)


def normpath(path):
    """``os.path.normpath(path)``, except for remote paths (those with ``://``, e.g.
    ``gs://bucket/dir``), which are returned unchanged."""
    return path if '://' in path else os.path.normpath(path)


def get_dataset_path(*args):
    """``$TENSORPACK_DATASET/<args...>``, or ``~/tensorpack_data/<args...>`` when the variable
    is not set (which is logged once). Nothing is created or downloaded.

    Example::

        get_dataset_path('mnist_data')   # e.g. '/data/mnist_data' with TENSORPACK_DATASET=/data
    """
    root = os.environ.get(DATASET_ENV_VAR)
    if not root:
        root = os.path.join(os.path.expanduser('~'), 'tensorpack_data')
        if execute_only_once():
            logger.info("${} is not set; datasets are looked for in {}.".format(DATASET_ENV_VAR, root))
    return os.path.join(root, *args)
