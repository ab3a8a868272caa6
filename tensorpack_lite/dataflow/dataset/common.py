"""What the datasets share: where their files live, and a DataFlow over image/label arrays.

(:func:`get_dataset_path` and ``DATASET_ENV_VAR`` live in :mod:`tensorpack_lite.utils.fs`
and are re-exported here.)"""

import os

import numpy as np

from ...utils.develop import import_optional
from ...utils.fs import DATASET_ENV_VAR, get_dataset_path
from ..raw import IndexedData

__all__ = ['DATASET_ENV_VAR', 'get_dataset_path', 'find_dataset_file', 'load_mat', 'ImageLabelData']


def find_dataset_file(directory, candidates, dataset, where_to_get, argument='dir'):
    """The path of the first of ``candidates`` (file names) present in ``directory``.

    Args:
        argument (str): the reader's argument that names the directory, for the message (None when
            the directory is a required argument: the message then only says where to get the files).

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
    where = '' if argument is None else ', then pass {}= or set ${}'.format(argument, DATASET_ENV_VAR)
    raise FileNotFoundError("{}: file not found: {}{}. Nothing is downloaded: {}{} (see "
                            "docs/datasets.md).".format(dataset, tried, missing_dir, where_to_get, where))


def load_mat(path, dataset, keys=()):
    """The variables of the MATLAB file ``path`` (a dict), read with ``scipy.io.loadmat``.

    Args:
        path (str): the .mat file (MATLAB 5 format, as the datasets publish them).
        dataset (str): the dataset reading it, for messages.
        keys (tuple[str]): variables the file must have.

    Raises:
        ValueError: naming the file, when it cannot be read or lacks one of ``keys``.
    """
    import_optional('scipy', purpose='{} (reading .mat files)'.format(dataset))
    import scipy.io
    try:
        data = scipy.io.loadmat(path)
    except Exception as err:
        raise ValueError("{}: '{}' is not a readable MATLAB .mat file ({}: {}). The file is corrupt or "
                         "truncated: get it again.".format(dataset, path, type(err).__name__, err)) from err
    missing = [k for k in keys if k not in data]
    if missing:
        raise ValueError("{}: '{}' has no variable {} (it has {}): it is not the dataset's file.".format(
            dataset, path, ', '.join(repr(k) for k in missing),
            sorted(k for k in data if not k.startswith('__'))))
    return data


class ImageLabelData(IndexedData):
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

    def _datapoint_at(self, k):
        return [self._convert_image(self._images[k]), self._labels[k]]

    def _convert_image(self, image):
        """The produced form of one stored image: a new float32 array, values unchanged."""
        return image.astype(np.float32)
