"""Layers written on ``tf.compat.v1`` ops with tensorpack's variable names, plus
``layer_register``, ``LinearWrap`` and the regularization helpers. ``argscope`` lives in
:mod:`tensorpack_lite.tfutils.argscope`.

Example::

    from tensorpack_lite.models import Conv2D, MaxPooling, FullyConnected, BatchNorm
    from tensorpack_lite.tfutils.argscope import argscope

    with argscope(Conv2D, kernel_size=3, activation=tf.nn.relu):
        x = Conv2D('conv0', image, 32)
        x = MaxPooling('pool0', x, 2)
    logits = FullyConnected('fc', x, 10)
"""

from .batch_norm import BatchNorm, BatchRenorm
from .conv2d import Conv2D, Conv2DTranspose, Deconv2D
from .fc import FullyConnected
from .layer_norm import InstanceNorm, LayerNorm
from .linearwrap import LinearWrap
from .nonlin import BNReLU, LeakyReLU, Maxout, PReLU
from .pool import AvgPooling, FixedUnPooling, GlobalAvgPooling, MaxPooling
from .registry import disable_layer_logging, get_registered_layer, layer_register
from .regularize import (Dropout, l1_regularizer, l2_regularizer, regularize_cost,
                         regularize_cost_from_collection)
from .shapes import ConcatWith
from .tflayer import rename_tflayer_get_variable
from .utils import VariableHolder

__all__ = [
    'layer_register', 'get_registered_layer', 'disable_layer_logging', 'VariableHolder',
    'rename_tflayer_get_variable', 'LinearWrap',
    'Conv2D', 'Conv2DTranspose', 'Deconv2D', 'FullyConnected',
    'BatchNorm', 'BatchRenorm', 'LayerNorm', 'InstanceNorm',
    'MaxPooling', 'AvgPooling', 'GlobalAvgPooling', 'FixedUnPooling',
    'Dropout', 'LeakyReLU', 'PReLU', 'BNReLU', 'Maxout', 'ConcatWith',
    'regularize_cost', 'regularize_cost_from_collection', 'l2_regularizer', 'l1_regularizer',
]
