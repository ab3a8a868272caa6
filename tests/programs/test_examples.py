"""The bundled examples run as scripts (short smoke runs) and write what they promise."""

import gzip
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from helpers.paths import REPO_DIR
from helpers.processes import run_bounded, users_env
from helpers.examples import final_number, read_stats, run_in_process

REPO = REPO_DIR


def run_example(relpath, args, cwd):
    """The example run as a user runs it: in the default environment (TensorFlow loads Keras 3)."""
    return subprocess.run([sys.executable, os.path.join(REPO, relpath)] + args, cwd=cwd,
                          env=users_env(), capture_output=True, text=True,
                          timeout=300)


def test_digits_custom_trainer(tmp_path):
    logdir = tmp_path / 'log'
    out = run_example('examples/basics/digits-custom-trainer.py',
                      ['--max-epoch', '3', '--logdir', str(logdir)], cwd=tmp_path)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    stats = json.loads((logdir / 'stats.json').read_text())
    assert [s['epoch_num'] for s in stats] == [1, 2, 3]
    assert stats[-1]['global_step'] == 3 * 23  # 1500 training digits in batches of 64
    assert stats[-1]['val_loss'] < stats[0]['val_loss']
    assert stats[-1]['val_accuracy'] > 0.7
    assert any(name.startswith('events.out.tfevents') for name in os.listdir(logdir))
    assert 'Final test accuracy' in out.stdout


def test_digits_custom_trainer_help(tmp_path):
    out = run_example('examples/basics/digits-custom-trainer.py', ['--help'], cwd=tmp_path)
    assert out.returncode == 0 and '--max-epoch' in out.stdout


# ----- the examples of models, GANs and data-parallel training -------------------------------

EXAMPLES = ['examples/basics/mnist-convnet.py', 'examples/basics/cifar-convnet.py',
            'examples/GAN/DCGAN.py', 'examples/GAN/WGAN.py',
            'examples/multigpu/multigpu-digits.py', 'examples/horovod/horovod-digits.py']


@pytest.mark.quick
@pytest.mark.parametrize('path', EXAMPLES)
def test_example_help(path, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as info:
        run_in_process(path, ['--help'], monkeypatch)
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert '--max-epoch' in out and '--logdir' in out and '--steps-per-epoch' in out
    assert 'default train_log/' in out.replace('\n', ' ').replace('  ', '')
    assert not os.listdir(tmp_path)     # nothing written


def test_mnist_convnet_smoke(tmp_path):
    # The default log directory, relative to the working directory, as a user runs it.
    logdir = tmp_path / 'train_log' / 'mnist-convnet'
    out = run_example('examples/basics/mnist-convnet.py', ['--max-epoch', '4', '--steps-per-epoch', '8'],
                      cwd=tmp_path)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    stats = read_stats(logdir)
    assert [s['epoch_num'] for s in stats] == [1, 2, 3, 4]
    assert stats[-1]['global_step'] == 32
    assert stats[-1]['validation_cross_entropy_loss'] < stats[0]['validation_cross_entropy_loss']
    assert stats[-1]['validation_accuracy'] > 0.7    # 10 classes; 32 steps of 64 digits (about 0.9)
    assert abs(stats[-1]['validation_accuracy'] - (1 - stats[-1]['validation_error'])) < 1e-6
    assert [s['learning_rate'] for s in stats] == pytest.approx([1e-3, 1e-3, 3e-4, 3e-5])
    files = os.listdir(logdir)
    assert {'checkpoint', 'model-32.index', 'max-validation_accuracy.index'} <= set(files)
    printed = final_number(out.stdout + out.stderr, 'Final validation accuracy')
    assert printed == pytest.approx(stats[-1]['validation_accuracy'], abs=1e-4)


def write_idx(path, array):
    """An IDX file: magic (2051 for images, 2049 for labels), the sizes, the uint8 data."""
    magic = 2051 if array.ndim == 3 else 2049
    header = magic.to_bytes(4, 'big') + b''.join(n.to_bytes(4, 'big') for n in array.shape)
    with gzip.open(str(path), 'wb') as f:
        f.write(header + array.astype(np.uint8).tobytes())


def test_mnist_convnet_reads_idx_files_and_names_a_missing_one(tmp_path, monkeypatch):
    data = tmp_path / 'mnist'
    data.mkdir()
    rng = np.random.RandomState(0)
    for prefix, num in (('train', 128), ('t10k', 40)):
        write_idx(data / '{}-images-idx3-ubyte.gz'.format(prefix), rng.randint(0, 256, (num, 28, 28)))
        write_idx(data / '{}-labels-idx1-ubyte.gz'.format(prefix), rng.randint(0, 10, num))
    logdir = tmp_path / 'log'
    out = run_example('examples/basics/mnist-convnet.py',
                      ['--data', str(data), '--max-epoch', '1', '--logdir', str(logdir)], cwd=tmp_path)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    stats = read_stats(logdir)
    assert stats[-1]['global_step'] == 2     # 128 images in batches of 64
    assert 'validation_accuracy' in stats[-1]

    (data / 't10k-labels-idx1-ubyte.gz').unlink()
    with pytest.raises(FileNotFoundError, match='t10k-labels-idx1-ubyte'):
        run_in_process('examples/basics/mnist-convnet.py', ['--data', str(data), '--logdir', str(logdir)],
                       monkeypatch)


def test_cifar_convnet_without_data_says_where_to_get_it(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as info:
        run_in_process('examples/basics/cifar-convnet.py', [], monkeypatch)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert '--data DIR' in err and '--fake' in err and 'cs.toronto.edu' in err
    with pytest.raises(SystemExit) as info:
        run_in_process('examples/basics/cifar-convnet.py', ['--data', str(tmp_path / 'nowhere')], monkeypatch)
    assert 'data_batch_1' in str(info.value.code) and 'nowhere' in str(info.value.code)
    assert not os.path.exists(tmp_path / 'train_log')


def test_cifar_convnet_fake_smoke(tmp_path):
    logdir = tmp_path / 'log'
    out = run_example('examples/basics/cifar-convnet.py',
                      ['--fake', '--max-epoch', '2', '--steps-per-epoch', '2', '--batch', '32',
                       '--logdir', str(logdir), '--mixed-precision', 'fp16'], cwd=tmp_path)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "Mixed precision: MixedPrecision('fp16'" in out.stdout + out.stderr
    stats = read_stats(logdir)
    assert [s['epoch_num'] for s in stats] == [1, 2] and stats[-1]['global_step'] == 4
    assert 0 <= stats[-1]['validation_accuracy'] <= 1
    assert 'model-4.index' in os.listdir(logdir)


def read_png(path):
    import matplotlib.image
    return matplotlib.image.imread(str(path))


def gan_smoke(tmp_path, script, extra=()):
    logdir = tmp_path / 'log'
    out = run_example(script, ['--max-epoch', '2', '--steps-per-epoch', '6', '--logdir', str(logdir)]
                      + list(extra), cwd=tmp_path)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    stats = read_stats(logdir)
    assert [s['epoch_num'] for s in stats] == [1, 2] and stats[-1]['global_step'] == 12
    assert 'model-12.index' in os.listdir(logdir)
    sheet = read_png(logdir / 'samples.png')
    # 10 x 10 samples of 16x16 pixels, each pixel shown twice as large, 4 pixels apart
    assert sheet.shape[:2] == (10 * 32 + 9 * 4, 10 * 32 + 9 * 4)
    return stats, sheet, out.stdout + out.stderr


def test_dcgan_smoke(tmp_path):
    stats, sheet, output = gan_smoke(tmp_path, 'examples/GAN/DCGAN.py')
    accuracies = [s['GAN_loss/discrim/accuracy'] for s in stats]
    assert all(0 < acc < 1.0 for acc in accuracies), accuracies
    assert final_number(output, 'Final GAN_loss/discrim/accuracy') == pytest.approx(accuracies[-1], abs=1e-4)
    assert np.ptp(sheet[4:36, 4:36, 0]) > 0.1      # not a blank first sample


def test_wgan_smoke_clips_the_critic(tmp_path):
    stats, _, _ = gan_smoke(tmp_path, 'examples/GAN/WGAN.py')
    assert 'GAN_loss/d_loss' in stats[-1] and 'GAN_loss/g_loss' in stats[-1]
    from tensorpack_lite.compat import tfv1
    reader = tfv1.train.load_checkpoint(str(tmp_path / 'log' / 'model-12'))
    critic = [name for name in reader.get_variable_to_shape_map()
              if name.startswith('discrim/') and '/RMSProp' not in name]
    assert critic
    for name in critic:
        assert np.abs(reader.get_tensor(name)).max() <= 0.01 + 1e-7, name
    generator = reader.get_tensor('gen/fc0/W')
    assert np.abs(generator).max() > 0.01     # only the critic is clipped


def test_multigpu_example_on_two_virtual_cpus(tmp_path):
    logdir = tmp_path / 'log'
    out = run_example('examples/multigpu/multigpu-digits.py',
                      ['--max-epoch', '3', '--steps-per-epoch', '8', '--logdir', str(logdir)], cwd=tmp_path)
    output = out.stdout + out.stderr
    assert out.returncode == 0, output[-6000:]
    assert 'training tower 1 on device /cpu:1' in output
    stats = read_stats(logdir)
    assert [s['epoch_num'] for s in stats] == [1, 2, 3] and stats[-1]['global_step'] == 24
    assert stats[-1]['validation_cross_entropy_loss'] < stats[0]['validation_cross_entropy_loss']
    assert stats[-1]['validation_accuracy'] > 0.7    # about 0.86 after 24 steps
    assert 'model-24.index' in os.listdir(logdir)
    assert 'Trained 2 towers on /cpu:0, /cpu:1' in output


def test_horovod_example_with_two_ranks(horovod_python, tmp_path):
    horovodrun = os.path.join(os.path.dirname(horovod_python), 'horovodrun')
    logdir = tmp_path / 'log'
    command = [horovodrun, '-np', '2', '-H', 'localhost:2', '--gloo', horovod_python,
               os.path.join(REPO, 'examples/horovod/horovod-digits.py'),
               '--max-epoch', '2', '--steps-per-epoch', '5', '--logdir', str(logdir)]
    code, output = run_bounded(command, 150, env=users_env(), cwd=tmp_path)
    assert code == 0, output[-6000:]
    stats = read_stats(logdir)
    assert [s['epoch_num'] for s in stats] == [1, 2] and stats[-1]['global_step'] == 10
    assert 'validation_accuracy' in stats[-1]
    assert '2 ranks; final validation accuracy' in output
    assert 'model-10.index' in os.listdir(logdir)


def test_horovod_example_under_mpiexec_with_two_ranks(tmp_path):
    """The same example on the MPI engine (mpi4py, the wheel's mpiexec), on this TensorFlow, in
    fp16 (every rank's session rewritten, one loss scale decided on the all-reduced gradients)."""
    pytest.importorskip('mpi4py', reason='the MPI engine needs mpi4py: pip install "tensorpack_lite[mpi]"')
    mpiexec = os.path.join(os.path.dirname(sys.executable), 'mpiexec')
    if not os.path.exists(mpiexec):
        pytest.skip('no mpiexec next to {}'.format(sys.executable))
    logdir = tmp_path / 'log'
    command = [mpiexec, '-launcher', 'fork', '-n', '2', sys.executable,
               os.path.join(REPO, 'examples/horovod/horovod-digits.py'),
               '--max-epoch', '2', '--steps-per-epoch', '5', '--logdir', str(logdir),
               '--mixed-precision', 'fp16']
    code, output = run_bounded(command, 150, env=users_env(), cwd=tmp_path)
    assert code == 0, output[-6000:]
    assert 'using MPI (mpi4py' in output
    assert output.count("Mixed precision: MixedPrecision('fp16'") == 2    # both ranks
    stats = read_stats(logdir)
    assert [s['epoch_num'] for s in stats] == [1, 2] and stats[-1]['global_step'] == 10
    assert stats[-1]['loss_scale/skipped_steps'] == 0
    assert '2 ranks; final validation accuracy' in output
    assert 'model-10.index' in os.listdir(logdir)
