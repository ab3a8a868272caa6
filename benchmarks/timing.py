"""What the benchmarks share: a callback that times epochs."""

import time

from tensorpack_lite.callbacks import Callback

__all__ = ['EpochTimer']


class EpochTimer(Callback):
    """The time from each epoch's first step to the end of its last."""

    _chief_only = False

    def __init__(self):
        self.times = []

    def _before_epoch(self):
        self._start = time.perf_counter()

    def _after_epoch(self):
        self.times.append(time.perf_counter() - self._start)
