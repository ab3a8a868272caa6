"""Graphs on virtual CPU devices and values read from them."""

from tensorpack_lite.callbacks.base import Callback
from tensorpack_lite.compat import tfv1


def run(fetches, feed=None):
    """``fetches`` run once in a new session of the default graph, its variables initialized."""
    with tfv1.Session() as sess:
        sess.run(tfv1.global_variables_initializer())
        return sess.run(fetches, feed)


def cpus(k):
    """The device names of ``k`` (virtual) CPUs."""
    return ['/cpu:{}'.format(i) for i in range(k)]


class ReadAllVariables(Callback):
    """After training: every global and local variable by op name."""

    def _after_train(self):
        variables = tfv1.global_variables() + tfv1.local_variables()
        self.values = dict(zip([v.op.name for v in variables], self.trainer.sess.run(variables)))
