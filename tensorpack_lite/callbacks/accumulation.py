"""The accumulated gradients of an unfinished update, in the resume state of every process."""

import numpy as np

from ..loop.callback import Callback
from ..utils import logger

__all__ = ['AccumulatorState']


class AccumulatorState(Callback):
    """Keeps what a :class:`~tensorpack_lite.graph_builder.accumulation.GradientAccumulator` holds
    between the micro-batches of an update in the resume state beside each checkpoint, so that a
    run stopped in the middle of an update (SIGTERM, a periodic checkpoint) resumes it exactly.
    Every process keeps its own (each accumulates its own batches): the chief in ``.resume``, the
    others in ``.resume.<owner>``. A checkpoint taken at the end of an update stores nothing here.

    The trainer registers it when ``accumulate`` > 1.
    """

    _chief_only = False

    def __init__(self, accumulator):
        self._accumulator = accumulator
        self._restored = False

    def _micro_batches_done(self):
        return self._accumulator.micro_batches_done(self.trainer.loop.global_step)

    def _get_state(self):
        done = self._micro_batches_done()
        if done == 0:
            return None
        values = self.trainer.sess.run(self._accumulator.variables)
        names = [var.op.name for var in self._accumulator.variables]
        return {'micro_batches': done, 'accumulators': dict(zip(names, values))}

    def _set_state(self, state):
        saved = state['accumulators']
        mine = {var.op.name: var for var in self._accumulator.variables}
        if sorted(saved) != sorted(mine):
            raise ValueError("{}: the resume state holds accumulators of other variables than this run's "
                             "(saved {} ; here {}): the model or its towers changed.".format(
                                 self, ', '.join(sorted(saved)), ', '.join(sorted(mine))))
        for name, var in mine.items():
            value = np.asarray(saved[name])
            if tuple(value.shape) != tuple(var.shape.as_list()):
                raise ValueError("{}: the saved accumulator {} has the shape {}, this run's {}".format(
                    self, name, value.shape, var.shape))
            var.load(value, self.trainer.sess)
        self._restored = int(state['micro_batches'])

    def _before_train(self):
        done = self._micro_batches_done()
        if done and self._restored != done:
            logger.warn("{}: the run starts at global step {}, {} micro-batch(es) into an update of {}, "
                        "without their gradients (the checkpoint has no resume state with them): that "
                        "update averages only the micro-batches from here over {}.".format(
                            self, self.trainer.loop.global_step, done, self._accumulator.num_micro_batches,
                            self._accumulator.num_micro_batches))
        elif done:
            logger.info("Resuming an update of {} micro-batches after {} of them, with their "
                        "gradients.".format(self._accumulator.num_micro_batches, done))

    def _stat_names(self):
        return []
