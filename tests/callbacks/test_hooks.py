"""Tests of the time, throughput, GPU and background-process callbacks, and of the
adapters between callbacks and TensorFlow's SessionRunHooks."""


from tensorpack_lite.callbacks.base import Callback
from tensorpack_lite.callbacks.hooks import HookToCallback
from tensorpack_lite.compat import tf, tfv1
from helpers.trainers import make_trainer, train


class _RecordingHook(tfv1.train.SessionRunHook):
    """Feeds the number of its before_run calls into a placeholder and fetches twice that."""

    def __init__(self):
        self.calls = []
        self.results = []

    def begin(self):
        self.calls.append('begin')
        self.graph_finalized_at_begin = tfv1.get_default_graph().finalized
        self.x = tfv1.placeholder(tf.float32, shape=[], name='hook_x')
        self.doubled = tf.multiply(self.x, 2.0, name='hook_doubled')
        self.n = 0

    def after_create_session(self, session, coord):
        self.calls.append('after_create_session')
        self.session = session

    def before_run(self, run_context):
        self.calls.append('before_run')
        self.n += 1
        return tfv1.train.SessionRunArgs(self.doubled, feed_dict={self.x: float(self.n)})

    def after_run(self, run_context, run_values):
        self.calls.append('after_run')
        self.results.append(run_values.results)

    def end(self, session):
        self.calls.append('end')
        self.end_session = session


def test_hook_to_callback_runs_every_hook_method():
    hook = _RecordingHook()
    trainer = make_trainer(0.0)

    class KeepSession(Callback):
        def _before_train(self):
            self.sess = self.trainer.sess

    keeper = KeepSession()
    train(trainer, [HookToCallback(hook), keeper], 2, 2)

    assert hook.calls == (['begin', 'after_create_session'] + ['before_run', 'after_run'] * 4
                          + ['end'])
    assert hook.graph_finalized_at_begin is False
    assert hook.doubled.name == 'hook_doubled:0'  # begin() ran outside the callback's scope
    assert hook.session is keeper.sess and hook.end_session is keeper.sess
    assert hook.results == [2.0, 4.0, 6.0, 8.0]
    assert str(HookToCallback(hook)) == 'HookToCallback(_RecordingHook)'
