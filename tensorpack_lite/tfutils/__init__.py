"""TensorFlow utilities. Import the submodules directly, as in tensorpack:
``from tensorpack_lite.tfutils.sessinit import SessionInit``."""

from . import collection, common, hooked_session, model_utils, sesscreate, sessinit, summary
from .common import get_global_step_value, get_global_step_var

__all__ = ['collection', 'common', 'hooked_session', 'model_utils', 'sesscreate', 'sessinit',
           'summary', 'get_global_step_var', 'get_global_step_value']
