"""examples/FasterRCNN_tensorpack/tiny_coco.py writes a COCO-format dataset whose boxes,
areas and images agree with its polygons."""

import json
import os
import sys

import pytest
from helpers.paths import REPO_DIR

cv2 = pytest.importorskip('cv2')
sys.path.insert(0, os.path.join(REPO_DIR,
                                'examples', 'FasterRCNN_tensorpack'))
from tiny_coco import COLORS, make_tiny_coco  # noqa: E402


def test_tiny_coco_files_boxes_areas_and_pixels(tmp_path):
    train, val = make_tiny_coco(str(tmp_path), num_train=3, num_val=2, height=48, width=64, seed=1)
    for split, content in (('train2017', train), ('val2017', val)):
        with open(tmp_path / 'annotations' / 'instances_{}.json'.format(split)) as f:
            assert json.load(f) == content
        assert [c['id'] for c in content['categories']] == [1, 2, 3]
        assert len({a['id'] for a in content['annotations']}) == len(content['annotations']) > 0
        for image in content['images']:
            pixels = cv2.imread(str(tmp_path / split / image['file_name']))
            assert pixels.shape == (48, 64, 3)
        for ann in content['annotations']:
            xs, ys = ann['segmentation'][0][0::2], ann['segmentation'][0][1::2]
            x, y, w, h = ann['bbox']
            assert (x, y) == (min(xs), min(ys)) and (x + w, y + h) == pytest.approx((max(xs), max(ys)))
            assert 0 <= x and x + w <= 64 and 0 <= y and y + h <= 48
            assert 0 < ann['area'] <= w * h + 1e-6
    # the last shape drawn is visible at its center, in its category's color
    ann = train['annotations'][-1]
    image = cv2.imread(str(tmp_path / 'train2017' / '{:06d}.png'.format(ann['image_id'])))
    x, y, w, h = ann['bbox']
    assert tuple(image[int(y + h / 2), int(x + w / 2)]) == COLORS[ann['category_id']]
    assert make_tiny_coco(str(tmp_path / "again"), 3, 2, 48, 64, seed=1)[0] == train  # deterministic
