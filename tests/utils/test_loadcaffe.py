"""utils: execute_only_once, the file helpers and download (file:// and a local HTTP server),
change_gpu, logger.addFilter, OnlineMoments, IterSpeedCounter, intensity_to_rgb,
dump_dataflow_images, PALETTE_RGB, enable_call_trace, NVMLContext (a missing library and a
fake one built with gcc), loadcaffe (a fake pycaffe and a fake protoc), and that no utils
module imports TensorFlow at import time."""

import logging
import os
import sys
import types

import numpy as np
import pytest

from tensorpack_lite.utils import loadcaffe


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
