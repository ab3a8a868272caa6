"""The 8x8 handwritten digits that scikit-learn ships: a real dataset needing no download."""

import numpy as np

from ...utils.argtools import shape2d
from .common import ImageLabelData

__all__ = ['Digits', 'resize_bilinear']


def _source_coords(out_len, in_len):
    """For each output index: the two input indices around it and the weight of the second.

    Pixel centers are aligned (as OpenCV and PIL do): output pixel ``i`` samples the input
    at ``(i + 0.5) * in_len / out_len - 0.5``, clamped to the image.
    """
    pos = (np.arange(out_len, dtype=np.float64) + 0.5) * (in_len / out_len) - 0.5
    pos = np.clip(pos, 0, in_len - 1)
    lo = np.floor(pos).astype(np.int64)
    hi = np.minimum(lo + 1, in_len - 1)
    return lo, hi, (pos - lo).astype(np.float32)


def resize_bilinear(images, size):
    """Resize a batch of single-channel images ``(N, H, W)`` to ``(N, h, w)`` bilinearly.

    Args:
        images (np.ndarray): N images of shape HxW.
        size (int or (h, w)): the new size.

    Returns:
        np.ndarray: float32, every value a convex combination of input pixels (so the value
        range is kept).

    Example::

        resize_bilinear(np.zeros((5, 8, 8)), 28).shape   # (5, 28, 28)
    """
    images = np.asarray(images, dtype=np.float32)
    if images.ndim != 3:
        raise ValueError("resize_bilinear() takes images of shape (N, H, W), got {}".format(images.shape))
    out_h, out_w = shape2d(size)
    if out_h <= 0 or out_w <= 0:
        raise ValueError("resize_bilinear(): the size must be positive, got {}".format(size))
    y0, y1, wy = _source_coords(out_h, images.shape[1])
    x0, x1, wx = _source_coords(out_w, images.shape[2])
    rows = images[:, y0, :] * (1 - wy)[None, :, None] + images[:, y1, :] * wy[None, :, None]
    return rows[:, :, x0] * (1 - wx) + rows[:, :, x1] * wx


class Digits(ImageLabelData):
    """Produces ``[image, label]`` from scikit-learn's handwritten digits
    (``sklearn.datasets.load_digits``: 1797 real 8x8 images of the digits 0-9).

    The image is float32 of shape ``image_size`` (8x8 by default) in the range [0, 1]
    (the 0..16 gray levels divided by 16, as Mnist's are in [0, 1]); the label is an
    ``np.int32`` in 0..9.

    The split is fixed: the first :attr:`TRAIN_SIZE` (1500) images are 'train', the other
    297 are 'test' (each class has 27 to 33 test images).

    Args:
        train_or_test (str): 'train' or 'test'.
        shuffle (bool): shuffle the order in every epoch.
        image_size (int or (h, w)): resize the images (bilinearly) to this size, e.g. 28 to
            use a model written for MNIST. None keeps 8x8.

    Example::

        df = Digits('train', image_size=28)
        df.reset_state()
        image, label = next(iter(df))   # image: (28, 28) float32 in [0, 1]; label: int32

    scikit-learn is imported when a Digits is created (``pip install scikit-learn``).
    """

    TRAIN_SIZE = 1500

    def __init__(self, train_or_test, shuffle=True, image_size=None):
        if train_or_test not in ('train', 'test'):
            raise ValueError("Digits: train_or_test must be 'train' or 'test', got {!r}".format(
                train_or_test))
        self.train_or_test = train_or_test
        images, labels = self._load()
        part = slice(None, self.TRAIN_SIZE) if train_or_test == 'train' else slice(self.TRAIN_SIZE, None)
        images, labels = images[part], labels[part]
        if image_size is not None:
            images = resize_bilinear(images, image_size)
        super(Digits, self).__init__(images, labels, shuffle)

    @staticmethod
    def _load():
        try:
            from sklearn.datasets import load_digits
        except ImportError as err:
            raise ImportError("Digits reads the digits that scikit-learn ships, but scikit-learn "
                              "is not installed: pip install scikit-learn") from err
        data = load_digits()
        return (data.images / 16.0).astype(np.float32), data.target
