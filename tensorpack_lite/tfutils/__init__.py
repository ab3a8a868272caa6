"""TensorFlow utilities. Import the submodules directly, as in tensorpack:
``from tensorpack_lite.tfutils.sessinit import SessionInit``. (``tfutils.export`` builds on
predictors and input sources, so it is not imported here: import it by its full name.)"""

from . import (argscope, collection, common, gradproc, hooked_session, model_utils, optimizer,
               scope_utils, sesscreate, sessinit, summary, tower, varmanip, varreplace)
from .common import get_global_step_value, get_global_step_var
from .tower import TowerContext, get_current_tower_context

__all__ = ['argscope', 'collection', 'common', 'gradproc', 'hooked_session', 'model_utils', 'optimizer',
           'scope_utils', 'sesscreate', 'sessinit', 'summary', 'tower', 'varmanip', 'varreplace',
           'get_global_step_var', 'get_global_step_value', 'TowerContext',
           'get_current_tower_context']
