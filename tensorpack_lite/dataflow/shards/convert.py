"""Convert a dataset into shards, from the command line or from Python.

Sources (the first argument of the command):

* ``dataflow MODULE:CALLABLE`` -- the DataFlow returned by ``CALLABLE()`` of the importable
  module ``MODULE`` (e.g. ``mypkg.data:train_flow``; a dotted name after the colon reaches into
  the module);
* ``lmdb PATH`` -- a database written by :class:`~tensorpack_lite.dataflow.LMDBSerializer`,
  its datapoints in key order;
* ``tfrecord PATH`` -- a file written by :class:`~tensorpack_lite.dataflow.TFRecordSerializer`,
  in file order;
* ``images DIR`` -- one subfolder of ``DIR`` per class (the labels are the sorted subfolder
  names' positions, 0, 1, ...): datapoints ``[image, label]``, ``image`` the file's encoded bytes
  (``bytes``: decode when reading, e.g. with ``cv2.imdecode``) or, with ``--decode``, the decoded
  HxWx3 BGR ``uint8`` array; ``label`` an ``np.int32``. Files are taken in sorted order; files
  whose extension is not an image's are skipped.

Example::

    python -m tensorpack_lite.dataflow.shards.convert images ~/data/train s3://bucket/train \\
        --shard-bytes 64MB

A bad source stops with the reason and the culprit named (exit code 2); a progress bar counts
the datapoints written.
"""

import argparse
import importlib
import os
import re
import sys

from ...utils import logger
from ...utils.utils import get_tqdm
from ..base import DataFlow, LengthUnavailable, ProxyDataFlow
from ..image import ImageFileLabelData
from ..serialize import LMDBSerializer, TFRecordSerializer
from .writer import save_shards

__all__ = ['dataflow_from_callable', 'lmdb_source', 'tfrecord_source', 'image_folder', 'IMAGE_EXTENSIONS',
           'convert', 'main']

IMAGE_EXTENSIONS = ('.jpg', '.jpeg', '.png', '.bmp', '.webp', '.tif', '.tiff', '.gif', '.ppm', '.pgm')
"""The file extensions (lower case) :func:`image_folder` takes as images."""

_SIZE = re.compile(r'^\s*(\d+(?:\.\d*)?)\s*([kmgt]?i?b?)\s*$', re.IGNORECASE)
_UNITS = {'': 1, 'b': 1, 'k': 10 ** 3, 'm': 10 ** 6, 'g': 10 ** 9, 't': 10 ** 12,
          'ki': 2 ** 10, 'mi': 2 ** 20, 'gi': 2 ** 30, 'ti': 2 ** 40}


def dataflow_from_callable(spec):
    """The DataFlow ``CALLABLE()`` returns, ``spec`` being ``'MODULE:CALLABLE'``.

    Raises:
        ValueError: ``spec`` is not of that form.
        ImportError: ``MODULE`` cannot be imported.
        AttributeError: it has no ``CALLABLE``.
        TypeError: ``CALLABLE`` is not callable, or returned something else than a DataFlow.
    """
    module_name, _, attribute = spec.partition(':')
    if not module_name or not attribute:
        raise ValueError("the DataFlow source must be given as MODULE:CALLABLE (e.g. mypkg.data:train_flow), "
                         "got {!r}".format(spec))
    try:
        obj = importlib.import_module(module_name)
    except ImportError as err:
        raise ImportError("cannot import the module {!r} of {!r}: {}".format(module_name, spec, err)) from err
    for part in attribute.split('.'):
        if not hasattr(obj, part):
            raise AttributeError("{!r}: {!r} has no attribute {!r}".format(spec, obj, part))
        obj = getattr(obj, part)
    if not callable(obj):
        raise TypeError("{!r} is a {}, not a callable returning a DataFlow".format(spec, type(obj).__name__))
    df = obj()
    if not isinstance(df, DataFlow):
        raise TypeError("{!r} returned a {}, not a DataFlow".format(spec, type(df).__name__))
    return df


def lmdb_source(path):
    """The datapoints of the LMDB database ``path`` written by ``LMDBSerializer``, in key order.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        ValueError: ``path`` is not such a database.
    """
    return LMDBSerializer.load(path, shuffle=False)


def tfrecord_source(path):
    """The datapoints of the TFRecord file ``path`` written by ``TFRecordSerializer``, in order.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        ValueError: ``path`` is not such a file (its first record is checked).
    """
    if not os.path.isfile(path):
        raise FileNotFoundError("the TFRecord file {} does not exist".format(path))
    try:
        df = TFRecordSerializer.load(path)   # reads every record's header
        df.reset_state()
        datapoints = iter(df)
        try:
            if next(datapoints, [None]) == []:   # the first record decodes as a datapoint
                raise ValueError("its first record has no component")
        finally:
            datapoints.close()
    except Exception as err:
        raise ValueError("{} is not a TFRecord file written by TFRecordSerializer ({}: {})".format(
            path, type(err).__name__, err)) from None
    return df


class _EncodedImageFiles(ImageFileLabelData):
    """``[the file's bytes, label]`` for each ``(file, label)``."""

    def _load(self, fname):
        with open(fname, 'rb') as f:
            return f.read()


def image_folder(directory, decode=False):
    """``[image, label]`` for each image file of the subfolders of ``directory``, one subfolder
    per class: ``image`` the file's encoded bytes, or the decoded HxWx3 BGR uint8 array if
    ``decode``; ``label`` the position of the subfolder among the sorted subfolders, an
    ``np.int32``. Files are in sorted order, class by class; files of other extensions than
    :data:`IMAGE_EXTENSIONS` are skipped. The DataFlow's ``classes`` lists the class names.

    Raises:
        FileNotFoundError: ``directory`` is not a directory.
        ValueError: it has no subfolder, or no image file in them.
    """
    if not os.path.isdir(directory):
        raise FileNotFoundError("the image folder {} does not exist (or is not a directory)".format(
            directory))
    classes = sorted(name for name in os.listdir(directory) if os.path.isdir(os.path.join(directory, name)))
    if not classes:
        raise ValueError("the image folder {} has no subfolder: it must hold one subfolder of images per "
                         "class".format(directory))
    imglist, skipped = [], 0
    for label, name in enumerate(classes):
        class_dir = os.path.join(directory, name)
        files = sorted(f for f in os.listdir(class_dir) if os.path.isfile(os.path.join(class_dir, f)))
        images = [f for f in files if os.path.splitext(f)[1].lower() in IMAGE_EXTENSIONS]
        skipped += len(files) - len(images)
        if not images:
            logger.warn("image_folder: the class {!r} ({}) has no image file".format(name, class_dir))
        imglist.extend((os.path.join(class_dir, f), label) for f in images)
    if not imglist:
        raise ValueError("the image folder {} has no image file (extensions {}) in its subfolders {}".format(
            directory, ', '.join(IMAGE_EXTENSIONS), ', '.join(classes)))
    logger.info("image_folder: {} images of {} classes in {}{}".format(
        len(imglist), len(classes), directory, "; {} other files skipped".format(skipped) if skipped else ''))
    df = ImageFileLabelData(imglist, shuffle=False) if decode else _EncodedImageFiles(imglist, shuffle=False)
    df.classes = classes
    return df


class _Progress(ProxyDataFlow):
    """``ds`` counted by a progress bar."""

    def __init__(self, ds, desc):
        super().__init__(ds)
        self.desc = desc

    def __iter__(self):
        try:
            total = len(self.ds)
        except LengthUnavailable:
            total = None
        with get_tqdm(total=total, desc=self.desc, unit='dp') as bar:
            for dp in self.ds:
                yield dp
                bar.update(1)


def convert(df, url, shard_bytes=None, storage_options=None, progress=True):
    """Write one epoch of the DataFlow ``df`` to shards at ``url`` (``save_shards``), with a
    progress bar if ``progress``; returns what ``save_shards`` returns."""
    kwargs = {} if shard_bytes is None else {'shard_bytes': shard_bytes}
    if progress:
        df = _Progress(df, 'shards to {}'.format(url))
    return save_shards(df, url, storage_options=storage_options, **kwargs)


def _byte_size(text):
    """``'64MB'`` -> 64000000, ``'1GiB'`` -> 2**30, ``'1000'`` -> 1000."""
    found = _SIZE.match(text)
    unit = found and found.group(2).lower().rstrip('b')
    if found is None or unit not in _UNITS:
        raise argparse.ArgumentTypeError("{!r} is not a size in bytes (e.g. 64MB, 1GiB, 1000000)".format(
            text))
    size = int(float(found.group(1)) * _UNITS[unit])
    if size < 1:
        raise argparse.ArgumentTypeError("the size must be at least 1 byte, got {!r}".format(text))
    return size


def _storage_option(text):
    key, sep, value = text.partition('=')
    if not sep or not key:
        raise argparse.ArgumentTypeError("a storage option is KEY=VALUE, got {!r}".format(text))
    return key, value


_SOURCES = {
    'dataflow': (dataflow_from_callable, 'MODULE:CALLABLE', 'the DataFlow CALLABLE() returns'),
    'lmdb': (lmdb_source, 'PATH', 'an LMDB database written by LMDBSerializer'),
    'tfrecord': (tfrecord_source, 'PATH', 'a TFRecord file written by TFRecordSerializer'),
    'images': (image_folder, 'DIR', 'a folder of one subfolder of images per class -> [bytes, label]'),
}


def _parser():
    parser = argparse.ArgumentParser(
        prog='python -m tensorpack_lite.dataflow.shards.convert',
        description="Convert a DataFlow, an LMDB or TFRecord file or an image folder into shards at a local "
                    "directory or an s3:// / gs:// URL.")
    parser.add_argument('kind', choices=sorted(_SOURCES), help='the kind of source')
    parser.add_argument('source', help='; '.join('{}: {} ({})'.format(kind, meta, what)
                                                 for kind, (_, meta, what) in sorted(_SOURCES.items())))
    parser.add_argument('url', help='where the shards go: a local directory, s3://bucket/path or gs://...')
    parser.add_argument('--shard-bytes', type=_byte_size, metavar='SIZE',
                        help="the size of a shard (e.g. 64MB, 1GiB; default: save_shards' 64 MiB)")
    parser.add_argument('--decode', action='store_true',
                        help='images: store the decoded HxWx3 BGR uint8 arrays instead of the files\' bytes')
    parser.add_argument('--storage-option', type=_storage_option, action='append', default=[],
                        metavar='KEY=VALUE',
                        help="fsspec's storage options for the URL (repeatable), e.g. "
                             "endpoint_url=http://127.0.0.1:9000")
    parser.add_argument('--no-progress', action='store_true', help='no progress bar')
    return parser


def main(argv=None):
    """The command line; returns the exit code (0: converted; a bad source is a usage error)."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.decode and args.kind != 'images':
        parser.error("--decode is for the images source only")
    make = _SOURCES[args.kind][0]
    try:
        df = make(args.source, decode=True) if args.decode else make(args.source)
    except (OSError, ValueError, TypeError, ImportError, AttributeError) as err:
        parser.error("{} source {}: {}".format(args.kind, args.source, err))
    convert(df, args.url, shard_bytes=args.shard_bytes, storage_options=dict(args.storage_option) or None,
            progress=not args.no_progress)
    return 0


if __name__ == '__main__':
    sys.exit(main())
