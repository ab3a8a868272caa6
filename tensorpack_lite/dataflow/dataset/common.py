"""What the datasets share: where their files live, and a DataFlow over image/label arrays.

(:func:`get_dataset_path` and ``DATASET_ENV_VAR`` live in :mod:`tensorpack_lite.utils.fs`
and are re-exported here.)"""

import os

import numpy as np

from ...utils.fs import DATASET_ENV_VAR, get_dataset_path
from ..base import RNGDataFlow

__all__ = ['DATASET_ENV_VAR', 'get_dataset_path', 'find_dataset_file', 'ImageLabelData']


def find_dataset_file(directory, candidates, dataset, where_to_get):
    """The path of the first of ``candidates`` (file names) present in ``directory``.

    Raises:
        FileNotFoundError: naming every path tried, and saying ``where_to_get`` the files
            of ``dataset``.
    """
    paths = [os.path.join(directory, name) for name in candidates]
    for path in paths:
        if os.path.isfile(path):
            return path
    tried = ' or '.join("'{}'".format(p) for p in paths)
    missing_dir = '' if os.path.isdir(directory) else " (the directory '{}' does not exist)".format(directory)
    raise FileNotFoundError(
        "{}: file not found: {}{}. Nothing is downloaded: {}, then pass dir= or set ${} "
        "(see docs/datasets.md).".format(dataset, tried, missing_dir, where_to_get, DATASET_ENV_VAR))


class ImageLabelData(RNGDataFlow):
    """Datapoints ``[image, label]`` from an array of images and an array of labels in memory.

    Every epoch produces each image once, in a new random order when ``shuffle``.  Images are
    kept in their compact stored form and converted by :meth:`_convert_image` as they are
    produced, so each datapoint owns a fresh float32 array; labels are ``np.int32`` scalars.

    Args:
        images (np.ndarray): N images (any shape per image).
        labels (np.ndarray): N integer labels.
        shuffle (bool): shuffle the order in every epoch (with ``self.rng``).
    """

    def __init__(self, images, labels, shuffle):
        if len(images) != len(labels):
            raise ValueError("{}: {} images but {} labels.".format(
                type(self).__name__, len(images), len(labels)))
        self._images = images
        self._labels = np.asarray(labels, dtype=np.int32)
        self.shuffle = bool(shuffle)

    def __len__(self):
        return len(self._labels)

    def __iter__(self):
        order = np.arange(len(self._labels))
        if self.shuffle:
            self.rng.shuffle(order)
        for k in order:
            yield [self._convert_image(self._images[k]), self._labels[k]]

    def _convert_image(self, image):
        """The produced form of one stored image: a new float32 array, values unchanged."""
        return image.astype(np.float32)
