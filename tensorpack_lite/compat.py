"""The single place where TensorFlow is imported.

Every other module of tensorpack_lite obtains TensorFlow from here, so that a missing
installation produces one clear error, and so that graph mode is switched on once.

``tfv1`` is ``tf.compat.v1``; tensorpack code conventionally starts with
``from tensorpack_lite import tfv1 as tf``.
"""

try:
    import tensorflow as tf
except ImportError as err:  # pragma: no cover - exercised in a subprocess test
    raise ImportError(
        "tensorpack_lite needs TensorFlow 2.x, which could not be imported ({}). "
        "Install one flavour of it, e.g. `pip install tensorflow-cpu` (CPU only), "
        "`pip install tensorflow`, or `pip install 'tensorflow[and-cuda]'`.".format(err)) from err

__all__ = ['tf', 'tfv1', 'is_tf_version_at_least']

tfv1 = tf.compat.v1

# tensorpack_lite is a graph-mode library: every op is built into a tf.Graph and run in a
# tf.compat.v1.Session. Eager execution (TF 2.x's default) would run ops immediately and
# forbid placeholders, so it is turned off for the process. See docs/differences.md.
tfv1.disable_eager_execution()


def is_tf_version_at_least(major, minor):
    """Whether the installed TensorFlow is at least ``major.minor``."""
    version = tuple(int(x) for x in tf.__version__.split('.')[:2])
    return version >= (major, minor)
