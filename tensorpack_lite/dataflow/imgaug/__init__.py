"""Image augmentation (tensorpack's ``imgaug``): augmentors that make random choices and the
deterministic transforms they return. Needs OpenCV (``pip install 'tensorpack_lite[image]'``).

Example::

    from tensorpack_lite.dataflow import imgaug

    augmentor = imgaug.AugmentorList([imgaug.Identity()])
    tfm = augmentor.get_transform(img)
    img, points = tfm.apply_image(img), tfm.apply_coords(points)
"""

from .base import Augmentor, AugmentorList, ImageAugmentor, PhotometricAugmentor
from .meta import Identity, MapImage, RandomApplyAug, RandomChooseAug, RandomOrderAug
from .transform import (CropTransform, FlipTransform, LazyTransform, NoOpTransform, PhotometricTransform,
                        ResizeTransform, Transform, TransformFactory, TransformList, TransposeTransform,
                        WarpAffineTransform)

__all__ = [
    # base
    'ImageAugmentor', 'Augmentor', 'AugmentorList', 'PhotometricAugmentor',
    # meta
    'Identity', 'RandomApplyAug', 'RandomChooseAug', 'RandomOrderAug', 'MapImage',
    # transform
    'Transform', 'ResizeTransform', 'CropTransform', 'FlipTransform', 'TransposeTransform',
    'WarpAffineTransform', 'NoOpTransform', 'PhotometricTransform', 'TransformFactory',
    'TransformList', 'LazyTransform',
]
