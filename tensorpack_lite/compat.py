"""The single place where TensorFlow is imported.

Every other module of tensorpack_lite obtains TensorFlow from here, so that a missing
installation produces one clear error. Importing it changes nothing in TensorFlow: graph mode
is switched on by :func:`enable_graph_mode` when a trainer, predictor or exporter is set up,
as tensorpack does.

``tfv1`` is ``tf.compat.v1``; tensorpack code conventionally starts with
``from tensorpack_lite import tfv1 as tf``.
"""

import importlib

try:
    import tensorflow as tf
except ImportError as err:  # pragma: no cover - exercised in a subprocess test
    raise ImportError(
        "tensorpack_lite needs TensorFlow 2.x, which could not be imported ({}). "
        "Install one flavour of it, e.g. `pip install tensorflow-cpu` (CPU only), "
        "`pip install tensorflow`, or `pip install 'tensorflow[and-cuda]'`.".format(err)) from err

__all__ = ['tf', 'tfv1', 'tf_internal', 'is_tf_version_at_least', 'enable_graph_mode']

tfv1 = tf.compat.v1


def enable_graph_mode():
    """Switch TensorFlow to graph mode for the process (again: it is idempotent).

    tensorpack_lite builds every op into a ``tf.Graph`` and runs it in a
    ``tf.compat.v1.Session``; eager execution (TF 2.x's default) would run ops at once and
    forbid placeholders. Trainers, offline predictors and exporters call it when they are set
    up; code that builds a graph by hand before (at the top level, outside
    ``with tf.Graph().as_default()``) calls it first. See docs/differences.md.
    """
    tfv1.disable_eager_execution()


def tf_internal(name):
    """A module of TensorFlow that its public API does not offer, by its path under
    ``tensorflow`` (``'core.protobuf.config_pb2'``, ``'python.client.timeline'``...), imported on
    first use: the way the rest of the library reaches them."""
    return importlib.import_module('tensorflow.' + name)


def is_tf_version_at_least(major, minor):
    """Whether the installed TensorFlow is at least ``major.minor``."""
    version = tuple(int(x) for x in tf.__version__.split('.')[:2])
    return version >= (major, minor)
