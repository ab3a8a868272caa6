"""utils: execute_only_once, the file helpers and download (file:// and a local HTTP server),
change_gpu, logger.addFilter, OnlineMoments, IterSpeedCounter, intensity_to_rgb,
dump_dataflow_images, PALETTE_RGB, enable_call_trace, NVMLContext (a missing library and a
fake one built with gcc), loadcaffe (a fake pycaffe and a fake protoc), and that no utils
module imports TensorFlow at import time."""

import ast
import http.server
import logging
import os
import shutil
import subprocess
import sys
import textwrap
import threading
import types

import numpy as np
import pytest

import tensorpack_lite.utils
from tensorpack_lite.dataflow.dataset import common as dataset_common
from tensorpack_lite.dataflow.raw import DataFromList
from tensorpack_lite.utils import fs, loadcaffe, logger, nvml
from tensorpack_lite.utils.debug import enable_call_trace
from tensorpack_lite.utils.fs import (download, get_dataset_path, mkdir_p, normpath,
                                      recursive_walk)
from tensorpack_lite.utils.gpu import change_gpu
from tensorpack_lite.utils.palette import PALETTE_RGB
from tensorpack_lite.utils.stats import OnlineMoments
from tensorpack_lite.utils.timer import IterSpeedCounter
from tensorpack_lite.utils.utils import change_env, execute_only_once
from tensorpack_lite.utils.viz import dump_dataflow_images, intensity_to_rgb

cv2 = pytest.importorskip('cv2')


# ----- execute_only_once -----------------------------------------------------------------------

def test_execute_only_once_is_per_call_site():
    def site_a():
        return execute_only_once()

    def site_b():
        return execute_only_once()
    assert [site_a(), site_a(), site_a()] == [True, False, False]
    assert [site_b(), site_b()] == [True, False]
    assert tensorpack_lite.utils.execute_only_once is execute_only_once
    assert 'execute_only_once' in tensorpack_lite.utils.__all__


# ----- file helpers ----------------------------------------------------------------------------

def test_mkdir_p_recursive_walk_and_normpath(tmp_path):
    nested = tmp_path / 'a' / 'b' / 'c'
    mkdir_p(str(nested))
    mkdir_p(str(nested))          # exists: nothing happens
    mkdir_p('')                   # the current directory
    assert nested.is_dir()
    for rel in ('a/x.txt', 'a/b/y.txt', 'a/b/c/z.txt', 'top.txt'):
        (tmp_path / rel).write_text(rel)
    found = sorted(os.path.relpath(p, str(tmp_path)) for p in recursive_walk(str(tmp_path)))
    assert found == ['a/b/c/z.txt', 'a/b/y.txt', 'a/x.txt', 'top.txt']
    with pytest.raises(ValueError, match='needs a directory name'):
        mkdir_p(None)
    assert normpath('data//train/../val/') == 'data/val'
    assert normpath('gs://bucket//train/../val') == 'gs://bucket//train/../val'


def test_get_dataset_path_reads_the_variable_and_creates_nothing(tmp_path, monkeypatch):
    with change_env('TENSORPACK_DATASET', str(tmp_path / 'sets')):
        assert get_dataset_path('mnist_data', 'x') == str(tmp_path / 'sets' / 'mnist_data' / 'x')
    monkeypatch.setenv('HOME', str(tmp_path))
    with change_env('TENSORPACK_DATASET', None):
        assert get_dataset_path('cifar10_data') == str(tmp_path / 'tensorpack_data' / 'cifar10_data')
    assert not (tmp_path / 'tensorpack_data').exists() and not (tmp_path / 'sets').exists()
    # the datasets' module uses the same function (one home: utils.fs)
    assert dataset_common.get_dataset_path is get_dataset_path
    assert dataset_common.DATASET_ENV_VAR == fs.DATASET_ENV_VAR == 'TENSORPACK_DATASET'


# ----- download --------------------------------------------------------------------------------

PAYLOAD = bytes(range(256)) * 300      # 76800 bytes: several read chunks


@pytest.fixture
def source_file(tmp_path):
    path = tmp_path / 'src' / 'weights.bin'
    path.parent.mkdir()
    path.write_bytes(PAYLOAD)
    return path


def test_download_file_url(tmp_path, source_file, log_records):
    target_dir = str(tmp_path / 'out' / 'sub')
    path = download(source_file.as_uri(), target_dir, expect_size=len(PAYLOAD))
    assert path == os.path.join(target_dir, 'weights.bin')
    with open(path, 'rb') as f:
        assert f.read() == PAYLOAD
    # present with the expected size: kept, not downloaded again
    source_file.write_bytes(b'changed')
    assert download(source_file.as_uri(), target_dir, expect_size=len(PAYLOAD)) == path
    with open(path, 'rb') as f:
        assert f.read() == PAYLOAD
    assert any('not downloading it again' in m for m in log_records.messages(logging.INFO))
    # another file name
    renamed = download(source_file.as_uri(), target_dir, filename='renamed.bin')
    with open(renamed, 'rb') as f:
        assert f.read() == b'changed'
    assert sorted(os.listdir(target_dir)) == ['renamed.bin', 'weights.bin']


def test_download_size_mismatch_and_missing_source_leave_no_file(tmp_path, source_file):
    target_dir = tmp_path / 'out'
    with pytest.raises(OSError) as err:
        download(source_file.as_uri(), str(target_dir), expect_size=len(PAYLOAD) + 1)
    message = str(err.value)
    assert source_file.as_uri() in message
    assert 'gave {} bytes, but {} were expected'.format(len(PAYLOAD), len(PAYLOAD) + 1) in message
    assert os.listdir(str(target_dir)) == []          # no file, no temporary file
    missing = (tmp_path / 'nothing.bin').as_uri()
    with pytest.raises(OSError, match='failed to download ' + missing):
        download(missing, str(target_dir))
    assert os.listdir(str(target_dir)) == []
    empty = tmp_path / 'empty.bin'
    empty.write_bytes(b'')
    with pytest.raises(OSError, match='empty file'):
        download(empty.as_uri(), str(target_dir))
    assert os.listdir(str(target_dir)) == []
    with pytest.raises(ValueError, match='file name'):
        download('http://127.0.0.1/', str(target_dir))


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    """Serves the payload at /data/weights.bin, a truncated body at /truncated, 404 elsewhere."""

    def log_message(self, *args):
        pass

    def do_GET(self):
        if self.path == '/data/weights.bin':
            body, length = PAYLOAD, len(PAYLOAD)
        elif self.path == '/truncated':
            body, length = PAYLOAD[:1000], len(PAYLOAD)     # announces more than it sends
        else:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header('Content-Length', str(length))
        self.send_header('Connection', 'close')
        self.end_headers()
        self.wfile.write(body)
        self.close_connection = True


@pytest.fixture
def http_url():
    server = http.server.ThreadingHTTPServer(('127.0.0.1', 0), _QuietHandler)
    thread = threading.Thread(target=server.serve_forever, kwargs={'poll_interval': 0.05}, daemon=True)
    thread.start()
    try:
        yield 'http://127.0.0.1:{}'.format(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


@pytest.mark.timeout(60)
def test_download_over_http(tmp_path, http_url, monkeypatch):
    monkeypatch.setattr(fs, 'DOWNLOAD_TIMEOUT', 10)
    target_dir = str(tmp_path / 'out')
    path = download(http_url + '/data/weights.bin', target_dir, expect_size=len(PAYLOAD))
    with open(path, 'rb') as f:
        assert f.read() == PAYLOAD
    with pytest.raises(OSError, match='failed to download {}/missing.bin.*404'.format(http_url)):
        download(http_url + '/missing.bin', target_dir)
    # the connection closes early: the partial data never becomes a file
    with pytest.raises(OSError, match='failed to download {}/truncated.*after 1000 of the 76800 bytes'.format(
            http_url)):
        download(http_url + '/truncated', target_dir, filename='partial.bin')
    assert os.listdir(target_dir) == ['weights.bin']


# ----- change_gpu, logger.addFilter ------------------------------------------------------------

def test_change_gpu_sets_and_restores_cuda_visible_devices():
    with change_env('CUDA_VISIBLE_DEVICES', '0,1'):
        with change_gpu(3):
            assert os.environ['CUDA_VISIBLE_DEVICES'] == '3'
        with change_gpu(-1):
            assert os.environ['CUDA_VISIBLE_DEVICES'] == ''
        with change_gpu('2,3'):
            assert os.environ['CUDA_VISIBLE_DEVICES'] == '2,3'
        assert os.environ['CUDA_VISIBLE_DEVICES'] == '0,1'
    with change_env('CUDA_VISIBLE_DEVICES', None):
        with change_gpu(0):
            assert os.environ['CUDA_VISIBLE_DEVICES'] == '0'
        assert 'CUDA_VISIBLE_DEVICES' not in os.environ


def test_logger_add_filter(log_records):
    class DropSecrets(logging.Filter):
        def filter(self, record):
            return 'secret' not in record.getMessage()
    drop = DropSecrets()
    logger.addFilter(drop)
    try:
        logger.info("the secret key")
        logger.info("a public message")
    finally:
        logger._logger.removeFilter(drop)
    logger.info("another secret, after removal")
    assert log_records.messages(logging.INFO) == ["a public message", "another secret, after removal"]
    assert 'addFilter' in logger.__all__


# ----- OnlineMoments, IterSpeedCounter ---------------------------------------------------------

def test_online_moments_match_numpy():
    values = np.random.RandomState(0).normal(3.0, 2.0, size=50)
    moments = OnlineMoments()
    for v in values:
        moments.feed(float(v))
    np.testing.assert_allclose(moments.mean, np.mean(values), rtol=1e-12)
    np.testing.assert_allclose(moments.variance, np.var(values, ddof=1), rtol=1e-10)
    np.testing.assert_allclose(moments.std, np.std(values, ddof=1), rtol=1e-10)
    # small exact case: 1, 2, 4 -> mean 7/3, sample variance ((4/3)^2 + (1/3)^2 + (5/3)^2) / 2 = 7/3
    exact = OnlineMoments()
    for v in (1.0, 2.0, 4.0):
        exact.feed(v)
    assert exact.mean == pytest.approx(7 / 3) and exact.variance == pytest.approx(7 / 3)


def test_online_moments_of_arrays_and_too_few_values():
    arrays = np.random.RandomState(1).uniform(-1, 1, size=(6, 2, 3))
    moments = OnlineMoments()
    for a in arrays:
        moments.feed(a)
    np.testing.assert_allclose(moments.mean, arrays.mean(axis=0), rtol=1e-12)
    np.testing.assert_allclose(moments.variance, arrays.var(axis=0, ddof=1), rtol=1e-10)
    single = OnlineMoments()
    single.feed(5.0)
    assert single.mean == 5.0
    with pytest.raises(ValueError, match='at least 2 values, got 1'):
        single.variance


def test_iter_speed_counter_logs_every_n_calls(log_records):
    counter = IterSpeedCounter(3)
    for _ in range(7):
        counter()
    lines = [m for m in log_records.messages(logging.INFO) if m.startswith('IterSpeed:')]
    assert len(lines) == 2
    assert ', 3 times, ' in lines[0] and ', 6 times, ' in lines[1]
    named = IterSpeedCounter(2, name='reader')
    named()
    named()
    assert any(m.startswith('reader: ') and ', 2 times, ' in m for m in log_records.messages(logging.INFO))
    with pytest.raises(ValueError, match='print_every must be >= 1'):
        IterSpeedCounter(0)


# ----- viz: intensity_to_rgb, dump_dataflow_images, palette ------------------------------------

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


def test_palette():
    assert PALETTE_RGB.shape == (79, 3) and PALETTE_RGB.dtype == np.float32
    assert PALETTE_RGB.min() >= 0 and PALETTE_RGB.max() <= 255
    # Detectron's first color, (0, 0.447, 0.741) of full intensity, and pure red at row 9
    np.testing.assert_allclose(PALETTE_RGB[0], [0, 0.447 * 255, 0.741 * 255], rtol=1e-6)
    np.testing.assert_allclose(PALETTE_RGB[9], [255, 0, 0])
    assert len({tuple(c) for c in PALETTE_RGB[:20].tolist()}) == 20     # the first ones all differ


# ----- debug -----------------------------------------------------------------------------------

def traced_target(x):
    return x + 1


def test_enable_call_trace_prints_calls(capsys):
    try:
        enable_call_trace()
        traced_target(1)
    finally:
        sys.settrace(None)
    out = capsys.readouterr().out
    assert "Call to `traced_target` on line {}:".format(__file__) in out
    assert " from {}:".format(__file__) in out


# ----- nvml ------------------------------------------------------------------------------------

@pytest.fixture
def nvml_library(monkeypatch):
    """Point NVMLContext at another library (forgetting the one loaded)."""
    def use(name):
        monkeypatch.setattr(nvml, 'LIBRARY_NAME', name)
        monkeypatch.setattr(nvml, '_library', None)
    return use


def test_nvml_missing_library_is_a_clear_error(nvml_library):
    nvml_library('libnvidia-ml-not-installed.so.1')
    with pytest.raises(nvml.NVMLError, match="cannot load the NVIDIA Management Library "
                                             "'libnvidia-ml-not-installed.so.1'") as err:
        with nvml.NVMLContext():
            pass
    assert err.value.code == 12


FAKE_NVML_C = r"""
typedef struct { unsigned long long total, free, used; } mem_t;
typedef struct { unsigned int gpu, memory; } util_t;
static int initialised = 0;
int nvmlInit_v2(void) { initialised = 1; return 0; }
int nvmlShutdown(void) { initialised = 0; return 0; }
int nvmlDeviceGetCount_v2(unsigned int *n) { if (!initialised) return 1; *n = 2; return 0; }
int nvmlDeviceGetHandleByIndex_v2(unsigned int i, void **h) { *h = (void *)(long)(i + 1); return 0; }
int nvmlDeviceGetName(void *h, char *buf, unsigned int len) {
    const char *name = (long)h == 1 ? "Fake GPU A" : "Fake GPU B";
    unsigned int k = 0;
    for (; name[k] && k + 1 < len; k++) buf[k] = name[k];
    buf[k] = 0;
    return 0;
}
int nvmlDeviceGetMemoryInfo(void *h, mem_t *m) {
    if ((long)h == 2) return 3;
    m->total = 1000; m->free = 400; m->used = 600; return 0;
}
int nvmlDeviceGetUtilizationRates(void *h, util_t *u) { u->gpu = 42; u->memory = 7; return 0; }
const char *nvmlErrorString(int code) { return code == 3 ? "Not Supported" : "Other"; }
"""


@pytest.mark.skipif(shutil.which('gcc') is None, reason='needs gcc to build a fake libnvidia-ml')
def test_nvml_context_with_a_fake_library(tmp_path, nvml_library):
    source = tmp_path / 'fake_nvml.c'
    source.write_text(FAKE_NVML_C)
    library = tmp_path / 'libfakenvml.so'
    subprocess.run(['gcc', '-shared', '-fPIC', '-o', str(library), str(source)], check=True, timeout=60)
    nvml_library(str(library))
    with nvml.NVMLContext() as ctx:
        assert ctx.num_devices() == 2
        first, second = ctx.devices()
        assert [first.name(), second.name()] == ['Fake GPU A', 'Fake GPU B']
        assert first.memory() == {'total': 1000, 'free': 400, 'used': 600}
        assert second.utilization() == {'gpu': 42, 'memory': 7}
        with pytest.raises(nvml.NVMLError, match=r'nvmlDeviceGetMemoryInfo\(\) failed with code 3: '
                                                 'Not Supported') as err:
            second.memory()
        assert err.value.code == 3
        with pytest.raises(ValueError, match=r'device\(2\): NVML found 2 GPU\(s\)'):
            ctx.device(2)
    with pytest.raises(nvml.NVMLError, match='nvmlDeviceGetCount_v2.*code 1: Other'):
        ctx.num_devices()             # after the context: NVML is shut down


# ----- loadcaffe -------------------------------------------------------------------------------

class _Blob(object):
    def __init__(self, data):
        self.data = np.asarray(data, dtype=np.float64)


class _Layer(object):
    def __init__(self, type_, *blobs):
        self.type = type_
        self.blobs = [_Blob(b) for b in blobs]


def _fake_caffe_net():
    rng = np.random.RandomState(0)
    layers = [
        ('data', _Layer('Input'), None),
        ('conv1', _Layer('Convolution', rng.randn(4, 3, 2, 2), rng.randn(4)), 'data'),
        ('bn1', _Layer('BatchNorm', [2.0, 4.0, 6.0, 8.0], [1.0, 3.0, 5.0, 7.0], [2.0]), 'conv1'),
        ('scale1', _Layer('Scale', [1.5, 2.5, 3.5, 4.5], [0.1, 0.2, 0.3, 0.4]), 'conv1'),
        ('fc1', _Layer('InnerProduct', rng.randn(5, 4 * 3 * 2), rng.randn(5)), 'conv1'),
        ('fc2', _Layer('InnerProduct', rng.randn(2, 5), rng.randn(2)), 'fc1'),
        ('prelu', _Layer('PReLU', [0.25]), 'fc2'),
    ]
    net = types.SimpleNamespace(
        _layer_names=[name for name, _, _ in layers], layers=[layer for _, layer, _ in layers],
        bottom_names={name: [bottom] if bottom else [] for name, _, bottom in layers},
        blobs={'data': _Blob(np.zeros((1, 3, 4, 3))), 'conv1': _Blob(np.zeros((1, 4, 3, 2))),
               'fc1': _Blob(np.zeros((1, 5))), 'fc2': _Blob(np.zeros((1, 2)))})
    return net


@pytest.fixture
def fake_caffe(monkeypatch, tmp_path):
    net = _fake_caffe_net()
    calls = []
    module = types.ModuleType('caffe')
    module.TEST = 'TEST'
    module.set_mode_cpu = lambda: calls.append('cpu')

    def make_net(desc, weights, phase):
        calls.append((desc, weights, phase))
        return net
    module.Net = make_net
    monkeypatch.setitem(sys.modules, 'caffe', module)
    desc, weights = tmp_path / 'deploy.prototxt', tmp_path / 'w.caffemodel'
    desc.write_text('')
    weights.write_bytes(b'')
    return net, calls, str(desc), str(weights)


def test_load_caffe_converts_to_tensorpack_names_and_layouts(fake_caffe, log_records):
    net, calls, desc, weights = fake_caffe
    params = loadcaffe.load_caffe(desc, weights)
    assert calls == ['cpu', (desc, weights, 'TEST')]
    assert sorted(params) == ['bn1/beta', 'bn1/gamma', 'bn1/mean/EMA', 'bn1/variance/EMA', 'conv1/W',
                              'conv1/b', 'fc1/W', 'fc1/b', 'fc2/W', 'fc2/b']
    caffe_kernel = net.layers[1].blobs[0].data
    assert params['conv1/W'].shape == (2, 2, 3, 4)
    for o, i, h, w in np.ndindex(*caffe_kernel.shape):
        assert params['conv1/W'][h, w, i, o] == caffe_kernel[o, i, h, w]
    np.testing.assert_allclose(params['bn1/mean/EMA'], [1, 2, 3, 4])
    np.testing.assert_allclose(params['bn1/variance/EMA'], [0.5, 1.5, 2.5, 3.5])
    np.testing.assert_allclose(params['bn1/gamma'], [1.5, 2.5, 3.5, 4.5])
    np.testing.assert_allclose(params['bn1/beta'], [0.1, 0.2, 0.3, 0.4])
    # fc1 on a feature map: Caffe flattens NCHW, tensorpack NHWC; the outputs must agree
    feature_chw = np.random.RandomState(1).randn(4, 3, 2)
    caffe_out = net.layers[4].blobs[0].data.dot(feature_chw.ravel())
    ours = feature_chw.transpose(1, 2, 0).ravel().dot(params['fc1/W'])
    assert params['fc1/W'].shape == (24, 5)
    np.testing.assert_allclose(ours, caffe_out, rtol=1e-12)
    np.testing.assert_array_equal(params['fc2/W'], net.layers[5].blobs[0].data.T)
    assert any('PReLU has parameters, but its type is not supported' in m
               for m in log_records.messages(logging.WARNING))


def test_load_caffe_errors(fake_caffe, monkeypatch):
    net, _, desc, weights = fake_caffe
    with pytest.raises(FileNotFoundError, match="model_file '/no/such.caffemodel' is not a file"):
        loadcaffe.load_caffe(desc, '/no/such.caffemodel')
    net.bottom_names['scale1'] = ['fc1']      # a Scale that no BatchNorm shares its input with
    with pytest.raises(ValueError, match="Scale layer scale1 reads 'fc1', which no BatchNorm layer reads"):
        loadcaffe.load_caffe(desc, weights)
    net.bottom_names['scale1'] = ['conv1']
    net.layers[2].blobs[2] = _Blob([0.0])       # Caffe's factor 0: statistics of no data
    params = loadcaffe.load_caffe(desc, weights)
    np.testing.assert_array_equal(params['bn1/mean/EMA'], np.zeros(4))
    monkeypatch.setitem(sys.modules, 'caffe', None)    # pycaffe not installed
    with pytest.raises(ImportError, match='load_caffe\\(\\) needs pycaffe.*not on PyPI'):
        loadcaffe.load_caffe(desc, weights)


FAKE_PROTOC = """#!/bin/sh
# a stand-in for protoc: checks its arguments, writes the module or fails on demand
[ "$1" = --proto_path ] && [ "$3" = --python_out ] || { echo "bad arguments: $*"; exit 2; }
grep -q BROKEN "$5" && { echo "caffe.proto:1:1: syntax error"; exit 1; }
echo "PROTO_FILE = '$5'" > "$4/caffe_pb2.py"
"""


def test_get_caffe_pb(tmp_path, monkeypatch):
    monkeypatch.setenv('TENSORPACK_DATASET', str(tmp_path / 'data'))
    proto_dir = tmp_path / 'data' / 'caffe'
    with pytest.raises(FileNotFoundError, match="'{}' not found.*{}".format(
            proto_dir / 'caffe.proto', loadcaffe.CAFFE_PROTO_URL)):
        loadcaffe.get_caffe_pb()
    proto_dir.mkdir(parents=True)
    (proto_dir / 'caffe.proto').write_text('BROKEN')
    bin_dir = tmp_path / 'bin'
    bin_dir.mkdir()
    monkeypatch.setenv('PATH', str(bin_dir))
    with pytest.raises(FileNotFoundError, match="protobuf compiler 'protoc'"):
        loadcaffe.get_caffe_pb()
    protoc = bin_dir / 'protoc'
    protoc.write_text(FAKE_PROTOC)
    protoc.chmod(0o755)
    monkeypatch.setenv('PATH', str(bin_dir) + os.pathsep + '/bin' + os.pathsep + '/usr/bin')
    with pytest.raises(RuntimeError, match='protoc could not compile .*exit code 1.*syntax error'):
        loadcaffe.get_caffe_pb()
    (proto_dir / 'caffe.proto').write_text('syntax = "proto2";')
    module = loadcaffe.get_caffe_pb()
    assert module.PROTO_FILE == str(proto_dir / 'caffe.proto')
    protoc.unlink()                   # compiled once: later calls only import it
    assert loadcaffe.get_caffe_pb().PROTO_FILE == module.PROTO_FILE


# ----- no TensorFlow at import time --------------------------------------------------------------

class _ImportTimeImports(ast.NodeVisitor):
    """Collects the modules imported by code that runs at import time (not inside functions)."""

    def __init__(self):
        self.modules = []

    def visit_FunctionDef(self, node):
        pass

    visit_AsyncFunctionDef = visit_Lambda = visit_FunctionDef

    def visit_Import(self, node):
        self.modules += [alias.name for alias in node.names]

    def visit_ImportFrom(self, node):
        self.modules.append('.' * node.level + (node.module or ''))


def _import_time_imports(source):
    visitor = _ImportTimeImports()
    visitor.visit(ast.parse(source))
    return visitor.modules


def _imports_tensorflow(module):
    return module.split('.')[0] == 'tensorflow' or module.lstrip('.') == 'compat' or module.startswith('..')


def test_the_import_checker():
    sample = textwrap.dedent("""
        import os
        from ..compat import tfv1
        try:
            import tensorflow as tf
        except ImportError:
            pass
        class A:
            from .logger import info
        def f():
            import tensorflow
    """)
    assert _import_time_imports(sample) == ['os', '..compat', 'tensorflow', '.logger']
    assert [_imports_tensorflow(m) for m in _import_time_imports(sample)] == [False, True, True, False]


def test_utils_modules_do_not_import_tensorflow_at_import_time():
    utils_dir = os.path.dirname(tensorpack_lite.utils.__file__)
    files = sorted(f for f in os.listdir(utils_dir) if f.endswith('.py'))
    assert {'fs.py', 'viz.py', 'nvml.py', 'loadcaffe.py', 'palette.py', 'debug.py'} <= set(files)
    offenders = {}
    for name in files:
        with open(os.path.join(utils_dir, name)) as f:
            bad = [m for m in _import_time_imports(f.read()) if _imports_tensorflow(m)]
        if bad:
            offenders[name] = bad
    assert offenders == {}
