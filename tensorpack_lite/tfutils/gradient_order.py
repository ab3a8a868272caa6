"""Gradients of ``BiasAdd`` and ``MatMul`` that order a layer's backward pass on a CPU, with the
values of TensorFlow's own.

* ``BiasAdd`` hands on its output gradient only once the bias gradient is computed. The layer
  below (a convolution's filter gradient) and the bias gradient then read different tensors, and
  TensorFlow's oneDNN graph pass does not merge the two into ``_MklNativeConv2DBackpropFilterWithBias``,
  which is slower than the two kernels apart.
* ``MatMul`` (``x @ W``) computes the gradient of its second input after that of its first: the
  gradient that carries the backward pass on to the layers below comes first, the weight
  gradient (a fully-connected layer's: 151 MB for AlexNet's first) after it. Only when both
  inputs are computed from variables: the gradient of an input that is not (a batch) is not
  needed, and is then not computed either.

``minimize()``'s default, ``GATE_OP``, imposes both orders, as a side effect of holding back every
op's input gradients until all of them are computed: on a CPU it ran AlexNet 3-6 % faster than
the trainers' ungated gradients, and GroupNorm ResNets up to 2.6 % slower. These two gradients
give AlexNet and VGG-16 that gain (4-5 %) and leave the rest of the backward pass ungated
(docs/efficiency.md has the numbers).

The trainers build their training towers under :func:`ordered_gradients`
(``SingleCostTrainer.ORDER_GRADIENTS``). Example::

    with ordered_gradients():
        cost = build_model(image, label)     # its BiasAdd and MatMul ops get these gradients
    grads = tf.gradients(cost, tf.trainable_variables())

Not to be confused with :mod:`tensorpack_lite.graph_builder.backprop_order`, which reads the order
in which backprop produces the variables' gradients (to group their all-reduces); this module
sets the order of two gradients within one layer.

The ops made there name their gradient in the ``_gradient_op_type`` attribute, as
``Graph.gradient_override_map`` does: a process that imports such a graph (a checkpoint's
``.meta``) and differentiates it must import this module first, which registers the gradients.
"""

import contextlib

from ..compat import tf, tfv1
from ..profiling.graph_walk import ops_run_by

__all__ = ['BIAS_ADD_GRADIENT', 'MATMUL_GRADIENT', 'ordered_gradients']

BIAS_ADD_GRADIENT = 'TensorpackLiteOrderedBiasAdd'
MATMUL_GRADIENT = 'TensorpackLiteOrderedMatMul'

_VARIABLE_OPS = ('ReadVariableOp', 'ResourceGather', 'VarHandleOp', 'VariableV2', 'Variable')


def _after(tensor, prerequisite):
    """``tensor``, handed on only once ``prerequisite`` is computed."""
    with tf.control_dependencies([prerequisite]):
        return tf.identity(tensor)


def _computed_from_a_variable(tensor):
    """Whether ``tensor`` depends on a variable (its gradient is then of use to a training step)."""
    return any(op.type in _VARIABLE_OPS for op in ops_run_by([tensor]))


@tfv1.RegisterGradient(BIAS_ADD_GRADIENT)
def _ordered_bias_add_gradient(op, grad):
    bias_grad = tf.raw_ops.BiasAddGrad(out_backprop=grad, data_format=op.get_attr('data_format'))
    return _after(grad, bias_grad), bias_grad


def _matmul_gradients(op, grad):
    """TensorFlow's gradients of ``op`` (a ``MatMul``) for its two inputs, the same ops as its own
    gradient builds (``grad_a``/``grad_b`` mark which input's gradient a product is)."""
    a, b = (tf.math.conj(x) for x in op.inputs)
    transpose_a, transpose_b = op.get_attr('transpose_a'), op.get_attr('transpose_b')

    def for_a(x, y, **transposes):
        return tf.raw_ops.MatMul(a=x, b=y, grad_a=True, **transposes)

    def for_b(x, y, **transposes):
        return tf.raw_ops.MatMul(a=x, b=y, grad_b=True, **transposes)

    if not transpose_a and not transpose_b:
        return for_a(grad, b, transpose_b=True), for_b(a, grad, transpose_a=True)
    if not transpose_a:
        return for_a(grad, b), for_b(grad, a, transpose_a=True)
    if not transpose_b:
        return for_a(b, grad, transpose_b=True), for_b(a, grad)
    return (for_a(b, grad, transpose_a=True, transpose_b=True),
            for_b(grad, a, transpose_a=True, transpose_b=True))


@tfv1.RegisterGradient(MATMUL_GRADIENT)
def _ordered_matmul_gradient(op, grad):
    first, second = _matmul_gradients(op, grad)
    if all(_computed_from_a_variable(x) for x in op.inputs):
        second = _after(second, first)
    return first, second


@contextlib.contextmanager
def ordered_gradients(graph=None):
    """Give the ``BiasAdd`` and ``MatMul`` ops made inside (in ``graph``, the default graph when
    None) the ordered gradients. An override map opened inside for either type takes precedence."""
    graph = tfv1.get_default_graph() if graph is None else graph
    with graph.gradient_override_map({'BiasAdd': BIAS_ADD_GRADIENT, 'MatMul': MATMUL_GRADIENT}):
        yield
