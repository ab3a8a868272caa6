"""Image augmentation (tensorpack's ``imgaug``): augmentors that make random choices and the
deterministic transforms they return. Needs OpenCV (``pip install 'tensorpack_lite[image]'``).

Example::

    from tensorpack_lite.dataflow import imgaug

    augmentor = imgaug.AugmentorList([imgaug.ResizeShortestEdge(256), imgaug.RandomCrop(224),
                                      imgaug.Flip(horiz=True)])
    tfm = augmentor.get_transform(img)
    img, points = tfm.apply_image(img), tfm.apply_coords(points)   # points: Nx2 (x, y)
"""

from .base import Augmentor, AugmentorList, CompositeAugmentor, ImageAugmentor, PhotometricAugmentor
from .convert import ColorSpace, Grayscale, ToFloat32, ToUint8
from .crop import CenterCrop, GoogleNetRandomCropAndResize, RandomCrop, RandomCropRandomShape, RandomCutout
from .deform import GaussianDeform, GaussianMap
from .external import Albumentations, IAAugmentor
from .geometry import Affine, Rotation, RotationAndCropValid, Shift
from .imgproc import (Brightness, BrightnessScale, Clip, ClippedPhotometricAugmentor, Contrast, Gamma,
                      GaussianBlur, Hue, Lighting, MeanVarianceNormalize, MinMaxNormalize, Saturation)
from .meta import Identity, MapImage, RandomApplyAug, RandomChooseAug, RandomOrderAug
from .misc import Flip, RandomResize, Resize, ResizeShortestEdge, Transpose
from .noise import GaussianNoise, JpegNoise, SaltPepperNoise
from .paste import BackgroundFiller, CenterPaste, ConstantBackgroundFiller, RandomPaste
from .transform import (CropTransform, FlipTransform, LazyTransform, NoOpTransform, PhotometricTransform,
                        ResizeTransform, Transform, TransformFactory, TransformList, TransposeTransform,
                        WarpAffineTransform)

__all__ = [
    # base
    'ImageAugmentor', 'Augmentor', 'AugmentorList', 'PhotometricAugmentor', 'CompositeAugmentor',
    # convert
    'ColorSpace', 'Grayscale', 'ToUint8', 'ToFloat32',
    # crop
    'RandomCrop', 'CenterCrop', 'RandomCropRandomShape', 'GoogleNetRandomCropAndResize', 'RandomCutout',
    # deform
    'GaussianMap', 'GaussianDeform',
    # external
    'IAAugmentor', 'Albumentations',
    # geometry
    'Shift', 'Rotation', 'RotationAndCropValid', 'Affine',
    # imgproc
    'ClippedPhotometricAugmentor',
    'Hue', 'Brightness', 'BrightnessScale', 'Contrast', 'MeanVarianceNormalize', 'GaussianBlur', 'Gamma',
    'Clip', 'Saturation', 'Lighting', 'MinMaxNormalize',
    # meta
    'Identity', 'RandomApplyAug', 'RandomChooseAug', 'RandomOrderAug', 'MapImage',
    # misc
    'Flip', 'Resize', 'ResizeShortestEdge', 'RandomResize', 'Transpose',
    # noise
    'JpegNoise', 'GaussianNoise', 'SaltPepperNoise',
    # paste
    'BackgroundFiller', 'ConstantBackgroundFiller', 'CenterPaste', 'RandomPaste',
    # transform
    'Transform', 'ResizeTransform', 'CropTransform', 'FlipTransform', 'TransposeTransform',
    'WarpAffineTransform', 'NoOpTransform', 'PhotometricTransform', 'TransformFactory',
    'TransformList', 'LazyTransform',
]
