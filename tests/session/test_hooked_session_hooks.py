"""HookedSession and its hooks: each hook's fetches, feeds and run options merged into the run,
its values handed back in the structure it asked for, a hook called only where it acts, and the
feeds checked like ``sess.run``'s."""

import numpy as np
import pytest

from tensorpack_lite.compat import tf, tfv1
from tensorpack_lite.session.hooked_session import HookedSession


class _Hook(tfv1.train.SessionRunHook):
    def __init__(self, fetch=None, feed=None, options=None):
        self.fetch, self.feed, self.options = fetch, feed, options
        self.results = []

    def before_run(self, ctx):
        return tfv1.train.SessionRunArgs(self.fetch, feed_dict=self.feed, options=self.options)

    def after_run(self, ctx, values):
        self.results.append(values.results)


def test_hooked_session_merges_fetches_and_feeds():
    x = tfv1.placeholder(tf.float32, [], name='x')
    y = tfv1.placeholder(tf.float32, [], name='y')
    total = x + y
    double = 2 * y
    feeder = _Hook(fetch=double, feed={y: 5.0})
    watcher = _Hook(fetch={'sum': total}, options=tfv1.RunOptions(timeout_in_ms=5000))
    silent = _Hook()
    with tfv1.Session() as sess:
        hooked = HookedSession(sess, [feeder, watcher, silent])
        assert hooked.run(total, feed_dict={x: 1.0}) == 6.0
        assert feeder.results == [10.0]
        assert watcher.results == [{'sum': 6.0}]
        assert silent.results == [None]
        assert not hooked.should_stop()
        clash = HookedSession(sess, [_Hook(feed={x: 2.0})])
        with pytest.raises(RuntimeError, match='already fed'):
            clash.run(total, feed_dict={x: 1.0, y: 1.0})


def test_hooked_session_timeout_option_applies():
    queue = tfv1.FIFOQueue(1, tf.float32)
    dequeue = queue.dequeue()
    with tfv1.Session() as sess:
        hooked = HookedSession(sess, [_Hook(options=tfv1.RunOptions(timeout_in_ms=200))])
        with pytest.raises(tf.errors.DeadlineExceededError):
            hooked.run(dequeue)


def test_hooked_session_feed_free_runs_follow_changing_fetches():
    """Cached callables must never return the values of a previous fetch structure."""
    a = tf.constant(1.0)
    b = tf.constant(2.0)
    counter = tfv1.get_variable('counter', [], initializer=tfv1.zeros_initializer())
    bump = tfv1.assign_add(counter, 1.0)

    class Alternating(tfv1.train.SessionRunHook):
        def __init__(self):
            self.calls = 0
            self.seen = []

        def before_run(self, ctx):
            self.calls += 1
            fetches = [a] if self.calls % 2 else {'b': b, 'both': [a, b]}
            return tfv1.train.SessionRunArgs(fetches)

        def after_run(self, ctx, values):
            self.seen.append(values.results)

    hook = Alternating()
    with tfv1.Session() as sess:
        sess.run(counter.initializer)
        hooked = HookedSession(sess, [hook])
        outputs = [hooked.run(bump) for _ in range(4)]
        assert outputs == [1.0, 2.0, 3.0, 4.0]
        assert hook.seen == [[1.0], {'b': 2.0, 'both': [1.0, 2.0]}] * 2
        assert hooked.run({'value': counter.read_value()}) == {'value': 4.0}


def test_hooked_session_calls_each_hook_where_it_acts():
    """A hook is called before and after runs only where it has a method of its own (in its class or
    set on the instance); each gets its own values back in any fetch structure."""
    a = tf.constant(1.0)
    b = tf.constant(2.0)
    step = tfv1.get_variable('steps', [], initializer=tfv1.zeros_initializer())
    bump = tfv1.assign_add(step, 1.0)

    class AfterOnly(tfv1.train.SessionRunHook):
        def __init__(self):
            self.runs = 0

        def after_run(self, ctx, values):
            assert values.results is None
            self.runs += 1

    class BeforeOnly(tfv1.train.SessionRunHook):
        def before_run(self, ctx):
            return tfv1.train.SessionRunArgs({'pair': (a, [b, a]), 'one': [b]})

    after_only, before_only = AfterOnly(), BeforeOnly()
    on_instance = tfv1.train.SessionRunHook()
    seen = []
    on_instance.before_run = lambda ctx: tfv1.train.SessionRunArgs((a, b))
    on_instance.after_run = lambda ctx, values: seen.append(values.results)
    with tfv1.Session() as sess:
        sess.run(step.initializer)
        hooked = HookedSession(sess, [after_only, before_only, on_instance])
        assert hooked.run([bump, (bump.op,)]) == [1.0, (None,)]
        assert hooked.run({'x': (a, [b])}) == {'x': (1.0, [2.0])}
    assert after_only.runs == 2
    assert seen == [(1.0, 2.0), (1.0, 2.0)]


def test_hooked_session_feeds_are_checked_like_sess_run():
    x = tfv1.placeholder(tf.float32, [None, 2], name='x')
    total = tf.reduce_sum(x)

    class Feeder(tfv1.train.SessionRunHook):
        def __init__(self):
            self.value = [[1, 2]]

        def before_run(self, ctx):
            return tfv1.train.SessionRunArgs(None, feed_dict={x: self.value})

    feeder = Feeder()
    with tfv1.Session() as sess:
        hooked = HookedSession(sess, [feeder])
        assert hooked.run(total) == 3.0
        feeder.value = np.ones((4, 2), dtype='float64')
        assert hooked.run(total) == 8.0
        assert hooked.run(total * 2) == 16.0
        feeder.value = np.ones((4, 3))
        with pytest.raises(ValueError, match=r"Cannot feed value of shape \(4, 3\) for Tensor x:0"):
            hooked.run(total)
