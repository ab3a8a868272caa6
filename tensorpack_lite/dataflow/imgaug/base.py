"""The augmentor base classes: :class:`ImageAugmentor`, :class:`AugmentorList` and
:class:`PhotometricAugmentor`.

An augmentor makes random choices in ``get_transform(img)`` and returns a deterministic
:class:`~.transform.Transform`, which then applies to the image and to anything tied to it::

    tfm = augmentor.get_transform(img)
    img = tfm.apply_image(img)
    boxes_corners = tfm.apply_coords(boxes_corners)     # Nx2 (x, y)

Images are uint8 in [0, 255] or floating point, of shape HxW or HxWxC.
"""

import os
import weakref

import numpy as np

from ...utils.argtools import log_once
from ...utils.develop import log_deprecated
from ...utils.utils import get_rng
from ..state import rng_state, set_rng_state
from .transform import (LazyTransform, PhotometricTransform, Transform, TransformFactory, TransformList,
                        constructor_repr)

__all__ = ['ImageAugmentor', 'Augmentor', 'AugmentorList', 'PhotometricAugmentor', 'CompositeAugmentor']

# Augmentors alive in this process; a forked child gives each a fresh random generator, so that
# worker processes do not all draw the same numbers.
_LIVE_AUGMENTORS = weakref.WeakValueDictionary()
_fork_hook_installed = False


def _reset_live_augmentors():
    for augmentor in list(_LIVE_AUGMENTORS.values()):
        augmentor.reset_state()


def _reset_in_forked_children(augmentor):
    global _fork_hook_installed
    if not _fork_hook_installed and hasattr(os, 'register_at_fork'):
        os.register_at_fork(after_in_child=_reset_live_augmentors)
        _fork_hook_installed = True
    _LIVE_AUGMENTORS[id(augmentor)] = augmentor


class ImageAugmentor(object):
    """Base class of augmentors.

    A subclass implements ``get_transform(img)`` (as in tensorpack), or ``_get_transform(img)`` to
    get the input checks of :meth:`get_transform` for free. It draws random numbers from
    ``self.rng`` only, so that :func:`~tensorpack_lite.utils.utils.fix_rng_seed` makes it
    reproducible.

    The legacy interface still works: a subclass that implements ``_get_augment_params(img)`` and
    ``_augment(img, param)`` (and optionally ``_augment_coords(coords, param)``; by default
    coordinates do not move) gets a ``get_transform`` built from them.

    Attributes:
        rng (np.random.RandomState): the generator; :meth:`reset_state` replaces it.
    """

    def __init__(self):
        self.reset_state()
        _reset_in_forked_children(self)

    def _init(self, params=None):
        """Keep the constructor arguments as attributes: ``self._init(locals())``."""
        for name, value in (params or {}).items():
            if name != 'self' and not name.startswith('_'):
                setattr(self, name, value)

    def reset_state(self):
        """Give the augmentor a fresh random generator.

        Call it in the process that uses the augmentor (the image DataFlows do it in their own
        ``reset_state``). Forked processes get it called automatically.
        """
        self.rng = get_rng(self)

    def get_state(self):
        """The state of the augmentor's random generator (a 2.5 kB copy), for the image DataFlows'
        state: the augmentor draws from ``self.rng`` only."""
        return {'rng': rng_state(self.rng)}

    def set_state(self, state):
        """Put the random generator back into a state :meth:`get_state` returned."""
        set_rng_state(self.rng, state['rng'])

    def _rand_range(self, low=1.0, high=None, size=None):
        """Uniform float32 numbers in [low, high), or in [0, low) when ``high`` is None."""
        if high is None:
            low, high = 0, low
        if size is None:
            return np.float32(self.rng.uniform(low, high))
        return self.rng.uniform(low, high, size).astype(np.float32)

    def _check_image(self, img):
        """Raise an error naming this augmentor unless ``img`` is an HxW or HxWxC uint8/float array."""
        if not isinstance(img, np.ndarray):
            error, problem = TypeError, "a numpy array as the image, got a {}".format(type(img).__name__)
        elif img.dtype != np.uint8 and not np.issubdtype(img.dtype, np.floating):
            error, problem = TypeError, "a uint8 or floating-point image, got dtype {}".format(img.dtype)
        elif img.ndim not in (2, 3):
            error, problem = ValueError, "an image of shape HxW or HxWxC, got shape {}".format(img.shape)
        else:
            return
        raise error("{} needs {}".format(' '.join(repr(self).split()), problem))

    def get_transform(self, img):
        """Make the random choices for ``img`` and return them as a deterministic Transform.

        Args:
            img (ndarray): HxW or HxWxC, uint8 or floating point.

        Returns:
            Transform: apply it to ``img`` and to data tied to ``img`` (coordinates, masks).
        """
        self._check_image(img)
        return self._get_transform(img)

    def _get_transform(self, img):
        """The Transform for a checked image; by default built from the legacy interface."""
        if getattr(self, '_augment', None) is None:
            raise NotImplementedError("{} must implement get_transform(img)".format(type(self).__name__))
        log_once("{} uses the legacy augmentor interface (_get_augment_params/_augment); "
                 "implement get_transform(img) instead".format(type(self).__name__), 'warn')
        param = self._get_augment_params(img)
        if isinstance(param, Transform):
            return param
        return TransformFactory(name="legacy " + type(self).__name__,
                                apply_image=lambda image: self._augment(image, param),
                                apply_coords=lambda coords: self._augment_coords(np.array(coords), param))

    def _get_augment_params(self, img):
        """Legacy interface: the random choices for ``img``."""
        return None

    def _augment_coords(self, coords, param):
        """Legacy interface: move ``coords`` (a copy: may be changed in place) as ``_augment(img, param)``
        moves the pixels."""
        return coords

    def augment(self, img):
        """Augment one image: ``get_transform(img).apply_image(img)``."""
        return self.get_transform(img).apply_image(img)

    def augment_return_params(self, img):
        """Deprecated: returns ``(augmented image, transform)``; use :meth:`get_transform`."""
        log_deprecated("ImageAugmentor.augment_return_params", "Use get_transform(img) instead.")
        tfm = self.get_transform(img)
        return tfm.apply_image(img), tfm

    def augment_with_params(self, img, tfm):
        """Deprecated: ``tfm.apply_image(img)``."""
        log_deprecated("ImageAugmentor.augment_with_params", "Use transform.apply_image(img) instead.")
        return tfm.apply_image(img)

    def augment_coords(self, coords, tfm):
        """Deprecated: ``tfm.apply_coords(coords)``."""
        log_deprecated("ImageAugmentor.augment_coords", "Use transform.apply_coords(coords) instead.")
        return tfm.apply_coords(coords)

    def __repr__(self):
        return constructor_repr(self)

    __str__ = __repr__


Augmentor = ImageAugmentor
"""The older name of :class:`ImageAugmentor`."""


class CompositeAugmentor(ImageAugmentor):
    """An augmentor made of other augmentors (``_members()``): resetting it resets them too."""

    def _members(self):
        raise NotImplementedError("{} must implement _members()".format(type(self).__name__))

    def reset_state(self):
        """Reset this augmentor's generator and those of its members."""
        super(CompositeAugmentor, self).reset_state()
        for augmentor in self._members():
            augmentor.reset_state()

    def get_state(self):
        """The state of this augmentor's generator and those of its members."""
        state = super(CompositeAugmentor, self).get_state()
        state['members'] = [augmentor.get_state() for augmentor in self._members()]
        return state

    def set_state(self, state):
        super(CompositeAugmentor, self).set_state(state)
        for augmentor, member_state in zip(self._members(), state['members']):
            augmentor.set_state(member_state)


class AugmentorList(CompositeAugmentor):
    """Several augmentors applied in order.

    Each augmentor decides its transform on the image the previous ones produced, so the
    returned TransformList must be applied to the image (``apply_image``) before anything else.

    Args:
        augmentors (list[ImageAugmentor]): the augmentors, in order.

    Example::

        augs = AugmentorList([ResizeShortestEdge(256), RandomCrop(224), Flip(horiz=True)])
        tfm = augs.get_transform(img)
        img, points = tfm.apply_image(img), tfm.apply_coords(points)
    """

    def __init__(self, augmentors):
        if not isinstance(augmentors, (list, tuple)):
            raise TypeError("AugmentorList: augmentors must be a list of augmentors, got a {}".format(
                type(augmentors).__name__))
        for index, augmentor in enumerate(augmentors):
            if not hasattr(augmentor, 'get_transform'):
                raise TypeError("AugmentorList: augmentors[{}] is a {}, not an augmentor".format(
                    index, type(augmentor).__name__))
        self.augmentors = list(augmentors)
        super(AugmentorList, self).__init__()

    def _members(self):
        return self.augmentors

    def _get_transform(self, img):
        tfms = []
        for index, augmentor in enumerate(self.augmentors):
            tfm = augmentor.get_transform(img) if index == 0 else LazyTransform(augmentor.get_transform)
            tfms.extend(tfm.tfms if isinstance(tfm, TransformList) else [tfm])
        return TransformList(tfms)

    def __repr__(self):
        return "imgaug.AugmentorList([\n{}])".format(',\n'.join('  ' + repr(a) for a in self.augmentors))

    __str__ = __repr__


class PhotometricAugmentor(ImageAugmentor):
    """An augmentor that changes pixel values only; coordinates never move.

    Subclasses implement ``_get_augment_params(img)`` (the random choices, from ``self.rng``;
    by default None) and ``_augment(img, param)`` (deterministic).

    Example::

        class AddNoise(PhotometricAugmentor):
            def _get_augment_params(self, img):
                return self.rng.randn(*img.shape)

            def _augment(self, img, noise):
                return img + noise
    """

    def _get_transform(self, img):
        param = self._get_augment_params(img)
        return PhotometricTransform(func=lambda image: self._augment(image, param), name=type(self).__name__)

    def _augment(self, img, param):
        raise NotImplementedError("{} must implement _augment(img, param)".format(type(self).__name__))
