"""dataflow.dataset image readers (ILSVRC12 and its caffe meta files, TinyImageNet, Places365,
SVHN, Caltech 101 Silhouettes, BSDS500), on small files the tests write in the real formats:
JPEG images, caffe's text files and a BlobProto encoded with protobuf, MATLAB .mat files."""

import os
import struct
import sys

import cv2
import numpy as np
import pytest
import scipy.io

from tensorpack_lite.dataflow.dataset.bsds500 import BSDS500
from tensorpack_lite.dataflow.dataset.caltech101 import Caltech101Silhouettes
from tensorpack_lite.dataflow.dataset.ilsvrc import (ILSVRC12, ILSVRC12Files, ILSVRCMeta, TinyImageNet,
                                                     read_caffe_blob)
from tensorpack_lite.dataflow.dataset.places import Places365Standard
from tensorpack_lite.dataflow.dataset.svhn import SVHNDigit
from helpers.paths import REPO_DIR
from helpers.dataflows import reset

sys.path.insert(0, os.path.join(REPO_DIR,
                                'examples', 'HED_tensorpack'))
from fake_bsds500 import write_bsds_image  # noqa: E402

SYNSETS = ['n01440764', 'n01443537', 'n01484850']
WORDS = ['tench, Tinca tinca', 'goldfish, Carassius auratus', 'great white shark']


def _write_text(path, lines):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, 'w') as f:
        f.write(''.join(line + '\n' for line in lines))


def _color(label, k):
    """The BGR color of the k-th test image of a class: telling the image and its label apart."""
    return (40 * label + 10, 20 * k + 30, 200)


def _write_jpeg(path, color, shape=(24, 32)):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    image = np.empty(shape + (3,), np.uint8)
    image[:] = color
    assert cv2.imwrite(path, image, [cv2.IMWRITE_JPEG_QUALITY, 100])


def _assert_color(image, color, shape=(24, 32)):
    """A decoded constant-color JPEG: uint8 BGR of the expected size, each pixel within 2 levels."""
    assert image.dtype == np.uint8 and image.shape == shape + (3,)
    assert np.abs(image.astype(int) - np.array(color)).max() <= 2


# ----- ILSVRC12 meta files and the BlobProto ----------------------------------------------------

def write_meta(meta_dir, val_labels=(2, 0, 1)):
    """caffe_ilsvrc12's text files for 2 training images per class and 3 val / 2 test images."""
    _write_text(os.path.join(meta_dir, 'synsets.txt'), SYNSETS)
    _write_text(os.path.join(meta_dir, 'synset_words.txt'), [s + ' ' + w for s, w in zip(SYNSETS, WORDS)])
    _write_text(os.path.join(meta_dir, 'train.txt'), ['{0}/{0}_{1}.JPEG {2}'.format(s, k, label)
                                                      for label, s in enumerate(SYNSETS) for k in range(2)])
    _write_text(os.path.join(meta_dir, 'val.txt'), ['ILSVRC2012_val_{:08d}.JPEG {}'.format(k + 1, label)
                                                    for k, label in enumerate(val_labels)])
    _write_text(os.path.join(meta_dir, 'test.txt'), ['ILSVRC2012_test_{:08d}.JPEG 0'.format(k + 1)
                                                     for k in range(2)])


def test_ilsvrc_meta_synsets_and_image_lists(tmp_path):
    meta_dir = str(tmp_path / 'meta')
    write_meta(meta_dir)
    meta = ILSVRCMeta(meta_dir)
    assert meta.get_synset_1000() == {0: 'n01440764', 1: 'n01443537', 2: 'n01484850'}
    assert meta.get_synset_words_1000()[1] == 'n01443537 goldfish, Carassius auratus'
    assert meta.get_image_list('train')[:3] == [('n01440764/n01440764_0.JPEG', 0),
                                                ('n01440764/n01440764_1.JPEG', 0),
                                                ('n01443537/n01443537_0.JPEG', 1)]
    assert meta.get_image_list('val') == [('ILSVRC2012_val_00000001.JPEG', 2),
                                          ('ILSVRC2012_val_00000002.JPEG', 0),
                                          ('ILSVRC2012_val_00000003.JPEG', 1)]
    # the 'train' structure puts val images in their synset's directory
    assert meta.get_image_list('val', 'train')[0] == ('n01484850/ILSVRC2012_val_00000001.JPEG', 2)
    with pytest.raises(ValueError, match="name must be one of .* got 'valid'"):
        meta.get_image_list('valid')
    with pytest.raises(ValueError, match="dir_structure must be one of"):
        meta.get_image_list('val', 'flat')
    with pytest.raises(FileNotFoundError, match=r"imagenet_mean\.binaryproto"):
        meta.get_per_pixel_mean()


def test_ilsvrc_meta_errors_name_the_file(tmp_path):
    missing = str(tmp_path / 'nowhere')
    with pytest.raises(FileNotFoundError, match=r"nowhere/synsets\.txt.*caffe_ilsvrc12\.tar\.gz"):
        ILSVRCMeta(missing)
    meta_dir = str(tmp_path / 'meta')
    write_meta(meta_dir)
    _write_text(os.path.join(meta_dir, 'val.txt'), ['a.JPEG 1', 'b.JPEG'])
    with pytest.raises(ValueError, match=r"line 2 of '.*val\.txt'"):
        ILSVRCMeta(meta_dir).get_image_list('val')


def _blob_message_class():
    """caffe's BlobProto and BlobShape messages (caffe.proto's field numbers), built at run time."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
    field = descriptor_pb2.FieldDescriptorProto
    proto = descriptor_pb2.FileDescriptorProto(name='caffe_blob_for_test.proto', package='caffe_test',
                                               syntax='proto2')
    shape = proto.message_type.add(name='BlobShape')
    dim = shape.field.add(name='dim', number=1, type=field.TYPE_INT64, label=field.LABEL_REPEATED)
    dim.options.packed = True
    blob = proto.message_type.add(name='BlobProto')
    for name, number in (('num', 1), ('channels', 2), ('height', 3), ('width', 4)):
        blob.field.add(name=name, number=number, type=field.TYPE_INT32, label=field.LABEL_OPTIONAL)
    data = blob.field.add(name='data', number=5, type=field.TYPE_FLOAT, label=field.LABEL_REPEATED)
    data.options.packed = True
    blob.field.add(name='shape', number=7, type=field.TYPE_MESSAGE, label=field.LABEL_OPTIONAL,
                   type_name='.caffe_test.BlobShape')
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName('caffe_test.BlobProto'))


def test_per_pixel_mean_from_a_blobproto(tmp_path):
    meta_dir = str(tmp_path / 'meta')
    write_meta(meta_dir)
    chw = np.arange(3 * 4 * 5, dtype=np.float32).reshape(3, 4, 5) + 0.5
    message = _blob_message_class()(num=1, channels=3, height=4, width=5)   # caffe's legacy dimensions
    message.data.extend(chw.ravel().tolist())
    with open(os.path.join(meta_dir, 'imagenet_mean.binaryproto'), 'wb') as f:
        f.write(message.SerializeToString())
    mean = ILSVRCMeta(meta_dir).get_per_pixel_mean()
    assert mean.shape == (4, 5, 3) and mean.dtype == np.float32
    assert mean[2, 3].tolist() == [chw[0, 2, 3], chw[1, 2, 3], chw[2, 2, 3]]
    np.testing.assert_array_equal(mean, chw.transpose(1, 2, 0))

    # resizing a mean that is constant in each channel keeps the constants
    flat = _blob_message_class()()
    flat.shape.dim.extend([1, 3, 6, 6])                      # the newer 'shape' field
    flat.data.extend(np.repeat([10., 20., 30.], 36).tolist())
    with open(os.path.join(meta_dir, 'imagenet_mean.binaryproto'), 'wb') as f:
        f.write(flat.SerializeToString())
    resized = ILSVRCMeta(meta_dir).get_per_pixel_mean(size=(2, 3))
    assert resized.shape == (2, 3, 3)
    np.testing.assert_allclose(resized, np.broadcast_to([10., 20., 30.], (2, 3, 3)), rtol=1e-6)


def test_read_caffe_blob_unpacked_values_and_corrupt_files(tmp_path):
    def key(number, wire_type):
        return bytes([number << 3 | wire_type])
    # unpacked floats (wire type 5), as an old writer may produce them; shape 2x1x1x1
    raw = key(1, 0) + b'\x02' + key(2, 0) + b'\x01' + key(3, 0) + b'\x01' + key(4, 0) + b'\x01'
    raw += key(5, 5) + struct.pack('<f', 1.5) + key(5, 5) + struct.pack('<f', -2.0)
    path = str(tmp_path / 'unpacked.binaryproto')
    with open(path, 'wb') as f:
        f.write(raw)
    blob = read_caffe_blob(path)
    assert blob.shape == (2, 1, 1, 1) and blob.ravel().tolist() == [1.5, -2.0]

    truncated = str(tmp_path / 'truncated.binaryproto')
    with open(truncated, 'wb') as f:
        f.write(key(5, 2) + b'\x08' + b'\x00' * 4)          # announces 8 bytes, has 4
    with pytest.raises(ValueError, match=r"truncated\.binaryproto' is not a valid caffe BlobProto"):
        read_caffe_blob(truncated)
    wrong_shape = str(tmp_path / 'wrong.binaryproto')
    with open(wrong_shape, 'wb') as f:
        f.write(key(1, 0) + b'\x03' + key(5, 5) + struct.pack('<f', 1.0))
    with pytest.raises(ValueError, match=r"wrong\.binaryproto.*shape \(3, 0, 0, 0\) does not match its 1 "):
        read_caffe_blob(wrong_shape)


# ----- ILSVRC12 images ------------------------------------------------------------------------

def write_ilsvrc(root, val_by_synset=False, val_labels=(2, 0, 1)):
    """dir/train/<synset>/..., dir/val/... (flat or by synset), dir/test/... and the meta files."""
    meta_dir = os.path.join(root, 'meta')
    write_meta(meta_dir, val_labels)
    for label, synset in enumerate(SYNSETS):
        for k in range(2):
            _write_jpeg(os.path.join(root, 'train', synset, '{}_{}.JPEG'.format(synset, k)), _color(label, k))
    for k, label in enumerate(val_labels):
        sub = SYNSETS[label] if val_by_synset else ''
        name = 'ILSVRC2012_val_{:08d}.JPEG'.format(k + 1)
        _write_jpeg(os.path.join(root, 'val', sub, name), _color(label, 9))
    for k in range(2):
        _write_jpeg(os.path.join(root, 'test', 'ILSVRC2012_test_{:08d}.JPEG'.format(k + 1)), (0, 0, 0))
    return meta_dir


@pytest.mark.parametrize('val_by_synset', [False, True])
def test_ilsvrc12_val_in_both_layouts(tmp_path, val_by_synset, log_records):
    root = str(tmp_path)
    meta_dir = write_ilsvrc(root, val_by_synset=val_by_synset)
    df = reset(ILSVRC12(root, 'val', meta_dir=meta_dir))     # the layout is guessed
    assert len(df) == 3
    expected = 'train' if val_by_synset else 'original'
    assert any("'{}' structure".format(expected) in m for m in log_records.messages())
    points = list(df)
    assert [label for _, label in points] == [2, 0, 1]           # val.txt's order: val is not shuffled
    for image, label in points:
        assert isinstance(label, np.int32)
        _assert_color(image, _color(label, 9))
    files = reset(ILSVRC12Files(root, 'val', meta_dir=meta_dir))
    first_path, first_label = next(iter(files))
    sub = 'n01484850' if val_by_synset else ''
    assert files.imglist[0] == (os.path.join(sub, 'ILSVRC2012_val_00000001.JPEG'), 2)   # relative to dir/val
    assert first_path == os.path.join(root, 'val', sub, 'ILSVRC2012_val_00000001.JPEG')
    assert first_label == 2
    # the wrong layout, given explicitly, names the image it does not find
    wrong = 'original' if val_by_synset else 'train'
    with pytest.raises(FileNotFoundError, match="ILSVRC2012_val_00000001.JPEG' does not exist .*'{}'"
                       .format(wrong)):
        ILSVRC12(root, 'val', meta_dir=meta_dir, dir_structure=wrong)


def test_ilsvrc12_train_is_shuffled_reproducibly(tmp_path, fixed_seed):
    root = str(tmp_path)
    meta_dir = write_ilsvrc(root)
    fixed_seed(7)
    df = reset(ILSVRC12(root, 'train', meta_dir=meta_dir))
    first = [(int(label), tuple(int(v) for v in image[0, 0])) for image, label in df]
    second = [(int(label), tuple(int(v) for v in image[0, 0])) for image, label in df]
    in_file_order = [(label, _color(label, k)) for label in range(3) for k in range(2)]
    file_order = [0, 0, 1, 1, 2, 2]
    assert len(first) == 6
    for epoch in (first, second):    # every image once, each with its own label
        assert sorted(label for label, _ in epoch) == file_order
        for label, color in epoch:
            assert min(np.abs(np.array(color) - c).max() for lbl, c in in_file_order if lbl == label) <= 2
    assert [label for label, _ in first] != file_order or [label for label, _ in second] != file_order
    fixed_seed(7)
    again = reset(ILSVRC12Files(root, 'train', meta_dir=meta_dir))
    assert [int(label) for _, label in again] == [label for label, _ in first]
    plain = reset(ILSVRC12Files(root, 'train', meta_dir=meta_dir, shuffle=False))
    assert [int(label) for _, label in plain] == file_order


def test_ilsvrc12_errors(tmp_path):
    root = str(tmp_path)
    meta_dir = write_ilsvrc(root)
    with pytest.raises(ValueError, match="name must be one of .* got 'validation'"):
        ILSVRC12(root, 'validation', meta_dir=meta_dir)
    with pytest.raises(FileNotFoundError, match="nowhere/val' does not exist"):
        ILSVRC12(str(tmp_path / 'nowhere'), 'val', meta_dir=meta_dir)
    with pytest.raises(FileNotFoundError, match="no_meta' does not exist"):
        ILSVRC12(root, 'val', meta_dir=str(tmp_path / 'no_meta'))
    with pytest.raises(ValueError, match="dir_structure must be one of"):
        ILSVRC12(root, 'val', meta_dir=meta_dir, dir_structure='nested')
    with open(os.path.join(root, 'val', 'ILSVRC2012_val_00000002.JPEG'), 'wb') as f:
        f.write(b'not an image')
    df = reset(ILSVRC12(root, 'val', meta_dir=meta_dir))
    with pytest.raises(ValueError, match=r"ILSVRC12: OpenCV cannot decode '.*ILSVRC2012_val_00000002\.JPEG'"):
        list(df)


def test_ilsvrc12_training_bbox(tmp_path):
    bbox_dir = tmp_path / 'bbox'
    (bbox_dir / 'n01440764').mkdir(parents=True)
    (bbox_dir / 'n01440764' / 'n01440764_0.xml').write_text(
        '<annotation><filename>n01440764_0</filename><size><width>32</width><height>24</height></size>'
        '<object><name>n01440764</name><bndbox><xmin>3</xmin><ymin>4</ymin><xmax>20</xmax><ymax>17</ymax>'
        '</bndbox></object><object><name>n01440764</name><bndbox><xmin>0</xmin><ymin>0</ymin>'
        '<xmax>1</xmax><ymax>1</ymax></bndbox></object></annotation>')
    (bbox_dir / 'n01440764' / 'n01440764_1.xml').write_text('<annotation><object>')   # broken
    imglist = [('n01440764/n01440764_0.JPEG', 0), ('n01440764/n01440764_1.JPEG', 0),
               ('n01443537/n01443537_0.JPEG', 1)]
    boxes = ILSVRC12.get_training_bbox(str(bbox_dir), imglist)
    assert boxes[0].dtype == np.float32 and boxes[0].tolist() == [3, 4, 20, 17]
    assert boxes[1] is None and boxes[2] is None


# ----- TinyImageNet and Places365 ----------------------------------------------------------------

def test_tiny_imagenet_train_and_val(tmp_path, fixed_seed):
    root = str(tmp_path / 'tiny-imagenet-200')
    wnids = ['n02124075', 'n01443537', 'n04067472']            # labels follow wnids.txt, not sorted
    _write_text(os.path.join(root, 'wnids.txt'), wnids)
    for label, wnid in enumerate(wnids):
        for k in range(2):
            _write_jpeg(os.path.join(root, 'train', wnid, 'images', '{}_{}.JPEG'.format(wnid, k)),
                        _color(label, k), shape=(64, 64))
    val = [('val_0.JPEG', 2), ('val_1.JPEG', 0)]
    _write_text(os.path.join(root, 'val', 'val_annotations.txt'),
                ['{}\t{}\t0\t0\t10\t10'.format(name, wnids[label]) for name, label in val])
    for name, label in val:
        _write_jpeg(os.path.join(root, 'val', 'images', name), _color(label, 9), shape=(64, 64))

    points = list(reset(TinyImageNet(root, 'val')))
    assert [int(label) for _, label in points] == [2, 0]
    for image, label in points:
        _assert_color(image, _color(label, 9), shape=(64, 64))
    fixed_seed(3)
    train = reset(TinyImageNet(root, 'train'))
    assert len(train) == 6
    labels = [int(label) for image, label in train]
    assert sorted(labels) == [0, 0, 1, 1, 2, 2]
    fixed_seed(3)
    assert [int(label) for _, label in reset(TinyImageNet(root, 'train'))] == labels

    with pytest.raises(ValueError, match="name must be one of .* got 'test'"):
        TinyImageNet(root, 'test')
    with pytest.raises(FileNotFoundError, match=r"elsewhere/wnids\.txt") as info:
        TinyImageNet(str(tmp_path / 'elsewhere'), 'train')
    assert 'pass dir=' not in str(info.value)   # the directory is a required argument
    _write_text(os.path.join(root, 'val', 'val_annotations.txt'), ['val_0.JPEG\tn99999999\t0\t0\t1\t1'])
    with pytest.raises(ValueError, match=r"line 1 of '.*val_annotations\.txt'"):
        TinyImageNet(root, 'val')


def test_places365_standard(tmp_path):
    root = str(tmp_path / 'places365_standard')
    val = ['val/kitchen/00000001.jpg', 'val/airfield/00000002.jpg', 'val/bakery-shop/00000003.jpg']
    _write_text(os.path.join(root, 'val.txt'), val)
    for k, path in enumerate(val):
        _write_jpeg(os.path.join(root, path), (k * 50, 10, 10))
    df = Places365Standard(root, 'val')
    assert df.get_label_names() == ['airfield', 'bakery-shop', 'kitchen']      # alphabetical
    points = list(reset(df))                                   # val: the listed order
    assert [int(label) for _, label in points] == [2, 0, 1]
    for k, (image, _) in enumerate(points):
        _assert_color(image, (k * 50, 10, 10))
    with pytest.raises(FileNotFoundError, match=r"places365_standard/train\.txt' does not exist"):
        Places365Standard(root, 'train')
    with pytest.raises(ValueError, match="'train' or 'val', got 'test'"):
        Places365Standard(root, 'test')


# ----- .mat datasets: SVHN, Caltech 101 Silhouettes, BSDS500 -----------------------------------------

def write_svhn(directory, name, n, seed):
    rng = np.random.RandomState(seed)
    images = rng.randint(0, 256, size=(32, 32, 3, n)).astype(np.uint8)      # the files' 32x32x3xN
    labels = rng.randint(1, 11, size=(n, 1)).astype(np.uint8)               # 10 stands for digit 0
    labels[0, 0] = 10
    os.makedirs(directory, exist_ok=True)
    scipy.io.savemat(os.path.join(directory, name + '_32x32.mat'), {'X': images, 'y': labels})
    return images, labels


def test_svhn_images_labels_and_mean(tmp_path):
    directory = str(tmp_path / 'svhn')
    images, labels = write_svhn(directory, 'train', 7, seed=0)
    test_images, _ = write_svhn(directory, 'test', 3, seed=1)
    df = reset(SVHNDigit('train', data_dir=directory, shuffle=False))
    assert len(df) == 7
    for k, (image, label) in enumerate(df):
        assert image.shape == (32, 32, 3) and image.dtype == np.float32
        np.testing.assert_array_equal(image, images[:, :, :, k])
        assert label.dtype == np.int32 and label == labels[k, 0] % 10
    assert next(iter(df))[1] == 0                                  # label 10 is the digit 0
    mean = SVHNDigit.get_per_pixel_mean(('train', 'test'), data_dir=directory)
    everything = np.concatenate([images, test_images], axis=3).astype(np.float64)
    assert mean.shape == (32, 32, 3) and mean.dtype == np.float32
    np.testing.assert_allclose(mean, everything.mean(axis=3), rtol=1e-6)


def test_svhn_errors_name_the_file(tmp_path):
    directory = str(tmp_path / 'svhn')
    with pytest.raises(FileNotFoundError, match=r"svhn/extra_32x32\.mat.*ufldl\.stanford\.edu/housenumbers.*"
                                                r"pass data_dir= or set \$TENSORPACK_DATASET"):
        SVHNDigit('extra', data_dir=directory)
    with pytest.raises(ValueError, match="one of .* got 'valid'"):
        SVHNDigit('valid', data_dir=directory)
    os.makedirs(directory)
    with open(os.path.join(directory, 'train_32x32.mat'), 'wb') as f:
        f.write(b'MATLAB 5.0 MAT-file' + b'\x00' * 40)                  # truncated header
    with pytest.raises(ValueError, match=r"train_32x32\.mat' is not a readable MATLAB \.mat file"):
        SVHNDigit('train', data_dir=directory)
    scipy.io.savemat(os.path.join(directory, 'test_32x32.mat'), {'images': np.zeros((2, 2))})
    with pytest.raises(ValueError, match=r"test_32x32\.mat' has no variable 'X', 'y'"):
        SVHNDigit('test', data_dir=directory)


def test_caltech101_silhouettes(tmp_path, fixed_seed):
    rng = np.random.RandomState(0)
    splits = {'train': 5, 'val': 3, 'test': 4}
    content = {}
    for name, n in splits.items():
        content[name + '_data'] = (rng.rand(n, 784) > 0.5).astype(np.float64)
        content[name + '_labels'] = rng.randint(1, 102, size=(n, 1)).astype(np.float64)   # 1..101
    content['train_labels'][:2, 0] = [1, 101]
    scipy.io.savemat(str(tmp_path / 'caltech101_silhouettes_28_split1.mat'), content)
    for name, n in splits.items():
        df = reset(Caltech101Silhouettes(name, shuffle=False, dir=str(tmp_path)))
        points = list(df)
        assert len(df) == len(points) == n
        for k, (image, label) in enumerate(points):
            assert image.shape == (28, 28) and image.dtype == np.float32
            np.testing.assert_array_equal(image.ravel(), content[name + '_data'][k])   # row-major rows
            assert label.dtype == np.int32 and label == content[name + '_labels'][k, 0] - 1
    first_two = [int(lbl) for _, lbl in reset(Caltech101Silhouettes('train', False, str(tmp_path)))][:2]
    assert first_two == [0, 100]
    with pytest.raises(ValueError, match="one of .* got 'validation'"):
        Caltech101Silhouettes('validation', dir=str(tmp_path))
    with pytest.raises(FileNotFoundError, match=r"caltech101_silhouettes_28_split1\.mat.*marlin"):
        Caltech101Silhouettes('train', dir=str(tmp_path / 'missing'))


def write_bsds(root, name, annotations):
    """One image per entry of ``annotations`` ({image id: (height, width, list of boundary maps)}),
    written by the HED example's fake BSDS500 writer."""
    for image_id, (height, width, boundary_maps) in annotations.items():
        image = np.zeros((height, width, 3), np.uint8)
        image[:240, :240] = (200, 100, 50)          # one 8x8-aligned corner block, so JPEG keeps it
        write_bsds_image(root, name, image_id, image, boundary_maps)


def test_bsds500_averaged_boundaries_and_portrait_images(tmp_path):
    landscape = [np.zeros((321, 481), np.uint8) for _ in range(3)]
    landscape[0][5, 7] = landscape[1][5, 7] = landscape[2][5, 7] = 1      # all 3 annotators
    landscape[1][300, 400] = 1                                             # 1 of 3
    portrait = [np.zeros((481, 321), np.uint8) for _ in range(2)]
    portrait[0][400, 10] = portrait[1][400, 10] = 1                       # row 400, column 10
    portrait[1][0, 300] = 1
    write_bsds(str(tmp_path), 'val', {'100007': (321, 481, landscape), '100039': (481, 321, portrait)})
    df = BSDS500('val', data_dir=str(tmp_path), shuffle=False)
    points = list(reset(df))
    assert len(df) == len(points) == 2
    for image, boundaries in points:
        assert image.shape == (321, 481, 3) and image.dtype == np.uint8
        assert boundaries.shape == (321, 481) and boundaries.dtype == np.float32
        assert np.abs(image[:232, :232].astype(int) - [200, 100, 50]).max() <= 2   # the corner block
        assert image[250:, 250:].max() <= 2
    first, second = points[0][1], points[1][1]                 # sorted by file name
    assert first[5, 7] == 1 and first[300, 400] == pytest.approx(1 / 3)
    assert first.sum() == pytest.approx(4 / 3)
    # the portrait map is transposed: row 400, column 10 becomes row 10, column 400
    assert second[10, 400] == 1 and second[300, 0] == 0.5 and second.sum() == 1.5


def test_bsds500_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"BSDS500/data/images/train' does not exist.*BSR_bsds500"):
        BSDS500('train', data_dir=str(tmp_path))
    with pytest.raises(ValueError, match="one of .* got 'trainval'"):
        BSDS500('trainval', data_dir=str(tmp_path))
    write_bsds(str(tmp_path), 'test', {'2018': (321, 481, [np.zeros((321, 481), np.uint8)])})
    gt = tmp_path / 'BSR' / 'BSDS500' / 'data' / 'groundTruth' / 'test' / '2018.mat'
    gt.write_bytes(b'garbage')
    with pytest.raises(ValueError, match=r"2018\.mat' is not a readable MATLAB \.mat file"):
        BSDS500('test', data_dir=str(tmp_path))
    gt.unlink()
    with pytest.raises(FileNotFoundError, match=r"ground-truth file '.*2018\.mat' does not exist"):
        BSDS500('test', data_dir=str(tmp_path))
    write_bsds(str(tmp_path), 'test', {'2018': (300, 481, [np.zeros((300, 481), np.uint8)])})
    with pytest.raises(ValueError, match=r"2018\.jpg' is 300x481, expected 321x481"):
        BSDS500('test', data_dir=str(tmp_path))
