"""Moved: ``tensorpack_lite.tfutils.mixed_precision`` is now :mod:`tensorpack_lite.precision.mixed_precision`
(the package of mixed precision), its loss scaling :mod:`tensorpack_lite.precision.loss_scale`.
Importing this module raises an ImportError that says so."""

__all__ = []

raise ImportError("tensorpack_lite.tfutils.mixed_precision moved to "
                  "tensorpack_lite.precision.mixed_precision: import it from there (DynamicLossScale "
                  "and LossScaleOptimizer from tensorpack_lite.precision.loss_scale).")
