"""A session that breaks as TensorFlow's do when a C++ exception gets out of a run
(:class:`BreakingSession`), and the callback that makes a trainer's session one (:class:`BreakSessionAt`)."""

import threading

from tensorpack_lite.callbacks.base import Callback
from tensorpack_lite.compat import tf, tfv1

__all__ = ['BreakingSession', 'BreakSessionAt']


def _op_names(fetches):
    """The names of the ops in a fetch structure (tensors, ops, names; nested lists and dicts)."""
    if isinstance(fetches, dict):
        return set().union(*map(_op_names, fetches.values())) if fetches else set()
    if isinstance(fetches, (list, tuple)):
        return set().union(*map(_op_names, fetches)) if fetches else set()
    if isinstance(fetches, (tf.Tensor, tf.Operation)):
        return {fetches.op.name if isinstance(fetches, tf.Tensor) else fetches.name}
    return set()


class BreakingSession(tfv1.Session):
    """A session that fails the way TensorFlow's does when a C++ exception gets out of a run
    (seen from a grappler pass): the ``fail_at``-th run of ``op`` raises an IndexError from
    inside the session, and from then on every run (of anything, through ``run`` or a
    callable) waits until :attr:`release` is set; closing still works. Made from a live session
    by :meth:`convert` (its class is swapped; nothing else changes)."""

    @classmethod
    def convert(cls, sess, op, fail_at, when_built=False):
        """With ``when_built``, the ``fail_at``-th build of a callable of ``op`` fails instead
        (where TensorFlow runs grappler)."""
        sess.__class__ = cls
        sess.op_name, sess.fail_at, sess.runs_of_op, sess.when_built = op.name, fail_at, 0, when_built
        sess.broken, sess.release = threading.Event(), threading.Event()
        sess.blocked_runs = 0
        return sess

    def _wait_if_broken(self):
        if self.broken.is_set():
            self.blocked_runs += 1
            self.release.wait()
            raise RuntimeError("BreakingSession: released")

    def _count(self, names):
        if self.op_name in names:
            self.runs_of_op += 1
            if self.runs_of_op == self.fail_at:
                self.broken.set()
                raise IndexError("absl::container_internal::raw_hash_map<>::at (BreakingSession)")

    def run(self, fetches, *args, **kwargs):
        self._wait_if_broken()
        self._count(_op_names(fetches))
        return super().run(fetches, *args, **kwargs)

    def _make_callable_from_options(self, callable_options):
        self._wait_if_broken()
        names = set(callable_options.target) | {t.split(':')[0] for t in callable_options.fetch}
        if self.when_built:
            self._count(names)
        inner = super()._make_callable_from_options(callable_options)

        def call(*args, **kwargs):
            self._wait_if_broken()
            if not self.when_built:
                self._count(names)
            return inner(*args, **kwargs)
        return call


class BreakSessionAt(Callback):
    """Before training, turns the trainer's session into a :class:`BreakingSession` whose
    ``fail_at``-th training step fails (``session`` then holds it)."""

    _chief_only = False

    def __init__(self, fail_at):
        self.fail_at = fail_at
        self.session = None

    def _before_train(self):
        self.session = BreakingSession.convert(self.trainer.sess, self.trainer.train_op, self.fail_at)
