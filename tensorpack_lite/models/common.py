"""What custom layers need, in one import (as tensorpack's ``models.common``)::

    from tensorpack_lite.models.common import layer_register, VariableHolder
"""

from .registry import disable_layer_logging, get_registered_layer, layer_register
from .tflayer import rename_tflayer_get_variable
from .utils import VariableHolder

__all__ = ['layer_register', 'VariableHolder', 'rename_tflayer_get_variable', 'get_registered_layer',
           'disable_layer_logging']
