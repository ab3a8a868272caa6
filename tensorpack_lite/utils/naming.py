"""Names shared across modules: graph collection keys and reserved op names."""

__all__ = ['MOVING_SUMMARY_OPS_KEY', 'GLOBAL_STEP_INCR_OP_NAME']

MOVING_SUMMARY_OPS_KEY = 'MOVING_SUMMARY_OPS'
"""Collection of the ops that update moving averages of summarized scalars; run with every
step by ``MovingAverageSummary``."""

GLOBAL_STEP_INCR_OP_NAME = 'global_step_incr'
"""Name of the op that increments the global step with every hooked run."""
