"""Write a tiny COCO-format detection dataset: a few small images of colored shapes, each
with its boxes and polygon masks, for smoke runs of COCO-format detection code.

Layout (as tensorpack's FasterRCNN example expects under ``DATA.BASEDIR``)::

    BASEDIR/train2017/*.png   BASEDIR/val2017/*.png
    BASEDIR/annotations/instances_train2017.json
    BASEDIR/annotations/instances_val2017.json

Category ids are COCO's 1 (person), 2 (bicycle) and 3 (car): a triangle, an ellipse and a
rectangle of a fixed color each, so that a detector has something learnable.

Usage::

    python tiny_coco.py /tmp/tiny_coco --train 8 --val 4 --height 96 --width 128
"""

import argparse
import json
import os

import numpy as np

CATEGORIES = [(1, 'person'), (2, 'bicycle'), (3, 'car')]
COLORS = {1: (40, 40, 220), 2: (40, 200, 40), 3: (220, 60, 40)}  # BGR


def _polygon(category, x, y, w, h):
    """The outline of a shape of ``category`` in the box (x, y, w, h), as [x1, y1, x2, y2...]."""
    if category == 1:  # triangle
        points = [(x + w / 2, y), (x + w, y + h), (x, y + h)]
    elif category == 2:  # ellipse, 12 points
        angles = np.linspace(0, 2 * np.pi, 12, endpoint=False)
        points = list(zip(x + w / 2 + np.cos(angles) * w / 2, y + h / 2 + np.sin(angles) * h / 2))
    else:  # rectangle
        points = [(x, y), (x + w, y), (x + w, y + h), (x, y + h)]
    return [round(float(v), 2) for point in points for v in point]


def _draw(image, polygon, color):
    import cv2
    points = np.round(np.asarray(polygon, dtype=np.float64).reshape(-1, 2)).astype(np.int32)
    cv2.fillPoly(image, [points], color)


def make_split(basedir, split, num_images, height, width, rng, first_ann_id=1):
    """Write ``num_images`` images of ``split`` and ``annotations/instances_<split>.json``;
    returns the annotation dict."""
    import cv2
    image_dir = os.path.join(basedir, split)
    os.makedirs(image_dir, exist_ok=True)
    os.makedirs(os.path.join(basedir, 'annotations'), exist_ok=True)
    images, annotations = [], []
    ann_id = first_ann_id
    for index in range(num_images):
        image_id = index + 1
        noise = rng.randint(0, 30, (height, width, 3)).astype(np.uint8)
        image = np.full((height, width, 3), 200, np.uint8) + noise
        for _ in range(rng.randint(1, 4)):
            category = int(rng.randint(1, 4))
            w, h = rng.randint(width // 5, width // 2), rng.randint(height // 5, height // 2)
            x, y = rng.randint(0, width - w), rng.randint(0, height - h)
            polygon = _polygon(category, x, y, w, h)
            _draw(image, polygon, COLORS[category])
            xs, ys = polygon[0::2], polygon[1::2]
            box = [min(xs), min(ys), max(xs) - min(xs), max(ys) - min(ys)]
            area = 0.5 * abs(float(np.dot(xs, np.roll(ys, 1)) - np.dot(ys, np.roll(xs, 1))))
            annotations.append({'id': ann_id, 'image_id': image_id, 'category_id': category,
                                'bbox': [round(v, 2) for v in box], 'area': round(area, 2),
                                'segmentation': [polygon], 'iscrowd': 0})
            ann_id += 1
        file_name = '{:06d}.png'.format(image_id)
        cv2.imwrite(os.path.join(image_dir, file_name), image)
        images.append({'id': image_id, 'file_name': file_name, 'height': height, 'width': width})
    content = {'images': images, 'annotations': annotations,
               'categories': [{'id': i, 'name': name, 'supercategory': 'shape'} for i, name in CATEGORIES]}
    with open(os.path.join(basedir, 'annotations', 'instances_{}.json'.format(split)), 'w') as f:
        json.dump(content, f)
    return content


def make_tiny_coco(basedir, num_train=8, num_val=4, height=96, width=128, seed=0):
    """Write the train2017 and val2017 splits under ``basedir``; returns their annotation dicts."""
    rng = np.random.RandomState(seed)
    return (make_split(basedir, 'train2017', num_train, height, width, rng),
            make_split(basedir, 'val2017', num_val, height, width, rng))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('basedir')
    parser.add_argument('--train', type=int, default=8, help='number of training images')
    parser.add_argument('--val', type=int, default=4, help='number of validation images')
    parser.add_argument('--height', type=int, default=96)
    parser.add_argument('--width', type=int, default=128)
    parser.add_argument('--seed', type=int, default=0)
    args = parser.parse_args()
    train, val = make_tiny_coco(args.basedir, args.train, args.val, args.height, args.width, args.seed)
    print("Wrote {} + {} images, {} + {} instances under {}".format(
        len(train['images']), len(val['images']), len(train['annotations']), len(val['annotations']),
        args.basedir))


if __name__ == '__main__':
    main()
