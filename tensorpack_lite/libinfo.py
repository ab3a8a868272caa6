"""Version information of tensorpack_lite."""

__all__ = ['__version__']

__version__ = '0.11.0'
