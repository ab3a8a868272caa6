"""The training loop's shared parts, below everything that plugs into it: the run state
(:class:`TrainLoop`, :class:`Schedule`), the Callback protocol (:class:`Callback`) and the
dispatcher that runs a group of callbacks (:class:`Callbacks`).

Input sources, callbacks, predictors and trainers all build on these; the public names are
also exported where tensorpack has them (``tensorpack_lite.callbacks``, ``tensorpack_lite.train``).
"""

from .callback import Callback, CallbackFactory, ProxyCallback
from .dispatch import Callbacks, CallbackToHook
from .state import Schedule, TrainLoop

__all__ = ['Callback', 'CallbackFactory', 'ProxyCallback', 'Callbacks', 'CallbackToHook', 'Schedule',
           'TrainLoop']
