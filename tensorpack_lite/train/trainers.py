"""Single-device trainers."""

from ..input_source.input_source import QueueInput
from ..tfutils.tower import TrainTowerContext
from ..utils import logger
from .tower import SingleCostTrainer

__all__ = ['SimpleTrainer', 'NoOpTrainer', 'QueueInputTrainer']


class SimpleTrainer(SingleCostTrainer):
    """One training tower on the default device; each step applies its gradients.

    Example::

        launch_train_with_config(TrainConfig(model=Model(), dataflow=df, max_epoch=10),
                                 SimpleTrainer())
    """

    def _setup_graph(self, input, get_cost_fn, get_opt_fn):
        logger.info("Building graph for a single training tower ...")
        with TrainTowerContext(''):
            grads = self._make_get_grad_fn(input, get_cost_fn, get_opt_fn)()
            self.train_op = get_opt_fn().apply_gradients(grads, name='train_op')
        return []


class NoOpTrainer(SimpleTrainer):
    """Builds the graph like :class:`SimpleTrainer` but trains nothing: each step is an empty
    hooked run, so only the callbacks work (e.g. to run inference with callbacks)."""

    def run_step(self):
        self.hooked_sess.run([])


class QueueInputTrainer(SimpleTrainer):
    """A :class:`SimpleTrainer` that insists on a :class:`QueueInput`."""

    def _setup_graph(self, input, get_cost_fn, get_opt_fn):
        if not isinstance(input, QueueInput):
            raise TypeError("QueueInputTrainer needs a QueueInput, got {!r}".format(input))
        return super()._setup_graph(input, get_cost_fn, get_opt_fn)
