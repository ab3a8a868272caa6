"""Photometric augmentors that change pixel values: hue, saturation, brightness, contrast, gamma,
blur, PCA lighting noise, clipping and normalization.

They accept HxW or HxWxC images, uint8 in [0, 255] or floating point; unless a docstring says
otherwise the result has the dtype and shape of the input. OpenCV is needed by :class:`Hue`,
:class:`Saturation`, :class:`GaussianBlur` and :class:`Contrast` with ``rgb`` set.
"""

import numpy as np

from ...utils.develop import import_optional, log_deprecated
from .base import PhotometricAugmentor

__all__ = ['ClippedPhotometricAugmentor', 'Hue', 'Brightness', 'BrightnessScale', 'Contrast',
           'MeanVarianceNormalize', 'GaussianBlur', 'Gamma', 'Clip', 'Saturation', 'Lighting',
           'MinMaxNormalize']


def opencv(augmentor):
    """The ``cv2`` module, or an ImportError saying that ``augmentor`` needs OpenCV."""
    return import_optional('cv2', extra='image', purpose='imgaug.{}'.format(type(augmentor).__name__))


def check_color_image(augmentor, img):
    """Raise a ValueError naming ``augmentor`` unless ``img`` is an HxWx3 colour image."""
    if img.ndim != 3 or img.shape[2] != 3:
        raise ValueError("imgaug.{} needs an HxWx3 colour image, got one of shape {}".format(
            type(augmentor).__name__, img.shape))


def _opencv_float(img):
    """``img`` in a dtype OpenCV's colour conversions accept (uint8 as is, anything else float32)."""
    return img if img.dtype == np.uint8 else img.astype(np.float32)


class ClippedPhotometricAugmentor(PhotometricAugmentor):
    """Base of the augmentors that compute new pixel values and then return the input's dtype.

    Subclasses implement ``_new_values(img, param)``, returning a floating point array. The
    result is clipped to [0, 255] when ``self.clip`` is true or the input is uint8, and cast
    back to the input's dtype (truncating, as ``ndarray.astype`` does).
    """

    def _augment(self, img, param):
        values = self._new_values(img, param)
        own = values.flags.writeable and not np.may_share_memory(values, img)  # may change in place
        if self.clip or img.dtype == np.uint8:
            values = np.clip(values, 0, 255, out=values if own else None)
            own = True
        return values.astype(img.dtype, copy=not own)

    def _new_values(self, img, param):
        raise NotImplementedError("{} must implement _new_values(img, param)".format(type(self).__name__))


class Hue(PhotometricAugmentor):
    """Shift the hue of an HxWx3 RGB or BGR image by a random offset.

    The offset is in OpenCV's 8-bit hue unit (half a degree: 180 is a full turn), for uint8
    and float32 images alike.

    Example::

        Hue(range=(-10, 10), rgb=False)  # a small hue change of a BGR image
    """

    def __init__(self, range=(0, 180), rgb=True):
        """
        Args:
            range (tuple): the interval the hue offset is drawn from (at most (-90, 90) is useful).
            rgb (bool): whether the channels are RGB (True) or BGR (False).
        """
        super().__init__()
        rgb = bool(rgb)
        self._init(locals())

    def _get_augment_params(self, img):
        return self._rand_range(*self.range)

    def _augment(self, img, hue):
        check_color_image(self, img)
        cv2 = opencv(self)
        to_hsv, from_hsv = ((cv2.COLOR_RGB2HSV, cv2.COLOR_HSV2RGB) if self.rgb
                            else (cv2.COLOR_BGR2HSV, cv2.COLOR_HSV2BGR))
        hsv = cv2.cvtColor(_opencv_float(img), to_hsv)
        if hsv.dtype == np.uint8:   # OpenCV's hue of 8-bit images is in [0, 180)
            hsv[..., 0] = (hsv[..., 0] + hue) % 180
        else:                       # and in degrees, [0, 360), for float images
            hsv[..., 0] = (hsv[..., 0] + 2 * hue) % 360
        return cv2.cvtColor(hsv, from_hsv).astype(img.dtype, copy=False)


class Brightness(ClippedPhotometricAugmentor):
    """Add one random value, drawn from [-delta, delta], to every pixel."""

    def __init__(self, delta, clip=True):
        """
        Args:
            delta (float): the largest change, > 0.
            clip (bool): clip the result to [0, 255] also for float images (uint8 always is).
        """
        super().__init__()
        if not delta > 0:
            raise ValueError("imgaug.Brightness: delta must be > 0, got {!r}".format(delta))
        self._init(locals())

    def _get_augment_params(self, img):
        return self._rand_range(-self.delta, self.delta)

    def _new_values(self, img, delta):
        return img.astype(np.float32, copy=False) + delta


class BrightnessScale(ClippedPhotometricAugmentor):
    """Multiply every pixel by one random factor drawn from ``range``."""

    def __init__(self, range, clip=True):
        """
        Args:
            range (tuple): the interval of the factor, e.g. (0.8, 1.2).
            clip (bool): clip the result to [0, 255] also for float images (uint8 always is).
        """
        super().__init__()
        self._init(locals())

    def _get_augment_params(self, img):
        return self._rand_range(*self.range)

    def _new_values(self, img, factor):
        return img.astype(np.float32, copy=False) * factor


class Contrast(ClippedPhotometricAugmentor):
    """Scale the distance of every pixel to the mean: ``x = (x - mean) * factor + mean``.

    The mean is per channel when ``rgb`` is None; otherwise it is the mean of the greyscale
    image (HxWx3 input, RGB or BGR as ``rgb`` says). A 2-D image has one mean.
    """

    def __init__(self, factor_range, rgb=None, clip=True):
        """
        Args:
            factor_range (tuple): the interval the contrast factor is drawn from.
            rgb (bool or None): None for per-channel means, else whether the channels are RGB.
            clip (bool): clip the result to [0, 255] also for float images (uint8 always is).
        """
        super().__init__()
        self._init(locals())

    def _get_augment_params(self, img):
        return self._rand_range(*self.factor_range)

    def _new_values(self, img, factor):
        img = img.astype(np.float32, copy=False)
        if img.ndim == 2:
            mean = np.mean(img)
        elif self.rgb is None:
            mean = np.mean(img, axis=(0, 1), keepdims=True)
        else:
            check_color_image(self, img)
            cv2 = opencv(self)
            grey = cv2.cvtColor(img, cv2.COLOR_RGB2GRAY if self.rgb else cv2.COLOR_BGR2GRAY)
            mean = np.mean(grey)
        values = img * factor
        values += mean * (1 - factor)
        return values


class MeanVarianceNormalize(PhotometricAugmentor):
    """Shift and scale the image to mean 0 and standard deviation 1 (float32 result).

    The standard deviation used is at least ``1 / sqrt(number of elements)``, so a constant
    image becomes all zeros instead of a division by zero.
    """

    def __init__(self, all_channel=True):
        """
        Args:
            all_channel (bool): one mean and deviation for the whole image (True) or one per channel.
        """
        super().__init__()
        self._init(locals())

    def _augment(self, img, _):
        img = img.astype(np.float32)
        axes = None if self.all_channel else (0, 1)
        mean = np.mean(img, axis=axes, keepdims=True)
        std = np.maximum(np.std(img, axis=axes, keepdims=True), 1.0 / np.sqrt(img.size))
        return ((img - mean) / std).astype(np.float32)


class GaussianBlur(PhotometricAugmentor):
    """Blur with a Gaussian window of random size (and optionally random sigma).

    The window is ``2 * size + 1`` pixels wide, ``size`` an integer drawn from
    ``[size_range[0], size_range[1])``; borders replicate the edge pixels.
    """

    def __init__(self, size_range=(0, 3), sigma_range=(0, 0), symmetric=True, max_size=None):
        """
        Args:
            size_range (tuple[int] or int): the [low, high) range of ``size``; an int n means (0, n).
            sigma_range (tuple[float]): the interval of sigma; 0 lets OpenCV derive it from the size.
            symmetric (bool): use the same size and sigma along x and y.
            max_size (int): deprecated, the same as ``size_range=(0, max_size)``.
        """
        super().__init__()
        if not isinstance(size_range, (list, tuple)):
            size_range = (0, size_range)
        if not isinstance(sigma_range, (list, tuple)):
            raise ValueError("imgaug.GaussianBlur: sigma_range must be a (low, high) pair, got {!r}".format(
                sigma_range))
        if max_size is not None:
            log_deprecated("GaussianBlur(max_size=)", "Use size_range=(0, max_size) instead.", "2020-09-01")
            size_range = (0, max_size)
        self._init(locals())

    def _get_augment_params(self, img):
        sizes = self.rng.randint(self.size_range[0], self.size_range[1], size=(2,)) * 2 + 1
        sigmas = self._rand_range(*self.sigma_range, size=(2,))
        if self.symmetric:
            sizes[1], sigmas[1] = sizes[0], sigmas[0]
        return (int(sizes[0]), int(sizes[1])), (float(sigmas[0]), float(sigmas[1]))

    def _augment(self, img, param):
        cv2 = opencv(self)
        (size_x, size_y), (sigma_x, sigma_y) = param
        blurred = cv2.GaussianBlur(img, (size_x, size_y), sigmaX=sigma_x, sigmaY=sigma_y,
                                   borderType=cv2.BORDER_REPLICATE)
        return blurred.reshape(img.shape)


class Gamma(PhotometricAugmentor):
    """Gamma correction with a random exponent: ``255 * (x / 255) ** (1 / (1 + gamma))``.

    The input is clipped to [0, 255] and looked up as uint8 (so the values are integers), then
    cast back to the input's dtype.
    """

    def __init__(self, range=(-0.5, 0.5)):
        """
        Args:
            range (tuple): the interval ``gamma`` is drawn from (each end > -1).
        """
        super().__init__()
        self._init(locals())

    def _get_augment_params(self, img):
        return self._rand_range(*self.range)

    def _augment(self, img, gamma):
        levels = np.arange(256, dtype=np.float32) / 255
        table = (levels ** (1. / (1. + gamma)) * 255).astype(np.uint8)
        return table[np.clip(img, 0, 255).astype(np.uint8)].astype(img.dtype)


class Clip(PhotometricAugmentor):
    """Clip the pixel values to [min, max]."""

    def __init__(self, min=0, max=255):
        """
        Args:
            min, max: the bounds.
        """
        super().__init__()
        self._init(locals())

    def _augment(self, img, _):
        return np.clip(img, self.min, self.max)


class Saturation(ClippedPhotometricAugmentor):
    """Blend an HxWx3 image with its greyscale version: ``x = x * v + grey * (1 - v)``.

    ``v`` is drawn from ``[1 - alpha, 1 + alpha]``; the scheme is the one of fb.resnet.torch.
    """

    def __init__(self, alpha=0.4, rgb=True, clip=True):
        """
        Args:
            alpha (float): the largest change of saturation, < 1.
            rgb (bool): whether the channels are RGB (True) or BGR (False).
            clip (bool): clip the result to [0, 255] also for float images (uint8 always is).
        """
        super().__init__()
        rgb = bool(rgb)
        if not alpha < 1:
            raise ValueError("imgaug.Saturation: alpha must be < 1, got {!r}".format(alpha))
        self._init(locals())

    def _get_augment_params(self, img):
        return 1 + self._rand_range(-self.alpha, self.alpha)

    def _new_values(self, img, ratio):
        check_color_image(self, img)
        cv2 = opencv(self)
        grey = cv2.cvtColor(_opencv_float(img), cv2.COLOR_RGB2GRAY if self.rgb else cv2.COLOR_BGR2GRAY)
        values = img * ratio
        values += (grey * (1 - ratio))[:, :, np.newaxis]
        return values


class Lighting(ClippedPhotometricAugmentor):
    """AlexNet's PCA lighting noise: add ``eigvec @ (alpha * eigval)`` to every pixel.

    ``alpha`` holds 3 values drawn from N(0, std^2); the image must be HxWx3. The scheme is the
    one of fb.resnet.torch.

    Example (ImageNet's RGB eigen decomposition, pixel values in [0, 255])::

        Lighting(0.1, eigval=np.asarray([0.2175, 0.0188, 0.0045]) * 255,
                 eigvec=[[-0.5675, 0.7192, 0.4009],
                         [-0.5808, -0.0045, -0.8140],
                         [-0.5836, -0.6948, 0.4203]])
    """

    def __init__(self, std, eigval, eigvec, clip=True):
        """
        Args:
            std (float): the standard deviation of ``alpha``.
            eigval: 3 eigenvalues, one per channel.
            eigvec: a 3x3 matrix whose columns are the eigenvectors.
            clip (bool): clip the result to [0, 255] also for float images (uint8 always is).
        """
        super().__init__()
        eigval = np.asarray(eigval, dtype=np.float32)
        eigvec = np.asarray(eigvec, dtype=np.float32)
        if eigval.shape != (3,):
            raise ValueError("imgaug.Lighting: eigval must have shape (3,), got {}".format(eigval.shape))
        if eigvec.shape != (3, 3):
            raise ValueError("imgaug.Lighting: eigvec must have shape (3, 3), got {}".format(eigvec.shape))
        self._init(locals())

    def _get_augment_params(self, img):
        check_color_image(self, img)
        return (self.rng.randn(3) * self.std).astype(np.float32)

    def _new_values(self, img, alpha):
        return img + self.eigvec.dot(alpha * self.eigval)


class MinMaxNormalize(PhotometricAugmentor):
    """Scale linearly so that the smallest value becomes ``min`` and the largest ``max``.

    The result is float32. A constant image (or channel) becomes all ``min``.
    """

    def __init__(self, min=0, max=255, all_channel=True):
        """
        Args:
            min, max (float): the new smallest and largest value.
            all_channel (bool): one range for the whole image (True) or one per channel.
        """
        super().__init__()
        self._init(locals())

    def _augment(self, img, _):
        img = img.astype(np.float32)
        axes = None if self.all_channel else (0, 1)
        low = np.min(img, axis=axes, keepdims=True)
        span = np.max(img, axis=axes, keepdims=True) - low
        unit = (img - low) / np.where(span > 0, span, 1)
        return ((self.max - self.min) * unit + self.min).astype(np.float32)
