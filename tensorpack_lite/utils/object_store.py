"""Directories on object storage (``s3://bucket/run``, ``gs://bucket/run``): what a URL is, the
local directory that mirrors it, and its fsspec file system.

TensorFlow no longer reads or writes S3 itself, so a run whose logger directory is a URL works
in a local mirror directory (:func:`local_mirror_dir`) and
:class:`~tensorpack_lite.checkpoint.remote.RemoteMirror` moves the files between the two.
fsspec (with s3fs or gcsfs) is imported only when a URL is used; credentials and the endpoint
come from fsspec's usual configuration (``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``,
``AWS_ENDPOINT_URL`` or ``FSSPEC_S3_ENDPOINT_URL``, ``GOOGLE_APPLICATION_CREDENTIALS``...).

Example::

    is_remote_url('s3://bucket/run')        # True
    local_mirror_dir('s3://bucket/run')     # '~/.cache/tensorpack_lite/remote/s3/bucket/run'
"""

import os
import re

__all__ = ['is_remote_url', 'local_mirror_dir', 'remote_filesystem', 'split_url', 'CACHE_ENV_VAR',
           'REMOTE_PROTOCOLS']

CACHE_ENV_VAR = 'TENSORPACK_LITE_CACHE'
"""Environment variable naming the library's cache directory (default
``~/.cache/tensorpack_lite``); the mirrors of remote directories are under ``<cache>/remote``."""

REMOTE_PROTOCOLS = {'s3': 's3', 's3a': 's3', 'gs': 'gcs', 'gcs': 'gcs'}
"""The URL schemes taken for object storage, and the extra of the package that installs the
fsspec implementation of each (``pip install 'tensorpack_lite[s3]'``)."""

_URL = re.compile(r'^([a-zA-Z][a-zA-Z0-9+.-]*)://(.*)$')


def is_remote_url(path):
    """Whether ``path`` is a URL of object storage (``s3://``, ``gs://``, ``gcs://``, ``s3a://``)."""
    if not isinstance(path, str):
        return False
    match = _URL.match(path)
    return bool(match) and match.group(1).lower() in REMOTE_PROTOCOLS


def split_url(url):
    """``(scheme, bucket, key)`` of ``url`` with no trailing '/', e.g. ``('s3', 'bucket', 'run/a')``;
    ValueError for what is not an object-storage URL or has '.' or '..' in its path."""
    if not is_remote_url(url):
        raise ValueError("Not a URL of object storage (s3://, gs://): {!r}".format(url))
    scheme, rest = _URL.match(url).groups()
    parts = [p for p in rest.split('/') if p]
    if not parts or any(p in ('.', '..') for p in parts):
        raise ValueError("Cannot use {!r}: it needs a bucket, and no '.' or '..' in its path.".format(url))
    return scheme.lower(), parts[0], '/'.join(parts[1:])


def local_mirror_dir(url, cache_dir=None):
    """The local directory that mirrors ``url``: ``<cache>/remote/<scheme>/<bucket>/<key>``, where
    ``<cache>`` is ``cache_dir``, else ``$TENSORPACK_LITE_CACHE``, else ``~/.cache/tensorpack_lite``."""
    scheme, bucket, key = split_url(url)
    cache = cache_dir or os.environ.get(CACHE_ENV_VAR) or os.path.join('~', '.cache', 'tensorpack_lite')
    parts = [os.path.abspath(os.path.expanduser(cache)), 'remote', scheme, bucket]
    return os.path.join(*parts, *(key.split('/') if key else []))


def remote_filesystem(url, storage_options=None):
    """``(fsspec file system, path)`` of ``url``, the path being what the file system takes (e.g.
    ``'bucket/run'``). ImportError naming the extra to install when fsspec or its implementation
    of the scheme (s3fs, gcsfs) is missing."""
    scheme, bucket, key = split_url(url)
    extra = REMOTE_PROTOCOLS[scheme]
    try:
        import fsspec
        fs, path = fsspec.core.url_to_fs(url, **(storage_options or {}))
    except ImportError as err:
        raise ImportError("A directory on {}:// needs fsspec and {}: pip install 'tensorpack_lite[{}]' "
                          "({})".format(scheme, 's3fs' if extra == 's3' else 'gcsfs', extra, err)) from err
    return fs, path.rstrip('/')
