"""tfutils.scope_utils: reuse of variable scopes and name-scope decorators."""

import pytest

from tensorpack_lite import tfv1 as tf
from tensorpack_lite.tfutils.scope_utils import (auto_reuse_variable_scope, cached_name_scope,
                                                 under_name_scope, under_variable_scope)


@pytest.fixture(autouse=True)
def fresh_graph():
    with tf.Graph().as_default():
        yield


@auto_reuse_variable_scope
def dense(x):
    w = tf.get_variable('w', [3, 2], initializer=tf.ones_initializer())
    return tf.matmul(x, w)


def test_auto_reuse_shares_variables_per_scope():
    x = tf.ones([1, 3])
    with tf.variable_scope('d'):
        a = dense(x)
        b = dense(x)        # reuses d/w
    with tf.variable_scope('g'):
        dense(x)            # a new scope: creates g/w
    names = sorted(v.op.name for v in tf.global_variables())
    assert names == ['d/w', 'g/w']
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        assert sess.run(a).tolist() == sess.run(b).tolist() == [[3.0, 3.0]]


def test_auto_reuse_is_per_graph():
    with tf.variable_scope('d'):
        dense(tf.ones([1, 3]))
    with tf.Graph().as_default():
        with tf.variable_scope('d'):
            dense(tf.ones([1, 3]))  # would fail with reuse=True in a graph without d/w
        assert [v.op.name for v in tf.global_variables()] == ['d/w']


def test_plain_function_without_decorator_would_clash():
    def undecorated(x):
        return tf.get_variable('w', [1])
    with tf.variable_scope('d'):
        undecorated(None)
        with pytest.raises(ValueError, match='already exists'):
            undecorated(None)


def test_under_name_scope_default_and_override():
    @under_name_scope()
    def rms(x):
        return tf.sqrt(tf.reduce_mean(tf.square(x)))

    assert rms(tf.ones([2])).op.name == 'rms/Sqrt'
    assert rms(tf.ones([2]), name_scope='other').op.name == 'other/Sqrt'

    @under_name_scope('fixed')
    def neg(x):
        return tf.negative(x)
    assert neg(tf.ones([2])).op.name == 'fixed/Neg'


def test_under_variable_scope_names_variables():
    @under_variable_scope()
    def head(x):
        return tf.get_variable('b', [1]) + x
    out = head(tf.ones([1]))
    assert [v.op.name for v in tf.global_variables()] == ['head/b']
    assert out.op.name.startswith('head/')


def test_cached_name_scope_is_entered_again():
    with cached_name_scope('stats'):
        a = tf.constant(1.0, name='a')
    with cached_name_scope('stats'):
        b = tf.constant(2.0, name='b')
    with tf.name_scope('outer'):
        with cached_name_scope('inner', top_level=False):
            c = tf.constant(3.0, name='c')
        with cached_name_scope('inner', top_level=False):
            d = tf.constant(4.0, name='d')
    assert [t.op.name for t in (a, b, c, d)] == ['stats/a', 'stats/b', 'outer/inner/c', 'outer/inner/d']
