"""Default callbacks and monitors of a training run."""

from ..callbacks.monitor import MonitorBase

__all__ = ['DEFAULT_CALLBACKS', 'DEFAULT_MONITORS']


def DEFAULT_CALLBACKS():
    """The callbacks every training gets unless told otherwise."""
    return []


def DEFAULT_MONITORS():
    """The monitors every training gets unless told otherwise."""
    return []
