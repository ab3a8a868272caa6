"""ModelDesc: a model described by its inputs, its graph and its optimizer -- the contract
between a model and what trains it (``train``) or runs it (``predict``), so it sits below both.

Example::

    class Model(ModelDesc):
        def inputs(self):
            return [tf.TensorSpec([None, 64], tf.float32, 'image'),
                    tf.TensorSpec([None], tf.int32, 'label')]

        def build_graph(self, image, label):
            logits = ...
            return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
                labels=label, logits=logits), name='cost')

        def optimizer(self):
            return tf.train.AdamOptimizer(1e-3)
"""

from ..compat import tf, tfv1
from ..tfutils.common import get_op_tensor_name
from ..tfutils.tower_context import get_current_tower_context
from ..tfutils.tower_func import check_input_signature
from ..utils.argtools import memoized_method

__all__ = ['ModelDescBase', 'ModelDesc']


class ModelDescBase:
    """A model with inputs and a graph-building function, for training or inference."""

    @memoized_method
    def get_input_signature(self):
        """The inputs as a list of ``tf.TensorSpec`` (``inputs()`` may also return placeholders,
        as older tensorpack code does; they are built in a throw-away graph)."""
        with tfv1.Graph().as_default() as scratch:
            inputs = self.inputs()
        if not isinstance(inputs, (list, tuple)) or not inputs:
            raise TypeError("{}.inputs() must return a non-empty list of tf.TensorSpec, got {!r}".format(
                type(self).__name__, inputs))
        owner = '{}.inputs()'.format(type(self).__name__)
        signature = []
        for index, item in enumerate(inputs):
            if isinstance(item, tf.Tensor) and item.op.type.startswith('Placeholder') \
                    and item.graph is scratch:
                item = tf.TensorSpec(item.shape, item.dtype, get_op_tensor_name(item.name)[0])
            elif not isinstance(item, tf.TensorSpec):
                raise TypeError("{}[{}] must be a tf.TensorSpec (or a placeholder created inside "
                                "inputs()), got {!r}".format(owner, index, item))
            signature.append(item)
        return check_input_signature(signature, owner)

    @property
    def training(self):
        """Whether the graph being built is for training (the current tower context's ``is_training``)."""
        return get_current_tower_context().is_training

    @property
    def input_names(self):
        """The names of the inputs, in order."""
        return [spec.name for spec in self.get_input_signature()]

    def inputs(self):
        """Return the list of ``tf.TensorSpec`` the model takes."""
        raise NotImplementedError("{} must implement inputs()".format(type(self).__name__))

    def build_graph(self, *args):
        """Build the graph from the input tensors (one per spec of :meth:`inputs`, in order).
        A ModelDesc used for training returns the scalar cost to minimize."""
        raise NotImplementedError("{} must implement build_graph()".format(type(self).__name__))


class ModelDesc(ModelDescBase):
    """A ModelDescBase that also knows how to train itself: :meth:`build_graph` returns the
    cost and :meth:`optimizer` the ``tf.compat.v1.train.Optimizer``."""

    @memoized_method
    def get_optimizer(self):
        """The optimizer, created once by :meth:`optimizer`."""
        optimizer = self.optimizer()
        if not isinstance(optimizer, tfv1.train.Optimizer):
            raise TypeError("{}.optimizer() must return a tf.compat.v1.train.Optimizer, got {!r} "
                            "(Keras optimizers are not supported)".format(type(self).__name__, optimizer))
        return optimizer

    def optimizer(self):
        """Return the ``tf.compat.v1.train.Optimizer`` to train with."""
        raise NotImplementedError("{} must implement optimizer()".format(type(self).__name__))
