"""dataflow.image: ImageFromFile on PNG/JPEG files the tests write, and the AugmentImage* DataFlows
with small augmentors defined here (random shifts whose drawn values the test can read back)."""

import logging
import sys

import cv2
import numpy as np
import pytest

from tensorpack_lite.dataflow.common import MapData
from tensorpack_lite.dataflow.image import (AugmentImageComponent, AugmentImageComponents,
                                            AugmentImageCoordinates, ImageFromFile, read_image)
from tensorpack_lite.dataflow.imgaug.base import AugmentorList, ImageAugmentor
from tensorpack_lite.dataflow.imgaug.transform import TransformFactory
from tensorpack_lite.dataflow.raw import DataFromList
from helpers.dataflows import reset


class Shift(ImageAugmentor):
    """Rolls the image by a random 0..3 pixels along ``axis`` (1: right, 0: down) and moves the
    (x, y) coordinates along; remembers each shift it drew and how often it was reset."""

    def __init__(self, axis=1):
        self.axis = axis
        self.drawn = []
        self.resets = 0
        super(Shift, self).__init__()

    def reset_state(self):
        super(Shift, self).reset_state()
        self.resets += 1

    def get_transform(self, img):
        shift = int(self.rng.randint(4))
        self.drawn.append(shift)
        move = [shift, 0] if self.axis == 1 else [0, shift]
        return TransformFactory(name='shift', apply_image=lambda im: np.roll(im, shift, axis=self.axis),
                                apply_coords=lambda coords: coords + move)


class AddOneInPlace(ImageAugmentor):
    """Adds 1 to the image in place (as some augmentors work)."""

    def get_transform(self, img):
        def add(im):
            im += 1
            return im
        return TransformFactory(name='add one', apply_image=add)


class FailOnOdd(ImageAugmentor):
    """Raises for images whose first pixel is odd."""

    def get_transform(self, img):
        if int(img.flat[0]) % 2:
            raise RuntimeError("odd image")
        return TransformFactory(name='identity', apply_image=lambda im: im, apply_coords=lambda c: c)


def _images(n, shape=(4, 6)):
    """n distinct uint8 images: image k holds k*50 + its pixel index."""
    size = int(np.prod(shape))
    return [((np.arange(size) + 50 * k) % 256).astype(np.uint8).reshape(shape) for k in range(n)]


# ----- ImageFromFile -----------------------------------------------------------------------------

def _write_png(path, image):
    assert cv2.imwrite(str(path), image)
    return str(path)


def test_image_from_file_color_gray_and_resize(tmp_path):
    bgr = np.random.RandomState(0).randint(0, 256, size=(5, 7, 3)).astype(np.uint8)
    gray = np.arange(35, dtype=np.uint8).reshape(5, 7) * 7
    files = [_write_png(tmp_path / 'color.png', bgr), _write_png(tmp_path / 'gray.png', gray)]

    color_image, gray_as_color = [dp[0] for dp in reset(ImageFromFile(files, channel=3))]
    assert color_image.dtype == np.uint8 and color_image.shape == (5, 7, 3)
    np.testing.assert_array_equal(color_image, bgr[:, :, ::-1])            # produced as RGB
    np.testing.assert_array_equal(gray_as_color, np.stack([gray] * 3, axis=2))

    gray_image = list(reset(ImageFromFile(files[1:], channel=1)))[0][0]
    assert gray_image.shape == (5, 7, 1)
    np.testing.assert_array_equal(gray_image[:, :, 0], gray)

    constant = np.empty((9, 4, 3), np.uint8)
    constant[:] = (10, 20, 30)
    resized = list(reset(ImageFromFile([_write_png(tmp_path / 'c.png', constant)], resize=(3, 8))))[0][0]
    assert resized.shape == (3, 8, 3)                                      # resize is (h, w)
    assert (resized == [30, 20, 10]).all()
    square = list(reset(ImageFromFile(files[1:], channel=1, resize=6)))[0][0]
    assert square.shape == (6, 6, 1)


def test_image_from_file_shuffle_keeps_the_list(tmp_path, fixed_seed):
    files = [_write_png(tmp_path / '{}.png'.format(k), np.full((2, 2), k * 10, np.uint8)) for k in range(6)]
    given = list(files)
    fixed_seed(5)
    df = reset(ImageFromFile(files, channel=1, shuffle=True))
    epochs = [[int(dp[0][0, 0, 0]) // 10 for dp in df] for _ in range(2)]
    assert all(sorted(epoch) == list(range(6)) for epoch in epochs)
    assert epochs[0] != list(range(6)) or epochs[1] != list(range(6))
    assert files == given and len(df) == 6
    fixed_seed(5)
    assert [int(dp[0][0, 0, 0]) // 10 for dp in reset(ImageFromFile(files, channel=1, shuffle=True))] \
        == epochs[0]
    assert [int(dp[0][0, 0, 0]) // 10 for dp in ImageFromFile(files, channel=1)] == list(range(6))


def test_image_from_file_errors(tmp_path):
    with pytest.raises(ValueError, match='no image files'):
        ImageFromFile([])
    with pytest.raises(ValueError, match='channel must be 1 or 3, got 2'):
        ImageFromFile(['a.png'], channel=2)
    missing = str(tmp_path / 'missing.jpg')
    with pytest.raises(FileNotFoundError, match=r"ImageFromFile: the image file '.*missing\.jpg' does not "):
        list(ImageFromFile([missing]))
    corrupt = tmp_path / 'corrupt.png'
    corrupt.write_bytes(b'\x89PNG\r\n\x1a\n' + b'\x00' * 20)
    with pytest.raises(ValueError, match=r"OpenCV cannot decode '.*corrupt\.png'"):
        read_image(str(corrupt), purpose='ImageFromFile')


# ----- AugmentImageComponent -----------------------------------------------------------------------

def test_augment_image_component_shifts_each_image_and_keeps_the_input(fixed_seed):
    images = _images(5)
    source = [[img, k] for k, img in enumerate(images)]
    shift = Shift()
    fixed_seed(11)
    df = reset(AugmentImageComponent(DataFromList(source, shuffle=False), [shift], index=0))
    out = list(df)
    assert len(shift.drawn) == 5 and len(set(shift.drawn)) > 1
    for (image, label), drawn, original in zip(out, shift.drawn, images):
        np.testing.assert_array_equal(image, np.roll(original, drawn, axis=1))
    assert [label for _, label in out] == list(range(5))
    assert all(dp[0] is img for dp, img in zip(source, images))        # the input datapoints are untouched
    # reset_state reseeds the augmentors: with the fixed seed, the same shifts again
    first = list(shift.drawn)
    shift.drawn.clear()
    fixed_seed(11)
    df.reset_state()
    list(df)
    assert shift.drawn == first


def test_augment_image_component_copy_and_dict_datapoints():
    images = _images(2)
    source = [{'image': img.copy(), 'id': k} for k, img in enumerate(images)]
    out = list(reset(AugmentImageComponent(DataFromList(source, shuffle=False), [AddOneInPlace()],
                                           index='image')))
    for dp, original, src in zip(out, images, source):
        np.testing.assert_array_equal(dp['image'], original + 1)
        np.testing.assert_array_equal(src['image'], original)            # copy=True: input intact
    list(reset(AugmentImageComponent(DataFromList(source, shuffle=False), [AddOneInPlace()],
                                     index='image', copy=False)))
    np.testing.assert_array_equal(source[0]['image'], images[0] + 1)   # copy=False: modified in place


def test_augment_image_component_resets_input_and_augmentors():
    shift = Shift()
    augs = AugmentorList([shift])
    df = AugmentImageComponent(DataFromList([[np.zeros((2, 2), np.uint8)]], shuffle=True), augs)
    assert df.augs is augs
    resets = shift.resets
    df.reset_state()
    assert shift.resets == resets + 1
    assert len(list(df)) == 1          # the shuffling input got its generator from reset_state
    wrapped = AugmentImageComponent(DataFromList([[np.zeros((2, 2), np.uint8)]]), [Shift(), Shift(axis=0)])
    assert isinstance(wrapped.augs, AugmentorList) and len(wrapped.augs.augmentors) == 2
    with pytest.raises(TypeError, match='AugmentImageComponent: augmentors must be a list'):
        AugmentImageComponent(DataFromList([]), 'flip')


@pytest.mark.parametrize('image, error, message', [
    (np.zeros((2, 2, 3, 1), np.uint8), ValueError, r"component 1 should be an image of shape HxW or HxWxC.*"
                                                   r"\(2, 2, 3, 1\)"),
    (np.zeros((2, 2), np.int64), TypeError, "component 1 is an image of dtype int64"),
    ([[0, 1]], TypeError, "component 1 should be an image .* got a list"),
])
def test_augment_image_component_bad_images_name_the_component(image, error, message):
    df = reset(AugmentImageComponent(DataFromList([['label', image]]), [Shift()], index=1,
                                     catch_exceptions=True))
    with pytest.raises(error, match='AugmentImageComponent: ' + message):
        list(df)


def test_catch_exceptions_skips_failing_datapoints_with_rate_limited_warnings(log_records):
    # 500 images: those with an odd first pixel (250) fail
    source = [[np.full((2, 2), k % 256, np.uint8)] for k in range(500)]
    df = reset(AugmentImageComponent(DataFromList(source, shuffle=False), [FailOnOdd()],
                                     catch_exceptions=True))
    out = list(df)
    assert [int(dp[0][0, 0]) for dp in out] == [k % 256 for k in range(0, 500, 2)]
    warnings = [m for m in log_records.messages(logging.WARNING) if 'augmentation error' in m]
    # logged for the 1st..9th errors, then for every 100th: 100th and 200th
    assert len(warnings) == 11
    assert warnings[0].startswith('AugmentImageComponent: 1 augmentation error(s)')
    assert warnings[-1].startswith('AugmentImageComponent: 200 augmentation error(s)')
    with pytest.raises(RuntimeError, match='odd image'):
        list(reset(AugmentImageComponent(DataFromList(source, shuffle=False), [FailOnOdd()])))


# ----- AugmentImageComponents and AugmentImageCoordinates --------------------------------------------

def _keypoints(k):
    return np.array([[1.0, 2.0], [3.5, 0.5 + k]], dtype=np.float32)


def test_augment_image_components_one_transform_for_all_components():
    images, masks = _images(4, (5, 6)), [m // 3 for m in _images(4, (5, 6))]
    source = [(img, mask, _keypoints(k), k) for k, (img, mask) in enumerate(zip(images, masks))]
    right, down = Shift(axis=1), Shift(axis=0)
    df = reset(AugmentImageComponents(DataFromList(source, shuffle=False), [right, down],
                                      index=(0, 1), coords_index=(2,)))
    out = list(df)
    assert len(right.drawn) == len(down.drawn) == 4                 # one transform per datapoint
    for k, (image, mask, points, label) in enumerate(out):
        dx, dy = right.drawn[k], down.drawn[k]
        np.testing.assert_array_equal(image, np.roll(np.roll(images[k], dx, axis=1), dy, axis=0))
        np.testing.assert_array_equal(mask, np.roll(np.roll(masks[k], dx, axis=1), dy, axis=0))
        np.testing.assert_array_equal(points, _keypoints(k) + [dx, dy])
        assert label == k
    assert isinstance(out[0], list) and isinstance(source[0], tuple)
    np.testing.assert_array_equal(source[0][2], _keypoints(0))          # input coordinates intact


def test_augment_image_components_errors_name_the_component():
    good = [np.zeros((3, 3), np.uint8), np.zeros((3, 3), np.uint8), _keypoints(0)]
    with pytest.raises(ValueError, match=r"AugmentImageComponents: the datapoint .* has no component 3"):
        list(reset(AugmentImageComponents(DataFromList([good]), [Shift()], index=(0, 3))))
    with pytest.raises(TypeError, match=r"component 2 should hold coordinates, an Nx2 floating-point "
                                        r"array .* got an array of shape \(2, 2\) and dtype int64"):
        bad_points = good[:2] + [np.zeros((2, 2), np.int64)]
        list(reset(AugmentImageComponents(DataFromList([bad_points]), [Shift()], coords_index=(2,))))
    with pytest.raises(ValueError, match="at least one image component"):
        AugmentImageComponents(DataFromList([good]), [Shift()], index=())


def test_augment_image_coordinates():
    images = _images(3)
    source = [[images[k], _keypoints(k)] for k in range(3)]
    shift = Shift(axis=0)
    out = list(reset(AugmentImageCoordinates(DataFromList(source, shuffle=False), [shift])))
    for k, (image, points) in enumerate(out):
        np.testing.assert_array_equal(image, np.roll(images[k], shift.drawn[k], axis=0))
        np.testing.assert_array_equal(points, _keypoints(k) + [0, shift.drawn[k]])
    np.testing.assert_array_equal(source[1][1], _keypoints(1))
    by_key = Shift(axis=0)
    df = AugmentImageCoordinates(DataFromList([{'pts': _keypoints(0), 'img': images[0]}]), [by_key],
                                 img_index='img', coords_index='pts')
    dp = next(iter(reset(df)))
    np.testing.assert_array_equal(dp['img'], np.roll(images[0], by_key.drawn[0], axis=0))
    np.testing.assert_array_equal(dp['pts'], _keypoints(0) + [0, by_key.drawn[0]])
    with pytest.raises(TypeError, match=r"AugmentImageCoordinates: component 1 should hold coordinates.* "
                                        r"shape \(2, 3\)"):
        list(reset(AugmentImageCoordinates(DataFromList([[images[0], np.zeros((2, 3), np.float32)]]),
                                           [Shift()])))


def test_catch_exceptions_in_datapoint_augmentations(log_records):
    source = [[np.full((2, 2), k, np.uint8), _keypoints(k)] for k in range(4)]
    for cls in (AugmentImageCoordinates, AugmentImageComponents):
        kwargs = {} if cls is AugmentImageCoordinates else {'index': (0,), 'coords_index': (1,)}
        out = list(reset(cls(DataFromList(source, shuffle=False), [FailOnOdd()], catch_exceptions=True,
                             **kwargs)))
        assert [int(image[0, 0]) for image, _ in out] == [0, 2]
        assert isinstance(cls(DataFromList(source), [FailOnOdd()]), MapData)
    warned = log_records.messages(logging.WARNING)
    assert any(m.startswith('AugmentImageCoordinates: 2 augmentation error(s)') for m in warned)
    assert any(m.startswith('AugmentImageComponents: 2 augmentation error(s)') for m in warned)


def test_without_opencv_the_error_says_what_to_install(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, 'cv2', None)            # makes `import cv2` fail
    with pytest.raises(ImportError, match=r"ImageFromFile needs the Python package 'opencv-python-headless'"
                                          r".*tensorpack_lite\[image\]"):
        ImageFromFile([str(tmp_path / 'a.png')])
