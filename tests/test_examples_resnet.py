"""The ResNet examples train on every data source they offer: random images, CIFAR-10 batches,
an ILSVRC12 directory and LMDB files of JPEGs (all tiny, written here), for a few steps each."""

import os
import pickle
import signal
import subprocess
import sys

import numpy as np
import pytest

from test_examples import REPO, example_env, final_number, read_stats, run_in_process

CIFAR = 'examples/ResNet/cifar10-resnet.py'
IMAGENET = 'examples/ResNet/imagenet-resnet.py'
TIMEOUT = 150     # seconds for one smoke run; a run takes 10-30 s


def run_example(relpath, args, cwd):
    """(exit code, stdout + stderr) of the example run in its own session, which is killed
    afterwards with every process left in it (the data workers)."""
    proc = subprocess.Popen([sys.executable, os.path.join(REPO, relpath)] + list(args), cwd=str(cwd),
                            env=example_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        output, _ = proc.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
        pytest.fail("{} did not finish in {} s (killed):\n{}".format(relpath, TIMEOUT, output[-6000:]))
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return proc.returncode, output


def assert_multiple_of(value, fraction_of):
    """``value`` is k / fraction_of for an integer k: a mean over exactly that many images."""
    assert 0 <= value <= 1
    assert abs(value * fraction_of - round(value * fraction_of)) < 1e-5, (value, fraction_of)


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

def test_cifar10_resnet_fake_smoke(tmp_path):
    logdir = tmp_path / 'log'
    code, output = run_example(CIFAR, ['--fake', '-n', '1', '--batch', '16', '--max-epoch', '2',
                                       '--steps-per-epoch', '3', '--logdir', str(logdir)], tmp_path)
    assert code == 0, output[-6000:]
    stats = read_stats(logdir)
    assert [s['epoch_num'] for s in stats] == [1, 2] and stats[-1]['global_step'] == 6
    # the schedule's first point, (1, 0.1), replaces the initial 0.01 after the first epoch
    assert [s['learning_rate'] for s in stats] == pytest.approx([0.1, 0.1])
    for s in stats:
        assert_multiple_of(s['validation_error'], 128)     # every one of the 128 fake test images
        assert np.isfinite(s['validation_cost'])
    assert {'checkpoint', 'model-6.index'} <= set(os.listdir(logdir))
    printed = final_number(output, 'Final validation error')
    assert printed == pytest.approx(stats[-1]['validation_error'], abs=1e-4)


def write_cifar10(directory, per_batch, rng):
    """The five training batches and the test batch of cifar-10-batches-py, ``per_batch``
    images each (labels as the originals: a list under b'labels')."""
    folder = directory / 'cifar-10-batches-py'
    folder.mkdir(parents=True)
    for name in ['data_batch_{}'.format(k) for k in range(1, 6)] + ['test_batch']:
        batch = {b'data': rng.randint(0, 256, (per_batch, 3072)).astype(np.uint8),
                 b'labels': [int(x) for x in rng.randint(0, 10, per_batch)]}
        with open(folder / name, 'wb') as f:
            pickle.dump(batch, f)


def test_cifar10_resnet_reads_cifar_batches(tmp_path):
    data = tmp_path / 'cifar10'
    write_cifar10(data, per_batch=8, rng=np.random.RandomState(0))
    logdir = tmp_path / 'log'
    code, output = run_example(CIFAR, ['--data', str(data), '-n', '1', '--batch', '8', '--max-epoch', '1',
                                       '--logdir', str(logdir)], tmp_path)
    assert code == 0, output[-6000:]
    stats = read_stats(logdir)
    assert stats[-1]['global_step'] == 5       # one epoch: 40 training images in batches of 8
    assert_multiple_of(stats[-1]['validation_error'], 8)
    assert 'model-5.index' in os.listdir(logdir)


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
    (synsets.txt, synset_words.txt, train.txt, val.txt) in root/meta:
    (data dir, meta dir, [(jpeg bytes, label)] of train, of val)."""
    data, meta = root / 'ilsvrc', root / 'meta'
    meta.mkdir(parents=True)
    train, val, train_lines, val_lines = [], [], [], []
    for label, synset in enumerate(SYNSETS):
        (data / 'train' / synset).mkdir(parents=True)
        for k in range(per_class):
            name = '{}/{}_{}.JPEG'.format(synset, synset, k)
            train.append((jpeg_bytes(rng), label))
            (data / 'train' / name).write_bytes(train[-1][0])
            train_lines.append('{} {}'.format(name, label))
    (data / 'val').mkdir()
    for k in range(num_val):
        name = 'ILSVRC2012_val_{:08d}.JPEG'.format(k + 1)
        val.append((jpeg_bytes(rng), k % len(SYNSETS)))
        (data / 'val' / name).write_bytes(val[-1][0])
        val_lines.append('{} {}'.format(name, val[-1][1]))
    (meta / 'synsets.txt').write_text('\n'.join(SYNSETS) + '\n')
    (meta / 'synset_words.txt').write_text('\n'.join(s + ' a fish' for s in SYNSETS) + '\n')
    (meta / 'train.txt').write_text('\n'.join(train_lines) + '\n')
    (meta / 'val.txt').write_text('\n'.join(val_lines) + '\n')
    return data, meta, train, val


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


def test_imagenet_resnet_fake_smoke(tmp_path):
    logdir = tmp_path / 'log'
    code, output = run_example(IMAGENET, ['--fake', '--steps-per-epoch', '3', '--logdir', str(logdir)]
                               + IMAGENET_ARGS, tmp_path)
    assert code == 0, output[-6000:]
    stats = read_stats(logdir)
    assert stats[-1]['global_step'] == 3
    assert stats[-1]['learning_rate'] == pytest.approx(0.1 * 4 / 256)
    assert 'val-error-top1' not in stats[-1]      # nothing to validate on
    assert np.isfinite(stats[-1]['xentropy-loss'])
    assert 'model-3.index' in os.listdir(logdir)


def test_imagenet_resnet_reads_an_ilsvrc12_directory(tmp_path):
    data, meta, train, val = tiny_ilsvrc12(tmp_path, np.random.RandomState(0))
    logdir = tmp_path / 'log'
    code, output = run_example(IMAGENET, ['--data', str(data), '--meta-dir', str(meta),
                                          '--logdir', str(logdir)] + IMAGENET_ARGS, tmp_path)
    assert code == 0, output[-6000:]
    check_imagenet_run(logdir, output, steps=len(train) // 4, num_val=len(val))


def test_imagenet_resnet_reads_lmdb_files_of_jpegs(tmp_path):
    from tensorpack_lite.dataflow.raw import DataFromList
    from tensorpack_lite.dataflow.serialize import LMDBSerializer
    rng = np.random.RandomState(1)
    paths = {}
    for split, count in (('train', 10), ('val', 5)):
        points = [[np.frombuffer(jpeg_bytes(rng), np.uint8), k % len(SYNSETS)] for k in range(count)]
        paths[split] = str(tmp_path / 'ILSVRC-{}.lmdb'.format(split))
        LMDBSerializer.save(DataFromList(points, shuffle=False), paths[split])
    logdir = tmp_path / 'log'
    code, output = run_example(IMAGENET, ['--lmdb', paths['train'], '--val-lmdb', paths['val'],
                                          '--logdir', str(logdir)] + IMAGENET_ARGS, tmp_path)
    assert code == 0, output[-6000:]
    check_imagenet_run(logdir, output, steps=10 // 4, num_val=5)


def test_imagenet_resnet_needs_a_data_source(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    for args in ([], ['--fake', '--data', str(tmp_path)]):
        with pytest.raises(SystemExit) as info:
            run_in_process(IMAGENET, args, monkeypatch)
        assert info.value.code == 2
        err = capsys.readouterr().err
        assert '--data DIR' in err and '--lmdb FILE' in err and '--fake' in err
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
