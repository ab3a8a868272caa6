"""imgaug foundation: transforms, the augmentor base classes and the meta augmentors."""

import logging
import os
import pickle

import cv2
import numpy as np
import pytest

from helpers.processes import run_python

from tensorpack_lite.dataflow.imgaug.base import (Augmentor, AugmentorList, ImageAugmentor,
                                                  PhotometricAugmentor)
from tensorpack_lite.dataflow.imgaug.meta import (Identity, MapImage, RandomApplyAug, RandomChooseAug,
                                                  RandomOrderAug)
from tensorpack_lite.dataflow.imgaug.transform import (CropTransform, FlipTransform, LazyTransform,
                                                       NoOpTransform, PhotometricTransform, ResizeTransform,
                                                       Transform, TransformFactory, TransformList,
                                                       TransposeTransform, WarpAffineTransform)
from tensorpack_lite.utils import utils as tp_utils


@pytest.fixture
def seeded(monkeypatch):
    """``seeded(n)`` fixes the library's rng seed to n for the rest of the test only."""
    monkeypatch.setattr(tp_utils, '_RNG_SEED', None)
    return tp_utils.fix_rng_seed


def ramp(shape, dtype=np.uint8):
    """A deterministic image whose every pixel differs from its neighbours."""
    return (np.arange(int(np.prod(shape))) % 251).reshape(shape).astype(dtype)


# ----- small augmentors used by the tests -----------------------------------------------------

class AddRandomInt(PhotometricAugmentor):
    """Adds a random integer in [0, 100) to every pixel (photometric)."""

    def _get_augment_params(self, img):
        return self.rng.randint(100)

    def _augment(self, img, offset):
        return img + offset


class AddConstant(PhotometricAugmentor):
    def __init__(self, value):
        super(AddConstant, self).__init__()
        self._init(locals())

    def _augment(self, img, _):
        return img + self.value


class TimesTwo(PhotometricAugmentor):
    def _augment(self, img, _):
        return img * 2


class CropLeftHalf(ImageAugmentor):
    """Keeps the left half of whatever image it gets (its transform depends on the input shape)."""

    def _get_transform(self, img):
        return CropTransform(0, 0, img.shape[0], img.shape[1] // 2)


class LegacyShiftRight(ImageAugmentor):
    """The pre-Transform interface: random params + _augment + _augment_coords."""

    def __init__(self, max_shift):
        super(LegacyShiftRight, self).__init__()
        self._init(locals())

    def _get_augment_params(self, img):
        return self.rng.randint(1, self.max_shift + 1)

    def _augment(self, img, shift):
        return np.roll(img, shift, axis=1)

    def _augment_coords(self, coords, shift):
        coords = coords.copy()
        coords[:, 0] += shift
        return coords


class LegacyInvert(ImageAugmentor):
    """Legacy interface without _get_augment_params nor _augment_coords."""

    def _augment(self, img, param):
        assert param is None
        return 255 - img


class NoTransform(ImageAugmentor):
    pass


# ----- transforms ----------------------------------------------------------------------------

@pytest.mark.parametrize('dtype', [np.uint8, np.float32])
@pytest.mark.parametrize('shape', [(6, 8), (6, 8, 1), (6, 8, 3), (6, 8, 5)])
def test_resize_transform_image_keeps_rank_and_dtype(shape, dtype):
    img = ramp(shape, dtype)
    out = ResizeTransform(6, 8, 12, 4, cv2.INTER_NEAREST).apply_image(img)
    assert out.shape == (12, 4) + shape[2:] and out.dtype == dtype
    # nearest neighbour: output row r comes from input row floor(r / 2), column c from 2 * c
    np.testing.assert_array_equal(out, img[np.arange(12) // 2][:, np.arange(4) * 2])


def test_resize_transform_coords_scale_and_wrong_input_shape():
    tfm = ResizeTransform(6, 8, 12, 4, cv2.INTER_LINEAR)
    coords = np.array([[8., 6.], [2., 3.]])
    out = tfm.apply_coords(coords)
    np.testing.assert_allclose(out, [[4., 12.], [1., 6.]])
    np.testing.assert_array_equal(coords, [[8., 6.], [2., 3.]])  # the input is not modified
    with pytest.raises(ValueError, match=r'ResizeTransform.*\(5, 8\)'):
        tfm.apply_image(np.zeros((5, 8), np.uint8))


def test_crop_transform_image_coords_and_out_of_bounds():
    img = ramp((10, 12, 3))
    tfm = CropTransform(2, 3, 4, 5)
    np.testing.assert_array_equal(tfm.apply_image(img), img[2:6, 3:8])
    np.testing.assert_allclose(tfm.apply_coords(np.array([[3.5, 2.5], [10, 7]])), [[0.5, 0.5], [7, 5]])
    with pytest.raises(ValueError, match=r'CropTransform\(y0=8, x0=0, h=4, w=5\).*\(10, 12, 3\)'):
        CropTransform(8, 0, 4, 5).apply_image(img)


@pytest.mark.parametrize('horiz', [True, False])
def test_flip_transform_moves_pixels_and_coords_alike(horiz):
    img = np.zeros((5, 7), np.float32)
    img[1, 2] = 1.0                         # pixel covering [2, 3) x [1, 2): centre (2.5, 1.5)
    tfm = FlipTransform(5, 7, horiz=horiz)
    out = tfm.apply_image(img)
    (row,), (col,) = np.nonzero(out)
    assert (row, col) == ((1, 4) if horiz else (3, 2))
    np.testing.assert_allclose(tfm.apply_coords(np.array([[2.5, 1.5]])), [[col + 0.5, row + 0.5]])


def test_transpose_transform_many_channels():
    img = ramp((4, 6, 7))
    out = TransposeTransform().apply_image(img)
    assert out.shape == (6, 4, 7) and out.flags['C_CONTIGUOUS']
    np.testing.assert_array_equal(out[5, 2], img[2, 5])
    np.testing.assert_allclose(TransposeTransform().apply_coords(np.array([[5.5, 2.5]])), [[2.5, 5.5]])


@pytest.mark.parametrize('shape', [(9, 11), (9, 11, 1), (9, 11, 3)])
def test_warp_affine_translation_is_exact(shape):
    img = np.zeros(shape, np.uint8)
    img[2, 3] = 200
    mat = np.array([[1, 0, 4], [0, 1, -1]], np.float32)   # x + 4, y - 1
    tfm = WarpAffineTransform(mat, (11, 9))
    out = tfm.apply_image(img)
    assert out.shape == shape and out.dtype == np.uint8
    expected = np.zeros(shape, np.uint8)
    expected[1, 7] = 200
    np.testing.assert_array_equal(out, expected)
    np.testing.assert_allclose(tfm.apply_coords(np.array([[3.5, 2.5]])), [[7.5, 1.5]])


def test_warp_affine_rotation_coords_follow_the_pixel():
    # 90 degrees about the image centre, in OpenCV's (integer pixel centre) convention
    mat = cv2.getRotationMatrix2D((3.0, 3.0), 90, 1.0)
    img = np.zeros((7, 7), np.float32)
    img[1, 5] = 1.0
    tfm = WarpAffineTransform(mat, (7, 7), interp=cv2.INTER_NEAREST)
    (row,), (col,) = np.nonzero(tfm.apply_image(img))
    np.testing.assert_allclose(tfm.apply_coords(np.array([[5.5, 1.5]])), [[col + 0.5, row + 0.5]], atol=1e-6)


def test_noop_photometric_and_factory_transforms():
    img = ramp((3, 4))
    coords = np.array([[1, 2]])
    noop = NoOpTransform()
    assert noop.apply_image(img) is img and noop.apply_anything('x') == 'x'
    assert noop.apply_coords(coords).dtype == np.float32
    photo = PhotometricTransform(lambda x: x + 1, name='plus one')
    np.testing.assert_array_equal(photo.apply_image(img), img + 1)
    np.testing.assert_array_equal(photo.apply_coords(coords), coords)
    assert repr(photo) == 'imgaug.PhotometricTransform(plus one)'
    factory = TransformFactory(name='neg', apply_image=lambda x: -x)
    np.testing.assert_array_equal(factory.apply_image(img.astype(int)), -img.astype(int))
    with pytest.raises(NotImplementedError, match=r'TransformFactory\(neg\) does not implement apply_coords'):
        factory.apply_coords(coords)
    with pytest.raises(KeyError, match="'image'"):
        TransformFactory(image=lambda x: x)
    with pytest.raises(TypeError, match='apply_image must be callable'):
        TransformFactory(apply_image=3)


def test_transform_repr_and_missing_methods():
    assert repr(CropTransform(1, 2, 3, 4)) == 'imgaug.CropTransform(y0=1, x0=2, h=3, w=4)'
    assert repr(FlipTransform(3, 4)) == 'imgaug.FlipTransform(h=3, w=4)'   # default horiz left out
    assert repr(TransposeTransform()) == 'imgaug.TransposeTransform()'
    with pytest.raises(NotImplementedError, match=r'CropTransform.*apply_segmentation'):
        CropTransform(0, 0, 1, 1).apply_segmentation(None)
    with pytest.raises(AttributeError, match='nothing'):
        Transform().nothing
    with pytest.raises(ValueError, match=r'CropTransform.apply_coords.*\(4,\)'):
        CropTransform(0, 0, 1, 1).apply_coords(np.zeros(4))


def test_transform_list_applies_in_order_and_concatenates():
    img = ramp((6, 8))
    crop, flip = CropTransform(1, 2, 4, 5), FlipTransform(4, 5)
    tfms = TransformList([crop]) + flip
    assert isinstance(tfms, TransformList) and tfms.tfms == [crop, flip]
    np.testing.assert_array_equal(tfms.apply_image(img), img[1:5, 2:7][:, ::-1])
    # (2.5, 1.5) -> crop -> (0.5, 0.5) -> flip (w=5) -> (4.5, 0.5)
    np.testing.assert_allclose(tfms.apply_coords(np.array([[2.5, 1.5]])), [[4.5, 0.5]])
    assert (flip + TransformList([crop])).tfms == [flip, crop]
    assert (TransformList([crop]) + TransformList([flip, crop])).tfms == [crop, flip, crop]
    tfms += NoOpTransform()
    assert len(tfms.tfms) == 3
    assert TransformList([NoOpTransform(), NoOpTransform()]).apply_other(7) == 7
    with pytest.raises(NotImplementedError, match='CropTransform.*apply_other'):
        TransformList([crop]).apply_other(7)
    with pytest.raises(TypeError, match=r'tfms\[1\] is a str'):
        TransformList([crop, 'flip'])


def test_lazy_transform_decides_on_the_first_image():
    seen = []

    def decide(img):
        seen.append(img.shape)
        return CropTransform(0, 0, 2, 2)

    lazy = LazyTransform(decide)
    with pytest.raises(RuntimeError, match='apply_image'):
        lazy.apply_coords(np.zeros((1, 2)))
    assert 'LazyTransform' in repr(lazy)
    lazy.apply_image(ramp((5, 5)))
    lazy.apply_image(ramp((4, 4)))
    assert seen == [(5, 5)]
    np.testing.assert_allclose(lazy.apply_coords(np.array([[1., 1.]])), [[1., 1.]])
    assert repr(lazy) == 'imgaug.CropTransform(y0=0, x0=0, h=2, w=2)'


# ----- ImageAugmentor ------------------------------------------------------------------------

def test_init_stores_arguments_and_repr_lists_non_defaults():
    aug = AddConstant(3)
    assert aug.value == 3 and repr(aug) == str(aug) == 'imgaug.AddConstant(value=3)'
    assert repr(RandomApplyAug(aug, 0.5)) == \
        'imgaug.RandomApplyAug(aug=imgaug.AddConstant(value=3), prob=0.5)'
    assert repr(MapImage(abs)) == 'imgaug.MapImage(func=<built-in function abs>)'
    assert Augmentor is ImageAugmentor


def test_rand_range_is_float32_in_range(seeded):
    aug = AddRandomInt()
    value = aug._rand_range(2.0, 3.0)
    assert isinstance(value, np.float32) and 2.0 <= value < 3.0
    values = aug._rand_range(5.0, size=(1000,))
    assert values.dtype == np.float32 and values.shape == (1000,)
    assert values.min() >= 0 and values.max() < 5.0 and values.max() > 4.0


def test_fixed_seed_makes_augmentors_reproducible(seeded):
    seeded(7)
    first, second = AddRandomInt(), AddRandomInt()
    draws = [first.augment(np.zeros((2, 2), np.float32))[0, 0] for _ in range(5)]
    assert draws == [second.augment(np.zeros((2, 2), np.float32))[0, 0] for _ in range(5)]
    assert draws == list(np.random.RandomState(7).randint(100, size=5))
    first.reset_state()           # back to the start of the sequence
    assert first.augment(np.zeros((2, 2), np.float32))[0, 0] == draws[0]
    seeded(8)
    other = AddRandomInt()
    assert [other.augment(np.zeros((2, 2), np.float32))[0, 0] for _ in range(5)] != draws


@pytest.mark.parametrize('bad, error, match', [
    (np.zeros((1, 2, 3, 4), np.uint8), ValueError, r'AddConstant\(value=1\).*HxW.*\(1, 2, 3, 4\)'),
    (np.zeros(5, np.float32), ValueError, r'AddConstant.*\(5,\)'),
    (np.zeros((2, 2), np.int32), TypeError, r'AddConstant.*int32'),
    ([[1, 2]], TypeError, r'AddConstant.*list'),
])
def test_bad_images_name_the_augmentor(bad, error, match):
    with pytest.raises(error, match=match):
        AddConstant(1).augment(bad)


def test_augmentor_without_transform_names_its_class():
    with pytest.raises(NotImplementedError, match='NoTransform must implement get_transform'):
        NoTransform().get_transform(np.zeros((2, 2), np.uint8))


def test_legacy_interface_still_works(seeded, log_records):
    seeded(3)
    shift = np.random.RandomState(3).randint(1, 4)
    aug = LegacyShiftRight(3)
    img = ramp((4, 6))
    tfm = aug.get_transform(img)
    np.testing.assert_array_equal(tfm.apply_image(img), np.roll(img, shift, axis=1))
    np.testing.assert_allclose(tfm.apply_coords(np.array([[0.5, 1.5]])), [[0.5 + shift, 1.5]])
    assert any('legacy' in m for m in log_records.messages(logging.WARNING))

    invert = LegacyInvert()
    tfm = invert.get_transform(img)
    np.testing.assert_array_equal(tfm.apply_image(img), 255 - img)
    coords = np.array([[1., 2.]])
    moved = tfm.apply_coords(coords)
    np.testing.assert_array_equal(moved, [[1., 2.]])  # the legacy default: unchanged
    assert moved is not coords


def test_deprecated_augment_methods(log_records):
    aug = AddConstant(5)
    img = ramp((3, 3))
    out, tfm = aug.augment_return_params(img)
    np.testing.assert_array_equal(out, img + 5)
    np.testing.assert_array_equal(aug.augment_with_params(img, tfm), img + 5)
    np.testing.assert_array_equal(aug.augment_coords(np.array([[1., 1.]]), tfm), [[1., 1.]])
    warnings = ' '.join(log_records.messages(logging.WARNING))
    for name in ('augment_return_params', 'augment_with_params', 'augment_coords'):
        assert name + ' is deprecated' in warnings


def test_photometric_augmentor_changes_pixels_only(seeded):
    seeded(11)
    offset = np.random.RandomState(11).randint(100)
    tfm = AddRandomInt().get_transform(np.zeros((3, 3, 3), np.float32))
    assert isinstance(tfm, PhotometricTransform) and 'AddRandomInt' in repr(tfm)
    np.testing.assert_array_equal(tfm.apply_image(np.ones((3, 3, 3), np.float32)), 1 + offset)
    np.testing.assert_array_equal(tfm.apply_coords(np.array([[1.5, 2.5]])), [[1.5, 2.5]])
    with pytest.raises(NotImplementedError, match='PhotometricAugmentor must implement _augment'):
        PhotometricAugmentor().augment(np.zeros((2, 2), np.uint8))


def test_augmentors_are_picklable(seeded):
    seeded(1)
    augs = AugmentorList([AddRandomInt(), RandomApplyAug(AddConstant(2), 0.5), CropLeftHalf()])
    clone = pickle.loads(pickle.dumps(augs))
    img = np.zeros((2, 4), np.float32)
    np.testing.assert_array_equal(clone.augment(img), augs.augment(img))
    assert repr(clone) == repr(augs)


def test_forked_child_gets_a_fresh_generator(seeded):
    seeded(5)
    aug = AddRandomInt()
    parent_draws = [aug.rng.randint(100) for _ in range(3)]   # the parent's state moves on
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: the augmentor was reset after the fork, to the seeded start
        os.close(read_end)
        os.write(write_end, str(aug.rng.randint(100)).encode())
        os._exit(0)
    os.close(write_end)
    child_draw = int(os.read(read_end, 100).decode())
    os.close(read_end)
    os.waitpid(pid, 0)
    assert child_draw == parent_draws[0]
    assert aug.rng.randint(100) == np.random.RandomState(5).randint(100, size=4)[3]


# ----- AugmentorList -------------------------------------------------------------------------

def test_augmentor_list_decides_each_transform_on_the_previous_output():
    augs = AugmentorList([CropLeftHalf(), CropLeftHalf(), AddConstant(1)])
    img = ramp((4, 16, 3))
    tfm = augs.get_transform(img)
    assert isinstance(tfm, TransformList) and len(tfm.tfms) == 3
    out = tfm.apply_image(img)
    np.testing.assert_array_equal(out, img[:, :4] + 1)   # 16 -> 8 -> 4 columns
    np.testing.assert_allclose(tfm.apply_coords(np.array([[2.5, 1.5]])), [[2.5, 1.5]])
    assert repr(augs).startswith('imgaug.AugmentorList([\n  imgaug.CropLeftHalf(),')


def test_augmentor_list_flattens_and_resets_every_member(seeded):
    seeded(2)
    inner, other = AddRandomInt(), AddRandomInt()
    inner.rng.randint(100)
    augs = AugmentorList([AugmentorList([inner, other]), Identity()])
    assert len(augs.get_transform(np.zeros((2, 2), np.uint8)).tfms) == 3
    inner.rng.randint(100)
    augs.reset_state()
    assert inner.rng.randint(100) == np.random.RandomState(2).randint(100)


def test_augmentor_list_rejects_bad_arguments():
    with pytest.raises(TypeError, match='AugmentorList: augmentors must be a list'):
        AugmentorList(Identity())
    with pytest.raises(TypeError, match=r'augmentors\[1\] is a str'):
        AugmentorList([Identity(), 'flip'])
    with pytest.raises(ValueError, match=r'AugmentorList.*\(2, 2, 2, 2\)'):
        AugmentorList([Identity()]).get_transform(np.zeros((2, 2, 2, 2), np.uint8))


# ----- meta augmentors -----------------------------------------------------------------------

def test_identity():
    img = ramp((3, 5, 3))
    tfm = Identity().get_transform(img)
    assert tfm.apply_image(img) is img
    np.testing.assert_array_equal(tfm.apply_coords(np.array([[1., 2.]])), [[1., 2.]])


def test_random_apply_aug_follows_the_generator(seeded):
    seeded(4)
    aug = RandomApplyAug(AddConstant(10), 0.3)
    img = np.zeros((1, 1), np.float32)
    results = [aug.augment(img)[0, 0] for _ in range(200)]
    expected = np.where(np.random.RandomState(4).rand(200) < 0.3, 10.0, 0.0)
    np.testing.assert_array_equal(results, expected)
    assert RandomApplyAug(AddConstant(10), 0.0).augment(img)[0, 0] == 0
    assert RandomApplyAug(AddConstant(10), 1.0).augment(img)[0, 0] == 10
    with pytest.raises(ValueError, match='RandomApplyAug: prob.*1.5'):
        RandomApplyAug(Identity(), 1.5)


def test_random_choose_aug(seeded):
    img = np.zeros((1, 1), np.float32)
    sure = RandomChooseAug([(AddConstant(1), 0.0), (AddConstant(2), 1.0)])
    assert sure.prob == [0.0, 1.0] and {sure.augment(img)[0, 0] for _ in range(20)} == {2.0}
    seeded(9)
    even = RandomChooseAug([AddConstant(1), AddConstant(2), AddConstant(3)])
    picks = [even.augment(img)[0, 0] for _ in range(100)]
    rng = np.random.RandomState(9)
    assert picks == [rng.choice(3, p=[1 / 3.] * 3) + 1.0 for _ in range(100)]
    with pytest.raises(ValueError, match=r'RandomChooseAug: the probabilities \[0.5, 0.6\]'):
        RandomChooseAug([(Identity(), 0.5), (Identity(), 0.6)])
    with pytest.raises(ValueError, match='non-empty'):
        RandomChooseAug([])


def test_random_order_aug_uses_both_orders(seeded):
    seeded(0)
    aug = RandomOrderAug([AddConstant(1), TimesTwo()])
    img = np.full((1, 1), 3.0, np.float32)
    results = [aug.augment(img)[0, 0] for _ in range(30)]
    rng = np.random.RandomState(0)
    expected = [(3 + 1) * 2 if rng.permutation(2)[0] == 0 else 3 * 2 + 1 for _ in range(30)]
    assert results == expected and set(results) == {7.0, 8.0}


def test_map_image_with_and_without_coord_func():
    img = ramp((2, 3))
    tfm = MapImage(lambda x: x[::-1]).get_transform(img)
    np.testing.assert_array_equal(tfm.apply_image(img), img[::-1])
    with pytest.raises(NotImplementedError, match='MapImage'):
        tfm.apply_coords(np.zeros((1, 2)))
    tfm = MapImage(lambda x: x, coord_func=lambda c: c + 1).get_transform(img)
    np.testing.assert_array_equal(tfm.apply_coords(np.zeros((1, 2))), [[1., 1.]])


# ----- package-level behaviour ---------------------------------------------------------------

def test_import_without_opencv_is_one_clear_error():
    out = run_python("import sys; sys.modules['cv2'] = None\n"
                     "try:\n"
                     "    import tensorpack_lite.dataflow.imgaug\n"
                     "except ImportError as err:\n"
                     "    print('ERROR:', err)\n", without_tensorflow=True, timeout=120)
    assert 'ERROR:' in out, out
    assert 'opencv-python-headless' in out and "tensorpack_lite[image]" in out


def test_works_without_tensorflow():
    out = run_python("import numpy as np\n"
                     "from tensorpack_lite.dataflow.imgaug.meta import Identity\n"
                     "print('OK', Identity().augment(np.zeros((2, 2), np.uint8)).shape)\n",
                     without_tensorflow=True, timeout=120)
    assert 'OK (2, 2)' in out, out


def test_package_exports_every_module_name_once():
    import importlib

    from tensorpack_lite.dataflow import imgaug
    modules = ['base', 'convert', 'crop', 'deform', 'external', 'geometry', 'imgproc', 'meta', 'misc',
               'noise', 'paste', 'transform']
    expected = []
    for name in modules:
        module = importlib.import_module('tensorpack_lite.dataflow.imgaug.' + name)
        expected += module.__all__
        for public in module.__all__:
            assert getattr(imgaug, public) is getattr(module, public), (name, public)
    assert sorted(imgaug.__all__) == sorted(expected) and len(set(expected)) == len(expected)
