"""The terms a cost adds up and which are weight terms (tfutils/cost_terms.py): what the trainers'
cost check tests (tests/train/test_tower_nonfinite_cost.py trains with it)."""

import numpy as np
import pytest

from tensorpack_lite.compat import tf, tfv1
from tensorpack_lite.models.regularize import l1_regularizer, l2_regularizer
from tensorpack_lite.profiling.graph_walk import ops_run_by
from tensorpack_lite.tfutils.cost_terms import cost_summands, is_weight_term, terms_to_check


def _names(tensors):
    return [t.name for t in tensors]


@pytest.fixture
def data_and_weights():
    """x: a batch [None, 3] (data); w: a resource variable [3, 2]; r: a reference variable [2]."""
    x = tfv1.placeholder(tf.float32, [None, 3], name='x')
    w = tfv1.get_variable('w', initializer=np.ones((3, 2), np.float32))
    r = tfv1.Variable(np.ones(2, np.float32), use_resource=False, name='r')
    return x, w, r


def test_summands_are_read_through_identities_and_sums_in_order(data_and_weights):
    x, w, r = data_and_weights
    xent = tf.reduce_mean(tf.matmul(x, w), name='xent')
    decay = l2_regularizer(0.1)(w)
    other = tf.reduce_sum(r, name='other')
    cost = tf.identity(tf.add_n([tf.add(xent, decay), other]), name='cost')
    assert _names(cost_summands(cost)) == [xent.name, decay.name, other.name]
    assert _names(cost_summands(xent)) == [xent.name]


@pytest.mark.parametrize('make', [
    lambda x, w, r: l2_regularizer(1e-4)(w),
    lambda x, w, r: l1_regularizer(1e-4)(w),
    lambda x, w, r: tf.multiply(1e-4, tf.add_n([tf.nn.l2_loss(w), tf.nn.l2_loss(r)])),
    lambda x, w, r: tf.cast(l2_regularizer(1e-4)(tf.cast(w, tf.float64)), tf.float32),
    # the batch size read from the data is an integer: finite whatever the data holds
    lambda x, w, r: tf.nn.l2_loss(w) * tf.cast(tf.shape(x)[0], tf.float32),
], ids=['l2', 'l1', 'sum-of-l2', 'float64', 'times-batch-size'])
def test_weight_decays_are_weight_terms(data_and_weights, make):
    assert is_weight_term(make(*data_and_weights))


@pytest.mark.parametrize('make', [
    lambda x, w, r: tf.reduce_mean(tf.matmul(x, w)),            # reads the data
    lambda x, w, r: tf.math.log(tf.reduce_sum(w)),              # log(0) is -inf with finite w
    lambda x, w, r: tf.sqrt(tf.reduce_sum(r)),                  # sqrt(-1) is NaN
    lambda x, w, r: tf.reduce_sum(tf.divide(w, tf.reduce_sum(r))),   # w / 0
    lambda x, w, r: tf.nn.l2_loss(w) / tf.cast(tf.shape(x)[0], tf.float32),   # an empty batch
    lambda x, w, r: tf.reduce_mean(tf.square(tfv1.get_variable('empty', shape=[0]))),   # 0 / 0
    lambda x, w, r: l2_regularizer(1e-4)(tf.cast(w, tf.float16)),    # overflows at 65504
    lambda x, w, r: tf.multiply(np.inf, tf.nn.l2_loss(w)),             # a scale that is not finite
    lambda x, w, r: tf.nn.l2_loss(tfv1.placeholder(tf.float32, [3], name='not_a_weight')),
], ids=['data', 'log', 'sqrt', 'divide', 'over-batch-size', 'mean', 'float16', 'infinite-scale',
        'placeholder'])
def test_terms_that_can_be_non_finite_with_finite_weights_are_not(data_and_weights, make):
    assert not is_weight_term(make(*data_and_weights))


def test_a_cost_with_weight_decay_is_checked_on_its_other_terms(data_and_weights):
    x, w, r = data_and_weights
    xent = tf.reduce_mean(tf.matmul(x, w), name='xent')
    aux = tf.reduce_mean(x * tf.reduce_sum(r), name='aux')
    cost = tf.add_n([xent, l2_regularizer(1e-4)(w), aux, l1_regularizer(1e-5)(r)], name='cost')
    assert _names(terms_to_check(cost)) == [xent.name, aux.name]
    # what the check runs: no weight decay
    assert not {'L2Loss', 'Abs'} & {op.type for op in ops_run_by(terms_to_check(cost))}


def test_a_cost_without_weight_terms_or_of_weights_alone_is_checked_whole(data_and_weights):
    x, w, r = data_and_weights
    data_only = tf.add(tf.reduce_mean(tf.matmul(x, w)), tf.reduce_mean(x), name='data_only')
    weights_only = tf.add(l2_regularizer(1e-4)(w), tf.nn.l2_loss(r), name='weights_only')
    plain = tf.reduce_mean(tf.matmul(x, w), name='plain')
    for cost in (data_only, weights_only, plain):
        assert terms_to_check(cost) == [cost]
