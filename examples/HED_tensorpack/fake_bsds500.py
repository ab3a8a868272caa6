"""Write a tiny fake BSDS500 (the layout of the extracted ``BSR_bsds500.tgz``) for smoke runs of
edge-detection code: JPEG images of random rectangles, each with a ``groundTruth`` .mat file of
a few annotators' boundary maps (the rectangles' outlines, each annotator missing some).

Layout (as ``tensorpack_lite.dataflow.dataset.BSDS500`` reads it under ``data_dir``)::

    data_dir/BSR/BSDS500/data/images/{train,val,test}/<id>.jpg                 321x481 or 481x321
    data_dir/BSR/BSDS500/data/groundTruth/{train,val,test}/<id>.mat            cell array 'groundTruth'

Usage::

    python fake_bsds500.py /tmp/bsds500_data --train 10 --val 3
"""

import argparse
import os

import cv2
import numpy as np
import scipy.io

HEIGHT, WIDTH = 321, 481


def write_bsds_image(data_dir, split, image_id, image, boundary_maps):
    """Write ``image`` (HxWx3 uint8, BGR) as ``<image_id>.jpg`` of ``split`` and its ground truth:
    one annotator per HxW array of ``boundary_maps`` (0/1), each with a dummy segmentation."""
    root = os.path.join(data_dir, 'BSR', 'BSDS500', 'data')
    path = os.path.join(root, 'images', split, image_id + '.jpg')
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if not cv2.imwrite(path, image, [cv2.IMWRITE_JPEG_QUALITY, 100]):
        raise OSError("fake_bsds500: cannot write '{}'".format(path))
    cells = np.empty((1, len(boundary_maps)), dtype=object)
    for k, boundaries in enumerate(boundary_maps):
        cells[0, k] = {'Segmentation': np.ones(boundaries.shape, np.uint16),
                       'Boundaries': np.asarray(boundaries, np.uint8)}
    gt_path = os.path.join(root, 'groundTruth', split, image_id + '.mat')
    os.makedirs(os.path.dirname(gt_path), exist_ok=True)
    scipy.io.savemat(gt_path, {'groundTruth': cells})


def _random_scene(rng, height, width, num_annotators, num_rects=4, thickness=6):
    """A noisy image of ``num_rects`` filled rectangles and the boundary maps of its annotators:
    each draws the outlines of the rectangles but one (a different one per annotator)."""
    image = rng.randint(60, 90, size=(height, width, 3)).astype(np.uint8)
    rects = []
    for _ in range(num_rects):
        h, w = rng.randint(height // 5, height // 2), rng.randint(width // 5, width // 2)
        y, x = rng.randint(0, height - h), rng.randint(0, width - w)
        color = tuple(int(c) for c in rng.randint(100, 256, size=3))
        cv2.rectangle(image, (x, y), (x + w, y + h), color, -1)
        rects.append((x, y, w, h))
    maps = []
    for k in range(num_annotators):
        boundaries = np.zeros((height, width), np.uint8)
        for j, (x, y, w, h) in enumerate(rects):
            if num_annotators == 1 or j != k % num_rects:
                cv2.rectangle(boundaries, (x, y), (x + w, y + h), 1, thickness)
        maps.append(boundaries)
    return image, maps


def make_fake_bsds500(data_dir, num_train=10, num_val=3, num_test=0, seed=0, num_annotators=3):
    """Write the splits under ``data_dir``; every third image is portrait (481x321), as some of
    BSDS500's are. Returns ``{split: [image ids]}``."""
    rng = np.random.RandomState(seed)
    written = {}
    for split, count in (('train', num_train), ('val', num_val), ('test', num_test)):
        written[split] = []
        for k in range(count):
            height, width = (WIDTH, HEIGHT) if k % 3 == 2 else (HEIGHT, WIDTH)
            image, maps = _random_scene(rng, height, width, num_annotators)
            image_id = '{}{:03d}'.format({'train': 1, 'val': 2, 'test': 3}[split], k)
            write_bsds_image(data_dir, split, image_id, image, maps)
            written[split].append(image_id)
    return written


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('data_dir', help='the directory to hold BSR/ (e.g. $TENSORPACK_DATASET/bsds500_data)')
    parser.add_argument('--train', type=int, default=10, help='number of training images')
    parser.add_argument('--val', type=int, default=3, help='number of validation images')
    parser.add_argument('--test', type=int, default=0, help='number of test images')
    parser.add_argument('--seed', type=int, default=0)
    args = parser.parse_args()
    written = make_fake_bsds500(args.data_dir, args.train, args.val, args.test, args.seed)
    print("Wrote {} under {}".format(
        ', '.join('{} {} images'.format(len(ids), split) for split, ids in written.items()), args.data_dir))


if __name__ == '__main__':
    main()
