"""layer_register (name forms, shape logging once per layer in the main tower), argscope
(defaults applied, nested and restored) and LinearWrap chains."""

import logging

import numpy as np
import pytest

from tensorpack_lite.compat import tf, tfv1
from tensorpack_lite.models import (
    BatchNorm, ConcatWith, Conv2D, Dropout, FullyConnected, LinearWrap, MaxPooling, disable_layer_logging,
    get_registered_layer, layer_register)
from tensorpack_lite.models import common
from tensorpack_lite.tfutils.argscope import (
    argscope, enable_argscope_for_function, enable_argscope_for_module, get_arg_scope)
from tensorpack_lite.tfutils.tower import PredictTowerContext, TowerContext, TrainTowerContext
from helpers.graphs import run


def shape_logs(records):
    return [m for m in records.messages(logging.INFO) if ' input: ' in m or ' output: ' in m]


# ----- layer_register --------------------------------------------------------------------------

@layer_register(log_shape=True)
def ScaleBy(x, factor=2.0, offset=0.0):
    """A test layer: ``x * v + offset`` with a variable ``v`` initialised to ``factor``."""
    v = tfv1.get_variable('v', [], initializer=tfv1.constant_initializer(factor))
    return tf.add(x * v, offset, name='output')


@layer_register(use_scope=None)
def AddOne(x):
    return x + 1


@layer_register(use_scope=False)
def Negate(x):
    return tf.negative(x)


def test_layer_call_forms_and_scopes():
    x = tf.ones([2, 3])
    assert ScaleBy('s', x).name == 's/output:0'
    assert [v.op.name for v in tfv1.global_variables()] == ['s/v']
    with tfv1.variable_scope('outer'):
        ScaleBy('s', x)
    assert [v.op.name for v in tfv1.global_variables()] == ['s/v', 'outer/s/v']
    assert AddOne(x).name == 'add:0' and AddOne('named', x).name == 'named/add:0'
    assert Negate(x).name == 'Neg:0'
    assert get_registered_layer('ScaleBy') is ScaleBy and ScaleBy.use_scope is True
    assert AddOne.use_scope is None and get_registered_layer('NoSuchLayer') is None
    assert common.layer_register is layer_register     # tensorpack's import path for custom layers
    with pytest.raises(TypeError, match=r"ScaleBy must be called as ScaleBy\('name', input, \.\.\.\)"):
        ScaleBy(x)
    with pytest.raises(TypeError, match=r"ScaleBy\('s2', \.\.\.\) needs an input tensor"):
        ScaleBy('s2')
    np.testing.assert_allclose(run(ScaleBy('s3', x, 3.0, offset=1.0)), np.full([2, 3], 4.0))


def test_reserved_and_repeated_layer_names(log_records, monkeypatch):
    from tensorpack_lite.models import registry

    def tf(x):   # noqa: F811 - the reserved name on purpose
        return x
    with pytest.raises(ValueError, match="cannot be named 'tf'"):
        layer_register()(tf)

    def ScaleBy(x):   # noqa: F811 - registered twice on purpose
        return x
    # the module's own ScaleBy object goes back into the registry afterwards (registering it anew
    # would make another wrapper, which test_layer_call_forms_and_scopes tells apart)
    monkeypatch.setitem(registry._LAYER_REGISTRY, 'ScaleBy', get_registered_layer('ScaleBy'))
    layer_register()(ScaleBy)
    assert any("Layer 'ScaleBy' is registered again" in m for m in log_records.messages(logging.WARNING))
    assert get_registered_layer('ScaleBy').symbolic_function is ScaleBy


def test_shapes_logged_once_per_layer_in_the_main_tower(log_records):
    x = tfv1.placeholder(tf.float32, [None, 6, 6, 3])
    with TrainTowerContext('tower0', index=0, total=2):
        Conv2D('conv', x, 4, 3)
        ScaleBy('scale', x)
    with TrainTowerContext('tower1', index=1, total=2):
        Conv2D('conv', x, 4, 3)
    with tfv1.variable_scope(tfv1.get_variable_scope(), reuse=True), PredictTowerContext('infer'):
        Conv2D('conv', x, 4, 3)
    assert shape_logs(log_records) == [
        'conv input: [None, 6, 6, 3]', 'conv output: [None, 6, 6, 4]',
        'scale input: [None, 6, 6, 3]', 'scale output: [None, 6, 6, 3]']
    # a new graph logs again
    with tfv1.Graph().as_default():
        Conv2D('conv', tfv1.placeholder(tf.float32, [None, 5, 5, 1]), 2, 3)
    assert shape_logs(log_records)[-2:] == ['conv input: [None, 5, 5, 1]', 'conv output: [None, 5, 5, 2]']
    # layers registered without log_shape never log
    MaxPooling('pool', x, 2)
    BatchNorm('bn', x, training=True)
    assert shape_logs(log_records)[-1] == 'pool output: [None, 3, 3, 3]'


# ----- argscope --------------------------------------------------------------------------------

def last_op_type(layer_output):
    """The type of the op a layer's ``output`` names, past the slice that cuts a batch of unknown
    size back after the empty-batch guard (see models/conv2d.py) and the IdentityN that gives the
    slice its gradient."""
    tensor = layer_output.op.inputs[0]
    if tensor.op.type == 'IdentityN':
        tensor = tensor.op.inputs[tensor.value_index]
    if tensor.op.type == 'Slice':
        tensor = tensor.op.inputs[0]
    return tensor.op.type


def test_argscope_defaults_apply_nest_and_restore():
    x = tfv1.placeholder(tf.float32, [None, 8, 8, 2])
    assert get_arg_scope()['Conv2D'] == {}
    with argscope(Conv2D, kernel_size=5, activation=tf.nn.relu, use_bias=False):
        a = Conv2D('a', x, 3)
        with argscope([Conv2D, MaxPooling], padding='valid'), argscope(Conv2D, kernel_size=3):
            assert get_arg_scope()['Conv2D'] == {'kernel_size': 3, 'activation': tf.nn.relu,
                                                 'use_bias': False, 'padding': 'valid'}
            b = Conv2D('b', x, 3)
            pooled = MaxPooling('pool', x, 3, 1)
            explicit = Conv2D('c', x, 3, kernel_size=1, padding='same', use_bias=True)
        after = Conv2D('d', x, 3)
        scope = get_arg_scope()
        scope['Conv2D']['kernel_size'] = 99          # a copy: changes nothing
    plain = Conv2D('e', x, 3, 3)
    assert get_arg_scope()['Conv2D'] == {}
    shapes = {v.op.name: v.shape.as_list() for v in tfv1.global_variables()}
    assert shapes == {'a/W': [5, 5, 2, 3], 'b/W': [3, 3, 2, 3], 'c/W': [1, 1, 2, 3], 'c/b': [3],
                      'd/W': [5, 5, 2, 3], 'e/W': [3, 3, 2, 3], 'e/b': [3]}
    assert b.shape.as_list() == [None, 6, 6, 3] and pooled.shape.as_list() == [None, 6, 6, 2]
    assert explicit.shape.as_list() == [None, 8, 8, 3] and after.shape.as_list() == [None, 8, 8, 3]
    assert last_op_type(a) == 'Relu' and last_op_type(plain) == 'BiasAdd'


def test_argscope_positional_arguments_win_and_old_names_work():
    x = tfv1.placeholder(tf.float32, [None, 4, 4, 1])
    with argscope(Conv2D, filters=8, kernel_size=3, data_format='NHWC'):
        y = Conv2D('pos', x, 2)                   # positional filters beat the default
    with argscope(Conv2D, out_channel=5, kernel_shape=1, nl=tf.nn.relu):
        z = Conv2D('old', x)
    assert y.shape.as_list() == [None, 4, 4, 2] and z.shape.as_list() == [None, 4, 4, 5]
    assert last_op_type(z) == 'Relu'


def test_argscope_errors_and_restores_after_an_exception():
    with pytest.raises(TypeError, match="only applies to layers registered"):
        with argscope(tf.nn.relu, alpha=1):
            pass
    with pytest.raises(RuntimeError):
        with argscope(Conv2D, kernel_size=7):
            raise RuntimeError("inside")
    assert get_arg_scope()['Conv2D'] == {}
    x = tfv1.placeholder(tf.float32, [None, 4, 4, 1])
    with argscope(Conv2D, no_such_argument=1):
        with pytest.raises(TypeError, match="no_such_argument"):
            Conv2D('c', x, 2, 3)


def test_enable_argscope_for_function(log_records):
    def scaled(x, factor=1.0):
        return x * factor
    wrapped = enable_argscope_for_function(scaled)
    with argscope(wrapped, factor=3.0):
        out = wrapped(tf.ones([2]))
    np.testing.assert_allclose(run(out), [3, 3])
    assert "'scaled': [2] --> [2]" in log_records.messages(logging.INFO)


# ----- LinearWrap ------------------------------------------------------------------------------

def test_linearwrap_chain(capsys):
    image = tfv1.placeholder(tf.float32, [None, 8, 8, 1])
    skip = tf.zeros([1, 4, 4, 2]) + 0 * tf.reduce_sum(image)
    with TowerContext('', is_training=True):
        wrapped = (LinearWrap(image)
                   .Conv2D('conv0', 4, 3, activation=tf.nn.relu)
                   .MaxPooling('pool0', 2)
                   .ConcatWith(tf.tile(skip, [tf.shape(image)[0], 1, 1, 1]), 3)
                   .tf.nn.relu()
                   .apply(tf.multiply, 2.0)
                   .apply2(FullyConnected, 'fc0', 10)
                   .Dropout(rate=0.5)
                   .Dropout('named_drop', rate=0.1)
                   .print_tensor()
                   .FullyConnected('fc1', 3))
    logits = wrapped()
    assert wrapped.tensor() is logits
    assert logits.name == 'fc1/output:0' and logits.shape.as_list() == [None, 3]
    assert 'named_drop/dropout' in capsys.readouterr().out
    assert sorted(v.op.name for v in tfv1.trainable_variables()) == [
        'conv0/W', 'conv0/b', 'fc0/W', 'fc0/b', 'fc1/W', 'fc1/b']
    assert {v.op.name: v.shape.as_list() for v in tfv1.trainable_variables()}['fc0/W'] == [4 * 4 * 6, 10]
    assert run(logits, {image: np.ones([2, 8, 8, 1])}).shape == (2, 3)
    with pytest.raises(AttributeError, match="LinearWrap has no layer 'Conv3D'"):
        LinearWrap(image).Conv3D('c', 3)
    with pytest.raises(AttributeError, match="is not a function"):
        LinearWrap(image).tf.float32()
    assert ConcatWith is get_registered_layer('ConcatWith') and Dropout is get_registered_layer('Dropout')


def test_enable_argscope_for_module_and_disable_layer_logging(log_records):
    import types
    from tensorpack_lite.models import registry
    module = types.ModuleType('my_layers')

    def double(x, factor=2.0):
        return x * factor
    double.__module__ = 'my_layers'
    module.double = double
    enable_argscope_for_module(module, log_shape=False)
    with argscope(module.double, factor=5.0):
        out = module.double(tf.ones([1]))
    np.testing.assert_allclose(run(out), [5.0])
    try:
        disable_layer_logging()
        Conv2D('quiet', tfv1.placeholder(tf.float32, [None, 4, 4, 1]), 2, 3)
    finally:
        registry._ShapeLogging.enabled = True
    assert shape_logs(log_records) == []
