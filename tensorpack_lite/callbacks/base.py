"""The Callback interface (tensorpack's path to it): defined in :mod:`tensorpack_lite.loop.callback`,
below the input sources that use it too."""

from ..loop.callback import Callback, CallbackFactory, ProxyCallback

__all__ = ['Callback', 'ProxyCallback', 'CallbackFactory']
