"""Weights of a Caffe model as a dict of tensorpack variable names, and Caffe's protobuf module.

Both need software that is not on PyPI: :func:`load_caffe` needs pycaffe (Caffe's Python
interface), :func:`get_caffe_pb` needs ``caffe.proto`` and the protobuf compiler ``protoc``.

Example::

    params = load_caffe('deploy.prototxt', 'weights.caffemodel')
    np.savez_compressed('weights.npz', **params)      # then SmartInit('weights.npz')
"""

import importlib.util
import os
import shutil

import numpy as np

from . import logger
from .concurrency import subproc_call
from .fs import get_dataset_path
from .utils import change_env

__all__ = ['load_caffe', 'get_caffe_pb', 'CAFFE_PROTO_URL']

CAFFE_PROTO_URL = 'https://github.com/BVLC/caffe/raw/master/src/caffe/proto/caffe.proto'
"""Where Caffe's ``caffe.proto`` can be fetched (for :func:`get_caffe_pb`)."""

_PROTOC_TIMEOUT = 60


class _CaffeNetConverter(object):
    """Turns the parameter blobs of a ``caffe.Net`` into ``{tensorpack variable name: array}``.

    Caffe stores convolution kernels as (out, in, h, w) and fully connected weights as
    (out, in) with the input flattened in (C, H, W) order; tensorpack's layers use (h, w, in,
    out) and (in, out) with NHWC inputs flattened in (H, W, C) order.
    """

    def __init__(self, net):
        self.net = net
        self.layer_names = list(net._layer_names)
        self.converters = {'Convolution': self.convolution, 'InnerProduct': self.inner_product,
                           'BatchNorm': self.batch_norm, 'Scale': self.scale}

    def convert(self):
        params = {}
        for name, layer in zip(self.layer_names, self.net.layers):
            blobs = [np.asarray(b.data) for b in layer.blobs]
            if layer.type in self.converters:
                logger.info("Converting Caffe layer {} of type {}".format(name, layer.type))
                params.update(self.converters[layer.type](name, blobs))
            elif blobs:
                logger.warn("Caffe layer {} of type {} has parameters, but its type is not supported; "
                            "they are skipped.".format(name, layer.type))
        return params

    @staticmethod
    def _with_bias(name, kernel, blobs):
        params = {name + '/W': kernel}
        if len(blobs) > 1:
            params[name + '/b'] = blobs[1]
        return params

    def convolution(self, name, blobs):
        if blobs[0].ndim != 4:
            raise ValueError("Caffe convolution {}: expected a 4-D kernel, got shape {}.".format(
                name, blobs[0].shape))
        return self._with_bias(name, blobs[0].transpose(2, 3, 1, 0), blobs)

    def inner_product(self, name, blobs):
        weights = blobs[0]
        num_out = weights.shape[0]
        input_shape = np.asarray(self.net.blobs[self.net.bottom_names[name][0]].data).shape
        if len(input_shape) == 4:    # the input is a feature map: reorder its (C, H, W) flattening
            logger.info("Caffe fully connected layer {} takes a {}-D input.".format(name, len(input_shape)))
            kernel = weights.reshape((num_out,) + input_shape[1:]).transpose(2, 3, 1, 0).reshape(-1, num_out)
        else:
            kernel = weights.reshape(num_out, -1).T
        return self._with_bias(name, kernel, blobs)

    @staticmethod
    def batch_norm(name, blobs):
        # Caffe keeps running sums; its third blob is the factor to divide them by (0: no data).
        factor = float(blobs[2].ravel()[0])
        multiplier = 0.0 if factor == 0 else 1.0 / factor
        return {name + '/mean/EMA': blobs[0] * multiplier, name + '/variance/EMA': blobs[1] * multiplier}

    def scale(self, name, blobs):
        # Caffe splits a batch normalization into BatchNorm (statistics) + Scale (gamma, beta)
        # reading the same input: the pair becomes one tensorpack BatchNorm.
        bottom = self.net.bottom_names[name][0]
        for other, layer in zip(self.layer_names, self.net.layers):
            if layer.type == 'BatchNorm' and self.net.bottom_names[other][0] == bottom:
                logger.info("Merging Caffe layers {} and {} into the BatchNorm {}".format(name, other, other))
                params = {other + '/gamma': blobs[0]}
                if len(blobs) > 1:
                    params[other + '/beta'] = blobs[1]
                return params
        raise ValueError("Caffe Scale layer {} reads '{}', which no BatchNorm layer reads: only Scale layers "
                         "that complete a BatchNorm are supported.".format(name, bottom))


def _import_pycaffe():
    try:
        with change_env('GLOG_minloglevel', '2'):
            import caffe
    except ImportError as err:
        raise ImportError("load_caffe() needs pycaffe, the Python interface of Caffe, which could not be "
                          "imported ({}). It is not on PyPI: build Caffe with its Python bindings, or "
                          "install your distribution's package of it.".format(err)) from err
    return caffe


def load_caffe(model_desc, model_file):
    """Load a Caffe model's parameters, named as the tensorpack layers of the same names name
    their variables (``conv1/W``, ``conv1/b``, ``bn1/mean/EMA``, ``bn1/gamma``...).

    Convolution, InnerProduct, BatchNorm and Scale (the gamma and beta of the BatchNorm that
    reads the same input) layers are converted; other layers with parameters are skipped
    with a warning.

    Args:
        model_desc (str): the model's description (``.prototxt``).
        model_file (str): its parameters (``.caffemodel``).

    Returns:
        dict: variable name -> np.ndarray.
    """
    for what, path in (('model_desc', model_desc), ('model_file', model_file)):
        if not os.path.isfile(path):
            raise FileNotFoundError("load_caffe(): {} '{}' is not a file.".format(what, path))
    caffe = _import_pycaffe()
    with change_env('GLOG_minloglevel', '2'):
        caffe.set_mode_cpu()
        net = caffe.Net(model_desc, model_file, caffe.TEST)
    params = _CaffeNetConverter(net).convert()
    logger.info("Model loaded from Caffe. Params: " + ", ".join(sorted(params)))
    return params


def get_caffe_pb():
    """Caffe's protobuf module (``caffe_pb2``), to read ``.caffemodel`` files without Caffe.

    It is compiled once from ``caffe.proto`` in ``get_dataset_path('caffe')`` with ``protoc``
    and kept there as ``caffe_pb2.py``. Nothing is downloaded: when ``caffe.proto`` is
    missing, the error says where to put it (e.g. ``download(CAFFE_PROTO_URL, that_dir)``).

    Returns:
        module: the imported ``caffe_pb2`` module.
    """
    directory = get_dataset_path('caffe')
    module_file = os.path.join(directory, 'caffe_pb2.py')
    if not os.path.isfile(module_file):
        proto_file = os.path.join(directory, 'caffe.proto')
        if not os.path.isfile(proto_file):
            raise FileNotFoundError(
                "get_caffe_pb(): '{}' not found. Put Caffe's caffe.proto there (from {}; e.g. "
                "tensorpack_lite.utils.fs.download(CAFFE_PROTO_URL, '{}')).".format(
                    proto_file, CAFFE_PROTO_URL, directory))
        protoc = shutil.which('protoc')
        if protoc is None:
            raise FileNotFoundError("get_caffe_pb() needs the protobuf compiler 'protoc' on $PATH to compile "
                                    "'{}' (e.g. apt-get install protobuf-compiler).".format(proto_file))
        command = [protoc, '--proto_path', directory, '--python_out', directory, proto_file]
        output, code = subproc_call(command, timeout=_PROTOC_TIMEOUT)
        if code != 0 or not os.path.isfile(module_file):
            raise RuntimeError("get_caffe_pb(): protoc could not compile '{}' (exit code {}): {}".format(
                proto_file, code, output.decode('utf-8', 'replace').strip()))
    spec = importlib.util.spec_from_file_location('caffe_pb2', module_file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
