"""utils: execute_only_once, the file helpers and download (file:// and a local HTTP server),
change_gpu, logger.addFilter, OnlineMoments, IterSpeedCounter, intensity_to_rgb,
dump_dataflow_images, PALETTE_RGB, enable_call_trace, NVMLContext (a missing library and a
fake one built with gcc), loadcaffe (a fake pycaffe and a fake protoc), and that no utils
module imports TensorFlow at import time."""

import os

import numpy as np
import pytest

from tensorpack_lite.dataflow.raw import DataFromList
from tensorpack_lite.utils.viz import dump_dataflow_images, intensity_to_rgb


cv2 = pytest.importorskip('cv2')


def test_intensity_to_rgb_values():
    heat = intensity_to_rgb(np.array([[0.0, 1.0], [0.0, 1.0]]))
    assert heat.shape == (2, 2, 3) and heat.dtype == np.float32
    # cubehelix runs from black to white
    np.testing.assert_allclose(heat[0, 0], [0, 0, 0], atol=1e-3)
    np.testing.assert_allclose(heat[0, 1], [255, 255, 255], atol=1e-3)
    # the gray colormap maps x to x * 255 (up to its 256-entry table)
    gray = intensity_to_rgb(np.array([[0.0, 0.25, 0.5, 1.0]]), cmap='gray')
    np.testing.assert_allclose(gray[0, :, 0], [0, 63.75, 127.5, 255], atol=1.01)
    np.testing.assert_array_equal(gray[..., 0], gray[..., 2])
    # normalize rescales [2, 10] to [0, 1]
    normalized = intensity_to_rgb(np.array([[2.0, 6.0, 10.0]]), cmap='gray', normalize=True)
    np.testing.assert_allclose(normalized[0, :, 1], [0, 127.5, 255], atol=1.01)
    flat = intensity_to_rgb(np.full((2, 2), 7.0), cmap='gray', normalize=True)
    np.testing.assert_array_equal(flat, np.zeros((2, 2, 3), np.float32))


def test_intensity_to_rgb_errors():
    with pytest.raises(ValueError, match=r'2-D \(HxW\) array, got shape \(2, 2, 3\)'):
        intensity_to_rgb(np.zeros((2, 2, 3)))
    with pytest.raises(ValueError, match="unknown matplotlib colormap 'no_such_map'"):
        intensity_to_rgb(np.zeros((2, 2)), cmap='no_such_map')


def _colored_batches():
    """Two datapoints, each a batch of two 8x8 RGB images in [0, 1] of one color each."""
    colors = [(1.0, 0.0, 0.0), (0.0, 1.0, 0.0), (0.0, 0.0, 1.0), (1.0, 1.0, 1.0)]
    images = [np.ones((8, 8, 3)) * np.array(c) for c in colors]
    return DataFromList([[np.stack(images[:2]), 0], [np.stack(images[2:]), 1]], shuffle=False), colors


def test_dump_dataflow_images_writes_numbered_files(tmp_path):
    df, colors = _colored_batches()
    out = str(tmp_path / 'dump')
    dump_dataflow_images(df, index=0, number=6, output_dir=out, scale=255)
    assert sorted(os.listdir(out)) == ['{:03d}.jpg'.format(k) for k in range(1, 7)]
    for k in range(6):       # 4 images per epoch: the 5th and 6th are the first two again
        written = cv2.imread(os.path.join(out, '{:03d}.jpg'.format(k + 1)))
        assert written.shape == (8, 8, 3)
        np.testing.assert_allclose(written.mean(axis=(0, 1)), np.array(colors[k % 4]) * 255, atol=3)


def test_dump_dataflow_images_flip_resize_and_unbatched(tmp_path):
    df, _ = _colored_batches()
    out = str(tmp_path / 'flip')
    dump_dataflow_images(df, number=1, output_dir=out, scale=255, flipRGB=True, resize=(4, 6))
    written = cv2.imread(os.path.join(out, '001.jpg'))
    assert written.shape == (4, 6, 3)                 # resize is (h, w)
    np.testing.assert_allclose(written.mean(axis=(0, 1)), [0, 0, 255], atol=3)   # channel order reversed
    single = DataFromList([[np.full((5, 5), 200, np.uint8)]], shuffle=False)
    out2 = str(tmp_path / 'single')
    dump_dataflow_images(single, batched=False, number=2, output_dir=out2)
    assert sorted(os.listdir(out2)) == ['001.jpg', '002.jpg']
    np.testing.assert_allclose(cv2.imread(os.path.join(out2, '002.jpg'), cv2.IMREAD_GRAYSCALE), 200, atol=2)
    with pytest.raises(ValueError, match='produced no image'):
        dump_dataflow_images(DataFromList([[np.zeros((0, 4, 4))]], shuffle=False), number=1)
