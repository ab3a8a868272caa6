"""BSDS500, the Berkeley Segmentation Data Set: images and their averaged human boundary maps."""

import glob
import os

import numpy as np

from ..image import read_image
from ..raw import IndexedData
from .common import DATASET_ENV_VAR, get_dataset_path, load_mat

__all__ = ['BSDS500']

IMG_H, IMG_W = 321, 481


def _landscape(array):
    """``array`` (HxW or HxWxC) with its first two axes swapped when it is taller than wide."""
    return array.swapaxes(0, 1) if array.shape[0] > array.shape[1] else array


class BSDS500(IndexedData):
    """Produces ``[image, boundaries]`` from BSDS500: the image is uint8 321x481x3 (BGR), the
    boundary map float32 321x481 in [0, 1], each pixel the fraction of the human annotators who
    drew a boundary there. Portrait images (481x321) and their maps are transposed to landscape.

    The data is the extracted ``BSR_bsds500.tgz``: ``data_dir/BSR/BSDS500/data/images/<name>/*.jpg``
    and ``data_dir/BSR/BSDS500/data/groundTruth/<name>/<image id>.mat``. All images of the split are
    read at construction. Nothing is downloaded.

    Args:
        name (str): 'train', 'val' or 'test'.
        data_dir (str): the directory holding ``BSR``; defaults to ``$TENSORPACK_DATASET/bsds500_data``.
        shuffle (bool): shuffle the order in every epoch.

    Example::

        df = BSDS500('train', data_dir='/data/bsds500')
    """

    DIR_NAME = 'bsds500_data'
    SPLITS = ('train', 'val', 'test')
    WHERE_TO_GET = ("download BSR_bsds500.tgz from https://www2.eecs.berkeley.edu/Research/Projects/CS/"
                    "vision/grouping/resources.html and extract it in the directory "
                    "(tar xzf BSR_bsds500.tgz)")

    def __init__(self, name, data_dir=None, shuffle=True):
        if name not in self.SPLITS:
            raise ValueError("BSDS500: name must be one of {}, got {!r}.".format(self.SPLITS, name))
        if data_dir is None:
            data_dir = get_dataset_path(self.DIR_NAME)
        data_dir = os.path.expanduser(data_dir)
        self.data_root = os.path.join(data_dir, 'BSR', 'BSDS500', 'data')
        image_dir = os.path.join(self.data_root, 'images', name)
        if not os.path.isdir(image_dir):
            raise FileNotFoundError(
                "BSDS500: the directory '{}' does not exist. Nothing is downloaded: {}, then pass data_dir= "
                "or set ${} (see docs/datasets.md).".format(image_dir, self.WHERE_TO_GET, DATASET_ENV_VAR))
        self.name = name
        self.shuffle = shuffle
        image_files = sorted(glob.glob(os.path.join(image_dir, '*.jpg')))
        if not image_files:
            raise FileNotFoundError("BSDS500: no .jpg image in '{}'.".format(image_dir))
        gt_dir = os.path.join(self.data_root, 'groundTruth', name)
        self.data = np.stack([self._read_image(f) for f in image_files])
        self.label = np.stack([self._read_boundaries(os.path.join(
            gt_dir, os.path.splitext(os.path.basename(f))[0] + '.mat')) for f in image_files])

    @staticmethod
    def _read_image(path):
        image = _landscape(read_image(path, purpose='BSDS500'))
        if image.shape[:2] != (IMG_H, IMG_W):
            raise ValueError("BSDS500: '{}' is {}x{}, expected {}x{} (or {}x{}).".format(
                path, image.shape[0], image.shape[1], IMG_H, IMG_W, IMG_W, IMG_H))
        return image

    @staticmethod
    def _read_boundaries(path):
        """The average of the boundary maps of all annotators in the ground-truth file ``path``."""
        if not os.path.isfile(path):
            raise FileNotFoundError("BSDS500: the ground-truth file '{}' does not exist.".format(path))
        annotations = load_mat(path, 'BSDS500', keys=('groundTruth',))['groundTruth'].reshape(-1)
        try:
            maps = [np.asarray(a['Boundaries'][0, 0], dtype=np.float32) for a in annotations]
        except (IndexError, KeyError, ValueError) as err:
            raise ValueError("BSDS500: '{}' should hold a cell array 'groundTruth' of structs with a "
                             "'Boundaries' field ({}).".format(path, err)) from None
        if not maps or any(m.shape != maps[0].shape for m in maps):
            raise ValueError("BSDS500: '{}' has no annotation, or boundary maps of different shapes."
                             .format(path))
        boundaries = _landscape(sum(maps) / np.float32(len(maps)))
        if boundaries.shape != (IMG_H, IMG_W):
            raise ValueError("BSDS500: the boundary maps in '{}' are {}x{}, expected {}x{}.".format(
                path, boundaries.shape[0], boundaries.shape[1], IMG_H, IMG_W))
        return boundaries

    def __len__(self):
        return len(self.data)

    def _datapoint_at(self, k):
        return [self.data[k].copy(), self.label[k].copy()]
