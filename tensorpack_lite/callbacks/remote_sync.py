"""The upload of a logger directory on object storage at epoch ends (see
:mod:`tensorpack_lite.checkpoint.remote`): the trainer adds :class:`RemoteSync` by itself when
the logger directory is a URL (``logger.set_logger_dir('s3://bucket/run')``)."""

from ..checkpoint.remote import mirror_for
from ..loop.callback import Callback
from ..utils import logger

__all__ = ['RemoteSync']


class RemoteSync(Callback):
    """Uploads what changed in a local mirror directory (``stats.json``, event files, ``log.log``...;
    the checkpoints are ModelSaver's) to the URL it mirrors: in a thread once every callback of
    an epoch's end has run (training goes on), and once more, waited for, when training ends
    (after the other callbacks' ``after_train``: place it last). A failed upload is one warning
    and is tried again at the next occasion.

    Args:
        directory (str): the mirror directory; default the logger directory.
    """

    def __init__(self, directory=None):
        self._directory = directory
        self.mirror = None

    def _setup_graph(self):
        self.mirror = mirror_for(self._directory or logger.get_logger_dir())

    def _trigger_epoch(self):
        if self.mirror is not None:   # once the epoch's callbacks wrote their files (stats.json...)
            self.after_callbacks(self.mirror.push_files_in_background)

    def _after_train(self):
        if self.mirror is not None:
            self.mirror.finish()
