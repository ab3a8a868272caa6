"""Callbacks that read or break a run, and a session init without a checkpoint."""

from tensorpack_lite.callbacks.base import Callback
from tensorpack_lite.compat import tf, tfv1
from tensorpack_lite.tfutils.sessinit import SessionInit

__all__ = ['ReadBack', 'RecordCost', 'RaiseAt', 'AssignValues']


class ReadBack(Callback):
    """Reads variables in after_train, while the session is still open: ``values``."""

    def __init__(self, *variables):
        self._variables = variables
        self.values = None

    def _after_train(self):
        self.values = self.trainer.sess.run(list(self._variables))


class RecordCost(Callback):
    """Records the cost of every step, fetched along with it."""

    def __init__(self):
        self.costs = []

    def _setup_graph(self):
        self.cost = self.get_tensors_maybe_in_tower(['cost'])[0]

    def _before_run(self, ctx):
        return [self.cost]

    def _after_run(self, ctx, values):
        self.costs.append(float(values.results[0]))


class RaiseAt(Callback):
    """Raises ``error`` after global step ``step``."""

    def __init__(self, step, error):
        self.step, self.error = step, error

    def _trigger_step(self):
        if self.global_step == self.step:
            raise self.error


class AssignValues(SessionInit):
    """Sets variables from a dict op name -> value (a checkpoint-free restore); every name
    must be a variable of the graph. Plain data, so it pickles into worker processes."""

    def __init__(self, values):
        self.values = values
        self.setup_graph_calls = 0

    def _setup_graph(self):
        self.setup_graph_calls += 1
        variables = {v.op.name: v for v in tfv1.global_variables()}
        missing = set(self.values) - set(variables)
        assert not missing, missing
        self.assign = tf.group(*[variables[name].assign(value) for name, value in self.values.items()])

    def _run_init(self, sess):
        sess.run(self.assign)
