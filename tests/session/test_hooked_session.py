"""Regressions found in review: HookedSession's compiled-callable cache must behave like
``sess.run`` (results and errors), and callbacks may fetch variables in ``_before_run``."""

import collections

import pytest

from tensorpack_lite.callbacks.base import Callback
from tensorpack_lite.callbacks.hooks import CallbackToHook
from tensorpack_lite.compat import tf, tfv1
from tensorpack_lite.session.hooked_session import HookedSession


class _Hook(tfv1.train.SessionRunHook):
    """A hook that asks for nothing, so every run goes through the callable cache."""


def _outcome(run, fetches, feed_dict):
    try:
        return 'ok', run(fetches, feed_dict=feed_dict)
    except Exception as err:  # the kind of error is what is compared
        return 'error', type(err)


def _assert_same_as_sess_run(sess, fetches, feed_dict):
    expected = _outcome(sess.run, fetches, feed_dict)
    hooked = HookedSession(sess, [_Hook()])
    for _ in range(2):  # the first call compiles, the second uses the cached callable
        got = _outcome(hooked.run, fetches, feed_dict)
        assert got[0] == expected[0], (got, expected)
        if expected[0] == 'error':
            assert got[1] is expected[1], (got, expected)
        else:
            assert type(got[1]) is type(expected[1])
            assert got[1] == expected[1]
    return got


@pytest.mark.parametrize('kind', [collections.OrderedDict,
                                  lambda **kw: collections.defaultdict(list, **kw)])
def test_hooked_session_keeps_the_mapping_type_of_fetches(kind):
    with tfv1.Graph().as_default():
        x = tfv1.placeholder(tf.float32, [], name='x')
        fetches = kind(b=x * 3, a=x + 1)
        with tfv1.Session() as sess:
            _, result = _assert_same_as_sess_run(sess, fetches, {x: 2.0})
    assert list(result.items()) == [('b', 6.0), ('a', 3.0)]


@pytest.mark.parametrize('dtype,value', [(tf.int8, 300), (tf.int32, 2 ** 40), (tf.string, 5)])
def test_hooked_session_rejects_python_ints_that_do_not_fit_like_sess_run(dtype, value):
    with tfv1.Graph().as_default():
        p = tfv1.placeholder(dtype, [], name='p')
        out = tf.identity(p)
        with tfv1.Session() as sess:
            outcome = _assert_same_as_sess_run(sess, out, {p: value})
    assert outcome == ('error', TypeError)


def test_hooked_session_python_ints_that_fit_still_feed():
    with tfv1.Graph().as_default():
        p = tfv1.placeholder(tf.int8, [], name='p')
        f = tfv1.placeholder(tf.float32, [], name='f')
        with tfv1.Session() as sess:
            _, result = _assert_same_as_sess_run(sess, [p * 2, f / 2], {p: -60, f: 3})
    assert result == [-120, 1.5]


def test_hooked_session_feed_key_naming_an_operation_fails_like_sess_run():
    with tfv1.Graph().as_default():
        x = tfv1.placeholder(tf.float32, [None], name='x')
        y = x * 2
        with tfv1.Session() as sess:
            outcome = _assert_same_as_sess_run(sess, y, {'x': [1.0]})
    assert outcome == ('error', TypeError)


def test_callback_before_run_may_fetch_a_variable():
    with tfv1.Graph().as_default():
        v = tfv1.get_variable('v', initializer=5.0)
        tf.multiply(v, 2.0, name='doubled')
        noop = tf.no_op()

        class WatchVariable(Callback):
            def _before_run(self, ctx):
                return [v, 'doubled:0']

            def _after_run(self, ctx, values):
                self.seen = values.results

        cb = WatchVariable()
        cb.setup_graph(None)
        with tfv1.Session() as sess:
            sess.run(v.initializer)
            hooked = HookedSession(sess, [CallbackToHook(cb)])
            hooked.run(noop)
            assert cb.seen == [5.0, 10.0]
            sess.run(v.assign(-2.0))
            hooked.run(noop)
            assert cb.seen == [-2.0, -4.0]
