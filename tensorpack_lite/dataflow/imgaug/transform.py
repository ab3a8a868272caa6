"""Deterministic transforms: what an augmentor decided to do to one image, replayable on
other images and on coordinates.

An augmentor's ``get_transform(img)`` makes its random choices and returns a :class:`Transform`;
``apply_image`` and ``apply_coords`` then apply that one fixed transformation::

    tfm = CropTransform(y0=2, x0=3, h=10, w=20)
    patch = tfm.apply_image(img)                    # img[2:12, 3:23]
    tfm.apply_coords(np.array([[5., 4.]]))          # [[2., 2.]]

Coordinates are an Nx2 array of (x, y). Pixel (row i, column j) covers the square
[j, j + 1) x [i, i + 1), so its centre is (j + 0.5, i + 0.5). ``apply_coords`` returns a new
array and never changes its argument.
"""

import inspect

import numpy as np

from ...utils.develop import import_optional

cv2 = import_optional('cv2', extra='image', purpose='tensorpack_lite.dataflow.imgaug')

__all__ = ['Transform', 'ResizeTransform', 'CropTransform', 'FlipTransform', 'TransposeTransform',
           'WarpAffineTransform', 'NoOpTransform', 'PhotometricTransform', 'TransformFactory',
           'TransformList', 'LazyTransform']


def _same_as_default(value, default):
    """Whether a constructor argument still has its default (so ``repr`` may leave it out)."""
    if value is default:
        return True
    if type(value) is not type(default):
        return False
    try:
        return bool(value == default)
    except (TypeError, ValueError):  # e.g. arrays: no single truth value
        return False


def constructor_repr(obj):
    """``'imgaug.Name(arg=value, ...)'`` from the constructor arguments ``obj`` keeps as attributes.

    Arguments left at their default, and those ``obj`` does not keep, are not shown.
    """
    params = inspect.signature(type(obj).__init__).parameters.values()
    shown = []
    for param in params:
        if param.name == 'self' or param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        if not hasattr(obj, param.name):
            continue
        value = getattr(obj, param.name)
        if param.default is not param.empty and _same_as_default(value, param.default):
            continue
        shown.append("{}={!r}".format(param.name, value))
    return "imgaug.{}({})".format(type(obj).__name__, ', '.join(shown))


def keep_rank(result, img):
    """OpenCV returns HxW for an HxWx1 input: give the channel axis back."""
    if img.ndim == 3 and result.ndim == 2:
        return result[:, :, np.newaxis]
    return result


class Transform(object):
    """A deterministic transformation of an image and of data tied to it.

    Subclasses implement ``apply_image(img)`` and, where it makes sense, ``apply_coords(coords)``
    (and any other ``apply_<what>``). Calling an ``apply_<what>`` a transform does not implement
    raises NotImplementedError naming the transform and the method.
    """

    def __init__(self):
        pass

    def _init(self, params=None):
        """Keep the constructor arguments as attributes: ``self._init(locals())``."""
        for name, value in (params or {}).items():
            if name != 'self' and not name.startswith('_'):
                setattr(self, name, value)

    def __getattr__(self, name):
        if name.startswith('apply_'):
            def unsupported(_):
                raise NotImplementedError("{} does not implement {}()".format(self, name))
            return unsupported
        raise AttributeError("'{}' object has no attribute '{}'".format(type(self).__name__, name))

    def _coords(self, coords):
        """A float copy of ``coords`` after checking it is Nx2 (the argument stays untouched)."""
        coords = np.asarray(coords)
        if coords.ndim != 2 or coords.shape[1] != 2:
            raise ValueError("{}.apply_coords: coords must be an Nx2 array of (x, y), got shape {}".format(
                type(self).__name__, coords.shape))
        dtype = coords.dtype if np.issubdtype(coords.dtype, np.floating) else np.float32
        return np.array(coords, dtype=dtype)

    def __repr__(self):
        return constructor_repr(self)

    __str__ = __repr__


class ResizeTransform(Transform):
    """Resize an ``h x w`` image to ``new_h x new_w``.

    Args:
        h, w (int): the size of the images this transform accepts.
        new_h, new_w (int): the output size.
        interp (int): an OpenCV interpolation flag, e.g. ``cv2.INTER_LINEAR``.
    """

    def __init__(self, h, w, new_h, new_w, interp):
        super(ResizeTransform, self).__init__()
        self._init(locals())

    def apply_image(self, img):
        if tuple(img.shape[:2]) != (self.h, self.w):
            raise ValueError("{} was given an image of shape {}".format(self, img.shape))
        result = cv2.resize(img, (int(self.new_w), int(self.new_h)), interpolation=self.interp)
        return keep_rank(result, img)

    def apply_coords(self, coords):
        coords = self._coords(coords)
        coords[:, 0] *= self.new_w / self.w
        coords[:, 1] *= self.new_h / self.h
        return coords


class CropTransform(Transform):
    """Cut out the ``h x w`` region whose top-left pixel is (row ``y0``, column ``x0``).

    Args:
        y0, x0 (int): the top-left corner of the region.
        h, w (int): the size of the region.
    """

    def __init__(self, y0, x0, h, w):
        super(CropTransform, self).__init__()
        self._init(locals())

    def apply_image(self, img):
        if self.y0 < 0 or self.x0 < 0 or self.y0 + self.h > img.shape[0] or self.x0 + self.w > img.shape[1]:
            raise ValueError("{} does not fit in an image of shape {}".format(self, img.shape))
        return img[self.y0:self.y0 + self.h, self.x0:self.x0 + self.w]

    def apply_coords(self, coords):
        coords = self._coords(coords)
        coords[:, 0] -= self.x0
        coords[:, 1] -= self.y0
        return coords


class FlipTransform(Transform):
    """Mirror an ``h x w`` image left-right (``horiz=True``) or upside down.

    Args:
        h, w (int): the image size (the mirror line of the coordinates).
        horiz (bool): flip horizontally; False flips vertically.
    """

    def __init__(self, h, w, horiz=True):
        super(FlipTransform, self).__init__()
        self._init(locals())

    def apply_image(self, img):
        return img[:, ::-1] if self.horiz else img[::-1]

    def apply_coords(self, coords):
        coords = self._coords(coords)
        if self.horiz:
            coords[:, 0] = self.w - coords[:, 0]
        else:
            coords[:, 1] = self.h - coords[:, 1]
        return coords


class TransposeTransform(Transform):
    """Swap rows and columns (the image's main diagonal stays in place)."""

    def apply_image(self, img):
        return np.ascontiguousarray(np.swapaxes(img, 0, 1))

    def apply_coords(self, coords):
        return self._coords(coords)[:, ::-1].copy()


class WarpAffineTransform(Transform):
    """An affine warp by the 2x3 matrix ``mat``, as ``cv2.warpAffine`` applies it.

    ``mat`` is in OpenCV's convention (pixel centres at integer positions); ``apply_coords``
    converts to and from this module's convention (centres at ``+ 0.5``), so points stay on the
    pixels they marked.

    Args:
        mat (ndarray): a 2x3 matrix from source to destination positions.
        dsize (tuple): the output size as (width, height).
        interp (int): an OpenCV interpolation flag.
        borderMode (int): an OpenCV border mode for pixels that come from outside the image.
        borderValue: the fill value for ``cv2.BORDER_CONSTANT``.
    """

    def __init__(self, mat, dsize, interp=cv2.INTER_LINEAR,
                 borderMode=cv2.BORDER_CONSTANT, borderValue=0):
        super(WarpAffineTransform, self).__init__()
        self._init(locals())

    def apply_image(self, img):
        result = cv2.warpAffine(img, self.mat, tuple(int(v) for v in self.dsize), flags=self.interp,
                                borderMode=self.borderMode, borderValue=self.borderValue)
        return keep_rank(result, img)

    def apply_coords(self, coords):
        coords = self._coords(coords)
        mat = np.asarray(self.mat, dtype=np.float64)
        moved = (coords - 0.5).dot(mat[:, :2].T) + mat[:, 2] + 0.5
        return moved.astype(coords.dtype)


class NoOpTransform(Transform):
    """Leaves everything as it is: every ``apply_<what>`` returns its input."""

    def __getattr__(self, name):
        if name.startswith('apply_'):
            return lambda x: x
        return super(NoOpTransform, self).__getattr__(name)

    def apply_image(self, img):
        return img

    def apply_coords(self, coords):
        return self._coords(coords)


class PhotometricTransform(Transform):
    """Changes pixel values only: ``apply_image`` is ``func``, coordinates stay where they are.

    Args:
        func (ndarray -> ndarray): the pixel operation.
        name (str): a name for ``repr``.
    """

    def __init__(self, func, name=None):
        super(PhotometricTransform, self).__init__()
        self._func = func
        self._name = name

    def apply_image(self, img):
        return self._func(img)

    def apply_coords(self, coords):
        return self._coords(coords)

    def __repr__(self):
        return "imgaug.PhotometricTransform({})".format(self._name or '')

    __str__ = __repr__


class TransformFactory(Transform):
    """A transform made of given functions.

    Args:
        name (str): a name for ``repr``.
        **kwargs: ``apply_<what>=function`` for each method the transform offers.

    Example::

        TransformFactory(name='invert', apply_image=lambda img: 255 - img)
    """

    def __init__(self, name=None, **kwargs):
        super(TransformFactory, self).__init__()
        for key, func in kwargs.items():
            if not key.startswith('apply_'):
                raise KeyError("TransformFactory: unknown argument '{}' (expected apply_<what>=function)"
                               .format(key))
            if not callable(func):
                raise TypeError("TransformFactory: {} must be callable, got {!r}".format(key, func))
            setattr(self, key, func)
        self._name = name

    def __repr__(self):
        return "imgaug.TransformFactory({})".format(self._name or '')

    __str__ = __repr__


def _transforms_of(other):
    return list(other.tfms) if isinstance(other, TransformList) else [other]


class TransformList(Transform):
    """Several transforms applied one after the other; ``+`` concatenates.

    Args:
        tfms (list[Transform]): the transforms, in the order they apply.

    Example::

        tfm = TransformList([CropTransform(0, 0, 8, 8)]) + FlipTransform(8, 8)
    """

    def __init__(self, tfms):
        super(TransformList, self).__init__()
        tfms = list(tfms)
        for index, tfm in enumerate(tfms):
            if not isinstance(tfm, Transform):
                raise TypeError("TransformList: tfms[{}] is a {}, not a Transform".format(
                    index, type(tfm).__name__))
        self.tfms = tfms

    def _apply(self, method, value):
        for tfm in self.tfms:
            value = getattr(tfm, method)(value)
        return value

    def __getattr__(self, name):
        if name.startswith('apply_'):
            return lambda value: self._apply(name, value)
        return super(TransformList, self).__getattr__(name)

    def apply_image(self, img):
        return self._apply('apply_image', img)

    def apply_coords(self, coords):
        if not self.tfms:
            return self._coords(coords)
        return self._apply('apply_coords', coords)

    def __add__(self, other):
        return TransformList(self.tfms + _transforms_of(other))

    def __radd__(self, other):
        return TransformList(_transforms_of(other) + self.tfms)

    def __iadd__(self, other):
        self.tfms.extend(TransformList(_transforms_of(other)).tfms)
        return self

    def __repr__(self):
        return "imgaug.TransformList([\n{}])".format(',\n'.join('  ' + repr(t) for t in self.tfms))

    __str__ = __repr__


class LazyTransform(Transform):
    """A transform decided by the first image it is applied to.

    ``apply_image`` calls ``get_transform(img)`` once and keeps the result; every ``apply_*``
    (including later ``apply_image`` calls) then uses it. Other ``apply_*`` methods before the
    first ``apply_image`` raise RuntimeError.

    Args:
        get_transform (ndarray -> Transform): usually an augmentor's ``get_transform``.
    """

    def __init__(self, get_transform):
        super(LazyTransform, self).__init__()
        self.get_transform = get_transform
        self._transform = None

    def _decided(self, method):
        if self._transform is None:
            raise RuntimeError("LazyTransform({!r}).{} needs apply_image to be called first: the "
                               "transform is decided by the image".format(self.get_transform, method))
        return self._transform

    def apply_image(self, img):
        if self._transform is None:
            self._transform = self.get_transform(img)
        return self._transform.apply_image(img)

    def apply_coords(self, coords):
        return self._decided('apply_coords').apply_coords(coords)

    def __getattr__(self, name):
        if name.startswith('apply_'):
            return lambda value: getattr(self._decided(name), name)(value)
        return super(LazyTransform, self).__getattr__(name)

    def __repr__(self):
        if self._transform is None:
            return "imgaug.LazyTransform(get_transform={!r})".format(self.get_transform)
        return repr(self._transform)

    __str__ = __repr__
