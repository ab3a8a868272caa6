"""Crops: random, central, of random shape, GoogleNet's crop-and-resize, and cutout."""

from numbers import Integral

import numpy as np

from ...utils.argtools import shape2d
from ...utils.develop import import_optional, log_deprecated
from .base import ImageAugmentor
from .misc import resize_shortest_edge
from .transform import CropTransform, PhotometricTransform, ResizeTransform, TransformList

cv2 = import_optional('cv2', extra='image', purpose='tensorpack_lite.dataflow.imgaug')

__all__ = ['RandomCrop', 'CenterCrop', 'RandomCropRandomShape', 'GoogleNetRandomCropAndResize',
           'RandomCutout']


def _check_fits(augmentor, img_shape, h, w):
    """Raise an error naming ``augmentor`` if an ``h x w`` region is larger than the image."""
    if h > img_shape[0] or w > img_shape[1]:
        raise ValueError("{}: cannot cut a {}x{} region out of an image of shape {}".format(
            augmentor, h, w, tuple(img_shape)))


def _centered_corner(img_h, img_w, h, w):
    """The (row, column) of the top-left pixel of the central ``h x w`` region."""
    return int((img_h - h) * 0.5), int((img_w - w) * 0.5)


class _FixedShapeCrop(ImageAugmentor):
    """Cuts out a region of shape ``crop_shape``; subclasses choose its top-left corner."""

    def __init__(self, crop_shape):
        super(_FixedShapeCrop, self).__init__()
        crop_shape = tuple(int(v) for v in shape2d(crop_shape))
        self._init(locals())

    def _corner(self, img_h, img_w):
        """The (row, column) of the region's top-left pixel in an ``img_h x img_w`` image."""
        raise NotImplementedError("{} must implement _corner(img_h, img_w)".format(type(self).__name__))

    def _get_transform(self, img):
        h, w = self.crop_shape
        _check_fits(self, img.shape, h, w)
        y0, x0 = self._corner(img.shape[0], img.shape[1])
        return CropTransform(y0, x0, h, w)


class RandomCrop(_FixedShapeCrop):
    """Cut out a region of fixed size at a random position.

    Args:
        crop_shape: ``(h, w)``, or an int for a square.
    """

    def _corner(self, img_h, img_w):
        y0 = self.rng.randint(img_h - self.crop_shape[0] + 1)
        x0 = self.rng.randint(img_w - self.crop_shape[1] + 1)
        return y0, x0


class CenterCrop(_FixedShapeCrop):
    """Cut out the central region of fixed size.

    Args:
        crop_shape: ``(h, w)``, or an int for a square.
    """

    def _corner(self, img_h, img_w):
        return _centered_corner(img_h, img_w, *self.crop_shape)


class RandomCropRandomShape(ImageAugmentor):
    """Cut out a region of random size (height in [hmin, hmax], width in [wmin, wmax], both
    ends included) at a random position.

    Args:
        wmin, hmin (int): the smallest width and height.
        wmax, hmax (int): the largest; None means the image's.
        max_aspect_ratio: deprecated, has no effect (as in tensorpack).
    """

    def __init__(self, wmin, hmin, wmax=None, hmax=None, max_aspect_ratio=None):
        if max_aspect_ratio is not None:
            log_deprecated("RandomCropRandomShape(max_aspect_ratio)", "It has no effect.")
        super(RandomCropRandomShape, self).__init__()
        self._init(locals())

    def _get_transform(self, img):
        hmax = self.hmax or img.shape[0]
        wmax = self.wmax or img.shape[1]
        h = self.rng.randint(self.hmin, hmax + 1)
        w = self.rng.randint(self.wmin, wmax + 1)
        _check_fits(self, img.shape, h, w)
        y0 = self.rng.randint(img.shape[0] - h + 1)
        x0 = self.rng.randint(img.shape[1] - w + 1)
        return CropTransform(y0, x0, h, w)


class GoogleNetRandomCropAndResize(ImageAugmentor):
    """The crop of "Going Deeper with Convolutions" (Szegedy et al.), as fb.resnet.torch does it:
    cut out a random region with a random share of the image's area and a random aspect ratio,
    then resize it to ``target_shape x target_shape``. When 10 tries find no region that fits,
    resize the shorter side to ``target_shape`` and take the central square.

    Args:
        crop_area_fraction (tuple): the range of the region's area, as fractions of the image's.
        aspect_ratio_range (tuple): the range of the region's width / height (either way round).
        target_shape (int): the output side.
        interp (int): an OpenCV interpolation flag.
    """

    def __init__(self, crop_area_fraction=(0.08, 1.), aspect_ratio_range=(0.75, 1.333),
                 target_shape=224, interp=cv2.INTER_LINEAR):
        super(GoogleNetRandomCropAndResize, self).__init__()
        self._init(locals())

    def _get_transform(self, img):
        h, w = img.shape[:2]
        size = self.target_shape
        for _ in range(10):
            area = self.rng.uniform(*self.crop_area_fraction) * h * w
            ratio = self.rng.uniform(*self.aspect_ratio_range)
            crop_w = int(np.sqrt(area * ratio) + 0.5)
            crop_h = int(np.sqrt(area / ratio) + 0.5)
            if self.rng.uniform() < 0.5:
                crop_w, crop_h = crop_h, crop_w
            if crop_h <= h and crop_w <= w:
                x0 = self.rng.randint(0, w - crop_w + 1)
                y0 = self.rng.randint(0, h - crop_h + 1)
                return TransformList([CropTransform(y0, x0, crop_h, crop_w),
                                      ResizeTransform(crop_h, crop_w, size, size, self.interp)])
        resize = resize_shortest_edge(h, w, size, self.interp)
        y0, x0 = _centered_corner(resize.new_h, resize.new_w, size, size)
        return TransformList([resize, CropTransform(y0, x0, size, size)])


class RandomCutout(ImageAugmentor):
    """Cutout (DeVries and Taylor, 2017): fill a random rectangle of the image with ``fill``.

    Args:
        h_range (int or tuple): the rectangle's height, or a ``[low, high)`` range for it.
        w_range (int or tuple): the same for its width.
        fill (float): the value of the rectangle's pixels.
    """

    def __init__(self, h_range, w_range, fill=0.):
        super(RandomCutout, self).__init__()
        self._init(locals())

    def _draw_length(self, length_range):
        if isinstance(length_range, Integral):
            return int(length_range)
        return self.rng.randint(*length_range)

    def _get_transform(self, img):
        h, w = self._draw_length(self.h_range), self._draw_length(self.w_range)
        _check_fits(self, img.shape, h, w)
        x0 = self.rng.randint(0, img.shape[1] + 1 - w)
        y0 = self.rng.randint(0, img.shape[0] + 1 - h)
        fill = self.fill

        def cutout(image):
            image = image.copy()
            image[y0:y0 + h, x0:x0 + w] = fill
            return image
        return PhotometricTransform(cutout, name='cutout')
