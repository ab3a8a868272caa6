"""Caltech 101 Silhouettes (28x28), read from ``caltech101_silhouettes_28_split1.mat``."""

import os

import numpy as np

from .common import ImageLabelData, find_dataset_file, get_dataset_path, load_mat

__all__ = ['Caltech101Silhouettes']


class Caltech101Silhouettes(ImageLabelData):
    """Produces ``[image, label]`` from the Caltech 101 Silhouettes dataset: the image is float32
    28x28 with values 0 and 1, the label an ``np.int32`` in 0..100 (the file's 1..101 minus 1).

    The data is the file ``caltech101_silhouettes_28_split1.mat`` (4100 training, 2264
    validation and 2307 test images) in ``dir``; nothing is downloaded.

    Args:
        name (str): 'train', 'val' or 'test'.
        shuffle (bool): shuffle the order in every epoch.
        dir (str): the directory of the file; defaults to ``$TENSORPACK_DATASET/caltech101_data``.

    Example::

        df = Caltech101Silhouettes('train', dir='/data/caltech101')
    """

    _DIR_NAME = 'caltech101_data'
    FILE_NAME = 'caltech101_silhouettes_28_split1.mat'
    SPLITS = ('train', 'val', 'test')
    WHERE_TO_GET = ("download caltech101_silhouettes_28_split1.mat from "
                    "https://people.cs.umass.edu/~marlin/data.shtml into the directory")

    def __init__(self, name, shuffle=True, dir=None):
        if name not in self.SPLITS:
            raise ValueError("Caltech101Silhouettes: name must be one of {}, got {!r}.".format(
                self.SPLITS, name))
        self.name = name
        directory = get_dataset_path(self._DIR_NAME) if dir is None else os.path.expanduser(dir)
        path = find_dataset_file(directory, [self.FILE_NAME], 'Caltech101Silhouettes', self.WHERE_TO_GET)
        data_key, label_key = name + '_data', name + '_labels'
        data = load_mat(path, 'Caltech101Silhouettes', keys=(data_key, label_key))
        pixels, labels = np.asarray(data[data_key]), np.asarray(data[label_key]).reshape(-1)
        if pixels.ndim != 2 or pixels.shape[1] != 28 * 28 or len(pixels) != len(labels):
            raise ValueError("Caltech101Silhouettes: '{}': expected {} of shape N x 784 and N {}, got shape "
                             "{} and {} labels.".format(path, data_key, label_key, pixels.shape, len(labels)))
        images = pixels.reshape(-1, 28, 28).astype(np.float32)
        super(Caltech101Silhouettes, self).__init__(images, labels.astype(np.int64) - 1, shuffle)
