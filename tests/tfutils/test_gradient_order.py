"""The ordered BiasAdd and MatMul gradients (tfutils/gradient_order.py): TensorFlow's values, the
order they impose (and where they impose none), and, where oneDNN runs, no merged
filter-and-bias kernel."""

import contextlib

import numpy as np
import pytest

from tensorpack_lite.compat import tf, tfv1
from tensorpack_lite.tfutils.dependency import ops_run_by
from tensorpack_lite.tfutils.gradient_order import BIAS_ADD_GRADIENT, MATMUL_GRADIENT, ordered_gradients

MERGED_KERNEL = '_MklNativeConv2DBackpropFilterWithBias'


def variable(name, shape, seed):
    """A variable of uniform values (the tests' graphs hold no constants: a graph of constants
    would be folded away before it runs)."""
    return tfv1.get_variable(name, initializer=np.random.RandomState(seed).rand(*shape).astype(np.float32))


def conv_bias_cost(data_format):
    """sum((conv(x, W) + b) * t): a convolution with a bias, as the Conv2D layer builds it."""
    x = variable('x', (2, 9, 9, 3) if data_format == 'NHWC' else (2, 3, 9, 9), 0)
    out = tf.nn.bias_add(tf.nn.conv2d(x, variable('W', (3, 3, 3, 8), 1), 1, 'SAME', data_format=data_format),
                         variable('b', (8,), 2), data_format=data_format)
    return tf.reduce_sum(out * variable('t', out.shape.as_list(), 3)), tfv1.global_variables()[:3]


def gradients(build, ordered, *args):
    """A graph of ``build(*args)``'s cost (built under :func:`ordered_gradients` when ``ordered``)
    and the gradients of the cost for the variables ``build`` returns."""
    with tf.Graph().as_default() as graph:
        with ordered_gradients() if ordered else contextlib.nullcontext():
            cost, wrt = build(*args)
        return graph, wrt, tf.gradients(cost, wrt)


def values(build, *args):
    """The gradients of ``build(*args)``'s cost, with TensorFlow's gradients, then with the ordered ones."""
    result = []
    for ordered in (False, True):
        graph, _, grads = gradients(build, ordered, *args)
        with tfv1.Session(graph=graph) as sess:
            sess.run(tfv1.global_variables_initializer())
            result.append(sess.run(grads))
    return result


@pytest.mark.parametrize('data_format', ['NHWC', 'NCHW'])
def test_bias_add_values_are_tensorflows(data_format):
    plain, ordered = values(conv_bias_cost, data_format)
    for name, expected, got in zip(['x', 'W', 'b'], plain, ordered):
        np.testing.assert_allclose(got, expected, rtol=1e-6, err_msg=name)
    assert ordered[2].shape == (8,)


def matmul_cost(transpose_a, transpose_b):
    """sum(relu(matmul(a, b)) * t) for variables ``a`` (4x5) and ``b`` (5x3), stored transposed
    as asked."""
    a = variable('a', (5, 4) if transpose_a else (4, 5), 0)
    b = variable('b', (3, 5) if transpose_b else (5, 3), 1)
    out = tf.nn.relu(tf.linalg.matmul(a, b, transpose_a=transpose_a, transpose_b=transpose_b) - 1.0)
    return tf.reduce_sum(out * variable('t', (4, 3), 2)), [a, b]


@pytest.mark.parametrize('transpose_a', [False, True])
@pytest.mark.parametrize('transpose_b', [False, True])
def test_matmul_values_are_tensorflows(transpose_a, transpose_b):
    plain, ordered = values(matmul_cost, transpose_a, transpose_b)
    for name, expected, got in zip(['a', 'b'], plain, ordered):
        assert got.shape == expected.shape
        np.testing.assert_allclose(got, expected, rtol=1e-6, err_msg=name)


def test_matmul_weight_gradient_comes_after_the_gradient_it_hands_on():
    graph, _, (grad_a, grad_b) = gradients(matmul_cost, True, False, False)
    assert graph.get_operation_by_name('MatMul').get_attr('_gradient_op_type') == MATMUL_GRADIENT.encode()
    assert grad_a.op in set(ops_run_by([grad_b])), "b's gradient waits for a's"
    assert grad_b.op not in set(ops_run_by([grad_a])), "a's gradient does not wait for b's"


def batch_matmul_cost():
    """A fully-connected layer on a batch that is not computed from a variable."""
    batch = tfv1.placeholder(tf.float32, [4, 5], name='batch')
    weights = variable('W', (5, 3), 0)
    return tf.reduce_sum(tf.linalg.matmul(batch, weights)), [weights]


def test_matmul_on_a_batch_computes_no_batch_gradient():
    graph, _, (grad_w,) = gradients(batch_matmul_cost, True)
    needed = set(ops_run_by([grad_w]))
    backward_matmuls = [op for op in needed if op.type == 'MatMul' and 'gradients' in op.name]
    assert len(backward_matmuls) == 1 and backward_matmuls[0].outputs[0] is grad_w
    with tfv1.Session(graph=graph) as sess:
        sess.run(tfv1.global_variables_initializer())
        batch = np.arange(20, dtype=np.float32).reshape(4, 5)
        expected = np.tile(batch.sum(0)[:, None], (1, 3))
        np.testing.assert_allclose(sess.run(grad_w, {'batch:0': batch}), expected)


def backprop_inputs(graph):
    """The tensors the bias gradients read, and those the filter gradients read as the output's."""
    ops = graph.get_operations()
    return ({op.inputs[0] for op in ops if op.type == 'BiasAddGrad'},
            {op.inputs[2] for op in ops if op.type == 'Conv2DBackpropFilter'})


def test_filter_and_bias_gradients_read_different_tensors():
    graph, _, _ = gradients(conv_bias_cost, False, 'NHWC')
    bias_reads, filter_reads = backprop_inputs(graph)
    assert bias_reads & filter_reads, "with TensorFlow's gradient, both read the output gradient"
    graph, _, _ = gradients(conv_bias_cost, True, 'NHWC')
    bias_reads, filter_reads = backprop_inputs(graph)
    assert len(bias_reads) == len(filter_reads) == 1 and not bias_reads & filter_reads
    bias_add = next(op for op in graph.get_operations() if op.type == 'BiasAdd')
    assert bias_add.get_attr('_gradient_op_type') == BIAS_ADD_GRADIENT.encode()


def test_an_override_inside_takes_precedence():
    with tf.Graph().as_default() as graph:
        with ordered_gradients(), graph.gradient_override_map({'BiasAdd': 'BiasAdd'}):
            out = tf.nn.bias_add(tf.ones([2, 3]), tf.ones([3]))
            product = tf.linalg.matmul(tf.ones([2, 3]), tf.ones([3, 1]))
        assert out.op.get_attr('_gradient_op_type') == b'BiasAdd'
        assert product.op.get_attr('_gradient_op_type') == MATMUL_GRADIENT.encode()


def kernels_run(ordered):
    """The op types of the partition graphs that one training step of the NHWC convolution runs
    (after TensorFlow's graph passes, oneDNN's included)."""
    graph, wrt, grads = gradients(conv_bias_cost, ordered, 'NHWC')
    with graph.as_default():
        train_op = tf.group(*[var.assign_sub(0.1 * grad) for var, grad in zip(wrt[1:], grads[1:])])
    options = tfv1.RunOptions(output_partition_graphs=True)
    metadata = tfv1.RunMetadata()
    with tfv1.Session(graph=graph) as sess:
        sess.run(tfv1.global_variables_initializer())
        sess.run(train_op, options=options, run_metadata=metadata)
    return {node.op for partition in metadata.partition_graphs for node in partition.node}


def test_onednn_runs_the_two_kernels_apart():
    plain = kernels_run(False)
    if not any(kind.startswith('_Mkl') for kind in plain):
        pytest.skip("this TensorFlow runs without oneDNN here: no kernel to keep apart")
    assert MERGED_KERNEL in plain, sorted(plain)
    ordered = kernels_run(True)
    assert MERGED_KERNEL not in ordered, sorted(ordered)
    assert any('Conv2DBackpropFilter' in kind for kind in ordered), sorted(ordered)
