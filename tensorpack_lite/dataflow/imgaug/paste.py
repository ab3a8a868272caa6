"""Pasting the image onto a larger canvas, in the centre or at a random place, and the fillers
that make the canvas."""

import numpy as np

from ...utils.argtools import shape2d
from .base import ImageAugmentor
from .transform import Transform

__all__ = ['BackgroundFiller', 'ConstantBackgroundFiller', 'CenterPaste', 'RandomPaste']


class BackgroundFiller(object):
    """Makes the canvas an image is pasted on. Subclasses implement ``_fill(background_shape, img)``."""

    def fill(self, background_shape, img):
        """A canvas of ``background_shape`` (h, w) for ``img``: same dtype and number of channels.

        Args:
            background_shape (tuple): ``(h, w)`` of the canvas.
            img (ndarray): the image that will be pasted.
        """
        return self._fill(tuple(background_shape), img)

    def _fill(self, background_shape, img):
        raise NotImplementedError("{} must implement _fill(background_shape, img)".format(
            type(self).__name__))


class ConstantBackgroundFiller(BackgroundFiller):
    """A canvas of one constant value.

    Args:
        value (float): the value of every canvas pixel.
    """

    def __init__(self, value):
        self.value = value

    def _fill(self, background_shape, img):
        return np.full(background_shape + img.shape[2:], self.value, dtype=img.dtype)

    def __repr__(self):
        return "imgaug.ConstantBackgroundFiller({!r})".format(self.value)


class _PasteTransform(Transform):
    """Paste an ``h x w`` image at (row ``y0``, column ``x0``) of a canvas the filler makes."""

    def __init__(self, y0, x0, h, w, background_shape, background_filler):
        super(_PasteTransform, self).__init__()
        self._init(locals())

    def apply_image(self, img):
        if tuple(img.shape[:2]) != (self.h, self.w):
            raise ValueError("{} was given an image of shape {}".format(self, img.shape))
        canvas = self.background_filler.fill(self.background_shape, img)
        canvas[self.y0:self.y0 + self.h, self.x0:self.x0 + self.w] = img
        return canvas

    def apply_coords(self, coords):
        coords = self._coords(coords)
        coords[:, 0] += self.x0
        coords[:, 1] += self.y0
        return coords


class CenterPaste(ImageAugmentor):
    """Paste the image in the centre of a larger canvas.

    Args:
        background_shape (tuple): ``(h, w)`` of the canvas, at least the image's size.
        background_filler (BackgroundFiller): makes the canvas; by default all zeros.
    """

    def __init__(self, background_shape, background_filler=None):
        super(CenterPaste, self).__init__()
        background_shape = tuple(int(v) for v in shape2d(background_shape))
        if background_filler is None:
            background_filler = ConstantBackgroundFiller(0)
        self._init(locals())

    def _check_fits(self, img):
        h, w = img.shape[:2]
        if h > self.background_shape[0] or w > self.background_shape[1]:
            raise ValueError("{}: an image of shape {} does not fit on the {}x{} canvas".format(
                self, img.shape, *self.background_shape))

    def _position(self, h, w):
        """Where the image's top-left pixel goes: (row, column)."""
        return int((self.background_shape[0] - h) * 0.5), int((self.background_shape[1] - w) * 0.5)

    def _get_transform(self, img):
        self._check_fits(img)
        h, w = img.shape[:2]
        y0, x0 = self._position(h, w)
        return _PasteTransform(y0, x0, h, w, self.background_shape, self.background_filler)


class RandomPaste(CenterPaste):
    """Paste the image at a random place of a larger canvas.

    Args:
        background_shape (tuple): ``(h, w)`` of the canvas, at least the image's size.
        background_filler (BackgroundFiller): makes the canvas; by default all zeros.
    """

    def _position(self, h, w):
        y0 = self._rand_range(self.background_shape[0] - h)
        x0 = self._rand_range(self.background_shape[1] - w)
        return int(y0), int(x0)
