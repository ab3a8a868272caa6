"""utils.viz: patch grids and boxes (the plot tool is tested in utils/test_plot.py)."""

import sys

import numpy as np
import pytest

from tensorpack_lite.utils import viz
from tensorpack_lite.utils.viz import draw_boxes, gen_stack_patches, stack_patches


# ----- stack_patches / gen_stack_patches --------------------------------------------------------

def _numbered_patches(n, h=4, w=5):
    """Patch k is filled with the value 10 * (k + 1)."""
    return np.stack([np.full((h, w), 10 * (k + 1), dtype=np.uint8) for k in range(n)])


def test_stack_patches_places_patches_row_by_row():
    grid = stack_patches(_numbered_patches(6), nr_row=2, nr_col=3, border=2, bgcolor=255)
    assert grid.shape == (2 * 4 + 2, 3 * 5 + 2 * 2, 1) and grid.dtype == np.uint8
    for k in range(6):
        row, col = divmod(k, 3)
        top, left = row * 6, col * 7
        assert (grid[top:top + 4, left:left + 5] == 10 * (k + 1)).all()
    assert (grid[4:6] == 255).all() and (grid[:, 5:7] == 255).all()   # borders are background
    assert grid.size - (grid == 255).sum() == 6 * 4 * 5


def test_stack_patches_default_border_color_and_float_input():
    patches = np.random.RandomState(0).uniform(0, 255, size=(4, 20, 30, 3))
    grid = stack_patches(patches, 2, 2, bgcolor=(1, 2, 3))
    border = 2                                  # int(0.1 * min(20, 30))
    assert grid.shape == (2 * 20 + border, 2 * 30 + border, 3)
    np.testing.assert_array_equal(grid[20:22, 0], [[1, 2, 3]] * 2)
    np.testing.assert_array_equal(grid[22:, 32:], np.rint(patches[3]).astype(np.uint8))
    gray_on_color = stack_patches(_numbered_patches(2), 1, 2, border=1, bgcolor=(0, 0, 255))
    assert gray_on_color.shape == (4, 11, 3) and (gray_on_color[:, :5] == 10).all()


def test_stack_patches_pad_and_errors():
    grid = stack_patches([np.zeros((2, 2), np.uint8), np.full((4, 6, 3), 7, np.uint8)], 1, 2,
                         border=0, pad=True, bgcolor=255)
    assert grid.shape == (4, 12, 3)
    assert (grid[1:3, 2:4] == 0).all() and (grid[0, :6] == 255).all()   # small patch centered
    assert (grid[:, 6:] == 7).all()
    with pytest.raises(ValueError, match='3 patches for a grid of 2 x 2'):
        stack_patches(_numbered_patches(3), 2, 2)
    with pytest.raises(ValueError, match='pad=True'):
        stack_patches([np.zeros((2, 2)), np.zeros((3, 3))], 1, 2)
    with pytest.raises(ValueError, match='shape'):
        stack_patches(np.zeros((2, 4, 4, 2)), 1, 2)


def test_gen_stack_patches_pages():
    pages = list(gen_stack_patches(_numbered_patches(7), nr_row=2, nr_col=2, border=1))
    assert len(pages) == 2 and all(p.shape == (9, 11, 1) for p in pages)
    assert (pages[1][5:, :5] == 70).all()              # patch 7 is the 3rd place of page 2
    assert (pages[1][5:, 6:] == 255).all()             # the 4th place is background
    # rows / cols inferred from the maximum size: (40 + 1) // (4 + 1) rows, (23 + 1) // (5 + 1) cols
    inferred = next(gen_stack_patches(np.zeros((30, 4, 5)), border=1, max_height=40, max_width=23))
    assert inferred.shape == (8 * 5 - 1, 4 * 6 - 1, 1)


def test_interactive_imshow_without_display(monkeypatch):
    monkeypatch.setattr(sys, 'platform', 'linux')
    monkeypatch.delenv('DISPLAY', raising=False)
    monkeypatch.delenv('WAYLAND_DISPLAY', raising=False)
    with pytest.raises(RuntimeError, match='display'):
        stack_patches(_numbered_patches(1), 1, 1, viz=True)


def test_click_maps_to_patch_index(monkeypatch):
    shown = []
    monkeypatch.setattr(viz, 'interactive_imshow', lambda img, lclick_cb=None: shown.append(lclick_cb))
    clicked = []
    patches = _numbered_patches(6)
    list(gen_stack_patches(patches, 1, 4, border=1, lclick_cb=lambda p, k: clicked.append((p[0, 0, 0], k))))
    assert len(shown) == 2
    shown[1](None, 6 + 2, 3)      # page 2, 2nd place: patch 5 of the list
    shown[0](None, 5, 0)          # on a border: nothing
    shown[1](None, 13, 0)         # an empty place of the last page: nothing
    assert clicked == [(60, 5)]


# ----- draw_boxes -----------------------------------------------------------------------------

def test_draw_boxes_draws_the_border_only():
    im = np.zeros((20, 30, 3), np.uint8)
    out = draw_boxes(im, np.array([[2, 3, 10, 8]]), color=(1, 2, 3))
    assert (im == 0).all() and out.shape == (20, 30, 3) and out.dtype == np.uint8
    on = np.zeros((20, 30), bool)
    on[3, 2:11] = on[8, 2:11] = on[3:9, 2] = on[3:9, 10] = True
    np.testing.assert_array_equal((out != 0).any(axis=2), on)
    np.testing.assert_array_equal(out[3, 2], [1, 2, 3])


def test_draw_boxes_gray_default_color_edges_and_errors():
    im = np.full((10, 10), 200, np.uint8)
    out = draw_boxes(im, [[0, 0, 10, 10]])          # x2 == width is accepted, drawn at the edge
    assert out.shape == (10, 10, 3)
    np.testing.assert_array_equal(out[9, 5], [15, 128, 15])
    np.testing.assert_array_equal(out[5, 5], [200, 200, 200])
    np.testing.assert_array_equal(draw_boxes(im, np.zeros((0, 4)))[..., 0], im)
    with pytest.raises(ValueError, match=r'box 1 .*outside'):
        draw_boxes(im, [[0, 0, 2, 2], [5, 5, 11, 6]])
    with pytest.raises(ValueError, match='empty'):
        draw_boxes(im, [[5, 5, 4, 6]])
    with pytest.raises(ValueError, match='Nx4'):
        draw_boxes(im, [[1, 2, 3]])
    with pytest.raises(ValueError, match='2 labels for 1 boxes'):
        draw_boxes(im, [[1, 1, 3, 3]], labels=['a', 'b'])


def test_draw_boxes_label_text():
    pytest.importorskip('PIL')
    im = np.zeros((60, 80, 3), np.uint8)
    out = draw_boxes(im, [[10, 30, 70, 55]], labels=['cat'], color=(0, 0, 200))
    band = out[:30, 10:70]
    assert (band == [0, 0, 200]).all(axis=2).sum() > 20        # the label's background
    assert (band[..., 0] > 100).sum() > 5                      # its light text
    assert (out[31:, :] != 0).sum() == (draw_boxes(im, [[10, 30, 70, 55]], color=(0, 0, 200))[31:] != 0).sum()


def test_draw_boxes_labels_without_pillow(monkeypatch, log_records):
    monkeypatch.setitem(sys.modules, 'PIL', None)
    im = np.zeros((20, 20, 3), np.uint8)
    out = draw_boxes(im, [[2, 2, 9, 9]], labels=['dog'])
    np.testing.assert_array_equal(out, draw_boxes(im, [[2, 2, 9, 9]]))     # the box, no text
    assert any('Pillow' in m for m in log_records.messages())
