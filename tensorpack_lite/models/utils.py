"""Helpers shared by the layers: the ``variables`` holder of a layer's output, input checks
that name the layer, and the finishing steps (activation, ``output`` tensor)."""

from ..compat import tf, tfv1
from ..utils import logger
from ..utils.argtools import graph_memoized
from .registry import current_layer_description

__all__ = ['VariableHolder', 'describe_layer', 'check_input_rank', 'known_dim', 'finish_output',
           'shape_text', 'static_or_dynamic_shape', 'shape_argument', 'broadcastable',
           'affine_variables', 'log_once_per_graph']


class VariableHolder(object):
    """The variables of a layer, as attributes: ``Conv2D(...).variables.W``.

    Example::

        out = FullyConnected('fc', x, 10)
        out.variables.W, out.variables.b
    """

    def __init__(self, **kwargs):
        self._vars = {}
        for name, var in kwargs.items():
            self._add_variable(name, var)

    def _add_variable(self, name, var):
        self._vars[name] = var
        object.__setattr__(self, name, var)

    def __setattr__(self, name, var):
        if name.startswith('_'):
            object.__setattr__(self, name, var)
        else:
            self._add_variable(name, var)

    def all(self):
        """All the variables held, in the order they were added."""
        return list(self._vars.values())

    def __repr__(self):
        return "VariableHolder({})".format(', '.join(sorted(self._vars)))


@graph_memoized
def log_once_per_graph(message, level='info'):
    """Log ``message`` with ``logger.<level>`` once per default graph (a new model logs
    again)."""
    getattr(logger, level)(message)


def describe_layer(layer_type):
    """How errors name the layer being built, e.g. ``"Conv2D 'conv1'"``."""
    return current_layer_description() or layer_type


def shape_text(shape):
    """A static shape as text: ``(None, 64)``, or ``<unknown>`` for an unknown rank."""
    return '<unknown>' if shape.rank is None else str(tuple(shape.as_list()))


def check_input_rank(x, ranks, layer_type):
    """Raise ValueError naming the layer unless ``x`` has one of the ``ranks``."""
    if x.shape.rank not in ranks:
        raise ValueError("{} expects a {} input, got shape {}".format(
            describe_layer(layer_type), ' or '.join('{}-D'.format(r) for r in ranks), shape_text(x.shape)))


def known_dim(x, axis, what, layer_type):
    """The static size of ``x`` on ``axis`` (e.g. the channels); ValueError naming the layer
    when it is unknown."""
    size = x.shape.as_list()[axis]
    if size is None:
        raise ValueError("{} needs the {} of its input (axis {}) to be known, got shape {}".format(
            describe_layer(layer_type), what, axis, shape_text(x.shape)))
    return size


def static_or_dynamic_shape(x):
    """The shape of ``x`` as a list: the static size where known, else a scalar tensor."""
    static = x.shape.as_list()
    dynamic = tf.shape(x)
    return [size if size is not None else dynamic[i] for i, size in enumerate(static)]


def shape_argument(dims):
    """A list of ints and scalar tensors as a shape argument (stacked when it holds tensors)."""
    if any(isinstance(d, tf.Tensor) for d in dims):
        return tf.stack(dims)
    return dims


def broadcastable(vector, ndims, axis):
    """``vector`` of shape [C] reshaped to broadcast along ``axis`` of a rank-``ndims`` input."""
    if vector is None or axis == ndims - 1:
        return vector
    shape = [1] * ndims
    shape[axis] = -1
    return tf.reshape(vector, shape)


def affine_variables(num_chan, center, scale, beta_initializer, gamma_initializer, dtype):
    """The per-channel shift ``beta`` (when ``center``) and scale ``gamma`` (when ``scale``) of
    a normalization layer, each None when not wanted."""
    beta = tfv1.get_variable('beta', [num_chan], dtype=dtype, initializer=beta_initializer) \
        if center else None
    gamma = tfv1.get_variable('gamma', [num_chan], dtype=dtype,
                              initializer=gamma_initializer or tfv1.ones_initializer()) if scale else None
    return beta, gamma


def finish_output(x, activation=None, activity_regularizer=None, **variables):
    """Apply ``activation``, register ``activity_regularizer(output)`` in
    ``REGULARIZATION_LOSSES``, name the result ``output`` and attach ``variables`` to it as a
    :class:`VariableHolder`."""
    if activation is not None:
        x = activation(x)
    out = tf.identity(x, name='output')
    if activity_regularizer is not None:
        tfv1.add_to_collection(tfv1.GraphKeys.REGULARIZATION_LOSSES, activity_regularizer(out))
    out.variables = VariableHolder(**{k: v for k, v in variables.items() if v is not None})
    return out
