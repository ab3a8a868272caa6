"""Affine geometry: shifts, rotations (optionally cropped to the valid region) and general affine
warps."""

import math

import numpy as np

from ...utils.develop import import_optional
from .base import ImageAugmentor
from .transform import CropTransform, TransformList, WarpAffineTransform

cv2 = import_optional('cv2', extra='image', purpose='tensorpack_lite.dataflow.imgaug')

__all__ = ['Shift', 'Rotation', 'RotationAndCropValid', 'Affine']


def _check_step_deg(name, max_deg, step_deg):
    if step_deg is not None and (max_deg != 180 or 180 % step_deg != 0):
        raise ValueError("{}: step_deg needs max_deg=180 and must divide 180, got max_deg={}, step_deg={}"
                         .format(name, max_deg, step_deg))


def _check_pair(name, argument, value):
    if value is not None and (not isinstance(value, (tuple, list)) or len(value) != 2):
        raise ValueError("{}: {} must be a pair of floats (a, b), got {!r}".format(name, argument, value))


class Shift(ImageAugmentor):
    """Move the image by a random whole number of pixels.

    Args:
        horiz_frac (float): the largest horizontal move, as a fraction of the width (< 1).
        vert_frac (float): the largest vertical move, as a fraction of the height (< 1).
        border (int): an OpenCV border mode for the uncovered pixels.
        border_value: their value with ``cv2.BORDER_CONSTANT``.
    """

    def __init__(self, horiz_frac=0, vert_frac=0, border=cv2.BORDER_REPLICATE, border_value=0):
        if not (horiz_frac < 1.0 and vert_frac < 1.0):
            raise ValueError("Shift: horiz_frac and vert_frac must be < 1, got {} and {}".format(
                horiz_frac, vert_frac))
        super(Shift, self).__init__()
        self._init(locals())

    def _get_transform(self, img):
        max_dx = self.horiz_frac * img.shape[1]
        max_dy = self.vert_frac * img.shape[0]
        dx = np.round(self._rand_range(-max_dx, max_dx))
        dy = np.round(self._rand_range(-max_dy, max_dy))
        mat = np.array([[1, 0, dx], [0, 1, dy]], dtype=np.float32)
        return WarpAffineTransform(mat, img.shape[1::-1],
                                   borderMode=self.border, borderValue=self.border_value)


def _random_degrees(augmentor):
    """A random angle in [-max_deg, max_deg), rounded down to a multiple of ``step_deg`` if set."""
    deg = augmentor._rand_range(-augmentor.max_deg, augmentor.max_deg)
    if augmentor.step_deg:
        deg = deg // augmentor.step_deg * augmentor.step_deg
    return float(deg)


class Rotation(ImageAugmentor):
    """Rotate by a random angle around a random centre; the output keeps the input's size.

    Args:
        max_deg (float): the largest rotation, in degrees (counter-clockwise for positive angles).
        center_range (tuple): ``(low, high)``: the centre is drawn uniformly in this range, as
            fractions of the width and of the height.
        interp (int): an OpenCV interpolation flag.
        border (int): an OpenCV border mode for the uncovered pixels.
        step_deg (float): if set, the angle is a multiple of it (needs ``max_deg=180`` and must
            divide 180).
        border_value: the uncovered pixels' value with ``cv2.BORDER_CONSTANT``.
    """

    def __init__(self, max_deg, center_range=(0, 1), interp=cv2.INTER_LINEAR,
                 border=cv2.BORDER_REPLICATE, step_deg=None, border_value=0):
        _check_step_deg('Rotation', max_deg, step_deg)
        super(Rotation, self).__init__()
        self._init(locals())

    def _get_transform(self, img):
        center = np.array(img.shape[1::-1]) * self._rand_range(*self.center_range, size=(2,))
        deg = _random_degrees(self)
        # OpenCV puts pixel centres at integer positions, this package at + 0.5
        mat = cv2.getRotationMatrix2D((float(center[0] - 0.5), float(center[1] - 0.5)), deg, 1.0)
        return WarpAffineTransform(mat, img.shape[1::-1], interp=self.interp,
                                   borderMode=self.border, borderValue=self.border_value)


class RotationAndCropValid(ImageAugmentor):
    """Rotate around the centre by a random angle, then keep the largest upright rectangle that
    has no pixel from outside the image. The output shape varies with the angle.

    Args:
        max_deg, interp, step_deg: as in :class:`Rotation`.
    """

    def __init__(self, max_deg, interp=cv2.INTER_LINEAR, step_deg=None):
        _check_step_deg('RotationAndCropValid', max_deg, step_deg)
        super(RotationAndCropValid, self).__init__()
        self._init(locals())

    def _get_transform(self, img):
        deg = _random_degrees(self)
        h, w = img.shape[:2]
        mat = cv2.getRotationMatrix2D((w * 0.5 - 0.5, h * 0.5 - 0.5), deg, 1.0)
        rotate = WarpAffineTransform(mat, (w, h), interp=self.interp)
        valid_w, valid_h = self.largest_rotated_rect(w, h, deg)
        valid_w, valid_h = min(valid_w, w), min(valid_h, h)
        crop = CropTransform(int(h * 0.5 - valid_h * 0.5), int(w * 0.5 - valid_w * 0.5), valid_h, valid_w)
        return TransformList([rotate, crop])

    @staticmethod
    def largest_rotated_rect(w, h, angle):
        """The (width, height) of the largest upright rectangle inside a ``w x h`` rectangle
        rotated by ``angle`` degrees about its centre.
        """
        if w <= 0 or h <= 0:
            return 0, 0
        radians = math.radians(angle)
        sin, cos = abs(math.sin(radians)), abs(math.cos(radians))
        long_side, short_side = max(w, h), min(w, h)
        if short_side <= 2.0 * sin * cos * long_side:
            # two corners of the answer touch the long sides; the other two lie on the
            # rotated image's mid-line
            half = 0.5 * short_side
            along_long, along_short = half / sin, half / cos
            width, height = (along_long, along_short) if w >= h else (along_short, along_long)
        else:
            # all four corners touch the rotated image's sides
            cos_2a = cos * cos - sin * sin
            width = (w * cos - h * sin) / cos_2a
            height = (h * cos - w * sin) / cos_2a
        return int(np.round(width)), int(np.round(height))


class Affine(ImageAugmentor):
    """A random affine warp about the image centre: scale, rotation, shear, then translation.

    Args:
        scale (tuple): ``(a, b)``: the scale factor is drawn from [a, b]; None keeps the scale.
        translate_frac (tuple): ``(a, b)``: the largest horizontal / vertical move as fractions of
            the width / height (moves are whole pixels); None does not move.
        rotate_max_deg (float): the largest rotation, in degrees.
        shear (float): the largest shear angle, in degrees (>= 0).
        interp (int): an OpenCV interpolation flag.
        border (int): an OpenCV border mode for the uncovered pixels.
        border_value: their value with ``cv2.BORDER_CONSTANT``.
    """

    def __init__(self, scale=None, translate_frac=None, rotate_max_deg=0.0, shear=0.0,
                 interp=cv2.INTER_LINEAR, border=cv2.BORDER_REPLICATE, border_value=0):
        _check_pair('Affine', 'scale', scale)
        _check_pair('Affine', 'translate_frac', translate_frac)
        if shear < 0:
            raise ValueError("Affine: shear must be >= 0 degrees, got {}".format(shear))
        super(Affine, self).__init__()
        self._init(locals())

    def _get_transform(self, img):
        scale = self._rand_range(*self.scale) if self.scale is not None else 1.0
        dx = dy = 0.0
        if self.translate_frac is not None:
            max_dx = self.translate_frac[0] * img.shape[1]
            max_dy = self.translate_frac[1] * img.shape[0]
            dx = np.round(self._rand_range(-max_dx, max_dx))
            dy = np.round(self._rand_range(-max_dy, max_dy))
        shear = math.radians(self._rand_range(-self.shear, self.shear)) if self.shear > 0 else 0.0
        deg = float(self._rand_range(-self.rotate_max_deg, self.rotate_max_deg))

        center = np.array(img.shape[1::-1], dtype=np.float64) * 0.5 - 0.5   # OpenCV's convention
        linear = cv2.getRotationMatrix2D(tuple(center), deg, float(scale))[:, :2]
        linear = linear.dot([[1.0, math.sin(shear)], [0.0, math.cos(shear)]])
        mat = np.zeros((2, 3))
        mat[:, :2] = linear
        mat[:, 2] = center - linear.dot(center) + (dx, dy)   # the centre stays, then moves by (dx, dy)
        return WarpAffineTransform(mat, img.shape[1::-1], self.interp, self.border, self.border_value)
