"""Building ``tf.compat.v1.Summary`` protos and summary ops.

* :func:`create_scalar_summary`, :func:`create_image_summary`: protos built in Python.
* :func:`add_tensor_summary`, :func:`add_param_summary`, :func:`add_activation_summary`:
  summary ops of tensors and trainable variables.
* :func:`add_moving_summary`: summaries of the exponential moving averages of scalars.

The summary ops are only added in the main training tower (or outside any tower): a tower
that is not the main training tower, or an inference tower, adds nothing.
"""

import io
import re
from contextlib import contextmanager

import numpy as np

from ..compat import tf, tfv1
from ..utils import logger
from ..utils.argtools import graph_memoized, is_real
from ..utils.naming import MOVING_SUMMARY_OPS_KEY
from .tower_context import get_current_tower_context

__all__ = ['encode_png', 'create_scalar_summary', 'create_image_summary', 'add_tensor_summary',
           'add_param_summary', 'add_activation_summary', 'add_moving_summary', 'as_dense']


def create_scalar_summary(name, value):
    """A ``Summary`` proto holding one scalar.

    Example::

        summary = create_scalar_summary('val-error', 0.03)
    """
    summary = tfv1.Summary()
    summary.value.add(tag=name, simple_value=float(value))
    return summary


def encode_png(image):
    """PNG bytes of an HxWxC uint8 image, encoded without TensorFlow ops or extra packages."""
    import struct
    import zlib
    height, width, channels = image.shape
    color_type = {1: 0, 3: 2, 4: 6}[channels]
    raw = b''.join(b'\x00' + image[row].tobytes() for row in range(height))

    def chunk(kind, data):
        body = kind + data
        return struct.pack('>I', len(data)) + body + struct.pack('>I', zlib.crc32(body) & 0xffffffff)

    header = struct.pack('>IIBBBBB', width, height, 8, color_type, 0, 0, 0)
    out = io.BytesIO()
    out.write(b'\x89PNG\r\n\x1a\n')
    out.write(chunk(b'IHDR', header))
    out.write(chunk(b'IDAT', zlib.compress(raw, 6)))
    out.write(chunk(b'IEND', b''))
    return out.getvalue()


def create_image_summary(name, images):
    """A ``Summary`` proto of images.

    Args:
        name (str): the tag; with several images they are tagged ``name/0``, ``name/1``...
        images (np.ndarray): NHWC, HWC or HW, values in [0, 255] (clipped), with 1, 3 or 4
            channels.
    """
    images = np.asarray(images)
    if images.ndim == 2:
        images = images[np.newaxis, :, :, np.newaxis]
    elif images.ndim == 3:
        images = images[np.newaxis]
    if images.ndim != 4 or images.shape[3] not in (1, 3, 4):
        raise ValueError("create_image_summary('{}'): expected NHWC images with 1, 3 or 4 channels, "
                         "got shape {}".format(name, images.shape))
    if images.dtype != np.uint8:
        images = np.clip(images, 0, 255).astype(np.uint8)
    summary = tfv1.Summary()
    for index, image in enumerate(images):
        proto = tfv1.Summary.Image(height=image.shape[0], width=image.shape[1],
                                   colorspace=image.shape[2], encoded_image_string=encode_png(image))
        tag = name if len(images) == 1 else '{}/{}'.format(name, index)
        summary.value.add(tag=tag, image=proto)
    return summary


# ----- summary ops --------------------------------------------------------------------------

def _rms(x, name=None):
    """The root mean square of all elements of ``x``."""
    with tfv1.name_scope(name, 'rms', [x]) as scope:
        return tf.sqrt(tf.reduce_mean(tf.square(x)), name=scope)


def _summaries_allowed():
    """Whether summaries may be added here: outside towers or in the main training tower."""
    ctx = get_current_tower_context()
    return ctx is None or ctx.is_main_training_tower


def as_dense(x):
    """``x`` as a dense tensor: a ``tf.IndexedSlices`` (a sparse gradient) converted, anything else as is."""
    if isinstance(x, tf.IndexedSlices):
        return tf.convert_to_tensor(x)
    return x


@graph_memoized
def _top_level_name_scope(name):
    """The absolute name scope ``name/`` of the default graph, created on first use."""
    with tfv1.name_scope(None):
        with tfv1.name_scope(name) as scope:
            return scope


@contextmanager
def _reused_name_scope(name):
    """Enter the top-level name scope ``name`` (the same one at every call)."""
    with tfv1.name_scope(_top_level_name_scope(name)) as scope:
        yield scope


_SUMMARY_TYPES = {
    # type: (tag suffix, function of the tensor giving the value to summarize, is histogram)
    'scalar': ('-summary', lambda x: x, False),
    'histogram': ('-histogram', lambda x: x, True),
    'sparsity': ('-sparsity', lambda x: tf.nn.zero_fraction(x), False),
    'mean': ('-mean', lambda x: tf.reduce_mean(x), False),
    'rms': ('-rms', _rms, False),
}


def add_tensor_summary(x, types, name=None, collections=None, main_tower_only=True):
    """Add summary ops of a tensor, one per type.

    Types and the tags they create (under the current name scope):

    * ``'scalar'``: the value of a scalar tensor, ``<name>-summary``;
    * ``'histogram'``: a histogram of its elements, ``<name>-histogram``;
    * ``'sparsity'``: the fraction of zero elements, ``<name>-sparsity``;
    * ``'mean'``: the mean of its elements, ``<name>-mean``;
    * ``'rms'``: the root mean square of its elements, ``<name>-rms``.

    Args:
        x (tf.Tensor or tf.Variable): the tensor to summarize.
        types (list[str]): summary types, from the list above.
        name (str): the base of the tags; defaults to the op name of ``x``.
        collections (list[str]): collections of the summary ops; defaults to
            ``tf.compat.v1.GraphKeys.SUMMARIES``.
        main_tower_only (bool): add nothing when called inside a tower that is not the main
            training tower.

    Returns:
        list[tf.Tensor]: the summary ops added (empty when nothing was added).

    Example::

        with tf.name_scope('my-summaries'):
            add_tensor_summary(logits, ['histogram', 'rms', 'sparsity'], name='logits')
    """
    if isinstance(types, str):
        types = [types]
    types = list(dict.fromkeys(types))
    unknown = [t for t in types if t not in _SUMMARY_TYPES]
    if unknown:
        raise ValueError("add_tensor_summary: unknown summary type(s) {}; valid types are "
                         "{}".format(unknown, sorted(_SUMMARY_TYPES)))
    x = as_dense(x)
    if not isinstance(x, (tf.Tensor, tf.Variable)):
        raise TypeError("add_tensor_summary: expected a tf.Tensor or tf.Variable, got {!r}".format(x))
    if name is None:
        name = x.op.name
    if main_tower_only and not _summaries_allowed():
        return []
    if 'scalar' in types and x.shape.ndims not in (None, 0):
        raise ValueError("add_tensor_summary: type 'scalar' needs a scalar tensor, but '{}' has "
                         "shape {}; use 'mean' or 'rms' instead.".format(name, x.shape))
    ops = []
    for typ in types:
        suffix, value_fn, is_histogram = _SUMMARY_TYPES[typ]
        summary_fn = tfv1.summary.histogram if is_histogram else tfv1.summary.scalar
        ops.append(summary_fn(name + suffix, value_fn(x), collections=collections))
    return ops


def add_activation_summary(x, types=None, name=None, collections=None):
    """:func:`add_tensor_summary` of an activation, under the top-level name scope
    ``activation-summary``. Tensors of rank < 2 are skipped with a warning.

    Args:
        x (tf.Tensor): the activation.
        types (list[str]): summary types; defaults to ``['sparsity', 'rms', 'histogram']``.
        name (str): the base of the tags; defaults to the op name of ``x``.
        collections (list[str]): collections of the summary ops.

    Returns:
        list[tf.Tensor]: the summary ops added.
    """
    if not _summaries_allowed():
        return []
    ndims = x.shape.ndims
    if ndims is not None and ndims < 2:
        logger.warning("add_activation_summary: skipping '{}' of rank {}; it summarizes "
                       "activations of rank >= 2.".format(x.name, ndims))
        return []
    if types is None:
        types = ['sparsity', 'rms', 'histogram']
    with _reused_name_scope('activation-summary'):
        return add_tensor_summary(x, types, name=name, collections=collections)


def add_param_summary(*summary_lists, collections=None):
    """Summarize the trainable variables whose op name matches a regex, under the top-level
    name scope ``param-summary``. The regex must match the whole name (``$`` is appended
    when missing).

    Args:
        summary_lists: tuples ``(regex, types)``, ``types`` as in :func:`add_tensor_summary`.
        collections (list[str]): collections of the summary ops.

    Returns:
        list[tf.Tensor]: the summary ops added.

    Example::

        add_param_summary(('.*/W', ['histogram', 'rms']), ('.*/gamma', ['scalar']))
    """
    rules = []
    for item in summary_lists:
        if not (isinstance(item, (tuple, list)) and len(item) == 2 and isinstance(item[0], str)):
            raise TypeError("add_param_summary: each argument must be a tuple (regex, [types]), "
                            "got {!r}".format(item))
        regex, types = item
        rules.append((regex if regex.endswith('$') else regex + '$', types))
    if not _summaries_allowed():
        return []
    ops = []
    params = tfv1.get_collection(tfv1.GraphKeys.TRAINABLE_VARIABLES)
    with _reused_name_scope('param-summary'):
        for param in params:
            name = param.op.name
            for regex, types in rules:
                if re.match(regex, name):
                    ops.extend(add_tensor_summary(param, types, name=name,
                                                  collections=collections))
    return ops


def _ema_name(tensor):
    """The name of a tensor's moving average: its op name without tower prefixes."""
    return re.sub('tower[0-9]+/', '', tensor.op.name)


def _debiased_ema_update(name, value, decay, culprit):
    """Create the variables ``EMA/<name>``, ``EMA/<name>/biased`` and
    ``EMA/<name>/local_step`` at the root scope; return a tensor that performs one EMA step
    with ``value`` and evaluates to the new zero-debiased average."""
    dtype = value.dtype.base_dtype
    root_vs = tfv1.VariableScope(reuse=False, name='')
    with tfv1.variable_scope(root_vs), tfv1.name_scope('EMA/'):
        with tfv1.variable_scope('EMA', auxiliary_name_scope=False):
            def make(var_name):
                return tfv1.get_variable(var_name, shape=[], dtype=dtype, trainable=False,
                                         initializer=tfv1.zeros_initializer())
            try:
                average = make(name)
            except ValueError as err:
                if 'already exists' not in str(err):
                    raise
                raise ValueError("add_moving_summary: a moving average named '{}' already exists "
                                 "(EMA/{}); tensor '{}' needs another name.".format(
                                     name, name, culprit)) from None
            biased = make(name + '/biased')
            local_step = make(name + '/local_step')
        with tfv1.name_scope(name + '_EMA_apply'):
            decay = tf.constant(decay, dtype=dtype, name='decay')
            new_biased = tf.convert_to_tensor(
                tfv1.assign_sub(biased, (biased - value) * (1 - decay)))
            new_step = tf.convert_to_tensor(tfv1.assign_add(local_step, tf.ones([], dtype)))
            debiased = new_biased / (1 - tf.pow(decay, new_step))
            update = tf.convert_to_tensor(tfv1.assign(average, debiased))
        return tf.identity(update, name=name + '_EMA')


def add_moving_summary(*tensors, decay=0.95, collection=MOVING_SUMMARY_OPS_KEY,
                       summary_collections=None):
    """Summarize the exponential moving averages (EMA) of scalar tensors.

    For each tensor named ``name`` (tower prefixes such as ``tower0/`` removed) this creates

    * a non-trainable variable ``EMA/<name>`` (plus ``EMA/<name>/biased`` and
      ``EMA/<name>/local_step``) at the root scope, holding the zero-debiased EMA:
      ``biased_t = decay * biased_{t-1} + (1 - decay) * x_t`` and
      ``ema_t = biased_t / (1 - decay ** t)``;
    * an update op, returned and added to ``collection``, which performs one EMA step with
      the current value of the tensor and evaluates to the new EMA;
    * a scalar summary ``<name>-summary`` of the updated EMA. Evaluating the summary runs
      the update too (evaluate it along with the step, as :func:`MergeAllSummaries` does by
      default).

    Nothing is done (``[]`` is returned) inside a tower that is not the main training tower,
    in an inference tower, or under a variable scope with ``reuse=True``.

    Args:
        tensors: scalar tensors; integer tensors are averaged as float32.
        decay (float): the EMA decay, in [0, 1).
        collection (str or None): where to add the update ops; the default is run with every
            step by the :class:`MovingAverageSummary` callback. None adds them nowhere (run
            them yourself).
        summary_collections (list[str]): collections of the summary ops; defaults to
            ``tf.compat.v1.GraphKeys.SUMMARIES``.

    Returns:
        list[tf.Tensor]: one update tensor per input tensor.

    Example::

        cost = tf.reduce_mean(losses, name='cost')
        add_moving_summary(cost, accuracy)   # summaries 'cost-summary', 'accuracy-summary'
    """
    if not is_real(decay) or not 0 <= decay < 1:
        raise ValueError("add_moving_summary: decay must be a number in [0, 1), got {!r}".format(
            decay))
    if collection is not None and not isinstance(collection, str):
        raise TypeError("add_moving_summary: collection must be a collection name or None, got "
                        "{!r}".format(collection))
    for tensor in tensors:
        if not isinstance(tensor, (tf.Tensor, tf.Variable)):
            raise TypeError("add_moving_summary: expected scalar tensors as separate arguments, "
                            "got {!r}".format(tensor))
        if tensor.shape.ndims != 0:
            raise ValueError("add_moving_summary: only scalar tensors are accepted, but '{}' has "
                             "shape {}".format(tensor.name, tensor.shape))
    if not _summaries_allowed():
        return []
    if tfv1.get_variable_scope().reuse is True:
        logger.warning("add_moving_summary() called under a variable scope with reuse=True: "
                       "ignored ({}).".format(', '.join(t.name for t in tensors)))
        return []

    updates = []
    for tensor in tensors:
        name = _ema_name(tensor)
        with tfv1.name_scope(None):
            value = tensor if tensor.dtype.is_floating else tf.cast(tensor, tf.float32)
            value = tf.convert_to_tensor(value)
            update = _debiased_ema_update(name, value, decay, tensor.name)
            updates.append(update)
            tfv1.summary.scalar(name + '-summary', update, collections=summary_collections)
    if collection is not None:
        for update in updates:
            tfv1.add_to_collection(collection, update)
    return updates
