#!/usr/bin/env python
"""The graphs of the layers a real model is made of, this library's against tensorpack 0.11's:
op counts per layer call (forward, and forward + gradients) and the op kinds only one of them
builds, for a batch size known when the graph is built and for an unknown one.

The layers: ``Conv2D`` without bias (a ResNet's), ``Conv2D`` with bias and ReLU (a VGG's),
``BatchNorm`` in training, ``MaxPooling``, and the GroupNorm of ``real_model_zoo.py`` (the
model's own ops, the same in both: a check of the method), each on a 64-channel 14x14 input in
NCHW and NHWC. Without ``import tensorpack`` only this library's counts are printed.

    /root/tpvenv/bin/python benchmarks/layer_graphs.py
"""

import os

os.environ.setdefault('TF_USE_LEGACY_KERAS', '1')   # tensorpack 0.11's tf.layers need Keras 2

import collections  # noqa: E402

from tensorpack_lite import models as lite_models  # noqa: E402
from tensorpack_lite import tfv1 as tf  # noqa: E402
from tensorpack_lite.compat import enable_graph_mode  # noqa: E402
from tensorpack_lite.tfutils.argscope import argscope as lite_argscope  # noqa: E402
from tensorpack_lite.tfutils.tower import TrainTowerContext  # noqa: E402
from real_model_zoo import group_norm, layer_namespace  # noqa: E402

try:
    import tensorpack
except ImportError:
    tensorpack = None

LAYERS = {
    'Conv2D 3x3, no bias': lambda layers, x, fmt: layers.Conv2D('layer', x, 64, 3, use_bias=False,
                                                                data_format=fmt),
    'Conv2D 3x3 + bias + ReLU': lambda layers, x, fmt: layers.Conv2D('layer', x, 64, 3, activation=tf.nn.relu,
                                                                     data_format=fmt),
    'BatchNorm (training)': lambda layers, x, fmt: layers.BatchNorm('layer', x, data_format=fmt),
    'MaxPooling 3x3/2': lambda layers, x, fmt: layers.MaxPooling('layer', x, 3, strides=2, padding='SAME',
                                                                 data_format=fmt),
    'GroupNorm (model code)': lambda layers, x, fmt: group_norm('layer', x, fmt),
}


def library_layers(name):
    if name == 'tensorpack_lite':
        return layer_namespace(lite_models, lite_argscope), lambda: TrainTowerContext('')
    return (layer_namespace(tensorpack.models, tensorpack.argscope),
            lambda: tensorpack.tfutils.tower.TowerContext('', is_training=True))


def count(library, layer, data_format, batch):
    """(forward ops, all ops with the gradients, Counter of all op kinds) of one layer call."""
    layers, tower = library_layers(library)
    with tf.Graph().as_default() as graph:
        shape = [batch, 64, 14, 14] if data_format == 'channels_first' else [batch, 14, 14, 64]
        x = tf.placeholder(tf.float32, shape)
        with tower():
            y = LAYERS[layer](layers, x, data_format)
        forward = len(graph.get_operations()) - 1
        tf.gradients(tf.reduce_sum(y), [x] + tf.trainable_variables())
        ops = graph.get_operations()
        return forward, len(ops) - 1, collections.Counter(op.type for op in ops)


def describe(counter):
    return ', '.join('{} {}'.format(kind, n) for kind, n in sorted(counter.items())) or '-'


def main():
    enable_graph_mode()
    libraries = ['tensorpack_lite'] + (['tensorpack'] if tensorpack else [])
    print("tensorpack: {}".format(tensorpack.__version__ if tensorpack else 'not importable'))
    print("{:<26} {:<7} {:<7} {:>17} {:>17}  {}".format(
        'layer', 'format', 'batch', 'forward (lite/tp)', 'with grads', 'op kinds only one builds'))
    for layer in LAYERS:
        for data_format in ('channels_first', 'channels_last'):
            for batch in (2, None):
                counts = {lib: count(lib, layer, data_format, batch) for lib in libraries}
                lite = counts['tensorpack_lite']
                other = counts.get('tensorpack', (float('nan'), float('nan'), collections.Counter()))
                only = 'lite: {}; tensorpack: {}'.format(describe(lite[2] - other[2]),
                                                         describe(other[2] - lite[2]))
                print("{:<26} {:<7} {:<7} {:>8}/{:<8} {:>8}/{:<8}  {}".format(
                    layer, 'NCHW' if data_format == 'channels_first' else 'NHWC', str(batch), lite[0],
                    other[0], lite[1], other[1], only if tensorpack else ''))


if __name__ == '__main__':
    main()
