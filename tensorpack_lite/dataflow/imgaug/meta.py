"""Augmentors that combine or wrap others: do nothing, apply sometimes, pick one, shuffle the
order, or map the image with a function."""

from .base import CompositeAugmentor, ImageAugmentor
from .transform import NoOpTransform, TransformFactory, TransformList

__all__ = ['Identity', 'RandomApplyAug', 'RandomChooseAug', 'RandomOrderAug', 'MapImage']


class Identity(ImageAugmentor):
    """Leaves the image (and coordinates) unchanged."""

    def _get_transform(self, img):
        return NoOpTransform()


class RandomApplyAug(CompositeAugmentor):
    """Apply ``aug`` with probability ``prob``, otherwise do nothing.

    Args:
        aug (ImageAugmentor): the augmentor.
        prob (float): the probability to apply it, in [0, 1].
    """

    def __init__(self, aug, prob):
        if not 0 <= prob <= 1:
            raise ValueError("RandomApplyAug: prob must be in [0, 1], got {}".format(prob))
        self._init(locals())
        super(RandomApplyAug, self).__init__()

    def _members(self):
        return [self.aug]

    def _get_transform(self, img):
        if self.rng.rand() < self.prob:
            return self.aug.get_transform(img)
        return NoOpTransform()


class RandomChooseAug(CompositeAugmentor):
    """Apply one augmentor picked at random from a list.

    Args:
        aug_lists (list): augmentors (picked with equal probability), or ``(augmentor,
            probability)`` pairs whose probabilities sum to 1.

    Example::

        RandomChooseAug([(Flip(horiz=True), 0.7), (Transpose(prob=1.0), 0.3)])
    """

    def __init__(self, aug_lists):
        if not isinstance(aug_lists, (list, tuple)) or not aug_lists:
            raise ValueError("RandomChooseAug: aug_lists must be a non-empty list, got {!r}".format(
                aug_lists))
        if isinstance(aug_lists[0], (tuple, list)):
            prob = [float(pair[1]) for pair in aug_lists]
            aug_lists = [pair[0] for pair in aug_lists]
            if abs(sum(prob) - 1.0) > 1e-6:
                raise ValueError("RandomChooseAug: the probabilities {} do not sum to 1".format(prob))
        else:
            prob = [1.0 / len(aug_lists)] * len(aug_lists)
        self._init(locals())
        super(RandomChooseAug, self).__init__()

    def _members(self):
        return self.aug_lists

    def _get_transform(self, img):
        chosen = self.rng.choice(len(self.aug_lists), p=self.prob)
        return self.aug_lists[chosen].get_transform(img)


class RandomOrderAug(CompositeAugmentor):
    """Apply all augmentors, in a random order.

    Every augmentor decides its transform on the input image, so they should not change its shape.

    Args:
        aug_lists (list[ImageAugmentor]): the augmentors.
    """

    def __init__(self, aug_lists):
        self._init(locals())
        super(RandomOrderAug, self).__init__()

    def _members(self):
        return self.aug_lists

    def _get_transform(self, img):
        order = self.rng.permutation(len(self.aug_lists))
        tfms = [augmentor.get_transform(img) for augmentor in self.aug_lists]
        return TransformList([tfms[index] for index in order])


class MapImage(ImageAugmentor):
    """Map the image with a function (and coordinates with another).

    Args:
        func (ndarray -> ndarray): applied to the image.
        coord_func (ndarray -> ndarray): applied to Nx2 (x, y) coordinates; without it the
            transform's ``apply_coords`` raises NotImplementedError.

    Example::

        MapImage(lambda img: img[:, :, ::-1])      # BGR <-> RGB
    """

    def __init__(self, func, coord_func=None):
        super(MapImage, self).__init__()
        self.func = func
        self.coord_func = coord_func

    def _get_transform(self, img):
        functions = {'apply_image': self.func}
        if self.coord_func is not None:
            functions['apply_coords'] = self.coord_func
        return TransformFactory(name='MapImage', **functions)
