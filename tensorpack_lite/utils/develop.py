"""Helpers for the library's own development: optional dependencies and deprecation notes
(:func:`log_deprecated`, and the :func:`deprecated` decorator).

Optional packages (OpenCV, lmdb, h5py, ...) are imported on first use through
:func:`import_optional`, so that a missing one is a single ImportError that names the
package, the feature that needs it and the command that installs it::

    cv2 = import_optional('cv2', extra='image', purpose='image augmentation')

:class:`LazyModule` stands for a submodule that is imported on first use, so that a package
can offer it as an attribute (``tensorpack_lite.imgaug``) without paying for, or requiring,
what it imports.
"""

import collections
import functools
import importlib
import types

from . import logger
from .argtools import log_once

__all__ = ['import_optional', 'log_deprecated', 'deprecated', 'LazyModule']

# The pip distribution that provides an importable module, where the two names differ.
_DISTRIBUTION_OF = {
    'cv2': 'opencv-python-headless',
    'h5py': 'h5py',
    'lmdb': 'lmdb',
    'scipy': 'scipy',
    'sklearn': 'scikit-learn',
}


def import_optional(module_name, extra=None, purpose=None):
    """Import and return ``module_name``, or raise one ImportError saying how to install it.

    Args:
        module_name (str): the module to import, e.g. ``'cv2'``.
        extra (str): the tensorpack_lite extra that installs it (``pip install tensorpack_lite[extra]``).
        purpose (str): what needs it, for the message (e.g. ``'LMDBSerializer'``).
    """
    try:
        return importlib.import_module(module_name)
    except ImportError as err:
        top_level = module_name.split('.')[0]
        distribution = _DISTRIBUTION_OF.get(top_level, top_level)
        how = "pip install {}".format(distribution)
        if extra is not None:
            how += " (or: pip install 'tensorpack_lite[{}]')".format(extra)
        raise ImportError("{} needs the Python package '{}', which could not be imported ({}). "
                          "Install it with: {}".format(purpose or 'This feature', distribution, err, how)
                          ) from err


def log_deprecated(name='', text='', eos='', max_num_warnings=None):
    """Log a warning that ``name`` is deprecated, with ``text`` (what to do instead) and ``eos``,
    the date after which it goes (``'YYYY-MM-DD'``).

    Args:
        max_num_warnings (int): log the same warning at most this many times; by default once
            per process.
    """
    if not name and not text:
        raise ValueError("log_deprecated() needs a name or a text")
    message = "{} is deprecated.".format(name) if name else ""
    if text:
        message = (message + " " + text).strip()
    if eos:
        message += " It will be removed after {}.".format(eos)
    if max_num_warnings is None:
        log_once(message, 'warn')
    elif _WARNINGS_LOGGED[message] < max_num_warnings:
        _WARNINGS_LOGGED[message] += 1
        logger.warn(message)


_WARNINGS_LOGGED = collections.Counter()


def deprecated(text='', eos='', max_num_warnings=None):
    """A decorator that makes a function log :func:`log_deprecated` (with these arguments)
    each time it is called, then run as before.

    Example::

        @deprecated("Use GANTrainer(num_gpu=...) instead.", "2019-01-31")
        def make_trainer(...):
            ...
    """
    def decorate(func):
        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            log_deprecated(func.__qualname__, text, eos, max_num_warnings)
            return func(*args, **kwargs)
        return wrapper
    return decorate


class LazyModule(types.ModuleType):
    """A placeholder for the module ``import_name``, imported when one of its attributes is first read.

    Example::

        imgaug = LazyModule('tensorpack_lite.dataflow.imgaug')   # nothing imported yet
        imgaug.Flip(horiz=True)                                    # imports it now
    """

    def __init__(self, import_name):
        super().__init__(import_name)
        self.__lazy_import_name = import_name

    def __load(self):
        return importlib.import_module(self.__lazy_import_name)

    def __getattr__(self, name):
        # Only called for attributes the placeholder itself lacks: everything of the real module.
        return getattr(self.__load(), name)

    def __dir__(self):
        return dir(self.__load())

    def __repr__(self):
        return "<lazily imported module '{}'>".format(self.__lazy_import_name)
