"""Augmentors that convert an image: to another colour space, to greyscale, to uint8 or float32."""

import numpy as np

from .base import PhotometricAugmentor
from .imgproc import opencv

__all__ = ['ColorSpace', 'Grayscale', 'ToUint8', 'ToFloat32']


class ColorSpace(PhotometricAugmentor):
    """Convert the image with OpenCV's ``cv2.cvtColor``.

    Example::

        ColorSpace(cv2.COLOR_BGR2HSV)
    """

    def __init__(self, mode, keepdims=True):
        """
        Args:
            mode (int): an OpenCV conversion code, e.g. ``cv2.COLOR_BGR2HSV``.
            keepdims (bool): when OpenCV returns HxW for an HxWxC input, give back HxWx1.
        """
        super().__init__()
        self._init(locals())

    def _augment(self, img, _):
        cv2 = opencv(self)
        try:
            converted = cv2.cvtColor(img, self.mode)
        except cv2.error as err:
            raise ValueError("imgaug.{} cannot convert an image of shape {} and dtype {} (mode={}): {}"
                             .format(type(self).__name__, img.shape, img.dtype, self.mode, err)) from err
        if self.keepdims and img.ndim == 3 and converted.ndim == 2:
            converted = converted[:, :, np.newaxis]
        return converted


class Grayscale(ColorSpace):
    """Convert an HxWx3 RGB or BGR image to greyscale (``0.299 R + 0.587 G + 0.114 B``)."""

    def __init__(self, keepdims=True, rgb=False, keepshape=False):
        """
        Args:
            keepdims (bool): return HxWx1 (True) or HxW (False).
            rgb (bool): whether the channels are RGB (True) or BGR (False, the default).
            keepshape (bool): repeat the grey channel 3 times, so the shape is the input's
                (needs ``keepdims=True``).
        """
        if keepshape and not keepdims:
            raise ValueError("imgaug.Grayscale: keepshape=True needs keepdims=True")
        cv2 = opencv(self)
        super().__init__(cv2.COLOR_RGB2GRAY if rgb else cv2.COLOR_BGR2GRAY, keepdims)
        self.rgb = rgb
        self.keepshape = keepshape

    def _augment(self, img, param):
        grey = super()._augment(img, param)
        if self.keepshape:
            grey = np.repeat(grey, 3, axis=2)
        return grey


class ToUint8(PhotometricAugmentor):
    """Clip to [0, 255] and cast to uint8 (truncating), e.g. to send fewer bytes between processes."""

    def _augment(self, img, _):
        return np.clip(img, 0, 255).astype(np.uint8)


class ToFloat32(PhotometricAugmentor):
    """Cast the image to float32, so that later augmentors compute in floating point."""

    def _augment(self, img, _):
        return img.astype(np.float32)
