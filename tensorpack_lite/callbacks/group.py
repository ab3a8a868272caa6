"""Callbacks, the group a trainer runs (tensorpack's path to it): defined in
:mod:`tensorpack_lite.loop.dispatch`, the one dispatcher to callbacks."""

from ..loop.dispatch import Callbacks

__all__ = ['Callbacks']
