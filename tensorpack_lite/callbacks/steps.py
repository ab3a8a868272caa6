"""Callbacks that act on every step."""

from ..compat import tfv1
from ..tfutils.common import get_global_step_var
from ..utils import logger
from .base import Callback

__all__ = ['MaintainStepCounter']

GLOBAL_STEP_INCR_OP_NAME = 'global_step_incr'


class MaintainStepCounter(Callback):
    """Increments the global step variable on every ``hooked_sess.run`` and keeps the
    trainer's Python-side counter equal to it.

    Every trainer registers it first. The increment rides along with the step's own
    ``sess.run``, so it costs no extra call.
    """

    _chief_only = False

    def _setup_graph(self):
        step_var = get_global_step_var()
        with tfv1.name_scope(None):
            self.increment_op = tfv1.assign_add(step_var, 1, name=GLOBAL_STEP_INCR_OP_NAME).op
        self._fetches = tfv1.train.SessionRunArgs(self.increment_op)

    def _before_train(self):
        if self.global_step != 0:
            logger.info("Start training with global_step={}".format(self.global_step))

    def _before_run(self, _):
        return self._fetches

    def _after_run(self, _, __):
        self.trainer.loop.increment_global_step()
