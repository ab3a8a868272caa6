"""Image DataFlows: images decoded from files, and image augmentors applied to the image (and
coordinate) components of datapoints.

Images are decoded with OpenCV, imported when first needed (``pip install 'tensorpack_lite[image]'``).

Example::

    from tensorpack_lite.dataflow.image import AugmentImageComponent, ImageFromFile
    from tensorpack_lite.dataflow import imgaug

    df = ImageFromFile(['a.jpg', 'b.png'], channel=3, resize=(64, 64))    # [RGB image]
    df = AugmentImageComponent(df, [imgaug.Flip(horiz=True)], index=0)
"""

import os

import numpy as np

from ..utils import logger
from ..utils.argtools import shape2d
from ..utils.develop import import_optional
from .common import MapData, MapDataComponent
from .raw import IndexedData

__all__ = ['ImageFromFile', 'AugmentImageComponent', 'AugmentImageComponents',
           'AugmentImageCoordinates', 'read_image', 'ImageFileLabelData']


def _cv2(purpose):
    return import_optional('cv2', extra='image', purpose=purpose)


def read_image(path, color=True, purpose='read_image'):
    """Decode the image file ``path`` with OpenCV.

    Args:
        path (str): the file (any format OpenCV reads: JPEG, PNG, ...).
        color (bool): True for an HxWx3 BGR array (gray images are converted), False for an HxW
            gray array.
        purpose (str): who reads the image, for error messages (e.g. ``'ILSVRC12'``).

    Returns:
        np.ndarray: uint8.

    Raises:
        FileNotFoundError: naming ``path`` when it does not exist.
        ValueError: naming ``path`` when OpenCV cannot decode it.
    """
    cv2 = _cv2(purpose)
    img = cv2.imread(path, cv2.IMREAD_COLOR if color else cv2.IMREAD_GRAYSCALE)
    if img is None:
        if not os.path.isfile(path):
            raise FileNotFoundError("{}: the image file '{}' does not exist.".format(purpose, path))
        raise ValueError("{}: OpenCV cannot decode '{}' as an image (the file is corrupt, truncated, or "
                         "in a format OpenCV does not read).".format(purpose, path))
    return img


class ImageFromFile(IndexedData):
    """Produces ``[image]`` for each image file of a list: an HxWx3 RGB (``channel=3``) or HxWx1
    gray (``channel=1``) uint8 array.

    Args:
        files (list[str]): the image files.
        channel (int): 3 (gray files are converted to color) or 1.
        resize (int or (h, w)): resize every image to this size (bilinear), when given.
        shuffle (bool): produce the files in a new random order every epoch (``files`` itself
            is not reordered).

    Example::

        df = ImageFromFile(glob.glob('photos/*.jpg'), channel=3, resize=224, shuffle=True)
    """

    def __init__(self, files, channel=3, resize=None, shuffle=False):
        self.files = list(files)
        if not self.files:
            raise ValueError("ImageFromFile: no image files given (files is empty).")
        if channel not in (1, 3):
            raise ValueError("ImageFromFile: channel must be 1 or 3, got {!r}.".format(channel))
        self.channel = int(channel)
        self.resize = None if resize is None else shape2d(resize)
        self.shuffle = shuffle
        _cv2('ImageFromFile')   # a missing OpenCV is an error now, not at the first datapoint

    def __len__(self):
        return len(self.files)

    def _datapoint_at(self, k):
        return [self._load(self.files[k])]

    def _load(self, path):
        img = read_image(path, color=self.channel == 3, purpose='ImageFromFile')
        if self.resize is not None:
            height, width = self.resize
            img = _cv2('ImageFromFile').resize(img, (width, height))
        if self.channel == 1:
            return img[:, :, np.newaxis]
        return np.ascontiguousarray(img[:, :, ::-1])


class ImageFileLabelData(IndexedData):
    """Produces ``[image, label]`` for each ``(file, label)`` of a list: the image decoded when
    produced, as an HxWx3 BGR uint8 array; the label an ``np.int32``. The image datasets
    (ILSVRC12, TinyImageNet, Places365Standard) are this DataFlow over the list their files give;
    they may override :meth:`_load` (e.g. to produce the path, or to resolve a relative one).

    Args:
        imglist (list[(str, int)]): the image files and their labels (kept as ``self.imglist``).
        shuffle (bool): produce them in a new random order every epoch.
    """

    def __init__(self, imglist, shuffle):
        self.imglist = imglist
        self.shuffle = shuffle

    def __len__(self):
        return len(self.imglist)

    def _datapoint_at(self, k):
        fname, label = self.imglist[k]
        return [self._load(fname), np.int32(label)]

    def _load(self, fname):
        """The first component of the datapoint of the file ``fname`` of imglist: the decoded image."""
        return read_image(fname, purpose=type(self).__name__)


# ----- augmenting datapoints ---------------------------------------------------------------------

def _as_augmentor_list(augmentors, owner):
    """``augmentors`` as an AugmentorList (a list of augmentors is wrapped)."""
    from .imgaug.base import AugmentorList, ImageAugmentor   # needs OpenCV: imported on use
    if isinstance(augmentors, AugmentorList):
        return augmentors
    if isinstance(augmentors, ImageAugmentor):
        return AugmentorList([augmentors])
    if isinstance(augmentors, (list, tuple)):
        return AugmentorList(list(augmentors))
    raise TypeError("{}: augmentors must be a list of ImageAugmentor or an AugmentorList, got a {}."
                    .format(owner, type(augmentors).__name__))


def _check_image(img, owner, key):
    if not isinstance(img, np.ndarray):
        raise TypeError("{}: component {!r} should be an image (a numpy array), got a {}.".format(
            owner, key, type(img).__name__))
    if img.ndim not in (2, 3):
        raise ValueError("{}: component {!r} should be an image of shape HxW or HxWxC, got an array of "
                         "shape {}.".format(owner, key, img.shape))
    if img.dtype != np.uint8 and not np.issubdtype(img.dtype, np.floating):
        raise TypeError("{}: component {!r} is an image of dtype {}; images must be uint8 or floating "
                        "point.".format(owner, key, img.dtype))


def _check_coords(coords, owner, key):
    if not isinstance(coords, np.ndarray) or coords.ndim != 2 or coords.shape[1] != 2 \
            or not np.issubdtype(coords.dtype, np.floating):
        described = ('an array of shape {} and dtype {}'.format(coords.shape, coords.dtype)
                     if isinstance(coords, np.ndarray) else 'a {}'.format(type(coords).__name__))
        raise TypeError("{}: component {!r} should hold coordinates, an Nx2 floating-point array of (x, y) "
                        "rows; got {}.".format(owner, key, described))


def _component(dp, key, owner):
    try:
        return dp[key]
    except (IndexError, KeyError, TypeError):
        raise ValueError("{}: the datapoint (a {} of {} components) has no component {!r}.".format(
            owner, type(dp).__name__, len(dp) if hasattr(dp, '__len__') else '?', key)) from None


class _AugmentationErrors(object):
    """Counts the exceptions raised while augmenting, and re-raises them or (when catching) logs
    them and drops the datapoint. The log is rate-limited: the first 9 errors, then every 100th.
    """

    def __init__(self, owner, catch_exceptions):
        self.owner = owner
        self.catch_exceptions = bool(catch_exceptions)
        self.count = 0

    def call(self, func, arg):
        """``func(arg)``, or None when it raised and exceptions are caught."""
        try:
            return func(arg)
        except Exception:
            self.count += 1
            if not self.catch_exceptions:
                raise
            if self.count < 10 or self.count % 100 == 0:
                logger.exception("{}: {} augmentation error(s) so far; the datapoint is skipped.".format(
                    self.owner, self.count))
            return None


class _ImageAugmentation(MapData):
    """What the augmenting DataFlows share: their augmentors ``self.augs``, reset with the input
    DataFlow; the optional copy of the inputs; the handling of errors; their state, which adds
    the augmentors' random generators to MapData's (a 2.5 kB copy per augmentor per call).

    Subclasses implement :meth:`_check` (bad input: always raised) and :meth:`_augment` (its
    exceptions are skipped with ``catch_exceptions``); both receive what MapData(Component)
    gives the mapping function.
    """

    def _setup_augmentation(self, augmentors, copy, catch_exceptions):
        owner = type(self).__name__
        self.augs = _as_augmentor_list(augmentors, owner)
        self._copy = bool(copy)
        self._errors = _AugmentationErrors(owner, catch_exceptions)

    def reset_state(self):
        """Reset the input DataFlow and the augmentors (their random generators)."""
        super(_ImageAugmentation, self).reset_state()
        self.augs.reset_state()

    def get_state(self):
        state = super(_ImageAugmentation, self).get_state()
        state['augs'] = self.augs.get_state()
        return state

    def set_state(self, state):
        super(_ImageAugmentation, self).set_state(state)
        self.augs.set_state(state['augs'])

    def _copied(self, array):
        return array.copy() if self._copy else array

    def _map(self, value):
        self._check(value)
        return self._errors.call(self._augment, value)

    def _check(self, value):
        raise NotImplementedError("{} must implement _check().".format(type(self).__name__))

    def _augment(self, value):
        raise NotImplementedError("{} must implement _augment().".format(type(self).__name__))


class AugmentImageComponent(_ImageAugmentation, MapDataComponent):
    """Apply image augmentors to one image component of every datapoint.

    Args:
        ds (DataFlow): the input.
        augmentors (list[ImageAugmentor] or AugmentorList): applied in order.
        index (int or str): index or key of the image component.
        copy (bool): augment a copy of the image, so that augmentors that work in place leave
            the input datapoint intact. Turn it off to save time when that does not matter.
        catch_exceptions (bool): skip a datapoint whose augmentation raises (logged, rate
            limited) instead of raising. An image of the wrong rank or dtype is always an error.

    Example::

        df = AugmentImageComponent(df, [imgaug.Resize((32, 32)), imgaug.Flip(horiz=True)])
    """

    def __init__(self, ds, augmentors, index=0, copy=True, catch_exceptions=False):
        self._setup_augmentation(augmentors, copy, catch_exceptions)
        super(AugmentImageComponent, self).__init__(ds, self._map, index)

    def _check(self, img):
        _check_image(img, type(self).__name__, self._index)

    def _augment(self, img):
        return self.augs.augment(self._copied(img))


class _AugmentDatapoint(_ImageAugmentation):
    """An augmentation that rewrites several components of the (list or dict) datapoint."""

    def _component(self, dp, key):
        return _component(dp, key, type(self).__name__)

    def _augment(self, dp):
        dp = list(dp) if isinstance(dp, tuple) else dp     # MapData gave a shallow copy
        self._augment_components(dp)
        return dp

    def _augment_components(self, dp):
        """Replace the augmented components of the (mutable) datapoint ``dp``."""
        raise NotImplementedError("{} must implement _augment_components().".format(type(self).__name__))


class AugmentImageCoordinates(_AugmentDatapoint):
    """Apply image augmentors to an image and, with the same transform, to its coordinates.

    Args:
        ds (DataFlow): the input.
        augmentors (list[ImageAugmentor] or AugmentorList): applied in order.
        img_index (int or str): index or key of the image component.
        coords_index (int or str): index or key of the coordinates: an Nx2 floating-point
            array of (x, y) rows.
        copy, catch_exceptions: as in :class:`AugmentImageComponent`.

    Example::

        df = AugmentImageCoordinates(df, [imgaug.Flip(horiz=True)], img_index=0, coords_index=1)
    """

    def __init__(self, ds, augmentors, img_index=0, coords_index=1, copy=True, catch_exceptions=False):
        self._setup_augmentation(augmentors, copy, catch_exceptions)
        self._img_index = img_index
        self._coords_index = coords_index
        super(AugmentImageCoordinates, self).__init__(ds, self._map)

    def _check(self, dp):
        owner = type(self).__name__
        _check_image(self._component(dp, self._img_index), owner, self._img_index)
        _check_coords(self._component(dp, self._coords_index), owner, self._coords_index)

    def _augment_components(self, dp):
        img = self._copied(dp[self._img_index])
        transform = self.augs.get_transform(img)
        dp[self._img_index] = transform.apply_image(img)
        dp[self._coords_index] = transform.apply_coords(self._copied(dp[self._coords_index]))


class AugmentImageComponents(_AugmentDatapoint):
    """Apply image augmentors to several components of every datapoint, with one transform:
    e.g. an image and its segmentation mask get the same crop and flip.

    The transform is drawn for the first component of ``index``; the other images must have the
    same height and width. Coordinates (Nx2 floating-point arrays of (x, y) rows) are moved along.

    Args:
        ds (DataFlow): the input.
        augmentors (list[ImageAugmentor] or AugmentorList): applied in order.
        index (tuple): indices or keys of the image components.
        coords_index (tuple): indices or keys of the coordinate components.
        copy, catch_exceptions: as in :class:`AugmentImageComponent`.

    Example::

        ds = MyDataFlow()   # produces [image (HxWx3), mask (HxW), keypoints (Nx2)]
        ds = AugmentImageComponents(ds, augs, index=(0, 1), coords_index=(2,))
    """

    def __init__(self, ds, augmentors, index=(0, 1), coords_index=(), copy=True, catch_exceptions=False):
        self._setup_augmentation(augmentors, copy, catch_exceptions)
        self._index = tuple(index)
        self._coords_index = tuple(coords_index)
        if not self._index:
            raise ValueError("AugmentImageComponents: index must name at least one image component.")
        super(AugmentImageComponents, self).__init__(ds, self._map)

    def _check(self, dp):
        owner = type(self).__name__
        for key in self._index:
            _check_image(self._component(dp, key), owner, key)
        for key in self._coords_index:
            _check_coords(self._component(dp, key), owner, key)

    def _augment_components(self, dp):
        first = self._copied(dp[self._index[0]])
        transform = self.augs.get_transform(first)
        dp[self._index[0]] = transform.apply_image(first)
        for key in self._index[1:]:
            dp[key] = transform.apply_image(self._copied(dp[key]))
        for key in self._coords_index:
            dp[key] = transform.apply_coords(self._copied(dp[key]))
