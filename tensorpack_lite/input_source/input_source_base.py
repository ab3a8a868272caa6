"""The InputSource interface: where a trainer's input tensors come from.

An InputSource is set up once with the model's input signature (a list of ``tf.TensorSpec``),
then hands out the input tensors for each tower (:meth:`InputSource.get_input_tensors`) and
the callbacks that keep it running (:meth:`InputSource.get_callbacks`), e.g. a thread that
fills a queue or a hook that feeds placeholders.

:func:`remap_input_source` adapts a source to a model whose inputs differ from the source's
components (more inputs, or another order).
"""

from contextlib import contextmanager

from ..compat import tfv1
from ..loop.callback import Callback
from ..tfutils.common import check_tensor_names
from ..tfutils.inference_tower import build_or_reuse_placeholder
from ..tfutils.tower_func import check_input_signature
from ..utils.argtools import call_only_once, memoized_method

__all__ = ['InputSource', 'FeedfreeInput', 'ProxyInputSource', 'build_or_reuse_placeholder',
           'remap_input_source', 'is_position_key']

_POSITION_NAME = 'DataPosition({})'


def is_position_key(key):
    """Whether ``key`` of a resume state's callbacks (see
    :meth:`~tensorpack_lite.loop.dispatch.Callbacks.get_states`) is an input source's data position."""
    return key.startswith(_POSITION_NAME.format('')[:-1])


class _StartSource(Callback):
    """Resets an input source before training, and carries its data position: saved with every
    checkpoint (:meth:`InputSource.get_state`), put back before training in a resumed run."""

    def __init__(self, source):
        self._source = source
        self._resume = None

    def _before_train(self):
        self._source.reset_state()
        if self._resume is not None:
            self._source.set_state(self._resume)

    def _get_state(self):
        return self._source.get_state() if self._source.reports_position else None

    def _set_state(self, state):
        self._resume = state

    def __str__(self):
        return _POSITION_NAME.format(type(self._source).__name__)


class InputSource:
    """Base class of input pipelines for a trainer.

    Subclasses implement ``_setup(input_signature)``, ``_get_input_tensors()`` and may add
    ``_get_callbacks()``, ``_reset_state()`` and ``_size()``; a source fed by a DataFlow adds
    ``_get_state()``/``_set_state()``, the position of what training consumed of it.
    """

    _name_scope = None
    _setup_done = False

    reports_position = True
    """Whether this source's first callback saves its data position with each checkpoint. A
    source that takes its data ahead of training from another one (:class:`StagingInput`) sets
    it False on the one it wraps and reports the position itself."""

    def get_input_tensors(self):
        """The input tensors, in the order of the input signature. Called once per tower."""
        return self._get_input_tensors()

    def _get_input_tensors(self):
        raise NotImplementedError("{} does not implement _get_input_tensors()".format(type(self).__name__))

    @call_only_once
    def setup(self, input_signature):
        """Build what the source needs for ``input_signature`` (a list of tf.TensorSpec) and
        return its callbacks."""
        input_signature = check_input_signature(input_signature, '{}.setup()'.format(type(self).__name__))
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
        callbacks = self._get_reset_callbacks() + self._get_callbacks()
        for cb in callbacks:
            cb.set_chief_only(False)
        return callbacks

    def _get_reset_callbacks(self):
        """The callbacks, first of all, that reset the source before training (and carry its
        data position)."""
        return [_StartSource(self)]

    def _get_callbacks(self):
        return []

    def reset_state(self):
        """Start (or restart) producing data. Called by a callback before training."""
        self._reset_state()

    def _reset_state(self):
        pass

    def get_state(self, held_back=0):
        """The data position after what training consumed, to be given to :meth:`set_state`
        in a resumed run; None for a source without one (tensors, ``tf.data``, ZeroMQ).
        ``held_back``: datapoints taken from this source that training has not consumed yet
        (staged ahead by a wrapper). Called between steps, in the default session."""
        return self._get_state(held_back)

    def _get_state(self, held_back):
        return None

    def set_state(self, state):
        """Go back to a position :meth:`get_state` gave; called after :meth:`reset_state`,
        before the source produces anything."""
        self._set_state(state)

    def _set_state(self, state):
        raise NotImplementedError("{} has no data position to restore".format(type(self).__name__))

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

    The wrapped source's callbacks (which reset it before training) are the proxy's, and
    resetting the proxy resets the wrapped source."""

    def __init__(self, input):
        if not isinstance(input, InputSource):
            raise TypeError("{} wraps an InputSource, got {!r}".format(type(self).__name__, input))
        self._input = input

    def _get_input_tensors(self):
        return self._input.get_input_tensors()

    def _setup(self, input_signature):
        self._input.setup(input_signature)

    def _get_reset_callbacks(self):
        return []   # the wrapped source's own callbacks reset it

    def _get_callbacks(self):
        return self._input.get_callbacks()

    def _size(self):
        return self._input.size()

    def _reset_state(self):
        self._input.reset_state()

    def _get_state(self, held_back):
        return self._input.get_state(held_back)

    def _set_state(self, state):
        self._input.set_state(state)


class _RemappedInput(ProxyInputSource):
    """The source made by :func:`remap_input_source`: the wrapped source gives the inputs
    ``names``, placeholders give the others."""

    def __init__(self, input, names):
        super().__init__(input)
        self._names = tuple(check_tensor_names(names, 'remap_input_source', empty=False))

    def _setup(self, input_signature):
        specs = {spec.name: spec for spec in input_signature}
        unknown = [name for name in self._names if name not in specs]
        if unknown:
            raise ValueError("remap_input_source: {} are not inputs of the model, whose inputs are {}".format(
                unknown, [spec.name for spec in input_signature]))
        self._signature = list(input_signature)
        self._placeholders = {spec.name: build_or_reuse_placeholder(spec) for spec in input_signature
                              if spec.name not in self._names}
        self._input.setup([specs[name] for name in self._names])

    def _get_input_tensors(self):
        produced = self._input.get_input_tensors()
        if len(produced) != len(self._names):
            raise ValueError("remap_input_source: {} gives {} tensors for the {} names {}".format(
                type(self._input).__name__, len(produced), len(self._names), list(self._names)))
        mapped = dict(zip(self._names, produced))
        return [mapped[spec.name] if spec.name in mapped else self._placeholders[spec.name]
                for spec in self._signature]

    def __str__(self):
        return 'Remapped{}({})'.format(type(self._input).__name__, ', '.join(self._names))


class _RemappedFeedfreeInput(_RemappedInput, FeedfreeInput):
    """:func:`remap_input_source` of a :class:`FeedfreeInput`: still a FeedfreeInput."""


def remap_input_source(input, names):
    """Use an InputSource with a model whose inputs are not exactly the source's components.

    The source's components are the inputs ``names``, in this order; every other input of
    the model is a placeholder (fed by nothing: the model must not need it, or something
    else must feed it). The result is an InputSource, and a :class:`FeedfreeInput` when
    ``input`` is one; its size, callbacks and resets are ``input``'s.

    Args:
        input (InputSource): gives one tensor per name.
        names (list[str]): the names of the model's inputs that ``input`` gives, in the
            order of its components.

    Example::

        # the model takes inputs 'score', 'label', 'image'; the DataFlow gives [image, label]
        source = remap_input_source(QueueInput(ds), ['image', 'label'])
        # 'score' is a placeholder
    """
    if not isinstance(input, InputSource):
        raise TypeError("remap_input_source takes an InputSource, got {!r}".format(input))
    if isinstance(input, FeedfreeInput):
        return _RemappedFeedfreeInput(input, names)
    return _RemappedInput(input, names)
