""":class:`TensorBoardHParams` at its documented path: the name of
:mod:`tensorpack_lite.callbacks.monitors.hparams` (its home), the same object."""

from .monitors.hparams import TensorBoardHParams

__all__ = ['TensorBoardHParams']
