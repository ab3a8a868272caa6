"""The models of ``benchmarks/real_models.py``, written once against tensorpack's layer API so that
this library and tensorpack 0.11 build each of them with their own layers.

Each model is a function ``build(layers, image, label, data_format) -> cost``: ``layers`` is one
library's namespace (:func:`layer_namespace`), ``image`` a float32 NHWC batch (a model in
``'channels_first'`` transposes it first, as tensorpack's ImageNet programs do), ``label`` int32.
The cost is the mean cross-entropy plus an L2 weight decay of 1e-4 on the kernels, as in
tensorpack's ResNet programs. The GroupNorm is the model's own (neither library has one), so
its ops are the same in both.
"""

import types

from tensorpack_lite.compat import tfv1 as tf

__all__ = ['MODELS', 'layer_namespace']


def layer_namespace(models, argscope):
    """The layers a model here uses, taken from ``models`` (``tensorpack_lite.models`` or
    ``tensorpack.models``) with that library's ``argscope``."""
    names = ['Conv2D', 'BatchNorm', 'MaxPooling', 'AvgPooling', 'GlobalAvgPooling', 'FullyConnected']
    return types.SimpleNamespace(argscope=argscope, **{name: getattr(models, name) for name in names})


def _channels(x, data_format):
    return x.shape[1] if data_format == 'channels_first' else x.shape[3]


def group_norm(name, x, data_format, groups=32, epsilon=1e-5):
    """Group normalization (Wu & He, 2018) in ``data_format``, with a per-channel scale and shift."""
    with tf.variable_scope(name):
        first = data_format == 'channels_first'
        channels = int(_channels(x, data_format))
        groups = min(groups, channels)
        shape = tf.shape(x)
        if first:
            grouped = tf.reshape(x, [-1, groups, channels // groups, shape[2], shape[3]])
            axes, param_shape = [2, 3, 4], [1, channels, 1, 1]
        else:
            grouped = tf.reshape(x, [-1, shape[1], shape[2], groups, channels // groups])
            axes, param_shape = [1, 2, 4], [1, 1, 1, channels]
        mean, variance = tf.nn.moments(grouped, axes, keepdims=True)
        normed = tf.reshape((grouped - mean) * tf.math.rsqrt(variance + epsilon), shape)
        gamma = tf.get_variable('gamma', [channels], initializer=tf.ones_initializer())
        beta = tf.get_variable('beta', [channels], initializer=tf.zeros_initializer())
        return normed * tf.reshape(gamma, param_shape) + tf.reshape(beta, param_shape)


def _norm_relu(layers, norm, data_format):
    """The activation after a convolution: normalization then ReLU (BatchNorm or GroupNorm)."""
    def norm_relu(x, name=None):
        if norm == 'bn':
            x = layers.BatchNorm('bn', x)
        else:
            x = group_norm('gn', x, data_format)
        return tf.nn.relu(x, name=name)
    return norm_relu


def _norm(layers, norm, data_format, name, x):
    if norm == 'bn':
        return layers.BatchNorm(name, x)
    return group_norm(name, x, data_format)


def _cost(logits, label):
    xent = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=label, logits=logits),
                          name='xentropy')
    kernels = [v for v in tf.trainable_variables() if v.op.name.endswith('/W')]
    decay = tf.multiply(1e-4, tf.add_n([tf.nn.l2_loss(v) for v in kernels]), name='wd_cost')
    return tf.add(xent, decay, name='cost')


def _to_format(image, data_format):
    return tf.transpose(image, [0, 3, 1, 2]) if data_format == 'channels_first' else image


def resnet50(layers, image, label, data_format, norm='bn'):
    """ResNet-50 (bottleneck blocks 3-4-6-3, strides in the 1x1 of each stage's first block, as in
    tensorpack's ImageNet ResNet) at 224x224, 1000 classes."""
    act = _norm_relu(layers, norm, data_format)

    def bottleneck(x, channels, stride):
        shortcut = x
        x = layers.Conv2D('conv1', x, channels, 1, strides=stride, activation=act)
        x = layers.Conv2D('conv2', x, channels, 3, activation=act)
        x = layers.Conv2D('conv3', x, channels * 4, 1)
        x = _norm(layers, norm, data_format, 'bn3' if norm == 'bn' else 'gn3', x)
        if int(_channels(shortcut, data_format)) != channels * 4:
            shortcut = layers.Conv2D('convshortcut', shortcut, channels * 4, 1, strides=stride)
            shortcut = _norm(layers, norm, data_format, 'bnshortcut' if norm == 'bn' else 'gnshortcut',
                             shortcut)
        return tf.nn.relu(x + shortcut)

    x = _to_format(image, data_format)
    with layers.argscope([layers.Conv2D, layers.MaxPooling, layers.GlobalAvgPooling, layers.BatchNorm],
                         data_format=data_format), \
            layers.argscope(layers.Conv2D, use_bias=False):
        x = layers.Conv2D('conv0', x, 64, 7, strides=2, activation=act)
        x = layers.MaxPooling('pool0', x, 3, strides=2, padding='SAME')
        for stage, (channels, blocks, stride) in enumerate([(64, 3, 1), (128, 4, 2), (256, 6, 2),
                                                            (512, 3, 2)]):
            for block in range(blocks):
                with tf.variable_scope('group{}/block{}'.format(stage, block)):
                    x = bottleneck(x, channels, stride if block == 0 else 1)
        x = layers.GlobalAvgPooling('gap', x)
    logits = layers.FullyConnected('linear', x, 1000)
    return _cost(logits, label)


def resnet50_gn(layers, image, label, data_format):
    """:func:`resnet50` with GroupNorm (32 groups) in place of BatchNorm."""
    return resnet50(layers, image, label, data_format, norm='gn')


def vgg16(layers, image, label, data_format):
    """VGG-16 (configuration D) at 224x224 with BatchNorm-free convolutions and two 4096-wide
    fully connected layers."""
    x = _to_format(image, data_format)
    with layers.argscope([layers.Conv2D, layers.MaxPooling], data_format=data_format), \
            layers.argscope(layers.Conv2D, kernel_size=3, activation=tf.nn.relu):
        for stage, (channels, count) in enumerate([(64, 2), (128, 2), (256, 3), (512, 3), (512, 3)]):
            for index in range(count):
                x = layers.Conv2D('conv{}_{}'.format(stage + 1, index + 1), x, channels)
            x = layers.MaxPooling('pool{}'.format(stage + 1), x, 2)
    x = layers.FullyConnected('fc6', x, 4096, activation=tf.nn.relu)
    x = layers.FullyConnected('fc7', x, 4096, activation=tf.nn.relu)
    return _cost(layers.FullyConnected('fc8', x, 1000), label)


def alexnet(layers, image, label, data_format):
    """AlexNet (one-tower variant) at 224x224."""
    x = _to_format(image, data_format)
    with layers.argscope([layers.Conv2D, layers.MaxPooling], data_format=data_format), \
            layers.argscope(layers.Conv2D, activation=tf.nn.relu):
        x = layers.Conv2D('conv1', x, 64, 11, strides=4, padding='VALID')
        x = layers.MaxPooling('pool1', x, 3, strides=2, padding='VALID')
        x = layers.Conv2D('conv2', x, 192, 5)
        x = layers.MaxPooling('pool2', x, 3, strides=2, padding='VALID')
        x = layers.Conv2D('conv3', x, 384, 3)
        x = layers.Conv2D('conv4', x, 256, 3)
        x = layers.Conv2D('conv5', x, 256, 3)
        x = layers.MaxPooling('pool3', x, 3, strides=2, padding='VALID')
    x = layers.FullyConnected('fc6', x, 4096, activation=tf.nn.relu)
    x = layers.FullyConnected('fc7', x, 4096, activation=tf.nn.relu)
    return _cost(layers.FullyConnected('fc8', x, 1000), label)


def cifar_resnet(layers, image, label, data_format, depth=20):
    """The CIFAR ResNet of He et al. (``depth`` = 6n + 2: three stages of n basic blocks, 16, 32
    and 64 channels) on 32x32 images, 10 classes."""
    blocks = (depth - 2) // 6
    act = _norm_relu(layers, 'bn', data_format)
    x = _to_format(image, data_format)
    with layers.argscope([layers.Conv2D, layers.GlobalAvgPooling, layers.BatchNorm],
                         data_format=data_format), \
            layers.argscope(layers.Conv2D, use_bias=False, kernel_size=3):
        x = layers.Conv2D('conv0', x, 16, activation=act)
        for stage, channels in enumerate([16, 32, 64]):
            for block in range(blocks):
                with tf.variable_scope('res{}.{}'.format(stage, block)):
                    stride = 2 if stage > 0 and block == 0 else 1
                    shortcut = x
                    x = layers.Conv2D('conv1', x, channels, strides=stride, activation=act)
                    x = layers.BatchNorm('bn2', layers.Conv2D('conv2', x, channels))
                    if stride > 1:
                        shortcut = layers.Conv2D('convshortcut', shortcut, channels, kernel_size=1,
                                                 strides=stride)
                    x = tf.nn.relu(x + shortcut)
        x = layers.GlobalAvgPooling('gap', x)
    return _cost(layers.FullyConnected('linear', x, 10), label)


MODELS = {
    # name: (build, data_format, image side, batch, learning rate)
    'resnet50-nchw': (resnet50, 'channels_first', 224, 2, 1e-2),
    'resnet50-nhwc': (resnet50, 'channels_last', 224, 2, 1e-2),
    'vgg16': (vgg16, 'channels_first', 224, 2, 1e-4),
    'alexnet': (alexnet, 'channels_first', 224, 16, 1e-4),
    'resnet50-gn': (resnet50_gn, 'channels_first', 224, 2, 1e-2),
    'cifar-resnet20': (cifar_resnet, 'channels_first', 32, 32, 1e-2),
}
"""The models by name: how each is built, its layout (NCHW as tensorpack's GPU programs write
them, NHWC for one ResNet-50), its image side, its batch per step and the learning rate of its
momentum SGD (the models without normalization diverge on one repeated batch at 1e-2)."""
