"""Places365-Standard, the low-resolution images in the "easy directory structure"."""

import os

from ...utils import logger
from ..image import ImageFileLabelData

__all__ = ['Places365Standard']


class Places365Standard(ImageFileLabelData):
    """Produces ``[image, label]`` from Places365-Standard: the image is uint8 256x256x3 (BGR), as
    decoded from its file, the label an ``np.int32`` in 0..364.

    ``dir`` is the extracted ``places365standard_easyformat.tar``: ``dir/train.txt`` and
    ``dir/val.txt`` list one image per line, as a path relative to ``dir`` whose second part is
    the category (``train/airfield/00000001.jpg``). Labels number the categories in alphabetical
    order (the order of the official ``categories_places365.txt``).

    Args:
        dir (str): the dataset directory.
        name (str): 'train' or 'val'.
        shuffle (bool): shuffle the order in every epoch; None (the default) shuffles 'train' only.

    Example::

        df = Places365Standard('/data/places365_standard', 'val')
        names = df.get_label_names()
    """

    SPLITS = ('train', 'val')

    def __init__(self, dir, name, shuffle=None):
        if name not in self.SPLITS:
            raise ValueError("Places365Standard: name must be 'train' or 'val', got {!r}.".format(name))
        dir = os.path.expanduser(dir)
        list_file = os.path.join(dir, name + '.txt')
        if not os.path.isfile(list_file):
            raise FileNotFoundError(
                "Places365Standard: '{}' does not exist. Nothing is downloaded: get "
                "places365standard_easyformat.tar (small images, 256x256) from "
                "http://places2.csail.mit.edu/download.html and extract it; dir is the "
                "places365_standard directory it contains.".format(list_file))
        self.name = name
        entries = self._read_list(list_file)
        self._labels = sorted({category for _, category in entries})
        label_of = {category: label for label, category in enumerate(self._labels)}
        imglist = [(os.path.join(dir, path), label_of[category]) for path, category in entries]
        logger.info("Places365Standard: {} images listed in {}.".format(len(imglist), list_file))
        super(Places365Standard, self).__init__(imglist, name == 'train' if shuffle is None else shuffle)

    @staticmethod
    def _read_list(list_file):
        """(relative path, category) of every image listed in ``list_file``."""
        entries = []
        with open(list_file) as f:
            for number, line in enumerate(f, 1):
                if not line.strip():
                    continue
                path = line.split()[0]
                parts = path.split('/')
                if len(parts) < 3:
                    raise ValueError("Places365Standard: line {} of '{}' should be a path like 'train/"
                                     "<category>/<file>.jpg', got {!r}.".format(number, list_file, path))
                entries.append((path, parts[1]))
        if not entries:
            raise ValueError("Places365Standard: '{}' lists no image.".format(list_file))
        return entries

    def get_label_names(self):
        """The category of each label (list of str, alphabetical)."""
        return list(self._labels)
