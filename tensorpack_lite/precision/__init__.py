"""Mixed precision: training in 16 bits with a float32 model (variables, optimizer slots,
checkpoints stay float32; TensorFlow's grappler rewrite computes the heavy ops in bfloat16 or
float16). See docs/mixed_precision.md.

- :mod:`~tensorpack_lite.precision.mixed_precision`: the modes (:class:`MixedPrecision`), the
  session rewrite of each (:func:`mixed_precision_session_config`), the check that TensorFlow
  can apply it (:class:`MixedPrecisionError`) and the measure of what it did
  (:class:`PrecisionReport`).
- :mod:`~tensorpack_lite.precision.loss_scale`: dynamic loss scaling for 'fp16'
  (:class:`DynamicLossScale`, :class:`LossScaleOptimizer`).

It builds on ``tfutils`` (the default session config, ``ProxyOptimizer``); the trainers and the
layers (``models.layout``) use it.

Example::

    trainer.mixed_precision = 'bf16'     # or TrainConfig(mixed_precision='bf16')
    config = mixed_precision_session_config('bf16')   # for a session the trainers do not make
"""

from . import loss_scale, mixed_precision
from .loss_scale import DynamicLossScale, LossScaleOptimizer
from .mixed_precision import (MixedPrecision, MixedPrecisionError, PrecisionReport, expect_float16_rewrite,
                              mixed_precision_session_config)

__all__ = ['MixedPrecision', 'mixed_precision_session_config', 'MixedPrecisionError', 'PrecisionReport',
           'expect_float16_rewrite', 'DynamicLossScale', 'LossScaleOptimizer',
           'loss_scale', 'mixed_precision']
