"""Flips, transposes and resizes."""

from numbers import Integral

from ...utils import logger
from ...utils.argtools import shape2d
from ...utils.develop import import_optional
from .base import ImageAugmentor
from .transform import FlipTransform, NoOpTransform, ResizeTransform, TransposeTransform

cv2 = import_optional('cv2', extra='image', purpose='tensorpack_lite.dataflow.imgaug')

__all__ = ['Flip', 'Resize', 'ResizeShortestEdge', 'RandomResize', 'Transpose']


class Flip(ImageAugmentor):
    """Mirror the image with probability ``prob``, left-right (``horiz``) or upside down (``vert``).

    Args:
        horiz (bool): flip horizontally.
        vert (bool): flip vertically. Exactly one of ``horiz`` and ``vert`` must be True.
        prob (float): the probability to flip.
    """

    def __init__(self, horiz=False, vert=False, prob=0.5):
        if horiz == vert:
            raise ValueError("Flip: exactly one of horiz and vert must be True (use two Flip augmentors "
                             "to flip both ways), got horiz={}, vert={}".format(horiz, vert))
        super(Flip, self).__init__()
        self._init(locals())

    def _get_transform(self, img):
        if self._rand_range() < self.prob:
            return FlipTransform(img.shape[0], img.shape[1], horiz=self.horiz)
        return NoOpTransform()


class Transpose(ImageAugmentor):
    """Swap rows and columns with probability ``prob``.

    Args:
        prob (float): the probability to transpose.
    """

    def __init__(self, prob=0.5):
        super(Transpose, self).__init__()
        self.prob = prob

    def _get_transform(self, img):
        if self.rng.rand() < self.prob:
            return TransposeTransform()
        return NoOpTransform()


class Resize(ImageAugmentor):
    """Resize to a fixed size.

    Args:
        shape: ``(h, w)``, or an int for a square.
        interp (int): an OpenCV interpolation flag.
    """

    def __init__(self, shape, interp=cv2.INTER_LINEAR):
        super(Resize, self).__init__()
        shape = tuple(int(v) for v in shape2d(shape))
        self._init(locals())

    def _get_transform(self, img):
        return ResizeTransform(img.shape[0], img.shape[1], self.shape[0], self.shape[1], self.interp)


def resize_shortest_edge(h, w, size, interp):
    """The ResizeTransform that brings the shorter side of ``h x w`` to ``size`` (aspect ratio kept)."""
    scale = size / min(h, w)
    if h < w:
        return ResizeTransform(h, w, size, int(scale * w + 0.5), interp)
    return ResizeTransform(h, w, int(scale * h + 0.5), size, interp)


class ResizeShortestEdge(ImageAugmentor):
    """Resize so that the shorter side becomes ``size``, keeping the aspect ratio.

    Args:
        size (int): the new length of the shorter side.
        interp (int): an OpenCV interpolation flag.
    """

    def __init__(self, size, interp=cv2.INTER_LINEAR):
        super(ResizeShortestEdge, self).__init__()
        size = int(size)
        self._init(locals())

    def _get_transform(self, img):
        return resize_shortest_edge(img.shape[0], img.shape[1], self.size, self.interp)


def _is_pixel_range(value_range):
    return all(isinstance(v, Integral) for v in value_range)


class RandomResize(ImageAugmentor):
    """Resize to a random width and height.

    Args:
        xrange (tuple): ``(low, high)`` for the new width: scale factors if floats (e.g. (0.9, 1.2)),
            pixels if ints (e.g. (200, 350)).
        yrange (tuple): the same for the height, of the same kind as ``xrange``. Leave it None
            with ``aspect_ratio_thres=0``.
        minimum (tuple): ``(min_width, min_height)`` in pixels.
        aspect_ratio_thres (float): sizes that change the aspect ratio by this fraction or more
            are drawn again (after 50 tries the image is left as it is); 0 keeps the aspect ratio.
        interp (int): an OpenCV interpolation flag.
    """

    def __init__(self, xrange, yrange=None, minimum=(0, 0), aspect_ratio_thres=0.15,
                 interp=cv2.INTER_LINEAR):
        if aspect_ratio_thres < 0:
            raise ValueError("RandomResize: aspect_ratio_thres must be >= 0, got {}".format(
                aspect_ratio_thres))
        if yrange is None and aspect_ratio_thres > 0:
            raise ValueError("RandomResize: yrange is needed when aspect_ratio_thres > 0 "
                             "(aspect_ratio_thres=0 keeps the aspect ratio)")
        if yrange is not None and _is_pixel_range(xrange) != _is_pixel_range(yrange):
            raise ValueError("RandomResize: xrange {} and yrange {} must both be scale factors (floats) "
                             "or both pixel sizes (ints)".format(xrange, yrange))
        if aspect_ratio_thres == 0 and yrange is not None:
            if _is_pixel_range(xrange):
                logger.warn("RandomResize: yrange is not used when aspect_ratio_thres=0")
            elif tuple(xrange) != tuple(yrange):
                raise ValueError("RandomResize: with aspect_ratio_thres=0, yrange must equal xrange "
                                 "or be None")
        super(RandomResize, self).__init__()
        self._init(locals())
        self._in_pixels = _is_pixel_range(xrange)

    def _draw_size(self, h, w):
        """A random (width, height), before the aspect-ratio check."""
        x = self._rand_range(*self.xrange)
        if self.aspect_ratio_thres == 0:
            y = x * h / w if self._in_pixels else x
        else:
            y = self._rand_range(*self.yrange)
        if not self._in_pixels:
            x, y = x * w, y * h
        return int(max(x, self.minimum[0]) + 0.5), int(max(y, self.minimum[1]) + 0.5)

    def _get_transform(self, img):
        h, w = img.shape[:2]
        for _ in range(51):
            new_w, new_h = self._draw_size(h, w)
            if self.aspect_ratio_thres == 0:
                return ResizeTransform(h, w, new_h, new_w, self.interp)
            ratio_change = abs(new_w / new_h - w / h) / (w / h)
            if ratio_change < self.aspect_ratio_thres + 1e-5:
                return ResizeTransform(h, w, new_h, new_w, self.interp)
        logger.warn("{}: no size within the aspect ratio threshold in 51 tries; "
                    "the image of shape {} is left as it is".format(self, img.shape))
        return ResizeTransform(h, w, h, w, self.interp)
