"""Wrappers that use augmentors of other libraries as tensorpack augmentors: ``imgaug``
(aleju/imgaug, :class:`IAAugmentor`) and ``albumentations`` (:class:`Albumentations`).

Neither library is needed to import this module; the randomness of a wrapped augmentor is the
library's own (``fix_rng_seed`` does not fix it).
"""

import numpy as np

from ...utils.develop import import_optional
from ..state import DataFlowStateUnsupported
from .base import ImageAugmentor
from .transform import Transform

__all__ = ['IAAugmentor', 'Albumentations']


class _ExternalAugmentor(ImageAugmentor):
    """An augmentor whose random draws are another library's (``library``): their state is not
    saved, so the image DataFlows using it cannot save their position."""

    library = None

    def _not_saved(self):
        return DataFlowStateUnsupported(
            "{} draws its random numbers from the {} library, whose state is not saved: the image "
            "DataFlow using it cannot save its position.".format(type(self).__name__, self.library))

    def get_state(self):
        raise self._not_saved()

    def set_state(self, state):
        raise self._not_saved()


class IAATransform(Transform):
    """A deterministic ``imgaug`` augmenter applied to an image and to keypoints on it."""

    def __init__(self, aug, img_shape):
        """
        Args:
            aug: an ``imgaug`` augmenter made deterministic with ``to_deterministic()``.
            img_shape (tuple): the shape of the image the coordinates belong to.
        """
        super().__init__()
        self._init(locals())

    def apply_image(self, img):
        return self.aug.augment_image(img)

    def apply_coords(self, coords):
        coords = self._coords(coords)
        imgaug = import_optional('imgaug', purpose='imgaug.IAAugmentor (coordinates)')
        keypoints = imgaug.KeypointsOnImage([imgaug.Keypoint(x=x, y=y) for x, y in coords],
                                            shape=self.img_shape)
        moved = self.aug.augment_keypoints([keypoints])[0].keypoints
        return np.asarray([[p.x, p.y] for p in moved], dtype=coords.dtype).reshape(-1, 2)


class IAAugmentor(_ExternalAugmentor):
    """Use an augmenter of the `imgaug <https://github.com/aleju/imgaug>`_ library.

    Images and coordinates (as imgaug keypoints) are supported. That library works on uint8
    images, must not change the image shape here, and places keypoints only approximately.

    Example::

        from imgaug import augmenters as iaa            # the aleju/imgaug library
        from tensorpack_lite.dataflow import imgaug     # this package
        aug = imgaug.IAAugmentor(iaa.Sequential([iaa.Sharpen(alpha=(0, 1)), iaa.Fliplr(0.5)]))
    """

    library = 'imgaug'

    def __init__(self, augmentor):
        """
        Args:
            augmentor (imgaug.augmenters.Augmenter): the augmenter to use.
        """
        super().__init__()
        self.augmentor = augmentor

    def _get_transform(self, img):
        return IAATransform(self.augmentor.to_deterministic(), img.shape)


class AlbumentationsTransform(Transform):
    """An ``albumentations`` transform applied with fixed parameters."""

    def __init__(self, aug, param):
        """
        Args:
            aug: an ``albumentations`` transform.
            param (dict): its parameters, from ``aug.get_params()``.
        """
        super().__init__()
        self._init(locals())

    def apply_image(self, img):
        return self.aug.apply(img, **self.param)


class Albumentations(_ExternalAugmentor):
    """Use a transform of the `albumentations <https://github.com/albumentations-team/albumentations>`_
    library (images only: coordinates are not supported).

    Example::

        import albumentations as A
        from tensorpack_lite.dataflow import imgaug
        aug = imgaug.Albumentations(A.RandomRotate90(p=1))
    """

    library = 'albumentations'

    def __init__(self, augmentor):
        """
        Args:
            augmentor (albumentations.BasicTransform): the transform to use.
        """
        super().__init__()
        self.augmentor = augmentor

    def _get_transform(self, img):
        return AlbumentationsTransform(self.augmentor, self.augmentor.get_params())
