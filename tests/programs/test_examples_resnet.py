"""The ResNet examples train for a few steps on random images, on a tiny ILSVRC12 directory and
on tiny LMDB files of JPEGs (written here); the CIFAR-10 example's data pipeline is checked
on tiny CIFAR batches; the networks have their published sizes."""

import os
import pickle
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from helpers.paths import REPO_DIR
from helpers.processes import users_env
from helpers.examples import final_number, read_stats, run_in_process

REPO = REPO_DIR

CIFAR = 'examples/ResNet/cifar10-resnet.py'
IMAGENET = 'examples/ResNet/imagenet-resnet.py'
TIMEOUT = 300     # seconds for a smoke run; alone one takes 10-30 s, four at once on 2 cores longer


class SmokeRun(object):
    """An example started now in a session of its own; :meth:`result` waits for it (at most
    TIMEOUT seconds from the start) and then kills every process left in its session (the
    data workers). The runs of this module start together, so TensorFlow's start-ups overlap."""

    def __init__(self, relpath, args, cwd):
        self.relpath, self.logdir = relpath, cwd / 'log'
        self.started = time.monotonic()
        self.proc = subprocess.Popen(
            [sys.executable, os.path.join(REPO, relpath)] + list(args) + ['--logdir', str(self.logdir)],
            cwd=str(cwd), env=users_env(), stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True, start_new_session=True)

    def kill(self):
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def result(self):
        """The example's output, after checking that it succeeded."""
        try:
            output, _ = self.proc.communicate(timeout=max(1, TIMEOUT - (time.monotonic() - self.started)))
        except subprocess.TimeoutExpired:
            self.kill()
            output, _ = self.proc.communicate()
            pytest.fail("{} did not finish in {} s (killed):\n{}".format(
                self.relpath, TIMEOUT, output[-6000:]))
        finally:
            self.kill()
        assert self.proc.returncode == 0, output[-6000:]
        return output


def assert_multiple_of(value, fraction_of):
    """``value`` is k / fraction_of for an integer k: a mean over exactly that many images."""
    assert 0 <= value <= 1
    assert abs(value * fraction_of - round(value * fraction_of)) < 1e-5, (value, fraction_of)


# ----- the smoke runs: tiny data sets, every run started at once -------------------------------

SYNSETS = ['n01440764', 'n01443537', 'n01484850']
IMAGENET_ARGS = ['--depth', '10', '--image-size', '32', '--batch', '4', '--parallel', '1', '--max-epoch', '1']


def jpeg_bytes(rng):
    """A small JPEG (40-60 pixels a side, so that crops and resizes do real work)."""
    import cv2
    height, width = rng.randint(40, 61, size=2)
    ok, encoded = cv2.imencode('.jpg', rng.randint(0, 256, (height, width, 3)).astype(np.uint8))
    assert ok
    return encoded.tobytes()


def tiny_ilsvrc12(root, rng, per_class=4, num_val=6):
    """An ILSVRC12 directory (train/<synset>/*.JPEG, val/ flat) and the caffe meta files
    (synsets.txt, synset_words.txt, train.txt, val.txt) in root/meta: (data dir, meta dir)."""
    data, meta = root / 'ilsvrc', root / 'meta'
    meta.mkdir(parents=True)
    train_lines, val_lines = [], []
    for label, synset in enumerate(SYNSETS):
        (data / 'train' / synset).mkdir(parents=True)
        for k in range(per_class):
            name = '{}/{}_{}.JPEG'.format(synset, synset, k)
            (data / 'train' / name).write_bytes(jpeg_bytes(rng))
            train_lines.append('{} {}'.format(name, label))
    (data / 'val').mkdir()
    for k in range(num_val):
        name = 'ILSVRC2012_val_{:08d}.JPEG'.format(k + 1)
        (data / 'val' / name).write_bytes(jpeg_bytes(rng))
        val_lines.append('{} {}'.format(name, k % len(SYNSETS)))
    (meta / 'synsets.txt').write_text('\n'.join(SYNSETS) + '\n')
    (meta / 'synset_words.txt').write_text('\n'.join(s + ' a fish' for s in SYNSETS) + '\n')
    (meta / 'train.txt').write_text('\n'.join(train_lines) + '\n')
    (meta / 'val.txt').write_text('\n'.join(val_lines) + '\n')
    return data, meta


def tiny_lmdb(path, count, rng):
    """An LMDB of ``count`` [JPEG bytes as uint8, label] datapoints, written by LMDBSerializer."""
    from tensorpack_lite.dataflow.raw import DataFromList
    from tensorpack_lite.dataflow.serialize import LMDBSerializer
    points = [[np.frombuffer(jpeg_bytes(rng), np.uint8), k % len(SYNSETS)] for k in range(count)]
    LMDBSerializer.save(DataFromList(points, shuffle=False), str(path))
    return str(path)


@pytest.fixture(scope='module')
def smoke_runs(tmp_path_factory):
    """Writes the tiny data sets and starts every smoke run at once: {name: SmokeRun}."""
    rng = np.random.RandomState(0)
    folder = {name: tmp_path_factory.mktemp(name.replace(' ', '-'))
              for name in ('cifar10 fake', 'imagenet fake', 'imagenet dir', 'imagenet lmdb')}
    data, meta = tiny_ilsvrc12(folder['imagenet dir'], rng)       # 12 training images, 6 val
    train_lmdb = tiny_lmdb(folder['imagenet lmdb'] / 'ILSVRC-train.lmdb', 10, rng)
    val_lmdb = tiny_lmdb(folder['imagenet lmdb'] / 'ILSVRC-val.lmdb', 5, rng)
    arguments = {
        'cifar10 fake': (CIFAR, ['--fake', '-n', '1', '--batch', '16', '--max-epoch', '2',
                                 '--steps-per-epoch', '3', '--mixed-precision', 'fp16']),
        'imagenet fake': (IMAGENET, ['--fake', '--steps-per-epoch', '3'] + IMAGENET_ARGS),
        'imagenet dir': (IMAGENET, ['--data', str(data), '--meta-dir', str(meta)] + IMAGENET_ARGS),
        'imagenet lmdb': (IMAGENET, ['--lmdb', train_lmdb, '--val-lmdb', val_lmdb] + IMAGENET_ARGS),
    }
    runs = {name: SmokeRun(path, args, folder[name]) for name, (path, args) in arguments.items()}
    yield runs
    for run in runs.values():
        run.kill()


def test_help(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    for path, flags in ((CIFAR, ['--num-units', '--fake', '--data']),
                        (IMAGENET, ['--depth', '--lmdb', '--val-lmdb', '--meta-dir', '--image-size'])):
        with pytest.raises(SystemExit) as info:
            run_in_process(path, ['--help'], monkeypatch)
        assert info.value.code == 0
        out = capsys.readouterr().out
        for flag in flags + ['--max-epoch', '--steps-per-epoch', '--logdir', '--batch']:
            assert flag in out, (path, flag)
    assert not os.listdir(tmp_path)     # nothing written


# ----- CIFAR-10 ------------------------------------------------------------------------------

def test_cifar10_resnet_fake_smoke(smoke_runs):
    run = smoke_runs['cifar10 fake']
    output = run.result()
    logdir = run.logdir
    stats = read_stats(logdir)
    assert [s['epoch_num'] for s in stats] == [1, 2] and stats[-1]['global_step'] == 6
    # the schedule's first point, (1, 0.1), replaces the initial 0.01 after the first epoch
    assert [s['learning_rate'] for s in stats] == pytest.approx([0.01, 0.1])
    for s in stats:
        assert_multiple_of(s['validation_error'], 128)     # every one of the 128 fake test images
        assert np.isfinite(s['validation_cost'])
    assert {'checkpoint', 'model-6.index'} <= set(os.listdir(logdir))
    assert 'Mixed precision: MixedPrecision(\'fp16\'' in output     # trained with --mixed-precision fp16
    assert stats[-1]['loss_scale/skipped_steps'] == 0
    printed = final_number(output, 'Final validation error')
    assert printed == pytest.approx(stats[-1]['validation_error'], abs=1e-4)


def write_cifar10(directory, per_batch, rng):
    """The five training batches and the test batch of cifar-10-batches-py, ``per_batch``
    images each (labels as the originals: a list under b'labels'): {name: (N, 32, 32, 3)
    uint8 images, labels}."""
    folder = directory / 'cifar-10-batches-py'
    folder.mkdir(parents=True)
    written = {}
    for name in ['data_batch_{}'.format(k) for k in range(1, 6)] + ['test_batch']:
        data = rng.randint(0, 256, (per_batch, 3072)).astype(np.uint8)
        labels = [int(x) for x in rng.randint(0, 10, per_batch)]
        with open(folder / name, 'wb') as f:
            pickle.dump({b'data': data, b'labels': labels}, f)
        written[name] = (data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1), labels)   # CHW rows -> HWC
    return written


def is_padded_crop(image, originals):
    """Whether ``image`` is a 32x32 window of one of ``originals`` (or of its mirror image)
    centred on a 40x40 black canvas."""
    for original in originals:
        for candidate in (original, original[:, ::-1]):
            canvas = np.zeros((40, 40, 3), np.float32)
            canvas[4:36, 4:36] = candidate
            windows = np.lib.stride_tricks.sliding_window_view(canvas, (32, 32, 3))   # 9 x 9 x 1 windows
            if (np.abs(windows - image).max(axis=(3, 4, 5)) < 1e-3).any():
                return True
    return False


def test_cifar10_resnet_data_subtracts_the_training_mean_and_crops(tmp_path):
    import argparse
    import runpy
    written = write_cifar10(tmp_path, per_batch=8, rng=np.random.RandomState(0))
    train_images = np.concatenate([written['data_batch_{}'.format(k)][0] for k in range(1, 6)])
    train_mean = train_images.astype(np.float64).mean(axis=0)
    args = argparse.Namespace(fake=False, data=str(tmp_path), batch=3)
    get_data = runpy.run_path(os.path.join(REPO, CIFAR), run_name='cifar10_resnet')['get_data']

    test = get_data('test', args)               # 8 images in batches of 3, 3, 2, in file order
    test.reset_state()
    batches = list(test)
    assert [len(b[1]) for b in batches] == [3, 3, 2]
    images = np.concatenate([b[0] for b in batches])
    assert images.dtype == np.float32
    np.testing.assert_allclose(images, written['test_batch'][0] - train_mean, atol=1e-3)
    assert np.concatenate([b[1] for b in batches]).tolist() == written['test_batch'][1]

    train = get_data('train', args)             # augmented in 2 worker processes
    train.reset_state()
    try:
        images, labels = next(iter(train))
        assert images.shape == (3, 32, 32, 3) and images.dtype == np.float32 and len(labels) == 3
        for image in images:
            assert is_padded_crop(image + train_mean, train_images)
    finally:
        train.close()


def test_cifar10_resnet_without_data_says_where_to_get_it(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as info:
        run_in_process(CIFAR, [], monkeypatch)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert '--data DIR' in err and '--fake' in err and 'cs.toronto.edu' in err
    with pytest.raises(SystemExit) as info:
        run_in_process(CIFAR, ['--data', str(tmp_path / 'nowhere')], monkeypatch)
    assert 'data_batch_1' in str(info.value.code) and 'nowhere' in str(info.value.code)
    assert not os.path.exists(tmp_path / 'train_log')


# ----- ImageNet ------------------------------------------------------------------------------

def check_imagenet_run(logdir, output, steps, num_val):
    stats = read_stats(logdir)
    assert [s['epoch_num'] for s in stats] == [1] and stats[-1]['global_step'] == steps
    assert stats[-1]['learning_rate'] == pytest.approx(0.1 * 4 / 256)    # 0.1 x batch / 256
    top1, top5 = stats[-1]['val-error-top1'], stats[-1]['val-error-top5']
    assert_multiple_of(top1, num_val)
    assert_multiple_of(top5, num_val)
    assert top5 <= top1
    assert final_number(output, 'Final val-error-top1') == pytest.approx(top1, abs=1e-4)
    assert 'model-{}.index'.format(steps) in os.listdir(logdir)


def test_imagenet_resnet_fake_smoke(smoke_runs):
    run = smoke_runs['imagenet fake']
    run.result()
    stats = read_stats(run.logdir)
    assert stats[-1]['global_step'] == 3
    assert stats[-1]['learning_rate'] == pytest.approx(0.1 * 4 / 256)
    assert 'val-error-top1' not in stats[-1]      # nothing to validate on
    assert np.isfinite(stats[-1]['xentropy-loss'])
    assert 'model-3.index' in os.listdir(run.logdir)


def test_imagenet_resnet_reads_an_ilsvrc12_directory(smoke_runs):
    run = smoke_runs['imagenet dir']
    check_imagenet_run(run.logdir, run.result(), steps=12 // 4, num_val=6)


def test_imagenet_resnet_reads_lmdb_files_of_jpegs(smoke_runs):
    run = smoke_runs['imagenet lmdb']
    check_imagenet_run(run.logdir, run.result(), steps=10 // 4, num_val=5)


def test_imagenet_resnet_needs_a_data_source(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    for args in ([], ['--fake', '--data', str(tmp_path)]):
        with pytest.raises(SystemExit) as info:
            run_in_process(IMAGENET, args, monkeypatch)
        assert info.value.code == 2
        err = capsys.readouterr().err
        assert '--data DIR' in err and '--lmdb FILE' in err and '--fake' in err
    for args, named in ((['--data', str(tmp_path / 'nowhere')], os.path.join('nowhere', 'train')),
                        (['--lmdb', str(tmp_path / 'missing.lmdb')], 'missing.lmdb')):
        with pytest.raises(SystemExit) as info:
            run_in_process(IMAGENET, args, monkeypatch)
        assert str(info.value.code).startswith('imagenet-resnet: ') and named in str(info.value.code)
    assert not os.path.exists(tmp_path / 'train_log')


# ----- the networks --------------------------------------------------------------------------

def trainable_parameters(path, make_model):
    """The number of trainable parameters of the example's training graph."""
    import runpy
    from tensorpack_lite.compat import tfv1
    from tensorpack_lite.tfutils.tower import TowerContext
    model = make_model(runpy.run_path(os.path.join(REPO, path), run_name='resnet_example')['Model'])
    inputs = [tfv1.placeholder(spec.dtype, spec.shape, spec.name) for spec in model.inputs()]
    with TowerContext('', is_training=True):
        model.build_graph(*inputs)
    return sum(int(np.prod(v.shape.as_list())) for v in tfv1.trainable_variables())


def preact_cifar_resnet_parameters(n):
    """Counted by hand: 3x3 kernels without bias, BatchNorm gamma + beta, a 64 -> 10 layer."""
    total = 3 * 9 * 16 + 2 * 16                          # conv0 and its BatchNorm
    channels_in = 16
    for channels in (16, 32, 64):
        for k in range(n):
            c_in = channels_in if k == 0 else channels
            preact = 0 if (channels == 16 and k == 0) else 2 * c_in
            total += preact + c_in * 9 * channels + 2 * channels + channels * 9 * channels
        channels_in = channels
    return total + 2 * 64 + 64 * 10 + 10                 # last BatchNorm, linear


@pytest.mark.parametrize('n', [1, 3])
def test_cifar10_resnet_has_the_size_of_the_paper(n):
    assert trainable_parameters(CIFAR, lambda Model: Model(n)) == preact_cifar_resnet_parameters(n)
    if n == 3:
        assert preact_cifar_resnet_parameters(3) == 269722     # "0.27M" for ResNet-20 in He et al.


@pytest.mark.parametrize('depth,count', [(18, 11689512), (50, 25557032)])
def test_imagenet_resnet_has_the_standard_size(depth, count):
    # the trainable parameters of torchvision's resnet18 / resnet50 (same architecture)
    assert trainable_parameters(IMAGENET, lambda Model: Model(depth, 224)) == count
