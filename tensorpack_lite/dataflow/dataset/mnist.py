"""MNIST and Fashion-MNIST, read from the standard IDX files (gzipped or not) in a directory."""

import gzip
import zlib

import numpy as np

from .common import ImageLabelData, find_dataset_file, get_dataset_path

__all__ = ['Mnist', 'FashionMnist', 'read_idx']

IDX_LABELS_MAGIC = 2049   # unsigned bytes, 1 dimension
IDX_IMAGES_MAGIC = 2051   # unsigned bytes, 3 dimensions


def _read_bytes(path):
    """The (decompressed, for a '.gz' path) content of ``path``."""
    if not path.endswith('.gz'):
        with open(path, 'rb') as f:
            return f.read()
    try:
        with gzip.open(path, 'rb') as f:
            return f.read()
    except (OSError, EOFError, zlib.error) as err:
        raise ValueError("'{}' is not a valid gzip file ({}). Delete it and get the file again."
                         .format(path, err)) from err


def read_idx(path, magic):
    """The array stored in an IDX file of unsigned bytes (as MNIST's files are).

    Args:
        path (str): the file; read through gzip when it ends with '.gz'.
        magic (int): the magic number the file must start with: 2051 for images
            (an N x rows x cols array), 2049 for labels (N values).

    Returns:
        np.ndarray: uint8, of the shape the header gives.

    Raises:
        ValueError: naming the file, when its magic number or its size is wrong.
    """
    data = _read_bytes(path)
    found = int.from_bytes(data[:4], 'big') if len(data) >= 4 else None
    if found != magic:
        raise ValueError(
            "'{}' is not an IDX file of the expected kind: its magic number is {}, expected {} "
            "({}). The file is corrupt or is not the MNIST file its name says.".format(
                path, found, magic, 'images' if magic == IDX_IMAGES_MAGIC else 'labels'))
    ndim = magic & 0xff
    header = 4 + 4 * ndim
    dims = tuple(int(d) for d in np.frombuffer(data[4:header], dtype='>u4'))
    count = int(np.prod(dims))
    if len(dims) != ndim or len(data) - header != count:
        raise ValueError("'{}' is truncated or corrupt: its header announces an array of shape {} "
                         "({} bytes) but {} bytes of data follow.".format(
                             path, dims, count, max(len(data) - header, 0)))
    return np.frombuffer(data, dtype=np.uint8, count=count, offset=header).reshape(dims)


class Mnist(ImageLabelData):
    """Produces ``[image, label]`` from MNIST: the image is float32 28x28 in the range [0, 1],
    the label an ``np.int32`` in 0..9.

    The files are the standard IDX files, gzipped ('train-images-idx3-ubyte.gz') or not
    ('train-images-idx3-ubyte'): ``train-images-idx3-ubyte``, ``train-labels-idx1-ubyte``
    (60000 images) and ``t10k-images-idx3-ubyte``, ``t10k-labels-idx1-ubyte`` (10000).
    Nothing is downloaded: a missing file raises FileNotFoundError naming it.

    Args:
        train_or_test (str): 'train' or 'test'.
        shuffle (bool): shuffle the order in every epoch.
        dir (str): the directory of the files; defaults to ``$TENSORPACK_DATASET/mnist_data``
            (``~/tensorpack_data/mnist_data`` when the variable is not set).

    Example::

        df = Mnist('train', dir='/data/mnist')
        df.reset_state()
        image, label = next(iter(df))
    """

    DIR_NAME = 'mnist_data'
    WHERE_TO_GET = ("download the four files from http://yann.lecun.com/exdb/mnist/ "
                    "(or a mirror, e.g. https://ossci-datasets.s3.amazonaws.com/mnist/)")
    FILES = {'train': ('train-images-idx3-ubyte', 'train-labels-idx1-ubyte'),
             'test': ('t10k-images-idx3-ubyte', 't10k-labels-idx1-ubyte')}

    def __init__(self, train_or_test, shuffle=True, dir=None):
        name = type(self).__name__
        if train_or_test not in self.FILES:
            raise ValueError("{}: train_or_test must be 'train' or 'test', got {!r}".format(
                name, train_or_test))
        self.train_or_test = train_or_test
        self.dir = get_dataset_path(self.DIR_NAME) if dir is None else dir
        image_file, label_file = (
            find_dataset_file(self.dir, [base + '.gz', base], name, self.WHERE_TO_GET)
            for base in self.FILES[train_or_test])
        images = read_idx(image_file, IDX_IMAGES_MAGIC)
        labels = read_idx(label_file, IDX_LABELS_MAGIC)
        if len(images) != len(labels):
            raise ValueError("{}: '{}' holds {} images but '{}' holds {} labels.".format(
                name, image_file, len(images), label_file, len(labels)))
        super(Mnist, self).__init__(images, labels, shuffle)

    def _convert_image(self, image):
        return image.astype(np.float32) / np.float32(255)


class FashionMnist(Mnist):
    """Produces ``[image, label]`` from Fashion-MNIST, exactly as :class:`Mnist` does (same
    file names and format); the default directory is ``$TENSORPACK_DATASET/fashion_mnist_data``.
    """

    DIR_NAME = 'fashion_mnist_data'
    WHERE_TO_GET = ("download the four files from https://github.com/zalandoresearch/fashion-mnist "
                    "(directory data/fashion)")
