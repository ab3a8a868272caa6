"""Channels-first (NCHW) layers on a CPU: every layer with a ``data_format`` gives, with the
same weights, what it gives in channels-last on the transposed input (outputs, gradients with
respect to input and weights, moving statistics), in training and inference towers, whether the
CPU's kernels take NCHW (oneDNN, float32: no transpose) or not (the generic kernels: transposes
around those that need NHWC); a GPU tower gets none; variables and output names are those of
channels-last."""

import functools
import os
import subprocess
import sys

import numpy as np
import pytest

from tensorpack_lite.compat import tf, tfv1
from tensorpack_lite.graph_builder.devices import LeastLoadedDeviceSetter
from tensorpack_lite.models import (
    AvgPooling, BatchNorm, BatchRenorm, BNReLU, Conv2D, Conv2DTranspose, FixedUnPooling, GlobalAvgPooling,
    InstanceNorm, LayerNorm, MaxPooling)
from tensorpack_lite.models import layout
from tensorpack_lite.precision.mixed_precision import MixedPrecision
from tensorpack_lite.tfutils.argscope import argscope
from tensorpack_lite.tfutils.tower import TowerContext
from helpers.paths import TESTS_DIR
from helpers.processes import subprocess_env

TOLERANCE = dict(rtol=1e-5, atol=1e-5)
NHWC_SHAPE = (4, 6, 6, 4)     # batch, height, width, channels
TO_NCHW, TO_NHWC = (0, 3, 1, 2), (0, 2, 3, 1)
HERE = TESTS_DIR
REPO = os.path.dirname(HERE)


def bn_relu_conv(x, data_format):
    with argscope(BatchNorm, data_format=data_format):
        return Conv2D('layer', x, 4, 3, activation=BNReLU, data_format=data_format)


UNPOOL_MAT = np.random.RandomState(5).rand(2, 3).astype('float32')

# name -> (builder(x, data_format), transposes on a CPU, whether the output is 4-D)
LAYERS = {
    'conv': (functools.partial(Conv2D, 'layer', filters=5, kernel_size=3, activation=tf.nn.tanh), 2, True),
    'conv-strided-valid': (functools.partial(Conv2D, 'layer', filters=3, kernel_size=(3, 2), strides=2,
                                             padding='valid'), 2, True),
    'conv-dilated-no-bias': (functools.partial(Conv2D, 'layer', filters=3, kernel_size=3, dilation_rate=2,
                                               use_bias=False), 2, True),
    'conv-split': (functools.partial(Conv2D, 'layer', filters=6, kernel_size=3, split=2), 2, True),
    'deconv': (functools.partial(Conv2DTranspose, 'layer', filters=3, kernel_size=3, strides=2), 2, True),
    'deconv-valid': (functools.partial(Conv2DTranspose, 'layer', filters=2, kernel_size=4, strides=(2, 1),
                                       padding='valid'), 2, True),
    'maxpool': (functools.partial(MaxPooling, 'layer', pool_size=2), 2, True),
    'maxpool-same': (functools.partial(MaxPooling, 'layer', pool_size=3, strides=2, padding='same'), 2, True),
    'avgpool': (functools.partial(AvgPooling, 'layer', pool_size=3, strides=1, padding='same'), 2, True),
    'avgpool-valid': (functools.partial(AvgPooling, 'layer', pool_size=(2, 3), strides=(2, 1)), 2, True),
    'global-avgpool': (functools.partial(GlobalAvgPooling, 'layer'), 0, False),
    'unpool': (functools.partial(FixedUnPooling, 'layer', shape=2), 0, True),
    'unpool-mat': (functools.partial(FixedUnPooling, 'layer', shape=(2, 3), unpool_mat=UNPOOL_MAT), 0, True),
    'batchnorm': (functools.partial(BatchNorm, 'layer'), 0, True),
    'batchnorm-virtual': (functools.partial(BatchNorm, 'layer', virtual_batch_size=2), 0, True),
    'bnrelu-as-activation': (bn_relu_conv, 2, True),
    'batchrenorm': (functools.partial(BatchRenorm, 'layer', rmax=1.5, dmax=0.5), 0, True),
    'layernorm': (functools.partial(LayerNorm, 'layer'), 0, True),
    'instancenorm': (functools.partial(InstanceNorm, 'layer'), 0, True),
}
NEED_TRANSPOSE = sorted(name for name, (_, transposes, _) in LAYERS.items() if transposes)


def count_ops(op_type, scope):
    return sum(1 for op in tfv1.get_default_graph().get_operations()
               if op.type == op_type and op.name.startswith(scope + '/'))


def variables_under(scope):
    """{name without the scope: variable} of the global variables under ``scope``."""
    prefix = scope + '/'
    return {v.op.name[len(prefix):]: v for v in tfv1.global_variables() if v.op.name.startswith(prefix)}


@pytest.fixture(params=['onednn', 'generic'])
def cpu_kernels(request, monkeypatch, say_machine_fact):
    """The CPU kernels the layers build for: oneDNN's (they take NCHW in float32; skipped where
    this machine's TensorFlow does not run them) or TensorFlow's generic ones (NHWC only, which
    oneDNN runs too)."""
    if request.param == 'onednn':
        if not layout.cpu_runs_nchw():
            pytest.skip("this machine's CPU kernels do not take NCHW (oneDNN off, or not x86)")
        say_machine_fact("oneDNN's CPU kernels take NCHW")
    else:
        monkeypatch.setattr(layout, 'onednn_enabled', lambda: False)
    return request.param


def build(scope, layer, x, data_format, is_training):
    with TowerContext(scope, is_training=is_training, vs_name=scope):
        return layer(x, data_format=data_format)


def random_values(variables, rng):
    """Values for the variables: positive for variances and standard deviations."""
    values = {}
    for name, var in variables.items():
        value = rng.randn(*var.shape.as_list()).astype('float32')
        values[name] = np.abs(value) + 0.5 if 'var' in name or 'stddev' in name else value
    return values


@pytest.mark.parametrize('is_training', [True, False], ids=['training', 'inference'])
@pytest.mark.parametrize('name', sorted(LAYERS))
def test_channels_first_equals_channels_last_on_the_transposed_input(cpu_kernels, name, is_training):
    layer, transposes, four_d = LAYERS[name]
    transposes = transposes if cpu_kernels == 'generic' else 0
    rng = np.random.RandomState(0)
    x_nhwc = rng.randn(*NHWC_SHAPE).astype('float32')
    inputs = {'nhwc': tf.constant(x_nhwc), 'nchw': tf.constant(x_nhwc.transpose(TO_NCHW))}
    with tf.device('/cpu:0'):
        outputs = {fmt: build(fmt, layer, inputs[fmt], 'channels_' + ('last' if fmt == 'nhwc' else 'first'),
                              is_training) for fmt in ('nhwc', 'nchw')}
    # the same variables, names and shapes; the output named as in channels-last, in NCHW
    variables = {fmt: variables_under(fmt) for fmt in outputs}
    assert {n: v.shape.as_list() for n, v in variables['nchw'].items()} == {
        n: v.shape.as_list() for n, v in variables['nhwc'].items()}
    assert outputs['nchw'].name == outputs['nhwc'].name.replace('nhwc/', 'nchw/', 1)
    nhwc_shape = outputs['nhwc'].shape.as_list()
    assert outputs['nchw'].shape.as_list() == ([nhwc_shape[i] for i in TO_NCHW] if four_d else nhwc_shape)
    assert count_ops('Transpose', 'nchw') == transposes and count_ops('Transpose', 'nhwc') == 0

    # a loss weighting each output differently, so that every gradient is distinct
    weights = rng.randn(*nhwc_shape).astype('float32')
    losses = {'nhwc': tf.reduce_sum(outputs['nhwc'] * weights),
              'nchw': tf.reduce_sum(outputs['nchw'] * (weights.transpose(TO_NCHW) if four_d else weights))}
    trainable = {fmt: sorted(n for n, v in variables[fmt].items() if v.trainable) for fmt in outputs}
    grads = {fmt: tf.gradients(losses[fmt], [inputs[fmt]] + [variables[fmt][n] for n in trainable[fmt]])
             for fmt in outputs}
    values = random_values(variables['nhwc'], rng)
    with tfv1.Session() as sess:
        for fmt in outputs:
            for var_name, var in variables[fmt].items():
                var.load(values[var_name], sess)
        results = sess.run({'out': outputs, 'grads': grads})
        sess.run(tfv1.get_collection(tfv1.GraphKeys.UPDATE_OPS))
        updated = sess.run(variables)

    out_nchw = results['out']['nchw']
    np.testing.assert_allclose(out_nchw.transpose(TO_NHWC) if four_d else out_nchw, results['out']['nhwc'],
                               **TOLERANCE)
    (dx_nhwc, *dw_nhwc), (dx_nchw, *dw_nchw) = results['grads']['nhwc'], results['grads']['nchw']
    np.testing.assert_allclose(dx_nchw.transpose(TO_NHWC), dx_nhwc, **TOLERANCE)
    assert trainable['nchw'] == trainable['nhwc']
    for var_name, dw_first, dw_last in zip(trainable['nhwc'], dw_nchw, dw_nhwc):
        np.testing.assert_allclose(dw_first, dw_last, err_msg=var_name, **TOLERANCE)
    for var_name, value in updated['nhwc'].items():
        np.testing.assert_allclose(updated['nchw'][var_name], value, err_msg=var_name, **TOLERANCE)


@pytest.fixture
def generic_cpu_kernels(monkeypatch):
    """The layers build for TensorFlow's generic CPU kernels (NHWC only)."""
    monkeypatch.setattr(layout, 'onednn_enabled', lambda: False)


@pytest.fixture
def gpu_process(monkeypatch):
    """TensorFlow says the process has a GPU (graphs are built, not run)."""
    def list_physical_devices(device_type=None):
        return ['fake GPU'] if device_type == 'GPU' else real(device_type)
    real = tf.config.list_physical_devices
    monkeypatch.setattr(tf.config, 'list_physical_devices', list_physical_devices)


def probe_ops():
    return [op.name for op in tfv1.get_default_graph().get_operations() if op.type == 'NoOp']


@pytest.mark.parametrize('name', NEED_TRANSPOSE)
@pytest.mark.parametrize('device', ['/gpu:0', '/job:worker/task:0/device:GPU:1',
                                    LeastLoadedDeviceSetter('/gpu:1', ['/cpu:0'])],
                         ids=['gpu', 'worker-gpu', 'device-function'])
def test_a_gpu_tower_builds_the_nchw_kernels_without_transposes(gpu_process, generic_cpu_kernels, name,
                                                                device):
    layer = LAYERS[name][0]
    x = tfv1.placeholder(tf.float32, [None, 4, 6, 6])
    with tfv1.device(device):
        out = build('tower', layer, x, 'channels_first', is_training=True)
    assert count_ops('Transpose', 'tower') == 0
    formats = [op.get_attr('data_format') for op in tfv1.get_default_graph().get_operations()
               if op.type in ('Conv2D', 'Conv2DBackpropInput', 'MaxPool', 'AvgPool', 'BiasAdd')]
    assert formats and set(formats) == {b'NCHW'}
    with tf.device('/cpu:0'):
        on_cpu = build('cpu', layer, x, 'channels_first', is_training=True)
    assert count_ops('Transpose', 'cpu') == 2
    assert out.shape.as_list() == on_cpu.shape.as_list()


def test_a_gpu_tower_in_a_process_without_gpu_runs_on_the_cpu(cpu_kernels):
    """As a one-tower trainer given GPU 0 on a machine without GPU: soft placement; the CPU's
    kernels decide."""
    assert not tf.config.list_physical_devices('GPU')
    data = np.random.RandomState(0).rand(2, 4, 6, 6).astype('float32')
    with tf.device('/gpu:0'):
        out = build('tower', LAYERS['maxpool'][0], tf.constant(data), 'channels_first', is_training=True)
    assert count_ops('Transpose', 'tower') == (2 if cpu_kernels == 'generic' else 0) and not probe_ops()
    with tfv1.Session(config=tfv1.ConfigProto(allow_soft_placement=True)) as sess:
        np.testing.assert_array_equal(sess.run(out), data.reshape(2, 4, 3, 2, 3, 2).max(axis=(3, 5)))


DEVICE_TYPES = [
    ('/gpu:0', 'native'), ('/device:GPU:3', 'native'),
    ('/job:worker/replica:0/task:1/device:GPU:0', 'native'), ('', 'native'), ('/job:worker/task:0', 'native'),
    ('/cpu:0', 'transpose'), ('/job:ps/task:0/cpu:0', 'transpose'), ('/device:CPU:1', 'transpose'),
]


@pytest.mark.parametrize('device, strategy', DEVICE_TYPES, ids=[d or 'no-device' for d, _ in DEVICE_TYPES])
def test_with_a_gpu_the_device_type_decides(gpu_process, cpu_kernels, device, strategy):
    expected = 'native' if cpu_kernels == 'onednn' else strategy
    assert layout.nchw_strategy(device) == expected


@pytest.mark.parametrize('device', [d for d, _ in DEVICE_TYPES],
                         ids=[d or 'no-device' for d, _ in DEVICE_TYPES])
def test_without_a_gpu_every_device_decides_as_the_cpu(cpu_kernels, device):
    assert layout.nchw_strategy(device) == ('native' if cpu_kernels == 'onednn' else 'transpose')


@pytest.mark.parametrize('dtype', [tf.float16, tf.bfloat16, tf.float64])
def test_only_float32_runs_in_nchw_on_the_cpu(cpu_kernels, dtype):
    """oneDNN has no NCHW float16 pooling gradient on a CPU (and bfloat16 depends on the CPU)."""
    assert layout.nchw_strategy('/cpu:0', dtype) == 'transpose'
    assert layout.nchw_strategy('/cpu:0', tf.float32) == ('native' if cpu_kernels == 'onednn'
                                                          else 'transpose')


def test_a_graph_awaiting_the_float16_rewrite_transposes_on_the_cpu(cpu_kernels):
    """Mixed precision 'fp16' rewrites the float32 graph to float16 in the session: its layers
    are built as for float16 (the trainer says so before building the towers)."""
    graph = tfv1.get_default_graph()
    other = tf.Graph()
    MixedPrecision('fp16').prepare_graph(graph)
    MixedPrecision('bf16').prepare_graph(other)
    assert layout.nchw_strategy('/cpu:0') == 'transpose'
    assert layout.cpu_runs_nchw(graph=other) == (cpu_kernels == 'onednn')
    x = tf.zeros([2, 4, 6, 6])
    MaxPooling('pool', x, 2, data_format='channels_first')
    assert count_ops('Transpose', 'pool') == 2


def test_the_current_device_comes_from_scopes_and_device_functions(gpu_process, generic_cpu_kernels):
    assert layout.current_device() == ''
    assert layout.nchw_strategy() == 'native'      # no device: TensorFlow picks the GPU
    with tf.device('/gpu:1'):
        assert layout.current_device() == '/device:GPU:1'
        assert layout.nchw_strategy() == 'native'
        with tf.device('/cpu:0'):
            assert layout.nchw_strategy() == 'transpose'
    with tfv1.device(LeastLoadedDeviceSetter('/cpu:1', ['/gpu:0'])):
        assert layout.current_device() == '/device:CPU:1'
        assert layout.nchw_strategy() == 'transpose'
    assert len(probe_ops()) == 7 and all('device_probe' in name for name in probe_ops())


def test_channels_last_layers_never_ask_the_device(gpu_process):
    x = tfv1.placeholder(tf.float32, [None, 6, 6, 4])
    with tf.device('/cpu:0'):
        for index, layer in enumerate(entry[0] for entry in LAYERS.values()):
            build('l{}'.format(index), layer, x, 'channels_last', is_training=True)
    ops = tfv1.get_default_graph().get_operations()
    assert not [op.name for op in ops if op.type == 'Transpose' or 'device_probe' in op.name]


def test_call_in_data_format_transposes_around_the_kernel_on_a_cpu(generic_cpu_kernels):
    calls = []

    def kernel(x, data_format):
        calls.append((data_format, x.shape.as_list()))
        return x * 2.0
    x = tf.constant(np.arange(24, dtype='float32').reshape(1, 2, 3, 4))
    out = layout.call_in_data_format(kernel, x, 'channels_first')
    layout.call_in_data_format(kernel, x, 'NHWC')
    assert calls == [('NHWC', [1, 3, 4, 2]), ('NHWC', [1, 2, 3, 4])]
    assert out.op.name == 'to_nchw' and out.op.inputs[0].op.inputs[0].op.name == 'to_nhwc'
    with tfv1.Session() as sess:
        np.testing.assert_array_equal(sess.run(out), 2 * np.arange(24).reshape(1, 2, 3, 4))


def test_call_in_data_format_calls_the_kernel_in_nchw_on_a_gpu(gpu_process):
    calls, x = [], tf.zeros([1, 2, 3, 4])
    with tf.device('/gpu:0'):
        out = layout.call_in_data_format(lambda inputs, fmt: calls.append(fmt) or inputs, x, 'NCHW')
    assert calls == ['NCHW'] and out is x


NCHW_TRAINING_SCRIPT = """
import numpy as np
from tensorpack_lite.compat import enable_graph_mode, tf, tfv1
from tensorpack_lite.models import AvgPooling, BatchNorm, Conv2D, Conv2DTranspose, MaxPooling
from tensorpack_lite.tfutils.tower import TowerContext
enable_graph_mode()
x = tf.constant(np.random.RandomState(0).rand(2, 3, 8, 8).astype('float32'))
with tf.device('/gpu:0'), TowerContext('', is_training=True):   # no GPU: soft placement on the CPU
    y = Conv2D('conv', x, 4, 3, data_format='channels_first')
    y = BatchNorm('bn', y, data_format='channels_first')
    y = MaxPooling('pool', y, 2, data_format='channels_first')
    y = AvgPooling('avg', y, 2, data_format='channels_first')
    y = Conv2DTranspose('up', y, 2, 3, 2, data_format='channels_first')
loss = tf.reduce_mean(tf.square(y))
train_op = tfv1.train.GradientDescentOptimizer(0.1).minimize(loss)
with tfv1.Session(config=tfv1.ConfigProto(allow_soft_placement=True)) as sess:
    sess.run(tfv1.global_variables_initializer())
    losses = [sess.run([loss, train_op])[0] for _ in range(3)]
print('shape', y.shape.as_list(), 'trained', losses[-1] < losses[0])
"""


def test_nchw_trains_on_the_generic_cpu_kernels():
    """Without oneDNN, TensorFlow's CPU kernels of convolution and pooling refuse NCHW."""
    env = subprocess_env(TF_ENABLE_ONEDNN_OPTS='0')
    proc = subprocess.run([sys.executable, '-c', NCHW_TRAINING_SCRIPT], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.splitlines()[-1] == 'shape [2, 2, 4, 4] trained True'
