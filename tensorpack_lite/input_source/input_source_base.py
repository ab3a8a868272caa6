"""The InputSource interface: where a trainer's input tensors come from.

An InputSource is set up once with the model's input signature (a list of ``tf.TensorSpec``),
then hands out the input tensors for each tower (:meth:`InputSource.get_input_tensors`) and
the callbacks that keep it running (:meth:`InputSource.get_callbacks`), e.g. a thread that
fills a queue or a hook that feeds placeholders.
"""

from contextlib import contextmanager

from ..callbacks.base import CallbackFactory
from ..compat import tf, tfv1
from ..utils.argtools import call_only_once, memoized_method

__all__ = ['InputSource', 'FeedfreeInput', 'ProxyInputSource', 'build_or_reuse_placeholder']


def build_or_reuse_placeholder(tensor_spec):
    """A placeholder for ``tensor_spec`` in the default graph: the existing one when a
    placeholder of that name, dtype and a compatible shape exists, else a new one at the
    root name scope. A same-named tensor that does not match is a clear error."""
    graph = tfv1.get_default_graph()
    name = tensor_spec.name
    try:
        existing = graph.get_tensor_by_name(name + ':0')
    except KeyError:
        existing = None
    if existing is not None:
        if ('Placeholder' not in existing.op.type or existing.dtype != tensor_spec.dtype
                or not existing.shape.is_compatible_with(tensor_spec.shape)):
            raise ValueError("Input '{}' ({} {}) clashes with tensor {} ({} {}) already in the "
                             "graph".format(name, tensor_spec.dtype.name, tensor_spec.shape,
                                            existing.name, existing.dtype.name, existing.shape))
        return existing
    with tfv1.name_scope(None):
        return tfv1.placeholder(tensor_spec.dtype, shape=tensor_spec.shape, name=name)


class InputSource:
    """Base class of input pipelines for a trainer.

    Subclasses implement ``_setup(input_signature)``, ``_get_input_tensors()`` and may add
    ``_get_callbacks()``, ``_reset_state()`` and ``_size()``.
    """

    _name_scope = None
    _setup_done = False

    def get_input_tensors(self):
        """The input tensors, in the order of the input signature. Called once per tower."""
        return self._get_input_tensors()

    def _get_input_tensors(self):
        raise NotImplementedError("{} does not implement _get_input_tensors()".format(type(self).__name__))

    @call_only_once
    def setup(self, input_signature):
        """Build what the source needs for ``input_signature`` (a list of tf.TensorSpec) and
        return its callbacks."""
        for spec in input_signature:
            if not isinstance(spec, tf.TensorSpec):
                raise TypeError("{}.setup() takes a list of tf.TensorSpec, got {!r}".format(
                    type(self).__name__, spec))
        self._setup(input_signature)
        self._setup_done = True
        return self.get_callbacks()

    def _setup(self, input_signature):
        pass

    def setup_done(self):
        return self._setup_done

    @memoized_method
    def get_callbacks(self):
        """The callbacks this source needs; they run on every worker, chief or not. The first
        one resets the source before training."""
        if not self.setup_done():
            raise RuntimeError("{}.get_callbacks() called before setup()".format(type(self).__name__))
        callbacks = [CallbackFactory(before_train=lambda _: self.reset_state())] + self._get_callbacks()
        for cb in callbacks:
            cb.set_chief_only(False)
        return callbacks

    def _get_callbacks(self):
        return []

    def reset_state(self):
        """Start (or restart) producing data. Called by a callback before training."""
        self._reset_state()

    def _reset_state(self):
        pass

    def size(self):
        """Number of datapoints per epoch, when known (NotImplementedError otherwise)."""
        return self._size()

    def _size(self):
        raise NotImplementedError("The size of {} is unknown".format(type(self).__name__))

    @contextmanager
    def cached_name_scope(self):
        """A name scope named after the class, the same one every time it is entered."""
        if self._name_scope:
            with tfv1.name_scope(self._name_scope):
                yield self._name_scope
        else:
            with tfv1.name_scope(type(self).__name__) as scope:
                self._name_scope = scope
                yield scope


class FeedfreeInput(InputSource):
    """An InputSource whose tensors come from the graph itself (queues, datasets, staging
    areas...), so steps run without ``feed_dict``."""


class ProxyInputSource(InputSource):
    """Forwards everything to another InputSource; subclasses change one part of it.

    The wrapped source's callbacks (which reset it before training) are the proxy's."""

    def __init__(self, input):
        if not isinstance(input, InputSource):
            raise TypeError("{} wraps an InputSource, got {!r}".format(type(self).__name__, input))
        self._input = input

    def _get_input_tensors(self):
        return self._input.get_input_tensors()

    def _setup(self, input_signature):
        self._input.setup(input_signature)

    def _get_callbacks(self):
        return self._input.get_callbacks()

    def _size(self):
        return self._input.size()
