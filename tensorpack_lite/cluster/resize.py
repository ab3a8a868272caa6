"""A request to resize a running job: the engine that started the job (e.g.
:func:`~tensorpack_lite.cluster.ray.launch_on_ray`) has more room than the job uses and asks the
chief to end training once the current epoch has ended, so that it can start the job again with
more workers, which resumes from that epoch's end (``TrainConfig(elastic=...)`` says what the new
size changes).

The request is a file on the chief's machine, named by ``$TENSORPACK_LITE_RESIZE_REQUEST`` in the
chief's environment: the engine creates it (its text says why); the chief's elastic callback
(:mod:`tensorpack_lite.train.elastic`) looks for it at each epoch's end, asks every worker to stop
(``trainer.request_stop``) and answers with ``<file>.ack`` holding the epoch it stops after. An
ended job without the answer ran to its end. No TensorFlow is imported here.

Example (the engine's side)::

    channel = ResizeChannel('/tmp/job/resize')       # the chief runs with RESIZE_REQUEST_VARIABLE set to it
    channel.request('a node with room for one more worker joined')
    ...                                              # the job ends
    channel.acknowledged()                           # 3: it stopped after epoch 3 to be resized
"""

import os

__all__ = ['RESIZE_REQUEST_VARIABLE', 'ResizeChannel']

RESIZE_REQUEST_VARIABLE = 'TENSORPACK_LITE_RESIZE_REQUEST'
"""The environment variable naming the chief's resize request file (set by the engine)."""


class ResizeChannel:
    """The request file ``path`` and its answer ``path + '.ack'``."""

    def __init__(self, path):
        self.path = str(path)

    @classmethod
    def from_environ(cls, environ=None):
        """The channel named by :data:`RESIZE_REQUEST_VARIABLE`, or None where it is not set."""
        environ = os.environ if environ is None else environ
        path = environ.get(RESIZE_REQUEST_VARIABLE)
        return cls(path) if path else None

    @property
    def _ack(self):
        return self.path + '.ack'

    def request(self, why):
        """Ask the chief to stop after the current epoch (``why``: for its log)."""
        _write(self.path, why)

    def requested(self):
        """Why a resize was requested, or None."""
        return _read(self.path)

    def acknowledge(self, epoch):
        """Say that training stops after epoch ``epoch`` to be resized."""
        _write(self._ack, str(int(epoch)))

    def acknowledged(self):
        """The epoch training stopped after for the resize, or None."""
        text = _read(self._ack)
        return None if text is None else int(text)

    def clear(self):
        """Remove the request and its answer (before the job starts again)."""
        for path in (self.path, self._ack):
            try:
                os.remove(path)
            except FileNotFoundError:
                pass


def _write(path, text):
    temporary = path + '.tmp'
    with open(temporary, 'w') as f:
        f.write(text)
    os.replace(temporary, path)       # the reader sees the whole text or no file


def _read(path):
    try:
        with open(path) as f:
            return f.read()
    except FileNotFoundError:
        return None
