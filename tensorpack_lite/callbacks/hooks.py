"""Adapters between tensorpack callbacks and TensorFlow's ``SessionRunHook``s, and the
TensorFlow debugger (tfdbg) as a callback. (:class:`CallbackToHook` is defined with the
dispatcher, in :mod:`tensorpack_lite.loop.dispatch`.)"""

from ..compat import tf_internal, tfv1
from ..loop.callback import Callback
from ..loop.dispatch import CallbackToHook

__all__ = ['CallbackToHook', 'HookToCallback', 'TFLocalCLIDebugHook']


class HookToCallback(Callback):
    """Runs a ``tf.compat.v1.train.SessionRunHook`` as a callback.

    ``begin`` runs while the graph is set up, ``after_create_session`` before training,
    ``before_run``/``after_run`` around every hooked step and ``end`` after training.

    Example::

        HookToCallback(tf.train.StepCounterHook(every_n_steps=100))
    """

    _chief_only = False

    def __init__(self, hook):
        self._hook = hook

    def _setup_graph(self):
        with tfv1.name_scope(None):
            self._hook.begin()

    def _before_train(self):
        self._hook.after_create_session(self.trainer.sess, None)

    def _before_run(self, ctx):
        return self._hook.before_run(ctx)

    def _after_run(self, ctx, run_values):
        self._hook.after_run(ctx, run_values)

    def _after_train(self):
        if self.session_usable("the hook's end(session)"):
            self._hook.end(self.trainer.sess)

    def __str__(self):
        return "HookToCallback({})".format(type(self._hook).__name__)


class TFLocalCLIDebugHook(HookToCallback):
    """The interactive command-line TensorFlow debugger (tfdbg's ``LocalCLIDebugHook``) as a
    callback: at the first hooked run it opens the debugger in the terminal, where each run
    can be stepped through and its tensors inspected.

    Args:
        args, kwargs: passed to ``tensorflow.python.debug.LocalCLIDebugHook``
            (``ui_type='readline'``, ``dump_root``, ``thread_name_filter``, ``config_file_path``).

    Example::

        from tensorflow.python import debug as tfdbg
        debug = TFLocalCLIDebugHook(ui_type='readline')
        debug.add_tensor_filter('has_inf_or_nan', tfdbg.has_inf_or_nan)
        trainer.train_with_defaults(callbacks=[debug], ...)
    """

    _chief_only = True

    def __init__(self, *args, **kwargs):
        super().__init__(tf_internal('python.debug').LocalCLIDebugHook(*args, **kwargs))

    def add_tensor_filter(self, *args, **kwargs):
        """Register a tensor filter with the debugger (see
        ``LocalCLIDebugHook.add_tensor_filter(filter_name, tensor_filter)``)."""
        self._hook.add_tensor_filter(*args, **kwargs)
