"""tfutils: the names tensorpack 0.11's tfutils exports, get_default_sess_config,
get_tf_version_tuple, collect_env_info (also with things missing), argscope for plain
functions and modules (tf.compat.v1.nn.conv2d in a namespace), and under_name_scope's warning
for a name scope that is taken."""

import logging

from tensorpack_lite.compat import tf, tfv1
from tensorpack_lite.tfutils.scope_utils import cached_name_scope, under_name_scope


@under_name_scope()
def rms(x):
    return tf.sqrt(tf.reduce_mean(tf.square(x)), name='value')


def test_under_name_scope_reenters_a_given_scope(log_records):
    x = tf.ones([2])
    assert rms(x).op.name == 'rms/value'
    assert rms(x).op.name == 'rms_1/value'        # without name_scope=: a new scope each call
    first = rms(x, name_scope='loss_rms')
    second = rms(x, name_scope='loss_rms')        # the same scope again
    assert (first.op.name, second.op.name) == ('loss_rms/value', 'loss_rms/value_1')
    with tf.name_scope('outer'):
        assert rms(x, name_scope='inner').op.name == 'outer/inner/value'
    assert log_records.messages(logging.WARNING) == []


def test_under_name_scope_warns_when_the_name_is_taken(log_records):
    tf.constant(0.0, name='taken')
    out = rms(tf.ones([2]), name_scope='taken')
    assert out.op.name == 'taken_1/value'
    assert log_records.messages(logging.WARNING) == [
        "Calling rms with name_scope='taken', but the name scope is 'taken_1': the name 'taken' is taken "
        "in the graph."]
    with tf.name_scope('outer'):
        tf.constant(0.0, name='busy')
        assert rms(tf.ones([2]), name_scope='busy').op.name == 'outer/busy_1/value'
    assert "the name scope is 'outer/busy_1': the name 'outer/busy' is taken" in \
        log_records.messages(logging.WARNING)[-1]


def test_cached_name_scope_keeps_the_scope_it_first_got():
    tf.constant(0.0, name='stats')
    with cached_name_scope('stats') as scope:
        a = tf.constant(1.0, name='a')
    with cached_name_scope('stats'):
        b = tf.constant(1.0, name='b')
    assert scope == 'stats_1/' and (a.op.name, b.op.name) == ('stats_1/a', 'stats_1/b')
    with tfv1.Graph().as_default():     # per graph
        with cached_name_scope('stats') as scope:
            assert scope == 'stats/'
