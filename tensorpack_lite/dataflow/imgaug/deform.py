"""A smooth random deformation: pixels are pulled towards random offsets around a few anchors,
with Gaussian weights (tensorpack keeps it for reference; it is rarely useful)."""

import numpy as np

from ...utils.develop import import_optional
from .base import ImageAugmentor
from .transform import TransformFactory, keep_rank

cv2 = import_optional('cv2', extra='image', purpose='tensorpack_lite.dataflow.imgaug')

__all__ = ['GaussianMap', 'GaussianDeform']


class GaussianMap(object):
    """Gaussian weights over an image, peaking at an anchor.

    Args:
        image_shape (tuple): ``(h, w)``.
        sigma (float): the width of the Gaussian, in units of the image size.
    """

    def __init__(self, image_shape, sigma=0.5):
        if len(image_shape) != 2:
            raise ValueError("GaussianMap: image_shape must be (h, w), got {!r}".format(image_shape))
        self.shape = tuple(image_shape)
        self.sigma = sigma

    def get_gaussian_weight(self, anchor):
        """An HxW float32 map: ``exp(-((row / h - anchor[0])^2 + (col / w - anchor[1])^2) / sigma)``.

        Args:
            anchor: ``(y, x)``, as fractions of the height and width.
        """
        rows = np.arange(self.shape[0], dtype=np.float32)[:, None] / self.shape[0] - anchor[0]
        cols = np.arange(self.shape[1], dtype=np.float32)[None, :] / self.shape[1] - anchor[1]
        return np.exp(-(rows ** 2 + cols ** 2) / self.sigma).astype(np.float32)


class GaussianDeform(ImageAugmentor):
    """Move each anchor's neighbourhood by a random offset, smoothly (bilinear resampling, edges
    repeated). Works on images of one fixed shape; the transform has no ``apply_coords``.

    Args:
        anchors (list): ``(y, x)`` anchor positions, as fractions of the height and width.
        shape (tuple): ``(h, w)`` of the images.
        sigma (float): the width of each anchor's Gaussian, in units of the image size.
        randrange (float): the largest offset in pixels; by default ``h / 8``.
    """

    def __init__(self, anchors, shape, sigma=0.5, randrange=None):
        super(GaussianDeform, self).__init__()
        self.anchors = anchors
        self.shape = tuple(shape)
        self.sigma = sigma
        self.randrange = shape[0] / 8 if randrange is None else randrange
        gaussian = GaussianMap(self.shape, sigma=sigma)
        self._weights = np.stack([gaussian.get_gaussian_weight(a) for a in anchors], axis=-1)   # HxWxK

    def _get_transform(self, img):
        if tuple(img.shape[:2]) != self.shape:
            raise ValueError("{}: expects images of shape {}, got {}".format(self, self.shape, img.shape))
        offsets = (self.rng.rand(len(self.anchors), 2).astype(np.float32) - 0.5) * (2 * self.randrange)
        return TransformFactory(name='GaussianDeform', apply_image=lambda image: self._deform(image, offsets))

    def _deform(self, img, offsets):
        """Sample ``img`` at every pixel's position plus the weighted anchor offsets (dy, dx)."""
        displacement = self._weights.dot(offsets)    # HxWx2
        rows, cols = np.mgrid[:self.shape[0], :self.shape[1]].astype(np.float32)
        map_y = rows + displacement[:, :, 0]
        map_x = cols + displacement[:, :, 1]
        result = cv2.remap(img, map_x, map_y, cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)
        return keep_rank(result, img)
