"""CIFAR-10 and CIFAR-100, read from the "python version" pickle batches in a directory."""

import os
import pickle

import numpy as np

from .common import ImageLabelData, find_dataset_file, get_dataset_path

__all__ = ['CifarBase', 'Cifar10', 'Cifar100']


def _get(dic, key):
    """``dic[key]`` for a key stored as bytes (the original files) or as str."""
    if key.encode() in dic:
        return dic[key.encode()]
    return dic[key]


def _load_pickle(path):
    """The dict pickled in ``path``; ValueError naming the file when it is not one."""
    try:
        with open(path, 'rb') as f:
            obj = pickle.load(f, encoding='bytes')
    except Exception as err:
        raise ValueError("'{}' is not a readable CIFAR pickle file ({}: {}).".format(
            path, type(err).__name__, err)) from err
    if not isinstance(obj, dict):
        raise ValueError("'{}' should hold a pickled dict, got a {}.".format(path, type(obj).__name__))
    return obj


class CifarBase(ImageLabelData):
    """Produces ``[image, label]`` from a CIFAR dataset: the image is float32 32x32x3 (RGB)
    with values in [0, 255], the label an ``np.int32``.

    The files are the pickled batches of the "python version" of the dataset, found in
    ``dir/<FOLDER>/`` (the folder the archive extracts to) or directly in ``dir``. Nothing is
    downloaded: a missing file raises FileNotFoundError naming it. The files are pickles, which
    can run code when loaded: use only files from a source you trust.

    Subclasses say which files and keys hold the data (:attr:`TRAIN_FILES`, :attr:`TEST_FILES`,
    :attr:`LABEL_KEY`, ...).

    Args:
        train_or_test (str): 'train' or 'test'.
        shuffle (bool): shuffle the order in every epoch; None (the default) shuffles the
            training set only.
        dir (str): the directory; defaults to ``$TENSORPACK_DATASET/<DIR_NAME>``.
    """

    DIR_NAME = None
    FOLDER = None
    TRAIN_FILES = ()
    TEST_FILES = ()
    META_FILE = None
    LABEL_KEY = None
    LABEL_NAMES_KEY = None
    WHERE_TO_GET = None

    def __init__(self, train_or_test, shuffle=None, dir=None):
        name = type(self).__name__
        if train_or_test not in ('train', 'test'):
            raise ValueError("{}: train_or_test must be 'train' or 'test', got {!r}".format(
                name, train_or_test))
        self.train_or_test = train_or_test
        self.dir = get_dataset_path(self.DIR_NAME) if dir is None else dir
        images, labels = self._read_split(train_or_test)
        if shuffle is None:
            shuffle = train_or_test == 'train'
        super(CifarBase, self).__init__(images, labels, shuffle)

    def _find(self, filename):
        return find_dataset_file(self.dir, [os.path.join(self.FOLDER, filename), filename],
                                 type(self).__name__, self.WHERE_TO_GET)

    def _read_split(self, train_or_test):
        """uint8 images (N, 32, 32, 3) and int labels (N,) of the 'train' or 'test' files."""
        files = self.TRAIN_FILES if train_or_test == 'train' else self.TEST_FILES
        parts = [self._read_batch(self._find(f)) for f in files]
        return (np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]))

    def _read_batch(self, path):
        dic = _load_pickle(path)
        try:
            data = np.asarray(_get(dic, 'data'))
            labels = np.asarray(_get(dic, self.LABEL_KEY))
        except KeyError as err:
            raise ValueError("'{}' has no {} entry: it is not a {} batch file.".format(
                path, err, type(self).__name__)) from None
        if data.ndim != 2 or data.shape[1] != 3 * 32 * 32 or len(labels) != len(data):
            raise ValueError("'{}': expected N x 3072 image data and N labels, got data of shape {} "
                             "and {} labels.".format(path, data.shape, len(labels)))
        images = data.astype(np.uint8).reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
        return np.ascontiguousarray(images), labels

    def get_per_pixel_mean(self, names=('train', 'test')):
        """The mean image (float32 32x32x3) of all images in the splits ``names``."""
        total, count = np.zeros((32, 32, 3), dtype=np.float64), 0
        for split in names:
            if split not in ('train', 'test'):
                raise ValueError("{}.get_per_pixel_mean(): unknown split {!r}, expected 'train' "
                                 "or 'test'".format(type(self).__name__, split))
            images = self._images if split == self.train_or_test else self._read_split(split)[0]
            total += images.sum(axis=0, dtype=np.float64)
            count += len(images)
        return (total / count).astype(np.float32)

    def get_per_channel_mean(self, names=('train', 'test')):
        """The mean of each of the three channels (float32, shape (3,)) over the splits ``names``."""
        return self.get_per_pixel_mean(names).mean(axis=(0, 1))

    def get_label_names(self):
        """The name of each class (list of str), read from the dataset's meta file."""
        names = _get(_load_pickle(self._find(self.META_FILE)), self.LABEL_NAMES_KEY)
        return [n.decode() if isinstance(n, bytes) else n for n in names]


class Cifar10(CifarBase):
    """CIFAR-10 (see :class:`CifarBase`): 50000 training and 10000 test images in 10 classes,
    from ``data_batch_1`` .. ``data_batch_5`` and ``test_batch`` in ``cifar-10-batches-py``.

    Example::

        df = Cifar10('train', dir='/data/cifar10_data')
        mean = df.get_per_pixel_mean()          # 32x32x3
        df.reset_state()
        image, label = next(iter(df))           # (32, 32, 3) float32 in [0, 255], int32
    """

    DIR_NAME = 'cifar10_data'
    FOLDER = 'cifar-10-batches-py'
    TRAIN_FILES = tuple('data_batch_{}'.format(k) for k in range(1, 6))
    TEST_FILES = ('test_batch',)
    META_FILE = 'batches.meta'
    LABEL_KEY = 'labels'
    LABEL_NAMES_KEY = 'label_names'
    WHERE_TO_GET = ("download cifar-10-python.tar.gz from https://www.cs.toronto.edu/~kriz/cifar.html "
                    "and extract it into the directory")


class Cifar100(CifarBase):
    """CIFAR-100 (see :class:`CifarBase`) with its 100 fine labels, from ``train`` and ``test``
    in ``cifar-100-python``."""

    DIR_NAME = 'cifar100_data'
    FOLDER = 'cifar-100-python'
    TRAIN_FILES = ('train',)
    TEST_FILES = ('test',)
    META_FILE = 'meta'
    LABEL_KEY = 'fine_labels'
    LABEL_NAMES_KEY = 'fine_label_names'
    WHERE_TO_GET = ("download cifar-100-python.tar.gz from https://www.cs.toronto.edu/~kriz/cifar.html "
                    "and extract it into the directory")
