"""Photometric augmentors (imgaug.imgproc, imgaug.convert, imgaug.noise) and the wrappers of
external augmentation libraries (imgaug.external), exercised with small stand-ins."""

import re
import sys
import types

import cv2
import numpy as np
import pytest

from tensorpack_lite.dataflow.imgaug import convert, external, imgproc, noise
from tensorpack_lite.utils import utils as rng_utils
from tensorpack_lite.utils.utils import fix_rng_seed

# ITU-R BT.601 luma weights, as OpenCV's RGB2GRAY uses them.
LUMA_RGB = np.array([0.299, 0.587, 0.114])


@pytest.fixture
def seeded(monkeypatch):
    """``seeded(aug, seed)``: fix the global seed and reset ``aug`` (the seed is restored afterwards)."""
    monkeypatch.setattr(rng_utils, '_RNG_SEED', rng_utils._RNG_SEED)

    def reseed(aug, seed):
        fix_rng_seed(seed)
        aug.reset_state()
        return aug
    return reseed


def colour_image(dtype=np.float32, shape=(6, 5, 3), seed=0):
    """A random image with values in [0, 255]."""
    values = np.random.RandomState(seed).uniform(0, 255, size=shape)
    return values.astype(dtype)


def luma(img, rgb):
    weights = LUMA_RGB if rgb else LUMA_RGB[::-1]
    return img.astype(np.float64).dot(weights)


# ----- properties shared by all photometric augmentors ----------------------------------------

def _all_photometric():
    eig = dict(eigval=[30., 10., 5.], eigvec=np.eye(3))
    return [
        imgproc.Hue(range=(10, 20)), imgproc.Brightness(40), imgproc.BrightnessScale((0.5, 1.5)),
        imgproc.Contrast((0.5, 1.5)), imgproc.Contrast((0.5, 1.5), rgb=True), imgproc.MeanVarianceNormalize(),
        imgproc.GaussianBlur(), imgproc.Gamma(), imgproc.Clip(10, 200), imgproc.Saturation(),
        imgproc.Lighting(1.0, **eig), imgproc.MinMaxNormalize(), convert.ColorSpace(cv2.COLOR_BGR2RGB),
        convert.Grayscale(), convert.ToUint8(), convert.ToFloat32(), noise.JpegNoise(),
        noise.GaussianNoise(5), noise.SaltPepperNoise(),
    ]


@pytest.mark.parametrize('aug', _all_photometric(), ids=lambda a: type(a).__name__)
def test_deterministic_under_fixed_seed_and_coords_unchanged(aug, seeded):
    img = colour_image(np.uint8)
    first = seeded(aug, 123).augment(img.copy())
    again = seeded(aug, 123).augment(img.copy())
    np.testing.assert_array_equal(first, again)

    coords = np.array([[1.5, 2.0], [4.25, 0.5]], dtype=np.float32)
    moved = aug.get_transform(img).apply_coords(coords)
    np.testing.assert_array_equal(moved, [[1.5, 2.0], [4.25, 0.5]])


@pytest.mark.parametrize('aug', [
    imgproc.Brightness(40), imgproc.BrightnessScale((0.5, 1.5)), imgproc.Contrast((0.5, 1.5)),
    imgproc.GaussianBlur(), imgproc.Gamma(), imgproc.Clip(10, 200), noise.GaussianNoise(5),
    noise.SaltPepperNoise(), noise.JpegNoise()], ids=lambda a: type(a).__name__)
@pytest.mark.parametrize('shape', [(6, 5), (6, 5, 1), (6, 5, 3)])
@pytest.mark.parametrize('dtype', [np.uint8, np.float32])
def test_dtype_and_shape_kept(aug, shape, dtype, seeded):
    img = colour_image(dtype, shape)
    out = seeded(aug, 5).augment(img)
    assert out.dtype == dtype
    assert out.shape == shape


@pytest.mark.parametrize('aug, shape', [
    (imgproc.Hue(), (6, 5)), (imgproc.Hue(), (6, 5, 1)), (imgproc.Saturation(), (6, 5)),
    (imgproc.Saturation(), (6, 5, 1)), (imgproc.Lighting(1., [1., 1., 1.], np.eye(3)), (6, 5)),
    (imgproc.Lighting(1., [1., 1., 1.], np.eye(3)), (6, 5, 1)),
    (imgproc.Contrast((0.5, 1.5), rgb=False), (6, 5, 1))], ids=lambda a: getattr(type(a), '__name__', None))
def test_colour_augmentors_name_themselves_on_a_grey_image(aug, shape, seeded):
    seeded(aug, 0)
    with pytest.raises(ValueError, match=r"imgaug\.{}.*HxWx3.*{}".format(
            type(aug).__name__, re.escape(str(shape)))):
        aug.augment(np.zeros(shape, np.uint8))


# ----- imgproc ---------------------------------------------------------------------------------

def test_brightness_adds_one_value_then_clips(seeded):
    img = np.array([[0., 100.], [250., 255.]], dtype=np.float32)
    unclipped = seeded(imgproc.Brightness(20, clip=False), 7).augment(img)
    shift = unclipped[0, 0]                     # the pixel that was 0
    assert 0 < abs(shift) <= 20
    np.testing.assert_allclose(unclipped, img + shift, atol=1e-4)

    clipped = seeded(imgproc.Brightness(20), 7).augment(img)
    np.testing.assert_array_equal(clipped, np.clip(img + shift, 0, 255))

    as_uint8 = seeded(imgproc.Brightness(20), 7).augment(img.astype(np.uint8))
    assert as_uint8.dtype == np.uint8
    np.testing.assert_array_equal(as_uint8, np.floor(np.clip(img + shift, 0, 255)))


def test_brightness_needs_a_positive_delta():
    with pytest.raises(ValueError, match=r"Brightness: delta must be > 0, got 0"):
        imgproc.Brightness(0)


def test_brightness_scale_multiplies_and_clips(seeded):
    img = np.array([[10, 100, 200]], dtype=np.uint8)
    np.testing.assert_array_equal(seeded(imgproc.BrightnessScale((2, 2)), 0).augment(img), [[20, 200, 255]])
    unclipped = seeded(imgproc.BrightnessScale((2, 2), clip=False), 0).augment(img.astype(np.float32))
    np.testing.assert_array_equal(unclipped, [[20., 200., 400.]])


def test_contrast_scales_deviations_from_the_mean(seeded):
    img = colour_image()
    half = seeded(imgproc.Contrast((0.5, 0.5), clip=False), 0).augment(img)
    channel_mean = img.mean(axis=(0, 1))
    np.testing.assert_allclose(half, channel_mean + 0.5 * (img - channel_mean), rtol=1e-5)

    grey_mean = luma(img, rgb=True).mean()
    grey_based = seeded(imgproc.Contrast((0.5, 0.5), rgb=True, clip=False), 0).augment(img)
    np.testing.assert_allclose(grey_based, grey_mean + 0.5 * (img - grey_mean), rtol=1e-4)

    flat = img[:, :, 0]
    np.testing.assert_allclose(seeded(imgproc.Contrast((2, 2), clip=False), 0).augment(flat),
                               flat.mean() + 2 * (flat - flat.mean()), rtol=1e-5)


def test_contrast_with_a_random_factor_keeps_the_channel_means(seeded):
    img = colour_image()
    out = seeded(imgproc.Contrast((0.2, 1.8), clip=False), 3).augment(img)
    assert not np.allclose(out, img)
    np.testing.assert_allclose(out.mean(axis=(0, 1)), img.mean(axis=(0, 1)), rtol=1e-5)


def test_mean_variance_normalize():
    img = colour_image(np.uint8, (8, 7, 3))
    out = imgproc.MeanVarianceNormalize().augment(img)
    assert out.dtype == np.float32
    assert abs(out.mean()) < 1e-5 and abs(out.std() - 1) < 1e-4

    per_channel = imgproc.MeanVarianceNormalize(all_channel=False).augment(img)
    np.testing.assert_allclose(per_channel.mean(axis=(0, 1)), 0, atol=1e-5)
    np.testing.assert_allclose(per_channel.std(axis=(0, 1)), 1, rtol=1e-4)

    constant = imgproc.MeanVarianceNormalize().augment(np.full((4, 4), 9, np.uint8))
    np.testing.assert_array_equal(constant, np.zeros((4, 4)))


def test_min_max_normalize():
    img = np.stack([np.arange(12.).reshape(3, 4), 5 + 2 * np.arange(12.).reshape(3, 4)], axis=2)
    whole = imgproc.MinMaxNormalize(min=-1, max=1).augment(img)
    assert whole.dtype == np.float32
    np.testing.assert_allclose(whole, 2 * img / 27 - 1, rtol=1e-6)

    per_channel = imgproc.MinMaxNormalize(min=0, max=11, all_channel=False).augment(img)
    np.testing.assert_allclose(per_channel[:, :, 0], img[:, :, 0], atol=1e-5)
    np.testing.assert_allclose(per_channel[:, :, 1], img[:, :, 0], atol=1e-5)

    constant = imgproc.MinMaxNormalize(min=3, max=4).augment(np.full((2, 2), 7, np.uint8))
    np.testing.assert_array_equal(constant, np.full((2, 2), 3.))


def _gaussian_window(size, sigma):
    x = np.arange(size) - size // 2
    window = np.exp(-x ** 2 / (2 * sigma ** 2))
    return window / window.sum()


@pytest.mark.parametrize('shape', [(7, 7), (7, 7, 1)])
def test_gaussian_blur_of_an_impulse_is_the_gaussian_window(shape, seeded):
    img = np.zeros(shape, np.float32)
    img[3, 3] = 100
    aug = seeded(imgproc.GaussianBlur(size_range=(1, 2), sigma_range=(1, 1)), 0)
    out = aug.augment(img)
    window = _gaussian_window(3, 1.0)
    expected = np.zeros((7, 7))
    expected[2:5, 2:5] = 100 * np.outer(window, window)
    assert out.shape == shape
    np.testing.assert_allclose(out.reshape(7, 7), expected, atol=1e-4)


@pytest.mark.parametrize('symmetric', [True, False])
def test_gaussian_blur_window_sizes_are_odd_and_in_range(symmetric, seeded):
    impulse = np.zeros((9, 9), np.float32)
    impulse[4, 4] = 1
    aug = seeded(imgproc.GaussianBlur(size_range=(1, 4), symmetric=symmetric), 2)
    windows = set()
    for _ in range(40):
        rows, cols = np.nonzero(aug.augment(impulse))   # the blurred impulse covers the window
        windows.add((np.ptp(cols) + 1, np.ptp(rows) + 1))
    assert {size for window in windows for size in window} == {3, 5, 7}
    assert any(width != height for width, height in windows) == (not symmetric)


def test_gaussian_blur_keeps_a_constant_image_and_accepts_old_arguments(log_records):
    img = np.full((5, 6, 3), 77, np.uint8)
    np.testing.assert_array_equal(imgproc.GaussianBlur(size_range=(2, 3)).augment(img), img)
    assert imgproc.GaussianBlur(size_range=4).size_range == (0, 4)
    assert imgproc.GaussianBlur(max_size=5).size_range == (0, 5)
    assert any('GaussianBlur(max_size=) is deprecated' in m for m in log_records.messages())
    with pytest.raises(ValueError, match=r"GaussianBlur: sigma_range must be a \(low, high\) pair, got 2"):
        imgproc.GaussianBlur(sigma_range=2)


def test_gamma_applies_the_power_law(seeded):
    img = np.array([[0, 64, 128, 255]], dtype=np.uint8)
    out = seeded(imgproc.Gamma(range=(1, 1)), 0).augment(img)   # 255 * sqrt(x / 255) = sqrt(255 x)
    np.testing.assert_array_equal(out, [[0, 127, 180, 255]])      # sqrt(16320) = 127.75, ... 180.66
    as_float = seeded(imgproc.Gamma(range=(1, 1)), 0).augment(img.astype(np.float32)[:, :, None])
    assert as_float.dtype == np.float32 and as_float.shape == (1, 4, 1)
    np.testing.assert_array_equal(as_float[:, :, 0], out)


def test_clip():
    img = np.array([[-3., 15.5, 99.]])
    np.testing.assert_array_equal(imgproc.Clip(0, 20).augment(img), [[0., 15.5, 20.]])


@pytest.mark.parametrize('rgb', [True, False])
def test_saturation_blends_with_the_grey_image(rgb, seeded):
    img = colour_image()
    aug = seeded(imgproc.Saturation(alpha=0.4, rgb=rgb, clip=False), 11)
    out = aug.augment(img)
    grey = luma(img, rgb)[:, :, None]
    ratio = (out - grey) / (img - grey)   # the same v for every element
    np.testing.assert_allclose(ratio, ratio[0, 0, 0], rtol=1e-3)
    assert 0.6 <= ratio[0, 0, 0] <= 1.4 and abs(ratio[0, 0, 0] - 1) > 1e-3

    grey_img = np.repeat(grey.astype(np.float32), 3, axis=2)
    np.testing.assert_allclose(aug.augment(grey_img), grey_img, rtol=1e-5)


def test_saturation_needs_alpha_below_one():
    with pytest.raises(ValueError, match=r"Saturation: alpha must be < 1, got 1"):
        imgproc.Saturation(alpha=1)


def test_lighting_adds_the_eigen_combination(seeded):
    eigval = np.array([50., 20., 10.])
    eigvec = np.array([[0.6, 0.8, 0.], [-0.8, 0.6, 0.], [0., 0., 1.]])
    img = colour_image()
    out = seeded(imgproc.Lighting(0.5, eigval, eigvec, clip=False), 21).augment(img)
    alpha = np.random.RandomState(21).randn(3) * 0.5
    shift = eigvec.dot(alpha * eigval)
    np.testing.assert_allclose(out, img + shift, rtol=1e-5, atol=1e-4)

    as_uint8 = seeded(imgproc.Lighting(0.5, eigval, eigvec), 21).augment(img.astype(np.uint8))
    assert as_uint8.dtype == np.uint8
    np.testing.assert_array_equal(as_uint8, np.floor(np.clip(img.astype(np.uint8) + shift, 0, 255)))


def test_lighting_checks_its_eigen_decomposition():
    with pytest.raises(ValueError, match=r"Lighting: eigval must have shape \(3,\), got \(2,\)"):
        imgproc.Lighting(0.1, [1., 2.], np.eye(3))
    with pytest.raises(ValueError, match=r"Lighting: eigvec must have shape \(3, 3\), got \(3, 2\)"):
        imgproc.Lighting(0.1, [1., 2., 3.], np.ones((3, 2)))


@pytest.mark.parametrize('dtype', [np.uint8, np.float32])
def test_hue_turns_red_into_green_or_blue_into_red(dtype, seeded):
    red = np.zeros((2, 3, 3), dtype)
    red[..., 0] = 255                      # red as RGB, blue as BGR
    green = np.zeros_like(red)
    green[..., 1] = 255
    aug = seeded(imgproc.Hue(range=(60, 60)), 0)   # +60 units = +120 degrees
    np.testing.assert_allclose(aug.augment(red), green, atol=1e-3)

    out = seeded(imgproc.Hue(range=(60, 60), rgb=False), 0).augment(red)
    red_as_bgr = np.zeros_like(red)
    red_as_bgr[..., 2] = 255
    assert out.dtype == dtype
    np.testing.assert_allclose(out, red_as_bgr, atol=1e-3)


# ----- convert ---------------------------------------------------------------------------------

@pytest.mark.parametrize('rgb', [False, True])
def test_grayscale_weights(rgb):
    img = colour_image()
    expected = luma(img, rgb)
    out = convert.Grayscale(rgb=rgb).augment(img)
    assert out.shape == (6, 5, 1) and out.dtype == np.float32
    np.testing.assert_allclose(out[:, :, 0], expected, rtol=1e-4)

    as_uint8 = convert.Grayscale(rgb=rgb, keepdims=False).augment(img.astype(np.uint8))
    assert as_uint8.shape == (6, 5) and as_uint8.dtype == np.uint8
    np.testing.assert_allclose(as_uint8, luma(img.astype(np.uint8), rgb), atol=0.6)   # rounded

    same_shape = convert.Grayscale(rgb=rgb, keepshape=True).augment(img)
    assert same_shape.shape == (6, 5, 3)
    for channel in range(3):
        np.testing.assert_array_equal(same_shape[:, :, channel], out[:, :, 0])


def test_grayscale_keepshape_needs_keepdims():
    with pytest.raises(ValueError, match=r"Grayscale: keepshape=True needs keepdims=True"):
        convert.Grayscale(keepdims=False, keepshape=True)


def test_color_space_converts_and_restores_the_channel_axis():
    import cv2
    img = colour_image(np.uint8)
    hsv = convert.ColorSpace(cv2.COLOR_BGR2HSV).augment(img)
    np.testing.assert_array_equal(hsv, cv2.cvtColor(img, cv2.COLOR_BGR2HSV))
    assert convert.ColorSpace(cv2.COLOR_BGR2GRAY).augment(img).shape == (6, 5, 1)
    assert convert.ColorSpace(cv2.COLOR_BGR2GRAY, keepdims=False).augment(img).shape == (6, 5)
    assert convert.ColorSpace(cv2.COLOR_GRAY2BGR).augment(img[:, :, 0]).shape == (6, 5, 3)
    with pytest.raises(ValueError, match=r"imgaug\.ColorSpace cannot convert an image of shape \(6, 5, 1\)"):
        convert.ColorSpace(cv2.COLOR_BGR2HSV).augment(img[:, :, :1])


def test_to_uint8_and_to_float32():
    img = np.array([[-5., 3.7, 300.]])
    as_uint8 = convert.ToUint8().augment(img)
    assert as_uint8.dtype == np.uint8
    np.testing.assert_array_equal(as_uint8, [[0, 3, 255]])
    as_float = convert.ToFloat32().augment(as_uint8)
    assert as_float.dtype == np.float32
    np.testing.assert_array_equal(as_float, [[0., 3., 255.]])


# ----- noise -----------------------------------------------------------------------------------

def test_jpeg_noise_changes_pixels_and_higher_quality_changes_fewer(seeded):
    img = colour_image(np.uint8, (16, 16, 3))
    low = seeded(noise.JpegNoise(quality_range=(10, 11)), 0).augment(img)
    high = seeded(noise.JpegNoise(quality_range=(100, 101)), 0).augment(img)
    assert low.shape == img.shape and low.dtype == np.uint8
    low_error = np.abs(low.astype(int) - img).mean()
    high_error = np.abs(high.astype(int) - img).mean()
    assert low_error > 0
    assert high_error < low_error


def test_jpeg_noise_rejects_two_channels(seeded):
    aug = seeded(noise.JpegNoise(), 0)
    with pytest.raises(ValueError, match=r"JpegNoise needs an HxW, HxWx1 or HxWx3 image.*\(4, 4, 2\)"):
        aug.augment(np.zeros((4, 4, 2), np.uint8))


def test_gaussian_noise_adds_sigma_times_normal_draws(seeded):
    img = colour_image(shape=(4, 5, 3))
    out = seeded(noise.GaussianNoise(sigma=3, clip=False), 9).augment(img)
    np.testing.assert_allclose(out, img + 3 * np.random.RandomState(9).randn(4, 5, 3), rtol=1e-6, atol=1e-4)

    edges = np.array([[0, 255]], dtype=np.uint8)
    clipped = seeded(noise.GaussianNoise(sigma=1000), 1).augment(edges)
    draws = np.random.RandomState(1).randn(1, 2) * 1000
    np.testing.assert_array_equal(clipped, np.floor(np.clip(edges + draws, 0, 255)))


def test_salt_pepper_noise_fractions(seeded):
    img = np.full((100, 100, 3), 128, np.uint8)
    out = seeded(noise.SaltPepperNoise(white_prob=0.1, black_prob=0.2), 4).augment(img)
    assert np.all(img == 128)                   # the input is left alone
    assert abs(np.mean(out == 255) - 0.1) < 0.01
    assert abs(np.mean(out == 0) - 0.2) < 0.01
    assert np.all((out == 0) | (out == 128) | (out == 255))


def test_salt_pepper_probabilities_must_not_exceed_one():
    with pytest.raises(ValueError, match=r"SaltPepperNoise: white_prob \+ black_prob must be at most 1"):
        noise.SaltPepperNoise(white_prob=0.6, black_prob=0.5)


# ----- external --------------------------------------------------------------------------------

class FakeKeypoint(object):
    def __init__(self, x, y):
        self.x, self.y = x, y


class FakeKeypointsOnImage(object):
    def __init__(self, keypoints, shape):
        self.keypoints, self.shape = keypoints, shape


class FakeFlipLR(object):
    """Like an imgaug augmenter: flips left-right with probability 1/2, decided per call unless
    made deterministic with ``to_deterministic()``."""

    def __init__(self, seed=0, flip=None):
        self.rng = np.random.RandomState(seed)
        self.flip = flip

    def to_deterministic(self):
        return FakeFlipLR(flip=bool(self.rng.randint(2)))

    def _decide(self):
        return self.flip if self.flip is not None else bool(self.rng.randint(2))

    def augment_image(self, img):
        return img[:, ::-1] if self._decide() else img

    def augment_keypoints(self, keypoints_on_images):
        flip = self._decide()
        result = []
        for on_image in keypoints_on_images:
            width = on_image.shape[1]
            moved = [FakeKeypoint(width - p.x if flip else p.x, p.y) for p in on_image.keypoints]
            result.append(FakeKeypointsOnImage(moved, on_image.shape))
        return result


@pytest.fixture
def fake_imgaug(monkeypatch):
    module = types.ModuleType('imgaug')
    module.Keypoint = FakeKeypoint
    module.KeypointsOnImage = FakeKeypointsOnImage
    monkeypatch.setitem(sys.modules, 'imgaug', module)
    return module


def test_iaa_transform_is_deterministic_and_moves_keypoints_with_the_image(fake_imgaug):
    img = np.zeros((4, 6), np.uint8)
    img[1, 0] = 255                               # the pixel whose centre is (0.5, 1.5)
    aug = external.IAAugmentor(FakeFlipLR(seed=3))
    outcomes = set()
    for _ in range(20):
        tfm = aug.get_transform(img)
        out = tfm.apply_image(img)
        for _ in range(3):
            np.testing.assert_array_equal(tfm.apply_image(img), out)
        coords = tfm.apply_coords(np.array([[0.5, 1.5]], np.float32))
        assert coords.dtype == np.float32 and coords.shape == (1, 2)
        row, col = np.argwhere(out == 255)[0]
        np.testing.assert_array_equal(coords, [[col + 0.5, row + 0.5]])
        outcomes.add(int(col))
    assert outcomes == {0, 5}


def test_iaa_coords_without_the_library_name_it(monkeypatch):
    monkeypatch.setitem(sys.modules, 'imgaug', None)
    tfm = external.IAAugmentor(FakeFlipLR()).get_transform(np.zeros((2, 2), np.uint8))
    with pytest.raises(ImportError, match=r"IAAugmentor.*'imgaug'.*pip install imgaug"):
        tfm.apply_coords(np.zeros((1, 2)))


class FakeRotate90(object):
    """Like an albumentations transform: random parameters from ``get_params``, applied by ``apply``."""

    def __init__(self):
        self.rng = np.random.RandomState(0)
        self.calls = 0

    def get_params(self):
        self.calls += 1
        return {'factor': int(self.rng.randint(4))}

    def apply(self, img, factor=0):
        return np.ascontiguousarray(np.rot90(img, factor))


def test_albumentations_applies_one_parameter_draw_per_transform():
    fake = FakeRotate90()
    aug = external.Albumentations(fake)
    img = np.arange(6, dtype=np.uint8).reshape(2, 3)
    factors = set()
    for _ in range(12):
        tfm = aug.get_transform(img)
        factor = tfm.param['factor']
        factors.add(factor)
        np.testing.assert_array_equal(tfm.apply_image(img), np.rot90(img, factor))
        np.testing.assert_array_equal(tfm.apply_image(img), np.rot90(img, factor))
    assert fake.calls == 12 and factors == {0, 1, 2, 3}
    with pytest.raises(NotImplementedError, match=r"apply_coords"):
        aug.get_transform(img).apply_coords(np.zeros((1, 2)))
