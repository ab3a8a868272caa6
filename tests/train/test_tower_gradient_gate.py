"""With TF1 reference variables (what ``get_variable`` makes after ``disable_v2_behavior()``), every
update of a step waits for all of the step's gradients: a reference variable's reads alias the
buffer its update writes in place, so an early update (the output layer's) raced with a gradient
still to be computed from its value (the layer below's), and the step used half-updated weights
(the TF1 while-loop test saw it on 2 towers under load: tests/train/test_trainers_while_loop.py).
Resource variables are read as snapshots and stay ungated (no barrier between backprop and the
updates). The training towers' BiasAdd and MatMul ops get ordered gradients by default
(``ORDER_GRADIENTS``; tests/tfutils/test_gradient_order.py tests the gradients themselves)."""

import numpy as np
import pytest

from tensorpack_lite.compat import tf, tfv1
from tensorpack_lite.dataflow import DataFromList
from tensorpack_lite.graph_builder.model_desc import ModelDesc
from tensorpack_lite.input_source import PlaceholderInput, QueueInput
from tensorpack_lite.models import Conv2D, FullyConnected
from tensorpack_lite.tfutils.gradient_order import BIAS_ADD_GRADIENT, MATMUL_GRADIENT
from tensorpack_lite.tfutils.dependency import ops_run_by
from tensorpack_lite.tfutils.varmanip import is_reference_variable
from tensorpack_lite.train import SimpleTrainer, SyncMultiGPUTrainerReplicated

from helpers.models import cross_entropy_cost


class TwoLayers(ModelDesc):
    """cost = mean((relu(x W1) W2 - y)^2), reference or resource variables as asked."""

    def __init__(self, use_resource):
        self.use_resource = use_resource

    def inputs(self):
        return [tf.TensorSpec([None, 3], tf.float32, 'x'), tf.TensorSpec([None, 1], tf.float32, 'y')]

    def build_graph(self, x, y):
        with tfv1.variable_scope('net', use_resource=self.use_resource):
            w1 = tfv1.get_variable('W1', initializer=np.full((3, 4), 0.1, np.float32))
            w2 = tfv1.get_variable('W2', initializer=np.full((4, 1), 0.2, np.float32))
        return tf.reduce_mean(tf.square(tf.matmul(tf.nn.relu(tf.matmul(x, w1)), w2) - y), name='cost')

    def optimizer(self):
        return tfv1.train.GradientDescentOptimizer(0.1)


def apply_ops(graph):
    return [op for op in graph.get_operations() if op.type.endswith('ApplyGradientDescent')]


def backprop_matmuls(graph):
    """The matmuls of backprop that training uses, every tower's (each gradient of TwoLayers ends in
    one; the gradient of the input ``x`` is computed and left unused)."""
    return {op for op in graph.get_operations()
            if op.type == 'MatMul' and '_grad/' in op.name and op.outputs[0].consumers()}


def build(model, trainer):
    data = QueueInput(DataFromList([[np.ones((2, 3), np.float32), np.ones((2, 1), np.float32)]]))
    trainer.setup_graph(model.get_input_signature(), data, model.build_graph, model.get_optimizer)


@pytest.mark.parametrize('make_trainer', [SimpleTrainer,
                                          lambda: SyncMultiGPUTrainerReplicated(['/cpu:0', '/cpu:1'])],
                         ids=['simple', 'replicated'])
def test_reference_variables_update_after_every_gradient(make_trainer):
    with tf.Graph().as_default() as graph:
        build(TwoLayers(use_resource=False), make_trainer())
        variables = tfv1.trainable_variables()
        assert variables and all(is_reference_variable(v) for v in variables)
        updates, gradients = apply_ops(graph), backprop_matmuls(graph)
        assert len(updates) == len(variables) and len(gradients) >= 3 * len(variables) // 2
        for update in updates:
            missing = gradients - set(ops_run_by([update]))
            assert not missing, (update.name, sorted(op.name for op in missing))


def test_resource_variables_stay_ungated():
    """The output layer's update does not wait for the input layer's gradient."""
    with tf.Graph().as_default() as graph:
        build(TwoLayers(use_resource=True), SimpleTrainer())
        assert not any(is_reference_variable(v) for v in tfv1.trainable_variables())
        update = next(op for op in apply_ops(graph) if 'W2' in op.inputs[0].name)
        assert backprop_matmuls(graph) - set(ops_run_by([update]))


class ConvNet(ModelDesc):
    """A convolution and a fully-connected layer, both with biases (the library's layers)."""

    def inputs(self):
        return [tf.TensorSpec([None, 6, 6, 2], tf.float32, 'image'), tf.TensorSpec([None], tf.int32, 'label')]

    def build_graph(self, image, label):
        conv = Conv2D('conv', image, 4, 3, activation=tf.nn.relu,
                      kernel_initializer=tfv1.constant_initializer(0.05))
        logits = FullyConnected('fc', conv, 3, kernel_initializer=tfv1.constant_initializer(0.01))
        logits = tf.identity(logits, name='logits')
        return cross_entropy_cost(logits, label)

    def optimizer(self):
        return tfv1.train.GradientDescentOptimizer(0.5)


def conv_batches():
    rng = np.random.RandomState(0)
    return [[rng.rand(4, 6, 6, 2).astype(np.float32), rng.randint(0, 3, 4).astype(np.int32)]
            for _ in range(3)]


def gradient_types(graph):
    """The gradient each BiasAdd and MatMul op of ``graph`` names, by op name (None: TensorFlow's
    own)."""
    types = {}
    for op in graph.get_operations():
        if op.type in ('BiasAdd', 'MatMul') and '_grad' not in op.name:
            try:
                types[op.name] = op.get_attr('_gradient_op_type').decode()
            except ValueError:
                types[op.name] = None
    return types


def test_training_towers_order_gradients_by_default():
    """Training towers' BiasAdds and MatMuls get the ordered gradients unless switched off; an
    inference tower's never do; and the weights after three steps are the same either way."""
    weights = {}
    for ordered in (True, False):
        with tf.Graph().as_default() as graph:
            trainer = SimpleTrainer()
            if not ordered:
                trainer.ORDER_GRADIENTS = False
            model = ConvNet()
            source = PlaceholderInput()
            trainer.setup_graph(model.get_input_signature(), source, model.build_graph, model.get_optimizer)
            trainer.get_predictor(['image'], ['logits'])
            types = gradient_types(graph)
            training = {name: kind for name, kind in types.items() if not name.startswith('tower-pred')}
            inference = {name: kind for name, kind in types.items() if name not in training}
            assert sorted(training) == ['conv/BiasAdd', 'fc/BiasAdd', 'fc/MatMul'], types
            expected = dict.fromkeys(training)
            if ordered:
                expected.update({'conv/BiasAdd': BIAS_ADD_GRADIENT, 'fc/BiasAdd': BIAS_ADD_GRADIENT,
                                 'fc/MatMul': MATMUL_GRADIENT})
            assert training == expected, types
            assert inference and set(inference.values()) == {None}, types
            with tfv1.Session(graph=graph) as sess:
                sess.run(tfv1.global_variables_initializer())
                for batch in conv_batches():
                    sess.run(trainer.train_op, dict(zip(source.get_input_tensors(), batch)))
                weights[ordered] = sess.run(tfv1.trainable_variables())
    for name, plain, ordered in zip(['conv/W', 'conv/b', 'fc/W', 'fc/b'], weights[False], weights[True]):
        np.testing.assert_allclose(ordered, plain, rtol=1e-5, atol=1e-7, err_msg=name)
