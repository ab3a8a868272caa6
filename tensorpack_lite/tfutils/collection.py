"""Save and restore graph collections around code that should not change them."""

from contextlib import contextmanager

from ..compat import tfv1
from ..utils import logger

__all__ = ['backup_collection', 'restore_collection', 'freeze_collection', 'CollectionGuard']


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


def _graphkey_names():
    """Map each ``tf.compat.v1.GraphKeys`` value to its attribute name, for readable logs.

    The class dict is read rather than ``getattr``: deprecated keys (``VARIABLES``) are
    properties there, and reading them would log TensorFlow's deprecation warning."""
    names = {}
    for attr, value in sorted(vars(tfv1.GraphKeys).items()):
        if not attr.startswith('_') and isinstance(value, str):
            names.setdefault(value, attr)
    return names


class CollectionGuard(object):
    """Watch the collections of the default graph while a tower is built.

    On enter, every collection is backed up. On exit:

    * the collections in ``freeze_keys`` are put back as they were (what the tower added to
      them is dropped);
    * when ``check_diff`` is True, the collections the tower created or resized are logged,
      except those in ``diff_whitelist`` (by default the variable collections, queue runners,
      cond/while contexts and losses, which every tower is expected to touch).

    :meth:`get_collection_in_tower` gives what was added to a collection inside the block.

    Example::

        guard = CollectionGuard('tower1', check_diff=True,
                                freeze_keys=[tf.GraphKeys.SUMMARIES])
        with guard:
            build_model()
        guard.get_collection_in_tower(tf.GraphKeys.UPDATE_OPS)   # the tower's update ops
    """

    def __init__(self, name, check_diff, freeze_keys=(), diff_whitelist=None):
        """
        Args:
            name (str): the tower's name, used in log messages.
            check_diff (bool): log which collections were created or changed in size.
            freeze_keys (list[str]): collections restored on exit.
            diff_whitelist (list[str]): collections never reported by ``check_diff``;
                None means :meth:`default_diff_whitelist`.
        """
        self._name = name
        self._check_diff = bool(check_diff)
        self._freeze_keys = list(freeze_keys)
        self._whitelist = set(self.default_diff_whitelist() if diff_whitelist is None
                              else diff_whitelist)
        self._key_names = _graphkey_names()
        self._graph = None
        self._original = None
        self._freeze_backup = None
        self._on_exit = None

    @staticmethod
    def default_diff_whitelist():
        """Collections a tower is expected to change, hence not worth reporting."""
        keys = [tfv1.GraphKeys.TRAINABLE_VARIABLES, tfv1.GraphKeys.GLOBAL_VARIABLES,
                tfv1.GraphKeys.LOCAL_VARIABLES, tfv1.GraphKeys.QUEUE_RUNNERS]
        for attr in ('COND_CONTEXT', 'WHILE_CONTEXT', 'LOSSES'):
            if hasattr(tfv1.GraphKeys, attr):
                keys.append(getattr(tfv1.GraphKeys, attr))
        return keys

    @property
    def freeze_keys(self):
        """The collections restored on exit."""
        return list(self._freeze_keys)

    def _key_name(self, key):
        return self._key_names.get(key, key)

    def __enter__(self):
        if self._original is not None:
            raise RuntimeError("CollectionGuard '{}' cannot be entered twice.".format(self._name))
        self._graph = tfv1.get_default_graph()
        self._original = backup_collection()
        self._freeze_backup = backup_collection(self._freeze_keys)
        return self

    def __exit__(self, exc_type, exc_val, exc_tb):
        with self._graph.as_default():
            current = backup_collection()
            if self._check_diff and exc_type is None:
                self._log_diff(current)
            self._restore_frozen(current, log=exc_type is None)
            self._on_exit = backup_collection()
        return False

    def _log_diff(self, current):
        created, resized = [], []
        for key, items in current.items():
            if key in self._whitelist or key in self._freeze_keys:
                continue
            if key not in self._original:
                if items:
                    created.append("{} ({} items)".format(self._key_name(key), len(items)))
            elif len(self._original[key]) != len(items):
                resized.append("{}: {} -> {}".format(
                    self._key_name(key), len(self._original[key]), len(items)))
        if created:
            logger.info("Collections created in tower '{}': {}".format(
                self._name, ', '.join(created)))
        if resized:
            logger.info("Collections resized in tower '{}': {}".format(
                self._name, ', '.join(resized)))

    def _restore_frozen(self, current, log):
        changed = []
        for key, items in self._freeze_backup.items():
            now = current.get(key, [])
            if len(now) != len(items):
                changed.append("{}: {} -> {}".format(self._key_name(key), len(items), len(now)))
        if changed and log:
            logger.info("Collections changed in tower '{}' and restored (frozen there): {}".format(
                self._name, ', '.join(changed)))
        restore_collection(self._freeze_backup)

    def get_collection_in_tower(self, key):
        """The items added to collection ``key`` inside the block, in the order they were
        added. Inside the block this reflects the graph as it is now; after the block, the
        collections as they were on exit (so later towers do not leak in, and additions to
        frozen collections, which were discarded, are not reported)."""
        if self._original is None:
            raise RuntimeError("CollectionGuard '{}' has not been entered yet.".format(self._name))
        if self._on_exit is not None:
            items = self._on_exit.get(key, [])
        else:
            items = self._graph.get_collection(key)
        before = {id(item) for item in self._original.get(key, [])}
        return [item for item in items if id(item) not in before]
