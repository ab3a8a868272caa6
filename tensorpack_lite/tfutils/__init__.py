"""TensorFlow utilities: argscope, session initialisation (restoring models), the tower
context, the global step, the default session config and environment info.

As in tensorpack, the most used names are here (``from tensorpack_lite.tfutils import
SmartInit, argscope``) and the submodules are imported by name
(``from tensorpack_lite.tfutils.sessinit import SaverRestore``,
``tensorpack_lite.tfutils.summary.add_moving_summary``). ``tfutils.argscope`` is the
function; its module is ``sys.modules['tensorpack_lite.tfutils.argscope']``.
(``tfutils.export`` builds on predictors and input sources, so it is not imported here:
import it by its full name.)
"""

from . import (collection, common, gradproc, model_utils, optimizer, scope_utils, sesscreate, sessinit,
               summary, tower, varmanip, varreplace)
from .argscope import argscope, enable_argscope_for_function, enable_argscope_for_module, get_arg_scope
from .common import (collect_env_info, get_default_sess_config, get_global_step_value, get_global_step_var,
                     get_tf_version_tuple)
from .sessinit import (AveragedRestore, ChainInit, DictRestore, JustCurrentSession, SaverRestore,
                       SaverRestoreRelaxed, SessionInit, SmartInit, get_model_loader)
from .tower import TowerContext, get_current_tower_context

__all__ = [
    # tower
    'get_current_tower_context', 'TowerContext',
    # common
    'get_default_sess_config', 'get_global_step_value', 'get_global_step_var', 'get_tf_version_tuple',
    'collect_env_info',
    # sessinit
    'SessionInit', 'ChainInit', 'SaverRestore', 'SaverRestoreRelaxed', 'DictRestore', 'JustCurrentSession',
    'get_model_loader', 'SmartInit', 'AveragedRestore',
    # argscope
    'argscope', 'get_arg_scope', 'enable_argscope_for_module', 'enable_argscope_for_function',
    # submodules
    'sessinit', 'summary', 'optimizer', 'sesscreate', 'gradproc', 'varreplace', 'tower',
    'collection', 'common', 'model_utils', 'scope_utils', 'varmanip',
]
