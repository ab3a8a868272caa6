"""Tests of the time, throughput, GPU and background-process callbacks, and of the
adapters between callbacks and TensorFlow's SessionRunHooks."""

import pytest

from tensorpack_lite.callbacks.base import Callback
from tensorpack_lite.callbacks.hooks import CallbackToHook
from tensorpack_lite.compat import tf, tfv1
from tensorpack_lite.session.hooked_session import HookedSession


class _FetchSquare(Callback):
    def __init__(self, tensor, fail_at=None):
        self.tensor = tensor
        self.fail_at = fail_at
        self.seen = []

    def _before_run(self, ctx):
        return [self.tensor]

    def _after_run(self, ctx, values):
        self.seen.append(values.results[0])
        if len(self.seen) == self.fail_at:
            raise ValueError("bad value {}".format(values.results[0]))


def _counting_graph():
    step = tfv1.get_variable('step', shape=[], initializer=tfv1.zeros_initializer())
    inc = tfv1.assign_add(step, 1.0)
    with tf.control_dependencies([inc]):
        square = tf.square(step.read_value(), name='square')
    return inc, square


def test_callback_to_hook_in_monitored_session():
    inc, square = _counting_graph()
    cb = _FetchSquare(square)
    ran = []
    with tfv1.train.MonitoredSession(session_creator=tfv1.train.ChiefSessionCreator(),
                                     hooks=[CallbackToHook(cb)]) as sess:
        for _ in range(3):
            ran.append(sess.run(inc))
    assert ran == [1.0, 2.0, 3.0]
    assert cb.seen == [1.0, 4.0, 9.0]


def test_callback_to_hook_error_names_the_callback_in_monitored_session():
    inc, square = _counting_graph()
    cb = _FetchSquare(square, fail_at=2)
    with pytest.raises(ValueError, match='bad value 4.0') as info:
        with tfv1.train.MonitoredSession(session_creator=tfv1.train.ChiefSessionCreator(),
                                         hooks=[CallbackToHook(cb)]) as sess:
            for _ in range(5):
                sess.run(inc)
    assert info.value.callback is cb
    assert info.value.__notes__ == ['raised by callback _FetchSquare in after_run()']


def test_callback_to_hook_in_hooked_session():
    inc, square = _counting_graph()
    ok, failing = _FetchSquare(square), _FetchSquare('square:0', fail_at=3)  # by name too
    with tfv1.Session() as raw:
        raw.run(tfv1.global_variables_initializer())
        hooked = HookedSession(raw, [CallbackToHook(ok), CallbackToHook(failing)])
        assert hooked.run(inc) == 1.0
        assert hooked.run([inc]) == [2.0]
        with pytest.raises(ValueError, match='bad value 9.0') as info:
            hooked.run(inc)
    assert ok.seen == [1.0, 4.0, 9.0]
    assert failing.seen == [1.0, 4.0, 9.0]
    assert info.value.callback is failing
    assert any('_FetchSquare' in n and 'after_run' in n for n in info.value.__notes__)
