"""dataflow.dataset: Digits on scikit-learn's real data; Mnist / FashionMnist / Cifar from files
the tests write in the real formats (IDX, gzipped or not; pickled CIFAR batches)."""

import gzip
import os
import pickle
import sys

import numpy as np
import pytest

from tensorpack_lite.dataflow import BatchData
from tensorpack_lite.dataflow.dataset import Cifar10, Cifar100, Digits, FashionMnist, Mnist
from tensorpack_lite.dataflow.dataset.common import DATASET_ENV_VAR
from tensorpack_lite.dataflow.dataset.digits import resize_bilinear
from tensorpack_lite.utils.utils import change_env
from helpers.dataflows import reset

MNIST_FILES = {'train': ('train-images-idx3-ubyte', 'train-labels-idx1-ubyte'),
               'test': ('t10k-images-idx3-ubyte', 't10k-labels-idx1-ubyte')}


def _epoch(df):
    images, labels = zip(*list(df))
    return np.stack(images), np.array(labels)


# ----- Digits --------------------------------------------------------------------------------

def test_digits_real_data_split_shapes_and_ranges(digits):
    all_images, all_labels = digits
    train, test = Digits('train', shuffle=False), Digits('test', shuffle=False)
    assert (len(train), len(test)) == (1500, 297)
    for df, part in ((train, slice(None, 1500)), (test, slice(1500, None))):
        df.reset_state()
        images, labels = _epoch(df)
        assert images.shape == (len(df), 8, 8) and images.dtype == np.float32
        assert labels.dtype == np.int32 and set(labels.tolist()) == set(range(10))
        assert 0.0 <= images.min() and images.max() == 1.0
        # exactly scikit-learn's pixels / 16, in the file's order
        np.testing.assert_array_equal(images.reshape(len(df), 64), all_images[part])
        np.testing.assert_array_equal(labels, all_labels[part])


def test_digits_resize_keeps_content():
    small, big = Digits('test', shuffle=False), Digits('test', shuffle=False, image_size=28)
    small.reset_state()
    big.reset_state()
    (small_images, small_labels), (big_images, big_labels) = _epoch(small), _epoch(big)
    assert big_images.shape == (297, 28, 28) and big_images.dtype == np.float32
    np.testing.assert_array_equal(big_labels, small_labels)
    assert big_images.min() >= 0 and big_images.max() <= 1
    # block-averaging 28x28 back to 7x7 gives about the 8x8 image resized to 7x7
    pooled = big_images.reshape(297, 7, 4, 7, 4).mean(axis=(2, 4))
    assert np.abs(pooled - resize_bilinear(small_images, 7)).mean() < 0.05
    image, _ = next(iter(reset(Digits('train', image_size=(16, 12)))))
    assert image.shape == (16, 12)


def test_resize_bilinear_values():
    img = np.array([[[0., 1.], [2., 3.]]], dtype=np.float32)
    out = resize_bilinear(img, 4)[0]
    # half-pixel centers: output pixel 1 samples the input at 0.25, pixel 2 at 0.75
    np.testing.assert_allclose(out[0], [0, 0.25, 0.75, 1])
    np.testing.assert_allclose(out[:, 0], [0, 0.5, 1.5, 2])
    np.testing.assert_allclose(resize_bilinear(img, 2)[0], img[0])
    with pytest.raises(ValueError, match='(N, H, W)'):
        resize_bilinear(img[0], 4)


def test_digits_shuffle_is_a_permutation_and_reproducible(fixed_seed):
    df = Digits('train')
    fixed_seed(123)
    df.reset_state()
    first_images, first_labels = _epoch(df)
    second_images, second_labels = _epoch(df)
    assert not np.array_equal(first_labels, second_labels)     # a new order every epoch
    assert sorted(first_labels.tolist()) == sorted(second_labels.tolist())
    plain_images, plain_labels = _epoch(reset(Digits('train', shuffle=False)))
    assert not np.array_equal(first_labels, plain_labels)

    def sorted_rows(images):   # the same images, in a canonical order
        flat = images.reshape(len(images), -1)
        return flat[np.lexsort(flat.T)]
    np.testing.assert_array_equal(sorted_rows(first_images), sorted_rows(plain_images))

    again = Digits('train')
    fixed_seed(123)
    again.reset_state()
    np.testing.assert_array_equal(_epoch(again)[1], first_labels)


def test_digits_batches_and_bad_split():
    df = BatchData(reset(Digits('train', image_size=28)), 100)
    images, labels = next(iter(df))
    assert images.shape == (100, 28, 28) and images.dtype == np.float32
    assert labels.shape == (100,) and labels.dtype == np.int32
    with pytest.raises(ValueError, match="'train' or 'test'"):
        Digits('val')


def test_digits_without_scikit_learn(monkeypatch):
    monkeypatch.setitem(sys.modules, 'sklearn.datasets', None)    # makes the import fail
    with pytest.raises(ImportError, match='pip install scikit-learn'):
        Digits('train')


def test_dataflow_needs_reset_state():
    with pytest.raises(RuntimeError, match='reset_state'):
        next(iter(Digits('test')))


# ----- MNIST / Fashion-MNIST -------------------------------------------------------------------

def _idx_bytes(array, magic):
    header = int(magic).to_bytes(4, 'big') + b''.join(int(d).to_bytes(4, 'big') for d in array.shape)
    return header + array.astype(np.uint8).tobytes()


def _write(path, content, gz):
    if gz:
        with gzip.open(path + '.gz', 'wb') as f:
            f.write(content)
    else:
        with open(path, 'wb') as f:
            f.write(content)


def write_mnist(directory, n_train=50, n_test=20, gz=True, seed=0):
    """Write the four MNIST files with random content; return {split: (images, labels)}."""
    os.makedirs(directory, exist_ok=True)
    rng = np.random.RandomState(seed)
    data = {}
    for split, n in (('train', n_train), ('test', n_test)):
        images = rng.randint(0, 256, size=(n, 28, 28)).astype(np.uint8)
        labels = rng.randint(0, 10, size=n).astype(np.uint8)
        image_file, label_file = MNIST_FILES[split]
        _write(os.path.join(directory, image_file), _idx_bytes(images, 2051), gz)
        _write(os.path.join(directory, label_file), _idx_bytes(labels, 2049), gz)
        data[split] = images, labels
    return data


@pytest.mark.parametrize('gz', [True, False])
def test_mnist_reads_idx_files(tmp_path, gz):
    expected = write_mnist(str(tmp_path), gz=gz)
    for split in ('train', 'test'):
        df = reset(Mnist(split, shuffle=False, dir=str(tmp_path)))
        images, labels = _epoch(df)
        assert len(df) == len(expected[split][1])
        assert images.shape == (len(df), 28, 28) and images.dtype == np.float32
        np.testing.assert_array_equal(images, expected[split][0].astype(np.float32) / 255)
        assert labels.dtype == np.int32
        np.testing.assert_array_equal(labels, expected[split][1])
        assert 0 <= images.min() and images.max() <= 1


def test_mnist_shuffle_pairs_stay_together(tmp_path):
    expected_images, expected_labels = write_mnist(str(tmp_path))['train']
    df = reset(Mnist('train', dir=str(tmp_path)))
    images, labels = _epoch(df)
    assert not np.array_equal(labels, expected_labels) or not np.array_equal(images, expected_images)
    # every produced image is found at some index k in the file, with label[k]
    flat = expected_images.reshape(len(expected_images), -1)
    for image, label in zip(images, labels):
        k = np.flatnonzero((flat == np.rint(image.reshape(-1) * 255)).all(axis=1))
        assert len(k) == 1 and expected_labels[k[0]] == label


def test_fashion_mnist_default_dir_from_env(tmp_path):
    expected = write_mnist(str(tmp_path / 'fashion_mnist_data'), gz=False, seed=3)
    with change_env(DATASET_ENV_VAR, str(tmp_path)):
        df = reset(FashionMnist('test', shuffle=False))
        assert df.dir == str(tmp_path / 'fashion_mnist_data')
        with pytest.raises(FileNotFoundError, match='mnist_data'):
            Mnist('test')    # Mnist's own directory, mnist_data, is not there
    np.testing.assert_array_equal(_epoch(df)[1], expected['test'][1])


def test_mnist_missing_files_name_the_path(tmp_path):
    with pytest.raises(FileNotFoundError) as info:
        Mnist('train', dir=str(tmp_path / 'nowhere'))
    message = str(info.value)
    assert os.path.join(str(tmp_path / 'nowhere'), 'train-images-idx3-ubyte.gz') in message
    assert 'does not exist' in message and 'yann.lecun.com' in message

    write_mnist(str(tmp_path))
    os.remove(str(tmp_path / 't10k-labels-idx1-ubyte.gz'))
    with pytest.raises(FileNotFoundError, match='t10k-labels-idx1-ubyte'):
        Mnist('test', dir=str(tmp_path))
    with pytest.raises(FileNotFoundError, match='zalandoresearch'):
        FashionMnist('test', dir=str(tmp_path))


def test_mnist_corrupt_files_name_the_file(tmp_path):
    write_mnist(str(tmp_path), gz=False)
    labels_path = str(tmp_path / 'train-labels-idx1-ubyte')
    images_path = str(tmp_path / 'train-images-idx3-ubyte')

    good_labels = open(labels_path, 'rb').read()
    with open(labels_path, 'wb') as f:       # an images file where labels are expected
        f.write(open(images_path, 'rb').read())
    with pytest.raises(ValueError, match="{}.*magic number is 2051, expected 2049".format(labels_path)):
        Mnist('train', dir=str(tmp_path))

    with open(labels_path, 'wb') as f:
        f.write(good_labels)
    with open(images_path, 'wb') as f:
        f.write(b'<html>not found</html>')
    with pytest.raises(ValueError, match=images_path):
        Mnist('train', dir=str(tmp_path))

    with open(images_path, 'wb') as f:       # right magic, truncated data
        f.write(_idx_bytes(np.zeros((50, 28, 28)), 2051)[:-10])
    with pytest.raises(ValueError, match='{}.*truncated'.format(images_path)):
        Mnist('train', dir=str(tmp_path))

    with open(images_path, 'wb') as f:       # fewer images than labels
        f.write(_idx_bytes(np.zeros((49, 28, 28)), 2051))
    with pytest.raises(ValueError, match='49 images'):
        Mnist('train', dir=str(tmp_path))


def test_mnist_bad_gzip_names_the_file(tmp_path):
    write_mnist(str(tmp_path))
    path = str(tmp_path / 't10k-images-idx3-ubyte.gz')
    with open(path, 'wb') as f:
        f.write(b'not gzip at all')
    with pytest.raises(ValueError, match='{}.*gzip'.format(path)):
        Mnist('test', dir=str(tmp_path))


# ----- CIFAR -----------------------------------------------------------------------------------

def write_cifar(directory, folder, files, label_key, n=30, seed=0, meta=None):
    """Pickle batches as the "python version" does (bytes keys, N x 3072 uint8 rows, CHW order);
    return {file: (images HWC, labels)}."""
    path = os.path.join(directory, folder)
    os.makedirs(path, exist_ok=True)
    rng = np.random.RandomState(seed)
    data = {}
    for name in files:
        images = rng.randint(0, 256, size=(n, 32, 32, 3)).astype(np.uint8)
        labels = rng.randint(0, 10, size=n).tolist()
        rows = images.transpose(0, 3, 1, 2).reshape(n, 3072)
        with open(os.path.join(path, name), 'wb') as f:
            pickle.dump({b'batch_label': name.encode(), b'data': rows, label_key: labels}, f, protocol=2)
        data[name] = images, np.array(labels)
    if meta is not None:
        with open(os.path.join(path, meta[0]), 'wb') as f:
            pickle.dump(meta[1], f, protocol=2)
    return data


CIFAR10_TRAIN = ['data_batch_{}'.format(k) for k in range(1, 6)]
CIFAR10_META = ('batches.meta', {b'label_names': [b'airplane', b'automobile', b'bird', b'cat', b'deer',
                                                  b'dog', b'frog', b'horse', b'ship', b'truck']})


@pytest.fixture
def cifar10_dir(tmp_path):
    data = write_cifar(str(tmp_path), 'cifar-10-batches-py', CIFAR10_TRAIN + ['test_batch'], b'labels',
                       meta=CIFAR10_META)
    return str(tmp_path), data


def test_cifar10_reads_batches(cifar10_dir):
    directory, data = cifar10_dir
    train = reset(Cifar10('train', dir=directory, shuffle=False))
    images, labels = _epoch(train)
    assert len(train) == 150 and images.shape == (150, 32, 32, 3) and images.dtype == np.float32
    np.testing.assert_array_equal(images, np.concatenate([data[f][0] for f in CIFAR10_TRAIN]))
    np.testing.assert_array_equal(labels, np.concatenate([data[f][1] for f in CIFAR10_TRAIN]))
    assert labels.dtype == np.int32 and images.max() > 1    # values stay in [0, 255]

    test = reset(Cifar10('test', dir=os.path.join(directory, 'cifar-10-batches-py')))  # the folder itself
    assert test.shuffle is False and train.shuffle is False and Cifar10('train', dir=directory).shuffle
    test_images, test_labels = _epoch(test)
    np.testing.assert_array_equal(test_images, data['test_batch'][0])
    assert train.get_label_names()[0] == 'airplane' and len(train.get_label_names()) == 10


def test_cifar10_means(cifar10_dir):
    directory, data = cifar10_dir
    df = Cifar10('test', dir=directory)
    every = np.concatenate([d[0] for d in data.values()]).astype(np.float64)
    pixel = df.get_per_pixel_mean()
    assert pixel.shape == (32, 32, 3) and pixel.dtype == np.float32
    np.testing.assert_allclose(pixel, every.mean(axis=0), rtol=1e-6)
    np.testing.assert_allclose(df.get_per_channel_mean(), every.mean(axis=(0, 1, 2)), rtol=1e-6)
    np.testing.assert_allclose(df.get_per_pixel_mean(('test',)), data['test_batch'][0].mean(axis=0),
                               rtol=1e-6)
    with pytest.raises(ValueError, match="'val'"):
        df.get_per_pixel_mean(('val',))


def test_cifar_missing_and_bad_files(cifar10_dir, tmp_path):
    directory, _ = cifar10_dir
    batch = os.path.join(directory, 'cifar-10-batches-py', 'data_batch_3')
    os.remove(batch)
    with pytest.raises(FileNotFoundError) as info:
        Cifar10('train', dir=directory)
    assert batch in str(info.value) and 'cifar-10-python.tar.gz' in str(info.value)
    Cifar10('test', dir=directory)      # the test split does not need it

    with open(batch, 'wb') as f:
        f.write(b'garbage')
    with pytest.raises(ValueError, match=batch):
        Cifar10('train', dir=directory)

    with open(batch, 'wb') as f:
        pickle.dump({b'data': np.zeros((4, 100), np.uint8), b'labels': [0] * 4}, f)
    with pytest.raises(ValueError, match='{}.*3072'.format(batch)):
        Cifar10('train', dir=directory)

    with open(batch, 'wb') as f:
        pickle.dump({b'data': np.zeros((4, 3072), np.uint8)}, f)
    with pytest.raises(ValueError, match="{}.*'labels'".format(batch)):
        Cifar10('train', dir=directory)


def test_cifar100_fine_labels(tmp_path):
    data = write_cifar(str(tmp_path), 'cifar-100-python', ['train', 'test'], b'fine_labels', n=12,
                       meta=('meta', {b'fine_label_names': [str(k).encode() for k in range(100)]}))
    df = reset(Cifar100('train', dir=str(tmp_path), shuffle=False))
    images, labels = _epoch(df)
    np.testing.assert_array_equal(images, data['train'][0])
    np.testing.assert_array_equal(labels, data['train'][1])
    assert len(df.get_label_names()) == 100
