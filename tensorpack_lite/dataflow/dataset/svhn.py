"""SVHN (Street View House Numbers), the cropped-digits format: the official ``*_32x32.mat`` files.

"""

import os

import numpy as np

from .common import ImageLabelData, find_dataset_file, get_dataset_path, load_mat

__all__ = ['SVHNDigit']


class SVHNDigit(ImageLabelData):
    """Produces ``[image, label]`` from the SVHN cropped digits: the image is float32 32x32x3
    (RGB) with values in [0, 255], the label an ``np.int32`` in 0..9 (the files' label 10, for
    the digit 0, becomes 0).

    The files are the official ``train_32x32.mat`` (73257 images), ``test_32x32.mat`` (26032)
    and ``extra_32x32.mat`` (531131) in ``data_dir``. Nothing is downloaded. A file is read once
    per process and kept in memory for later instances.

    Args:
        name (str): 'train', 'test' or 'extra'.
        data_dir (str): the directory of the files; defaults to ``$TENSORPACK_DATASET/svhn_data``.
        shuffle (bool): shuffle the order in every epoch.

    Example::

        df = SVHNDigit('train', data_dir='/data/svhn')
        mean = SVHNDigit.get_per_pixel_mean(('train',), data_dir='/data/svhn')
    """

    DIR_NAME = 'svhn_data'
    SPLITS = ('train', 'test', 'extra')
    WHERE_TO_GET = ("download {} from http://ufldl.stanford.edu/housenumbers/ (format 2, cropped digits) "
                    "into the directory (SVHNDigit's data_dir)")
    _Cache = {}   # (path, size, mtime) -> (images, labels)

    def __init__(self, name, data_dir=None, shuffle=True):
        self.name = name
        images, labels = self._load(name, data_dir)
        super(SVHNDigit, self).__init__(images, labels, shuffle)

    @classmethod
    def _load(cls, name, data_dir):
        """uint8 images (N, 32, 32, 3) and int labels (N,) of the split ``name``."""
        if name not in cls.SPLITS:
            raise ValueError("SVHNDigit: name must be one of {}, got {!r}.".format(cls.SPLITS, name))
        directory = get_dataset_path(cls.DIR_NAME) if data_dir is None else os.path.expanduser(data_dir)
        filename = name + '_32x32.mat'
        path = find_dataset_file(directory, [filename], 'SVHNDigit', cls.WHERE_TO_GET.format(filename),
                                 argument='data_dir')
        stat = os.stat(path)
        key = (os.path.realpath(path), stat.st_size, stat.st_mtime_ns)
        if key not in cls._Cache:
            cls._Cache[key] = cls._read(path)
        return cls._Cache[key]

    @staticmethod
    def _read(path):
        data = load_mat(path, 'SVHNDigit', keys=('X', 'y'))
        images, labels = data['X'], np.asarray(data['y']).reshape(-1)
        if images.ndim != 4 or images.shape[:3] != (32, 32, 3) or images.shape[3] != len(labels):
            raise ValueError("SVHNDigit: '{}' should hold X of shape 32x32x3xN and N labels y, got X of "
                             "shape {} and {} labels.".format(path, images.shape, len(labels)))
        labels = labels.astype(np.int32)
        if labels.size and (labels.min() < 1 or labels.max() > 10):
            raise ValueError("SVHNDigit: '{}' has labels outside 1..10 (found {}..{}).".format(
                path, labels.min(), labels.max()))
        labels[labels == 10] = 0
        images = np.ascontiguousarray(images.transpose(3, 0, 1, 2).astype(np.uint8))
        return images, labels

    @staticmethod
    def get_per_pixel_mean(names=('train', 'test', 'extra'), data_dir=None):
        """The mean image (float32 32x32x3, RGB) of all images of the splits ``names``.

        Args:
            names (tuple[str]): splits among 'train', 'test', 'extra'.
            data_dir (str): the directory of the files, as in :class:`SVHNDigit`.
        """
        total, count = np.zeros((32, 32, 3), dtype=np.float64), 0
        for name in names:
            images, _ = SVHNDigit._load(name, data_dir)
            total += images.sum(axis=0, dtype=np.float64)
            count += len(images)
        return (total / max(count, 1)).astype(np.float32)
