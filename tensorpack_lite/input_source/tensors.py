"""Sources whose tensors come from the graph itself: :class:`TensorInput` (made by a
function), :class:`DummyConstantInput` (random constants) and :class:`TFDatasetInput`
(a ``tf.data.Dataset`` or a DataFlow)."""

import numpy as np

from ..compat import tf, tfv1
from ..dataflow.base import DataFlow
from ..utils import logger
from .datapoints import datapoint_as_list
from .input_source_base import FeedfreeInput

__all__ = ['TensorInput', 'DummyConstantInput', 'TFDatasetInput']


class TensorInput(FeedfreeInput):
    """Input tensors made by a function (e.g. reading from a queue the user built).

    Args:
        get_tensor_fn: called once per ``get_input_tensors()``; returns a list of tensors
            matching the input signature.
        size (int): number of steps in an epoch, if known.
    """

    def __init__(self, get_tensor_fn, size=None):
        if not callable(get_tensor_fn):
            raise TypeError("TensorInput takes a function, got {!r}".format(get_tensor_fn))
        self.get_tensor_fn = get_tensor_fn
        if size is not None:
            size = int(size)
            if size <= 0:
                raise ValueError("TensorInput: size must be positive, got {}".format(size))
        self._fixed_size = size

    def _setup(self, input_signature):
        self._spec = input_signature

    def _size(self):
        if self._fixed_size is None:
            raise NotImplementedError("The size of this TensorInput is unknown (size=None)")
        return self._fixed_size

    def _get_input_tensors(self):
        owner = type(self).__name__
        with self.cached_name_scope():
            ret = self.get_tensor_fn()
        if not isinstance(ret, (list, tuple)):
            raise TypeError("{}: the function must return a list of tensors, got {!r}".format(
                owner, ret))
        if len(ret) != len(self._spec):
            raise ValueError("{}: the function returned {} tensors for {} inputs".format(
                owner, len(ret), len(self._spec)))
        for tensor, spec in zip(ret, self._spec):
            if not tf.is_tensor(tensor):
                raise TypeError("{}: the function returned {!r} for input '{}', not a "
                                "tensor".format(owner, tensor, spec.name))
            if tensor.dtype.base_dtype != spec.dtype or not tensor.shape.is_compatible_with(spec.shape):
                raise ValueError("{}: tensor {} ({} {}) does not fit input '{}' ({} {})".format(
                    owner, tensor.name, tensor.dtype.name, tensor.shape, spec.name,
                    spec.dtype.name, spec.shape))
        return list(ret)


class DummyConstantInput(TensorInput):
    """Constant input tensors, filled with random values once: measures the speed of a model
    without any input pipeline.

    Args:
        shapes (list): one fully defined shape per input (the inputs' dtypes are used).

    Example::

        source = DummyConstantInput([[64, 224, 224, 3], [64]])
    """

    def __init__(self, shapes):
        self.shapes = [list(s) for s in shapes]
        self._values = None
        logger.warn("Using dummy input for debug!")
        super(DummyConstantInput, self).__init__(self._make_constants)

    def _setup(self, input_signature):
        super(DummyConstantInput, self)._setup(input_signature)
        if len(self.shapes) != len(input_signature):
            raise ValueError("DummyConstantInput: {} shapes given for {} inputs".format(
                len(self.shapes), len(input_signature)))
        rng = np.random.RandomState()
        self._values = []
        for shape, spec in zip(self.shapes, input_signature):
            if not spec.shape.is_compatible_with(shape):
                raise ValueError("DummyConstantInput: shape {} does not fit input '{}' of shape "
                                 "{}".format(shape, spec.name, spec.shape))
            self._values.append(self._random_value(rng, shape, spec.dtype))

    @staticmethod
    def _random_value(rng, shape, dtype):
        if dtype == tf.string:
            return np.full(shape, b'', dtype=object)
        if dtype.is_bool:
            return rng.rand(*shape) > 0.5
        if dtype.is_integer:
            return rng.randint(0, 10, size=shape).astype(dtype.as_numpy_dtype)
        return rng.rand(*shape).astype(dtype.as_numpy_dtype)

    def _make_constants(self):
        return [tf.constant(value, dtype=spec.dtype, name='dummy-{}'.format(spec.name or index))
                for index, (value, spec) in enumerate(zip(self._values, self._spec))]


class TFDatasetInput(FeedfreeInput):
    """Input tensors from a ``tf.data.Dataset``, through an initializable iterator that is
    initialized before training (and at every :meth:`reset_state`).

    Args:
        dataset (tf.data.Dataset or DataFlow): a dataset's elements are tuples with one tensor
            per input, of the inputs' dtypes and compatible shapes; a DataFlow becomes one with
            :meth:`dataflow_to_dataset` when the source is set up (one pass of it per
            :meth:`reset_state`: make it infinite for training, e.g. with ``RepeatedData``).

    Example::

        ds = tf.data.Dataset.from_tensor_slices((images, labels)).batch(32).repeat()
        source = TFDatasetInput(ds)
    """

    def __init__(self, dataset):
        if isinstance(dataset, tf.data.Dataset):
            self._dataset, self._dataflow = dataset, None
        elif isinstance(dataset, DataFlow):
            self._dataset, self._dataflow = None, dataset
        else:
            raise TypeError("TFDatasetInput takes a tf.data.Dataset or a DataFlow, got {!r}".format(
                dataset))
        self._last_get_next = []

    def _setup(self, input_signature):
        self._spec = input_signature
        if self._dataflow is not None:
            self._dataset = self.dataflow_to_dataset(
                self._dataflow, [spec.dtype for spec in input_signature],
                names=[spec.name for spec in input_signature])
        element = self._dataset.element_spec
        if not isinstance(element, tuple):
            element = (element,)
        if len(element) != len(input_signature):
            raise ValueError("TFDatasetInput: dataset elements have {} components, but there are "
                             "{} inputs ({})".format(
                                 len(element), len(input_signature),
                                 ', '.join(str(s.name) for s in input_signature)))
        for index, (comp, spec) in enumerate(zip(element, input_signature)):
            if not isinstance(comp, tf.TensorSpec):
                raise TypeError("TFDatasetInput: component {} of the dataset's elements is {}, "
                                "not a tensor".format(index, comp))
            if comp.dtype != spec.dtype or not comp.shape.is_compatible_with(spec.shape):
                raise ValueError("TFDatasetInput: component {} of the dataset's elements ({} {}) "
                                 "does not fit input '{}' ({} {})".format(
                                     index, comp.dtype.name, comp.shape, spec.name,
                                     spec.dtype.name, spec.shape))
        with self.cached_name_scope():
            self._iterator = tfv1.data.make_initializable_iterator(self._dataset)
            self._init_op = self._iterator.initializer

    def _reset_state(self):
        self._init_op.run()

    def _get_input_tensors(self):
        # as in QueueInput: the i-th call (tower) gets the i-th element of a step
        with tf.control_dependencies(self._last_get_next):
            ret = self._iterator.get_next()
        if isinstance(ret, tf.Tensor):
            ret = [ret]
        ret = list(ret)
        self._last_get_next = [ret[0].op]
        for tensor, spec in zip(ret, self._spec):
            tensor.set_shape(spec.shape)
        return ret

    @staticmethod
    def dataflow_to_dataset(df, types, names=None):
        """A ``tf.data.Dataset`` of the datapoints of ``df`` (reset here), one epoch of it.

        Args:
            df (DataFlow): produces datapoints as lists, or (with ``names``) as dicts keyed by
                those names.
            types (list): the ``tf.DType`` of each component.
            names (list[str]): the input name of each component, the keys of dict datapoints
                (tensorpack has no such argument: its version takes lists only).
        """
        if not isinstance(df, DataFlow):
            raise TypeError("dataflow_to_dataset() takes a DataFlow, got {!r}".format(df))
        if not isinstance(types, (list, tuple)):
            raise TypeError("dataflow_to_dataset(): types must be a list of dtypes, got {!r}"
                            .format(types))
        df.reset_state()
        if names is not None and len(names) != len(types):
            raise ValueError("dataflow_to_dataset(): {} names for {} types".format(len(names), len(types)))
        signature = tuple(tf.TensorSpec(shape=None, dtype=tf.as_dtype(t)) for t in types)

        def generate():
            for dp in df:
                if isinstance(dp, dict) and names is None:
                    raise TypeError("dataflow_to_dataset(): the datapoints of {} are dicts; give the "
                                    "input name of each component as names=".format(type(df).__name__))
                yield tuple(datapoint_as_list('dataflow_to_dataset', dp, names or ()))
        return tf.data.Dataset.from_generator(generate, output_signature=signature)
