"""Save and restore graph collections around code that should not change them."""

from contextlib import contextmanager

from ..compat import tfv1

__all__ = ['backup_collection', 'restore_collection', 'freeze_collection']


def backup_collection(keys=None):
    """A copy of the given collections of the default graph (all of them when ``keys`` is None),
    as a dict ``key -> list``."""
    graph = tfv1.get_default_graph()
    if keys is None:
        keys = graph.get_all_collection_keys()
    return {key: list(graph.get_collection(key)) for key in keys}


def restore_collection(backup):
    """Make each collection of the default graph hold exactly what ``backup`` holds for it."""
    graph = tfv1.get_default_graph()
    for key, items in backup.items():
        ref = graph.get_collection_ref(key)
        ref[:] = items


@contextmanager
def freeze_collection(keys):
    """Anything added to the collections ``keys`` inside the block is discarded on exit.

    Example::

        with freeze_collection([tf.GraphKeys.SUMMARIES]):
            build_inference_tower()   # its summaries do not reach the training summaries
    """
    backup = backup_collection(keys)
    try:
        yield
    finally:
        restore_collection(backup)
