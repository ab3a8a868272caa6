"""imgaug geometric augmentors: flips, resizes, crops, shifts, rotations, affine warps, pastes
and the Gaussian deformation. Coordinates are checked against where the pixels went."""

import math
import pickle

import cv2
import numpy as np
import pytest

from tensorpack_lite.dataflow.imgaug.base import AugmentorList
from tensorpack_lite.dataflow.imgaug.crop import (CenterCrop, GoogleNetRandomCropAndResize, RandomCrop,
                                                  RandomCropRandomShape, RandomCutout)
from tensorpack_lite.dataflow.imgaug.deform import GaussianDeform, GaussianMap
from tensorpack_lite.dataflow.imgaug.geometry import Affine, Rotation, RotationAndCropValid, Shift
from tensorpack_lite.dataflow.imgaug.misc import Flip, RandomResize, Resize, ResizeShortestEdge, Transpose
from tensorpack_lite.dataflow.imgaug.paste import (BackgroundFiller, CenterPaste, ConstantBackgroundFiller,
                                                   RandomPaste)
from tensorpack_lite.dataflow.imgaug.transform import CropTransform, ResizeTransform, TransformList
from tensorpack_lite.utils import utils as tp_utils

H, W = 40, 50


@pytest.fixture
def seeded(monkeypatch):
    """``seeded(n)`` fixes the library's rng seed to n for the rest of the test only."""
    monkeypatch.setattr(tp_utils, '_RNG_SEED', None)
    return tp_utils.fix_rng_seed


def square_image(shape, dtype, top=18, left=22, size=5):
    """Zeros with a bright ``size x size`` square; returns the image and the square's centre (x, y)."""
    img = np.zeros(shape, dtype)
    img[top:top + size, left:left + size] = 255 if dtype == np.uint8 else 1.0
    return img, np.array([[left + size / 2.0, top + size / 2.0]])


def centroid(img):
    """The brightness-weighted centre (x, y) of an image, with pixel (i, j) centred at (j + .5, i + .5)."""
    weights = img.astype(np.float64)
    if weights.ndim == 3:
        weights = weights.sum(axis=2)
    rows, cols = np.mgrid[:weights.shape[0], :weights.shape[1]] + 0.5
    total = weights.sum()
    assert total > 0, "the bright square left the image"
    return np.array([(weights * cols).sum() / total, (weights * rows).sum() / total])


def random_image(shape, dtype=np.uint8, seed=0):
    rng = np.random.RandomState(seed)
    return (rng.randint(0, 256, shape) if dtype == np.uint8 else rng.rand(*shape)).astype(dtype)


# Each entry: a name, a factory making an augmentor that always moves the image, and the
# tolerance (pixels) between the square's moved centre and its pixels' centroid. Interpolating
# warps are held to 0.15 pixel: that checks the half-pixel convention of the coordinates.
GEOMETRIC = [
    ('flip-h', lambda: Flip(horiz=True, prob=1.0), 1e-6),
    ('flip-v', lambda: Flip(vert=True, prob=1.0), 1e-6),
    ('transpose', lambda: Transpose(prob=1.0), 1e-6),
    ('resize', lambda: Resize((60, 25)), 0.3),
    ('resize-shortest', lambda: ResizeShortestEdge(24), 0.3),
    ('random-resize', lambda: RandomResize((0.6, 1.4), (0.6, 1.4), aspect_ratio_thres=0.3), 0.3),
    ('random-crop', lambda: RandomCrop((30, 35)), 1e-6),
    ('center-crop', lambda: CenterCrop(28), 1e-6),
    ('random-shape-crop', lambda: RandomCropRandomShape(34, 30), 1e-6),
    ('googlenet', lambda: GoogleNetRandomCropAndResize((0.8, 1.0), target_shape=20), 0.4),
    ('shift', lambda: Shift(0.2, 0.2), 1e-4),
    ('rotation', lambda: Rotation(40, center_range=(0.3, 0.7)), 0.15),
    ('rotation-crop', lambda: RotationAndCropValid(30), 0.15),
    ('affine', lambda: Affine((0.8, 1.2), (0.1, 0.1), rotate_max_deg=20, shear=15), 0.15),
    ('center-paste', lambda: CenterPaste((45, 61)), 1e-6),
    ('random-paste', lambda: RandomPaste((52, 70)), 1e-6),
]


@pytest.mark.parametrize('name, make, tolerance', GEOMETRIC, ids=[g[0] for g in GEOMETRIC])
@pytest.mark.parametrize('shape', [(H, W), (H, W, 1), (H, W, 3)], ids=['HxW', 'HxWx1', 'HxWx3'])
@pytest.mark.parametrize('dtype', [np.uint8, np.float32], ids=['uint8', 'float32'])
def test_coords_land_where_the_pixels_went(seeded, name, make, tolerance, shape, dtype):
    for seed in range(3):
        seeded(seed)
        img, centre = square_image(shape, dtype)
        tfm = make().get_transform(img)
        out = tfm.apply_image(img)
        assert out.dtype == dtype and out.ndim == img.ndim and out.shape[2:] == img.shape[2:]
        np.testing.assert_allclose(tfm.apply_coords(centre)[0], centroid(out), atol=tolerance)


@pytest.mark.parametrize('name, make, tolerance', GEOMETRIC + [('cutout', lambda: RandomCutout(3, 3), 0)],
                         ids=[g[0] for g in GEOMETRIC] + ['cutout'])
def test_wrong_rank_names_the_augmentor_and_the_shape(name, make, tolerance):
    augmentor = make()
    with pytest.raises(ValueError, match=r'{}.*\(4, 5, 3, 2\)'.format(type(augmentor).__name__)):
        augmentor.get_transform(np.zeros((4, 5, 3, 2), np.uint8))


DETERMINISTIC = ('flip-h', 'flip-v', 'transpose', 'resize', 'resize-shortest', 'center-crop', 'center-paste')
RANDOM = [g for g in GEOMETRIC if g[0] not in DETERMINISTIC] + [
    ('cutout', lambda: RandomCutout((2, 9), (2, 9)), 0),
    ('deform', lambda: GaussianDeform([(0.3, 0.3), (0.6, 0.7)], (H, W)), 0),
    ('flip-half', lambda: Flip(horiz=True), 0),
]


@pytest.mark.parametrize('name, make, tolerance', RANDOM, ids=[g[0] for g in RANDOM])
def test_fixed_seed_reproduces_and_other_seeds_differ(seeded, name, make, tolerance):
    img = random_image((H, W, 3))

    def outputs(augmentor):
        return [augmentor.augment(img) for _ in range(8)]

    seeded(1)
    first, second = make(), make()
    reference = outputs(first)
    for a, b in zip(reference, outputs(second)):
        np.testing.assert_array_equal(a, b)
    first.reset_state()
    for a, b in zip(reference, outputs(first)):
        np.testing.assert_array_equal(a, b)
    seeded(2)
    other = outputs(make())
    assert any(a.shape != b.shape or not np.array_equal(a, b) for a, b in zip(reference, other))


@pytest.mark.parametrize('name, make, tolerance', RANDOM, ids=[g[0] for g in RANDOM])
def test_augmentors_survive_pickling(seeded, name, make, tolerance):
    seeded(3)
    augmentor = make()
    clone = pickle.loads(pickle.dumps(augmentor))
    img = random_image((H, W))
    np.testing.assert_array_equal(clone.augment(img), augmentor.augment(img))


# ----- misc ----------------------------------------------------------------------------------

def test_flip_exact_pixels_and_arguments(seeded):
    img = random_image((4, 6, 3))
    np.testing.assert_array_equal(Flip(horiz=True, prob=1.0).augment(img), img[:, ::-1])
    np.testing.assert_array_equal(Flip(vert=True, prob=1.0).augment(img), img[::-1])
    np.testing.assert_array_equal(Flip(horiz=True, prob=0.0).augment(img), img)
    seeded(6)
    flip = Flip(horiz=True, prob=0.3)
    flipped = [np.array_equal(flip.augment(img), img[:, ::-1]) for _ in range(50)]
    assert flipped == list(np.random.RandomState(6).uniform(size=50) < 0.3)
    for horiz, vert in ((True, True), (False, False)):
        with pytest.raises(ValueError, match='Flip: exactly one of horiz and vert'):
            Flip(horiz=horiz, vert=vert)


def test_transpose_exact(seeded):
    img = random_image((3, 5, 2), np.float32)
    np.testing.assert_array_equal(Transpose(prob=1.0).augment(img), img.transpose(1, 0, 2))
    np.testing.assert_array_equal(Transpose(prob=0.0).augment(img), img)


def test_resize_and_resize_shortest_edge_sizes():
    img = random_image((H, W, 3))
    out = Resize(8, interp=cv2.INTER_AREA).augment(img)
    np.testing.assert_array_equal(out, cv2.resize(img, (8, 8), interpolation=cv2.INTER_AREA))
    assert Resize((10, 20)).augment(img[:, :, :1]).shape == (10, 20, 1)
    # the shorter side becomes 30, the other scales by 30/40 (rounded): 50 * 0.75 = 37.5 -> 38
    assert ResizeShortestEdge(30).augment(img).shape == (30, 38, 3)
    assert ResizeShortestEdge(30).augment(img.transpose(1, 0, 2)).shape == (38, 30, 3)
    assert ResizeShortestEdge(7).augment(np.zeros((9, 9), np.float32)).shape == (7, 7)


def test_random_resize_scale_pixel_and_kept_aspect(seeded, log_records):
    seeded(0)
    img = np.zeros((H, W), np.uint8)
    scaled = RandomResize((0.5, 2.0), (0.5, 2.0), aspect_ratio_thres=0.1)
    for _ in range(20):
        h, w = scaled.augment(img).shape
        assert 0.5 * H - 1 <= h <= 2 * H + 1 and 0.5 * W - 1 <= w <= 2 * W + 1
        assert abs((w / h) / (W / H) - 1) < 0.1 + 1e-5
    pixels = RandomResize((30, 60), (20, 80), minimum=(45, 0), aspect_ratio_thres=1.0)
    for _ in range(20):
        h, w = pixels.augment(img).shape
        assert 45 <= w <= 60 and 20 <= h <= 80
    kept = RandomResize((0.5, 2.0), aspect_ratio_thres=0)
    for _ in range(20):
        h, w = kept.augment(img).shape
        assert abs(w / W - h / H) <= 1.0 / H
    kept_pixels = RandomResize((25, 100), aspect_ratio_thres=0)
    for _ in range(20):
        h, w = kept_pixels.augment(img).shape
        assert abs(h - w * H / W) <= 1
    # no size can satisfy a near-zero threshold when width and height are drawn independently
    hopeless = RandomResize((0.5, 0.6), (1.5, 1.6), aspect_ratio_thres=0.01)
    assert hopeless.augment(img).shape == (H, W)
    assert any('RandomResize' in m and '51 tries' in m for m in log_records.messages())


def test_random_resize_rejects_bad_arguments():
    with pytest.raises(ValueError, match='RandomResize: yrange is needed'):
        RandomResize((0.5, 1.5))
    with pytest.raises(ValueError, match=r'RandomResize: xrange \(0.5, 1.5\) and yrange \(10, 20\)'):
        RandomResize((0.5, 1.5), (10, 20))
    with pytest.raises(ValueError, match='aspect_ratio_thres must be >= 0'):
        RandomResize((0.5, 1.5), (0.5, 1.5), aspect_ratio_thres=-1)
    with pytest.raises(ValueError, match='yrange must equal xrange'):
        RandomResize((0.5, 1.5), (0.6, 1.5), aspect_ratio_thres=0)


# ----- crop ----------------------------------------------------------------------------------

def test_random_crop_covers_every_position_and_rejects_big_crops(seeded):
    seeded(0)
    img = random_image((5, 6))
    crop = RandomCrop(4)
    corners = set()
    for _ in range(100):
        out = crop.augment(img)
        matches = [(y, x) for y in range(2) for x in range(3) if np.array_equal(out, img[y:y + 4, x:x + 4])]
        assert len(matches) == 1
        corners.add(matches[0])
    assert corners == {(y, x) for y in range(2) for x in range(3)}
    with pytest.raises(ValueError, match=r'RandomCrop\(crop_shape=\(6, 4\)\).*6x4.*\(5, 6\)'):
        RandomCrop((6, 4)).augment(img)


def test_center_crop_exact():
    img = random_image((10, 12, 3))
    np.testing.assert_array_equal(CenterCrop((4, 5)).augment(img), img[3:7, 3:8])   # (12 - 5) / 2 -> 3
    with pytest.raises(ValueError, match=r'CenterCrop.*\(10, 12, 3\)'):
        CenterCrop(11).augment(img)


def test_random_crop_random_shape_sizes_and_positions(seeded):
    seeded(0)
    img = random_image((8, 9))
    crop = RandomCropRandomShape(wmin=3, hmin=2, wmax=5, hmax=4)
    sizes, corners = set(), set()
    for _ in range(300):
        tfm = crop.get_transform(img)
        np.testing.assert_array_equal(tfm.apply_image(img), img[tfm.y0:tfm.y0 + tfm.h, tfm.x0:tfm.x0 + tfm.w])
        sizes.add((tfm.h, tfm.w))
        corners.add((tfm.y0 + tfm.h, tfm.x0 + tfm.w))
        assert tfm.y0 + tfm.h <= 8 and tfm.x0 + tfm.w <= 9
    assert sizes == {(h, w) for h in range(2, 5) for w in range(3, 6)}
    assert (8, 9) in corners   # the crop can touch the bottom-right corner
    with pytest.raises(ValueError, match=r'RandomCropRandomShape.*\(8, 9\)'):
        RandomCropRandomShape(wmin=10, hmin=2, wmax=10).augment(img)


def test_googlenet_crop_area_and_aspect(seeded):
    seeded(0)
    img = random_image((60, 80, 3))
    aug = GoogleNetRandomCropAndResize(target_shape=16)
    for _ in range(30):
        tfm = aug.get_transform(img)
        crop, resize = tfm.tfms
        assert isinstance(crop, CropTransform) and isinstance(resize, ResizeTransform)
        assert 0.08 * 0.8 <= crop.h * crop.w / (60 * 80) <= 1.0
        ratio = crop.w / crop.h
        assert 0.75 * 0.8 <= min(ratio, 1 / ratio) and max(ratio, 1 / ratio) <= 1.333 * 1.25
        out = tfm.apply_image(img)
        assert out.shape == (16, 16, 3) and out.dtype == np.uint8


def test_googlenet_falls_back_to_resize_and_center_crop():
    img = random_image((20, 30, 3))
    # aspect ratios of 4 to 5 never fit: the fallback resizes to 10x15 and keeps the centre 10x10
    aug = GoogleNetRandomCropAndResize((0.9, 1.0), aspect_ratio_range=(4, 5), target_shape=10)
    out = aug.augment(img)
    np.testing.assert_array_equal(out, cv2.resize(img, (15, 10))[:, 2:12])


def test_random_cutout_fills_one_rectangle(seeded):
    seeded(0)
    img = random_image((12, 14, 3)) | 1           # no pixel is 0 before the cutout
    original = img.copy()
    cutout = RandomCutout((2, 5), 3)
    sizes = set()
    for _ in range(40):
        out = cutout.augment(img)
        rows, cols = np.nonzero((out == 0).all(axis=2))
        h, w = rows.max() - rows.min() + 1, cols.max() - cols.min() + 1
        assert w == 3 and 2 <= h < 5 and len(rows) == h * w
        mask = np.zeros((12, 14), bool)
        mask[rows, cols] = True
        np.testing.assert_array_equal(out[~mask], img[~mask])
        sizes.add(h)
    assert sizes == {2, 3, 4}
    np.testing.assert_array_equal(img, original)    # the input is not modified
    out = RandomCutout(2, 2, fill=0.5).augment(np.zeros((4, 4), np.float32))
    assert out.dtype == np.float32 and (out == 0.5).sum() == 4
    with pytest.raises(ValueError, match=r'RandomCutout.*\(4, 4\)'):
        RandomCutout(5, 2).augment(np.zeros((4, 4), np.float32))


# ----- geometry ------------------------------------------------------------------------------

def test_shift_moves_by_whole_pixels_and_replicates_borders(seeded):
    seeded(0)
    img = random_image((10, 12))
    shift = Shift(horiz_frac=0.3, vert_frac=0.2)
    moves = set()
    for _ in range(20):
        tfm = shift.get_transform(img)
        dx, dy = int(tfm.mat[0, 2]), int(tfm.mat[1, 2])
        assert (dx, dy) == (tfm.mat[0, 2], tfm.mat[1, 2]) and abs(dx) <= 3.6 and abs(dy) <= 2
        rows = np.clip(np.arange(10) - dy, 0, 9)
        cols = np.clip(np.arange(12) - dx, 0, 11)
        np.testing.assert_array_equal(tfm.apply_image(img), img[rows][:, cols])
        moves.add((dx, dy))
    assert len(moves) > 5
    with pytest.raises(ValueError, match='Shift: horiz_frac and vert_frac must be < 1'):
        Shift(horiz_frac=1.0)


def test_rotation_by_quarter_turns_about_the_centre_is_exact(seeded):
    img = random_image((9, 9, 3))
    rotation = Rotation(180, center_range=(0.5, 0.5), step_deg=90)
    quarter_turns = set()
    for seed in range(12):
        seeded(seed)
        rotation.reset_state()
        tfm = rotation.get_transform(img)
        degrees = math.degrees(math.atan2(tfm.mat[0, 1], tfm.mat[0, 0]))   # [[cos, sin], [-sin, cos]]
        turns = int(round(degrees / 90)) % 4
        # OpenCV's positive angles turn counter-clockwise, as np.rot90 does
        np.testing.assert_array_equal(tfm.apply_image(img), np.rot90(img, turns))
        quarter_turns.add(turns)
    assert quarter_turns == {0, 1, 2, 3}
    with pytest.raises(ValueError, match='Rotation: step_deg needs max_deg=180'):
        Rotation(90, step_deg=45)
    with pytest.raises(ValueError, match='RotationAndCropValid: step_deg'):
        RotationAndCropValid(180, step_deg=7)


def test_largest_rotated_rect_known_cases():
    rect = RotationAndCropValid.largest_rotated_rect
    assert rect(50, 40, 0) == (50, 40)
    assert rect(50, 40, 90) == (40, 50)
    assert rect(50, 40, 180) == (50, 40)
    # a square turned by 45 degrees holds an upright square of side s / sqrt(2)
    assert rect(100, 100, 45) == (71, 71)
    assert rect(100, 100, -45) == (71, 71)
    assert rect(0, 10, 30) == (0, 0)


def test_rotation_and_crop_valid_has_no_outside_pixels(seeded):
    seeded(0)
    aug = RotationAndCropValid(40)
    ones = np.ones((30, 40), np.float32)
    shapes = set()
    for _ in range(10):
        rotate, crop = aug.get_transform(ones).tfms
        degrees = math.degrees(math.atan2(rotate.mat[0, 1], rotate.mat[0, 0]))
        valid_w, valid_h = RotationAndCropValid.largest_rotated_rect(40, 30, degrees)
        assert (crop.w, crop.h) == (min(valid_w, 40), min(valid_h, 30))
        out = crop.apply_image(rotate.apply_image(ones))
        # inside a one-pixel frame (where interpolation may touch the outside) every pixel is valid
        assert out.shape == (crop.h, crop.w) and out[1:-1, 1:-1].min() > 0.99
        shapes.add(out.shape)
    assert len(shapes) > 1


def test_affine_defaults_are_the_identity_and_translation_is_exact(seeded):
    seeded(0)
    img = random_image((10, 12, 3))
    np.testing.assert_array_equal(Affine().augment(img), img)
    tfm = Affine(translate_frac=(0.3, 0.3), border=cv2.BORDER_CONSTANT).get_transform(img)
    dx, dy = int(tfm.mat[0, 2]), int(tfm.mat[1, 2])
    expected = np.zeros_like(img)
    expected[max(dy, 0):10 + min(dy, 0), max(dx, 0):12 + min(dx, 0)] = \
        img[max(-dy, 0):10 - max(dy, 0), max(-dx, 0):12 - max(dx, 0)]
    np.testing.assert_array_equal(tfm.apply_image(img), expected)


def test_affine_scale_keeps_the_centre(seeded):
    seeded(0)
    tfm = Affine(scale=(2.0, 2.0)).get_transform(np.zeros((H, W), np.float32))
    # the image centre (25, 20) stays; a point 4 pixels right of it goes 8 pixels right
    np.testing.assert_allclose(tfm.apply_coords(np.array([[25., 20.], [29., 20.]])), [[25., 20.], [33., 20.]],
                               atol=1e-4)


def test_affine_rejects_bad_arguments():
    with pytest.raises(ValueError, match=r'Affine: scale must be a pair.*0.5'):
        Affine(scale=0.5)
    with pytest.raises(ValueError, match='Affine: translate_frac must be a pair'):
        Affine(translate_frac=(0.1, 0.1, 0.1))
    with pytest.raises(ValueError, match='Affine: shear must be >= 0'):
        Affine(shear=-3)


# ----- paste ---------------------------------------------------------------------------------

def test_center_paste_exact_with_a_constant_filler():
    img = random_image((3, 4, 3))
    out = CenterPaste((6, 9), ConstantBackgroundFiller(7)).augment(img)
    expected = np.full((6, 9, 3), 7, np.uint8)
    expected[1:4, 2:6] = img                  # (6 - 3) / 2 -> 1, (9 - 4) / 2 -> 2
    np.testing.assert_array_equal(out, expected)
    gray = CenterPaste(5).augment(np.ones((5, 5), np.float32))
    assert gray.dtype == np.float32 and gray.shape == (5, 5) and gray.min() == 1
    with pytest.raises(ValueError, match=r'CenterPaste.*\(7, 4, 3\).*6x9'):
        CenterPaste((6, 9)).augment(np.zeros((7, 4, 3), np.uint8))


def test_random_paste_positions(seeded):
    seeded(0)
    img = np.ones((2, 3), np.uint8)
    paste = RandomPaste((4, 6))
    corners = set()
    for _ in range(100):
        out = paste.augment(img)
        rows, cols = np.nonzero(out)
        assert out.shape == (4, 6) and len(rows) == 6
        corners.add((rows.min(), cols.min()))
    assert corners <= {(y, x) for y in range(3) for x in range(4)} and len(corners) >= 4


def test_background_filler_is_abstract():
    class Unfinished(BackgroundFiller):
        pass

    with pytest.raises(NotImplementedError, match='Unfinished must implement _fill'):
        Unfinished().fill((2, 2), np.zeros((1, 1), np.uint8))
    filled = ConstantBackgroundFiller(3).fill([2, 3], np.zeros((1, 1, 5), np.float32))
    assert filled.shape == (2, 3, 5) and filled.dtype == np.float32 and (filled == 3).all()


# ----- deform --------------------------------------------------------------------------------

def test_gaussian_map_weights():
    weights = GaussianMap((4, 5), sigma=0.5).get_gaussian_weight((0.5, 0.4))
    assert weights.shape == (4, 5) and weights.dtype == np.float32
    assert weights[2, 2] == pytest.approx(1.0)
    assert weights[0, 4] == pytest.approx(math.exp(-((0 - 0.5) ** 2 + (0.8 - 0.4) ** 2) / 0.5))
    with pytest.raises(ValueError, match='GaussianMap: image_shape'):
        GaussianMap((4, 5, 3))


def test_gaussian_deform_zero_range_is_identity_and_shape_is_checked(seeded):
    seeded(0)
    img = random_image((H, W, 3))
    np.testing.assert_array_equal(GaussianDeform([(0.5, 0.5)], (H, W), randrange=0).augment(img), img)
    moved = GaussianDeform([(0.5, 0.5)], (H, W), randrange=6).augment(img)
    assert moved.shape == img.shape and moved.dtype == np.uint8 and not np.array_equal(moved, img)
    with pytest.raises(ValueError, match=r'GaussianDeform.*\(10, 10\)'):
        GaussianDeform([(0.5, 0.5)], (H, W)).augment(np.zeros((10, 10), np.uint8))


# ----- in a pipeline -------------------------------------------------------------------------

def test_a_typical_pipeline_moves_a_box_with_the_image(seeded):
    seeded(4)
    augs = AugmentorList([ResizeShortestEdge(32), RandomCrop(28), Flip(horiz=True, prob=1.0), Transpose(1.0)])
    img, centre = square_image((H, W, 3), np.uint8)
    tfm = augs.get_transform(img)
    out = tfm.apply_image(img)
    assert out.shape == (28, 28, 3) and isinstance(tfm, TransformList)
    np.testing.assert_allclose(tfm.apply_coords(centre)[0], centroid(out), atol=0.5)
