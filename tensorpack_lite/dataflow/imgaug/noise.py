"""Augmentors that add noise: JPEG compression artefacts, Gaussian noise, salt and pepper."""

import numpy as np

from .base import PhotometricAugmentor
from .imgproc import ClippedPhotometricAugmentor, opencv

__all__ = ['JpegNoise', 'GaussianNoise', 'SaltPepperNoise']


class JpegNoise(PhotometricAugmentor):
    """Encode the image as JPEG with a random quality and decode it again.

    The image (HxW, HxWx1 or HxWx3; BGR and RGB alike) is clipped and rounded to uint8 for the
    encoder; the result has the input's shape and dtype.
    """

    def __init__(self, quality_range=(40, 100)):
        """
        Args:
            quality_range (tuple[int]): the [low, high) range of the JPEG quality (at most 101).
        """
        super().__init__()
        self._init(locals())

    def _get_augment_params(self, img):
        return int(self.rng.randint(*self.quality_range))

    def _augment(self, img, quality):
        if not (img.ndim == 2 or (img.ndim == 3 and img.shape[2] in (1, 3))):
            raise ValueError("imgaug.JpegNoise needs an HxW, HxWx1 or HxWx3 image, got one of shape {}"
                             .format(img.shape))
        cv2 = opencv(self)
        pixels = img if img.dtype == np.uint8 else np.clip(np.rint(img), 0, 255).astype(np.uint8)
        ok, encoded = cv2.imencode('.jpg', pixels, [cv2.IMWRITE_JPEG_QUALITY, quality])
        if not ok:
            raise RuntimeError("imgaug.JpegNoise: OpenCV failed to encode an image of shape {} as JPEG"
                               .format(img.shape))
        decoded = cv2.imdecode(encoded, cv2.IMREAD_UNCHANGED)
        return decoded.reshape(img.shape).astype(img.dtype)


class GaussianNoise(ClippedPhotometricAugmentor):
    """Add independent noise drawn from N(0, sigma^2) to every element of the image."""

    def __init__(self, sigma=1, clip=True):
        """
        Args:
            sigma (float): the standard deviation of the noise.
            clip (bool): clip the result to [0, 255] also for float images (uint8 always is).
        """
        super().__init__()
        self._init(locals())

    def _get_augment_params(self, img):
        return self.rng.randn(*img.shape)

    def _new_values(self, img, noise):
        return img + noise * self.sigma


class SaltPepperNoise(PhotometricAugmentor):
    """Set random elements (each channel on its own) to 255 (salt) or 0 (pepper)."""

    def __init__(self, white_prob=0.05, black_prob=0.05):
        """
        Args:
            white_prob (float): the probability that an element becomes 255.
            black_prob (float): the probability that an element becomes 0.
        """
        super().__init__()
        if white_prob + black_prob > 1:
            raise ValueError("imgaug.SaltPepperNoise: white_prob + black_prob must be at most 1, got {} + {}"
                             .format(white_prob, black_prob))
        self._init(locals())

    def _get_augment_params(self, img):
        return self.rng.uniform(low=0, high=1, size=img.shape)

    def _augment(self, img, draws):
        noisy = img.copy()
        noisy[draws > 1 - self.white_prob] = 255
        noisy[draws < self.black_prob] = 0
        return noisy
