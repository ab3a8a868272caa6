"""Summary ops (tfutils/summary.py), gradient processors (tfutils/gradproc.py), optimizer
wrappers (tfutils/optimizer.py) and RunUpdateOps with towers (callbacks/graph.py)."""

import numpy as np
import pytest

from tensorpack_lite.callbacks.graph import RunUpdateOps
from tensorpack_lite.callbacks.summary import MergeAllSummaries, MovingAverageSummary
from tensorpack_lite.compat import tf, tfv1
from tensorpack_lite.tfutils.gradproc import (
    CheckGradient, FilterNoneGrad, GlobalNormClip, MapGradient, PrintGradient, ScaleGradient,
    SummaryGradient)
from tensorpack_lite.tfutils.optimizer import (
    AccumGradOptimizer, PostProcessOptimizer, ProxyOptimizer, VariableAssignmentOptimizer,
    apply_grad_processors)
from tensorpack_lite.tfutils.summary import (
    add_activation_summary, add_moving_summary, add_param_summary, add_tensor_summary)
from tensorpack_lite.tfutils.tower import (
    PredictTowerContext, TowerFunc, TrainTowerContext, get_current_tower_context)
from tensorpack_lite.train.base import Trainer
from tensorpack_lite.utils.naming import MOVING_SUMMARY_OPS_KEY

from helpers.callbacks import ReadBack
from helpers.graphs import run


def numpy_debiased_ema(values, decay):
    """Zero-debiased EMA after each value: biased_t / (1 - decay ** t)."""
    biased, result = 0.0, []
    for t, value in enumerate(values, start=1):
        biased = decay * biased + (1 - decay) * value
        result.append(biased / (1 - decay ** t))
    return np.array(result)


def summary_values(serialized):
    """tag -> simple_value (or 'histo' for histograms) of a serialized Summary."""
    proto = tfv1.Summary.FromString(serialized)
    return {v.tag: (v.simple_value if v.WhichOneof('value') == 'simple_value' else 'histo')
            for v in proto.value}


def evaluate_summaries(feed=None):
    with tfv1.Session() as sess:
        sess.run(tfv1.global_variables_initializer())
        return summary_values(sess.run(tfv1.summary.merge_all(), feed))


# ---------------------------------------------------------------------------------------------
# add_moving_summary

def test_moving_summary_matches_numpy_debiased_ema():
    x = tfv1.placeholder(tf.float32, [], name='x')
    with TrainTowerContext('tower0', index=0, total=2):
        cost = tf.identity(x * 2.0, name='cost')
        updates = add_moving_summary(cost, decay=0.9)
    assert len(updates) == 1
    assert tfv1.get_collection(MOVING_SUMMARY_OPS_KEY) == updates
    ema_vars = [v.name for v in tfv1.global_variables()]
    assert 'EMA/cost:0' in ema_vars and all(n.startswith('EMA/cost') for n in ema_vars)
    assert tfv1.trainable_variables() == []

    inputs = [1.0, 5.0, -2.0, 3.5, 0.25, 8.0]
    expected = numpy_debiased_ema([2 * v for v in inputs], 0.9)
    summary = tfv1.summary.merge_all()
    got = []
    with tfv1.Session() as sess:
        sess.run(tfv1.global_variables_initializer())
        for value in inputs[:-1]:
            got.append(sess.run(updates[0], {x: value}))
        # the summary, fetched with the step, shows the EMA after that step
        last, serialized = sess.run([updates[0], summary], {x: inputs[-1]})
        got.append(last)
        stored = sess.run(tfv1.global_variables()[0])
    np.testing.assert_allclose(got, expected, rtol=1e-5)
    np.testing.assert_allclose(stored, expected[-1], rtol=1e-5)
    values = summary_values(serialized)
    assert list(values) == ['cost-summary']   # tower prefix removed, '-summary' appended
    np.testing.assert_allclose(values['cost-summary'], expected[-1], rtol=1e-5)


def test_moving_summary_in_training_reaches_the_monitors():
    counter = tfv1.get_variable('counter', initializer=0.0, trainable=False)
    with TrainTowerContext('tower0', index=0, total=1):
        count = tf.identity(tfv1.assign_add(counter, 1.0), name='count')   # 1, 2, 3...
        add_moving_summary(count, decay=0.8)
    trainer = Trainer()
    trainer.train_op = count.op
    trainer.train_with_defaults(callbacks=[MovingAverageSummary(), MergeAllSummaries()],
                                monitors=[], steps_per_epoch=3, max_epoch=2, extra_callbacks=[])
    expected = numpy_debiased_ema(np.arange(1, 7), 0.8)
    history = trainer.monitors.get_history('count')
    assert [step for step, _ in history] == [3, 6]
    np.testing.assert_allclose([value for _, value in history], expected[[2, 5]], rtol=1e-5)


def test_moving_summary_of_integer_tensor_and_default_decay():
    step = tfv1.placeholder(tf.int32, [], name='step')
    update, = add_moving_summary(step, collection=None)
    assert update.dtype == tf.float32
    assert tfv1.get_collection(MOVING_SUMMARY_OPS_KEY) == []
    inputs = [4, 0, 7]
    with tfv1.Session() as sess:
        sess.run(tfv1.global_variables_initializer())
        got = [sess.run(update, {step: v}) for v in inputs]
    np.testing.assert_allclose(got, numpy_debiased_ema(inputs, 0.95), rtol=1e-5)


def test_moving_summary_does_nothing_outside_the_main_training_tower():
    x = tfv1.placeholder(tf.float32, [], name='x')
    with TrainTowerContext('tower1', index=1, total=2):
        assert add_moving_summary(tf.identity(x, name='cost')) == []
    with PredictTowerContext('InferenceTower'):
        assert add_moving_summary(tf.identity(x, name='cost')) == []
    assert tfv1.global_variables() == []
    assert tfv1.get_collection(MOVING_SUMMARY_OPS_KEY) == []
    assert tfv1.get_collection(tfv1.GraphKeys.SUMMARIES) == []


def test_moving_summary_bad_input():
    with pytest.raises(ValueError, match="only scalar.*'vec:0'"):
        add_moving_summary(tf.zeros([3], name='vec'))
    with pytest.raises(TypeError, match='separate arguments'):
        add_moving_summary([tf.constant(1.0)])
    with pytest.raises(ValueError, match='decay'):
        add_moving_summary(tf.constant(1.0), decay=1.0)
    add_moving_summary(tf.constant(1.0, name='dup'))
    with tfv1.name_scope('tower0'):
        again = tf.constant(2.0, name='dup')
    with pytest.raises(ValueError, match="named 'dup' already exists.*tower0/dup:0"):
        add_moving_summary(again)


# ---------------------------------------------------------------------------------------------
# add_tensor_summary, add_param_summary, add_activation_summary

def test_tensor_summary_types_and_values():
    data = np.array([[0.0, 3.0], [0.0, -4.0]], dtype=np.float32)
    x = tf.constant(data, name='x')
    with tfv1.name_scope('my'):
        ops = add_tensor_summary(x, ['rms', 'mean', 'sparsity', 'histogram', 'rms'])
        add_tensor_summary(tf.reduce_max(x), ['scalar'], name='top')
    assert len(ops) == 4   # duplicates are summarized once
    values = evaluate_summaries()
    assert set(values) == {'my/x-rms', 'my/x-mean', 'my/x-sparsity', 'my/x-histogram',
                           'my/top-summary'}
    np.testing.assert_allclose(values['my/x-rms'], np.sqrt(np.mean(data ** 2)), rtol=1e-6)
    np.testing.assert_allclose(values['my/x-mean'], data.mean(), rtol=1e-6)
    np.testing.assert_allclose(values['my/x-sparsity'], 0.5)
    np.testing.assert_allclose(values['my/top-summary'], 3.0)
    assert values['my/x-histogram'] == 'histo'


def test_tensor_summary_errors_and_towers():
    x = tf.ones([2, 2], name='x')
    with pytest.raises(ValueError, match=r"unknown summary type.*'median'"):
        add_tensor_summary(x, ['rms', 'median'])
    with pytest.raises(ValueError, match="'scalar' needs a scalar.*'x'"):
        add_tensor_summary(x, ['scalar'])
    with TrainTowerContext('tower1', index=1, total=2):
        assert add_tensor_summary(x, ['rms']) == []
        # main_tower_only=False adds it, but the tower's summaries are discarded on exit
        assert len(add_tensor_summary(x, ['rms'], main_tower_only=False)) == 1
    assert tfv1.get_collection(tfv1.GraphKeys.SUMMARIES) == []
    mine = add_tensor_summary(x, ['mean'], collections=['mine'])
    assert tfv1.get_collection('mine') == mine
    assert tfv1.get_collection(tfv1.GraphKeys.SUMMARIES) == []


def test_param_summary_matches_whole_op_names():
    with tfv1.variable_scope('fc'):
        tfv1.get_variable('W', initializer=np.array([[1.0, -1.0], [2.0, 0.0]], np.float32))
        tfv1.get_variable('b', initializer=np.array([0.0, 0.0, 5.0], np.float32))
    with tfv1.variable_scope('conv'):
        tfv1.get_variable('W', initializer=np.array([3.0, 4.0], np.float32))
    tfv1.get_variable('Wfoo', initializer=1.0)
    ops = add_param_summary(('.*/W', ['rms']), ('fc/b', ['sparsity', 'mean']), ('fc', ['rms']))
    assert len(ops) == 4
    values = evaluate_summaries()
    assert set(values) == {'param-summary/fc/W-rms', 'param-summary/conv/W-rms',
                           'param-summary/fc/b-sparsity', 'param-summary/fc/b-mean'}
    np.testing.assert_allclose(values['param-summary/fc/W-rms'], np.sqrt(6 / 4), rtol=1e-6)
    np.testing.assert_allclose(values['param-summary/conv/W-rms'], np.sqrt(12.5), rtol=1e-6)
    np.testing.assert_allclose(values['param-summary/fc/b-sparsity'], 2 / 3, rtol=1e-6)
    np.testing.assert_allclose(values['param-summary/fc/b-mean'], 5 / 3, rtol=1e-6)
    with pytest.raises(TypeError, match='regex'):
        add_param_summary('.*')


def test_activation_summary_default_types_and_towers():
    act = tf.constant(np.array([[0.0, 1.0], [0.0, 0.0]], np.float32), name='relu')
    with tfv1.name_scope('block'):
        add_activation_summary(act)
    add_activation_summary(act, types=['mean'], name='relu2')
    assert add_activation_summary(tf.ones([4], name='vector')) == []   # rank 1: skipped
    with TrainTowerContext('tower1', index=1, total=2):
        assert add_activation_summary(act) == []
    values = evaluate_summaries()
    assert set(values) == {'activation-summary/relu-sparsity', 'activation-summary/relu-rms',
                           'activation-summary/relu-histogram', 'activation-summary/relu2-mean'}
    np.testing.assert_allclose(values['activation-summary/relu-sparsity'], 0.75)
    np.testing.assert_allclose(values['activation-summary/relu-rms'], 0.5, rtol=1e-6)


# ---------------------------------------------------------------------------------------------
# gradient processors

def linear_problem():
    """loss = sum(a * ca) + sum(b * cb); the gradients are ca and cb. 'unused' gets None."""
    a = tfv1.get_variable('a', initializer=np.array([1.0, 2.0], np.float32))
    b = tfv1.get_variable('b', initializer=np.array([-1.0], np.float32))
    unused = tfv1.get_variable('unused', initializer=0.0)
    ca, cb = np.array([3.0, 4.0], np.float32), np.array([12.0], np.float32)
    loss = tf.reduce_sum(a * ca) + tf.reduce_sum(b * cb)
    grads = tfv1.train.GradientDescentOptimizer(1.0).compute_gradients(loss, [a, b, unused])
    return (a, b, unused), (ca, cb), grads


def test_filter_none_grad_drops_missing_gradients():
    (a, b, unused), _, grads = linear_problem()
    assert grads[2][0] is None
    kept = FilterNoneGrad().process(grads)
    assert [v for _, v in kept] == [a, b]
    assert FilterNoneGrad(verbose=False).process(kept) == kept


def test_global_norm_clip_clips_to_the_norm():
    _, (ca, cb), grads = linear_problem()
    grads = FilterNoneGrad(verbose=False).process(grads)
    norm = np.sqrt(np.sum(ca ** 2) + np.sum(cb ** 2))   # 13
    clipped = GlobalNormClip(norm / 2).process(grads)
    untouched = GlobalNormClip(norm * 2).process(grads)
    assert clipped[0][0].name.startswith('GlobalNormClip/')
    ga, gb, ua, ub = run([clipped[0][0], clipped[1][0], untouched[0][0], untouched[1][0]])
    np.testing.assert_allclose(ga, ca / 2, rtol=1e-6)
    np.testing.assert_allclose(gb, cb / 2, rtol=1e-6)
    np.testing.assert_allclose(np.sqrt(np.sum(ga ** 2) + np.sum(gb ** 2)), norm / 2, rtol=1e-6)
    np.testing.assert_allclose(ua, ca)
    np.testing.assert_allclose(ub, cb)
    for bad in (0, -1.0, 'x', None):
        with pytest.raises(ValueError, match='global_norm'):
            GlobalNormClip(bad)


def test_map_gradient_by_regex_with_one_or_two_arguments():
    (a, b, unused), (ca, cb), grads = linear_problem()
    scaled = MapGradient(lambda g: g * 10.0, regex='a').process(grads)
    assert scaled[2] == grads[2]          # None gradients pass through
    plus_var = MapGradient(lambda g, v: g + v, regex='.*').process(grads)
    dropped = MapGradient(lambda g: None, regex='b').process(grads)
    assert [v for _, v in dropped] == [a, unused]
    sa, sb, pa, pb = run([scaled[0][0], scaled[1][0], plus_var[0][0], plus_var[1][0]])
    np.testing.assert_allclose(sa, ca * 10)
    np.testing.assert_allclose(sb, cb)
    np.testing.assert_allclose(pa, ca + [1.0, 2.0])
    np.testing.assert_allclose(pb, cb + [-1.0])
    # the regex must match the whole op name: 'a' does not match 'unused' or 'b'
    assert MapGradient(lambda g: g * 0, regex='u').process(grads) == grads
    with pytest.raises(TypeError, match='1 argument.*or 2'):
        MapGradient(lambda g, v, w: g)
    with pytest.raises(TypeError, match='callable'):
        MapGradient(3.0)


def test_scale_gradient_first_matching_rule_and_zero_drops():
    (a, b, unused), (ca, cb), grads = linear_problem()
    grads = FilterNoneGrad(verbose=False).process(grads)
    out = ScaleGradient([('a', 0.5), ('.*', 3.0)], verbose=False).process(grads)
    ga, gb = run([out[0][0], out[1][0]])
    np.testing.assert_allclose(ga, ca * 0.5)
    np.testing.assert_allclose(gb, cb * 3.0)
    only_a = ScaleGradient(('b', 0)).process(grads)
    assert [v for _, v in only_a] == [a]
    with pytest.raises(TypeError, match='pairs'):
        ScaleGradient([('a', 1.0, 2.0)])
    with pytest.raises(TypeError, match='regex'):
        ScaleGradient([(1, 1.0)])


def test_check_gradient_names_the_variable_on_nan():
    w = tfv1.get_variable('layer/w', initializer=np.array([1.0, 2.0], np.float32))
    c = tfv1.placeholder(tf.float32, [2])
    grads = tfv1.train.GradientDescentOptimizer(1.0).compute_gradients(tf.reduce_sum(w * c))
    (checked, var), = CheckGradient().process(grads)
    assert var is w
    with tfv1.Session() as sess:
        sess.run(tfv1.global_variables_initializer())
        np.testing.assert_allclose(sess.run(checked, {c: [1.0, 2.0]}), [1.0, 2.0])
        with pytest.raises(tf.errors.InvalidArgumentError, match='CheckGradient/layer/w'):
            sess.run(checked, {c: [1.0, np.nan]})


def test_summary_gradient_histogram_and_rms_moving_summary():
    (a, b, unused), (ca, cb), grads = linear_problem()
    grads = FilterNoneGrad(verbose=False).process(grads)
    proc = SummaryGradient(regex='a')
    out = proc.process(grads)
    proc.process(grads)   # a second call adds nothing
    assert out == grads
    updates = tfv1.get_collection(MOVING_SUMMARY_OPS_KEY)
    assert len(updates) == 1
    with tfv1.Session() as sess:
        sess.run(tfv1.global_variables_initializer())
        _, serialized = sess.run([updates, tfv1.summary.merge_all()])
    values = summary_values(serialized)
    assert set(values) == {'SummaryGradient/a-grad', 'SummaryGradient/a/rms-summary'}
    assert values['SummaryGradient/a-grad'] == 'histo'
    # the debiased EMA after one step is the value itself
    np.testing.assert_allclose(values['SummaryGradient/a/rms-summary'],
                               np.sqrt(np.mean(ca ** 2)), rtol=1e-5)


def test_summary_gradient_default_regex_takes_every_variable_as_tensorpack_0_11():
    ema = tfv1.get_variable('EMA/thing', initializer=1.0)
    w = tfv1.get_variable('w', initializer=1.0)
    grads = [(tf.constant(1.0), ema), (tf.constant(2.0), w)]
    SummaryGradient().process(grads)
    tags = sorted(t.op.name for t in tfv1.get_collection(tfv1.GraphKeys.SUMMARIES))
    assert tags == ['SummaryGradient/EMA/thing-grad', 'SummaryGradient/EMA/thing/rms-summary',
                    'SummaryGradient/w-grad', 'SummaryGradient/w/rms-summary']


def test_summary_gradient_regex_skips_variables():
    ema = tfv1.get_variable('EMA/thing', initializer=1.0)
    w = tfv1.get_variable('w', initializer=1.0)
    SummaryGradient(regex='^(?!EMA).*').process([(tf.constant(1.0), ema), (tf.constant(2.0), w)])
    tags = sorted(t.op.name for t in tfv1.get_collection(tfv1.GraphKeys.SUMMARIES))
    assert tags == ['SummaryGradient/w-grad', 'SummaryGradient/w/rms-summary']


def test_print_gradient_prints_to_stderr(capfd):
    (a, b, unused), _, grads = linear_problem()
    grads = FilterNoneGrad(verbose=False).process(grads)
    out = PrintGradient(regex='b').process(grads)
    capfd.readouterr()
    value = run(out[1][0])
    np.testing.assert_allclose(value, [12.0])
    err = capfd.readouterr().err
    assert 'b-grad' in err and 'a-grad' not in err and '12' in err


# ---------------------------------------------------------------------------------------------
# optimizer wrappers

def test_apply_grad_processors_changes_the_update():
    w = tfv1.get_variable('w', initializer=np.array([1.0, 2.0], np.float32))
    unused = tfv1.get_variable('unused', initializer=0.0)
    c = np.array([3.0, -4.0], np.float32)
    loss = tf.reduce_sum(w * c)
    base = tfv1.train.GradientDescentOptimizer(0.1)
    opt = apply_grad_processors(base, [FilterNoneGrad(verbose=False), ScaleGradient(('w', 0.5))])
    raw = opt.compute_gradients(loss, [w, unused])   # not processed
    assert raw[1][0] is None
    train_op = opt.minimize(loss, var_list=[w, unused])
    with tfv1.Session() as sess:
        sess.run(tfv1.global_variables_initializer())
        sess.run(train_op)
        np.testing.assert_allclose(sess.run(w), [1.0, 2.0] - 0.1 * 0.5 * c, rtol=1e-6)
    with pytest.raises(TypeError, match='GradientProcessor'):
        apply_grad_processors(base, [lambda g: g])
    with pytest.raises(TypeError, match='list'):
        apply_grad_processors(base, GlobalNormClip(1.0))


def test_proxy_optimizer_forwards_slots():
    w = tfv1.get_variable('w', initializer=1.0)
    inner = tfv1.train.MomentumOptimizer(0.1, 0.9)
    proxy = ProxyOptimizer(inner)
    proxy.minimize(tf.square(w))
    assert proxy.get_slot_names() == ['momentum']
    assert proxy.get_slot(w, 'momentum') is inner.get_slot(w, 'momentum')
    with pytest.raises(TypeError, match='tf.compat.v1.train.Optimizer'):
        ProxyOptimizer('sgd')


def test_post_process_and_variable_assignment_optimizers():
    w = tfv1.get_variable('w', initializer=np.array([1.0, 2.0], np.float32))
    v = tfv1.get_variable('v', initializer=np.array([1.0, 2.0], np.float32))
    c = np.array([-5.0, 5.0], np.float32)
    clip = VariableAssignmentOptimizer(tfv1.train.GradientDescentOptimizer(1.0),
                                       lambda var: tf.clip_by_value(var, -1.0, 1.0))
    op_w = clip.minimize(tf.reduce_sum(w * c), var_list=[w])
    post = PostProcessOptimizer(tfv1.train.GradientDescentOptimizer(1.0),
                                lambda var: tfv1.assign(var, var * 2.0))
    op_v = post.minimize(tf.reduce_sum(v * c), var_list=[v])
    with tfv1.Session() as sess:
        sess.run(tfv1.global_variables_initializer())
        sess.run([op_w, op_v])
        # update to [6, -3], then clipped / doubled after the update
        np.testing.assert_allclose(sess.run(w), [1.0, -1.0])
        np.testing.assert_allclose(sess.run(v), [12.0, -6.0])
    bad = PostProcessOptimizer(tfv1.train.GradientDescentOptimizer(1.0), lambda var: 3)
    with pytest.raises(TypeError, match='PostProcessOptimizer.*tf.Operation'):
        bad.minimize(tf.reduce_sum(v * c), var_list=[v])


def test_accum_grad_optimizer_applies_the_sum_every_niter_calls():
    w = tfv1.get_variable('w', initializer=np.array([1.0, -1.0], np.float32))
    c = tfv1.placeholder(tf.float32, [2])
    lr, niter = 0.1, 3
    opt = AccumGradOptimizer(tfv1.train.GradientDescentOptimizer(lr), niter)
    global_step = tfv1.train.get_or_create_global_step()
    train_op = opt.minimize(tf.reduce_sum(w * c), global_step=global_step)
    assert not any('AccumGrad' in var.name for var in tfv1.trainable_variables())
    rng = np.random.RandomState(0)
    grads = rng.uniform(-1, 1, size=(7, 2)).astype(np.float32)
    expected = np.array([1.0, -1.0], np.float32)
    with tfv1.Session() as sess:
        sess.run(tfv1.global_variables_initializer())
        for step, grad in enumerate(grads, start=1):
            sess.run(train_op, {c: grad})
            if step % niter == 0:
                total = grads[step - niter:step].sum(axis=0)
                # the sum of the accumulated gradients == niter * their mean
                np.testing.assert_allclose(total, niter * grads[step - niter:step].mean(axis=0),
                                           rtol=1e-5)
                expected = expected - lr * total
            np.testing.assert_allclose(sess.run(w), expected, rtol=1e-5, atol=1e-6)
            assert sess.run(global_step) == step   # incremented at every call
        accum, = [v for v in tfv1.global_variables() if v.op.name == 'w/AccumGrad']
        # the 7th gradient waits in the accumulator
        np.testing.assert_allclose(sess.run(accum), grads[6], rtol=1e-6)


def test_accum_grad_optimizer_with_momentum_slots():
    w = tfv1.get_variable('w', initializer=0.0)
    c = tfv1.placeholder(tf.float32, [])
    opt = AccumGradOptimizer(tfv1.train.MomentumOptimizer(1.0, momentum=0.5), niter=2)
    train_op = opt.minimize(w * c)
    with tfv1.Session() as sess:
        sess.run(tfv1.global_variables_initializer())
        for g in [1.0, 2.0, 3.0, 4.0]:
            sess.run(train_op, {c: g})
        # accumulator a: a1 = 3, w = -3; a2 = 0.5 * 3 + 7 = 8.5, w = -11.5
        np.testing.assert_allclose(sess.run(w), -11.5, rtol=1e-6)
        np.testing.assert_allclose(sess.run(opt.get_slot(w, 'momentum')), 8.5, rtol=1e-6)


@pytest.mark.parametrize('niter', [0, -2, 2.5, True, '3', None])
def test_accum_grad_optimizer_bad_niter(niter):
    with pytest.raises(ValueError, match='niter'):
        AccumGradOptimizer(tfv1.train.GradientDescentOptimizer(0.1), niter)


# ---------------------------------------------------------------------------------------------
# RunUpdateOps with towers

def build_two_towers():
    """Two training towers adding 1 (tower0) and 10 (tower1) to a shared counter in
    UPDATE_OPS, an inference tower, and an update op outside towers adding 100."""
    counter = tfv1.get_variable('counter', initializer=0, dtype=tf.int32, trainable=False)
    outside = tfv1.get_variable('outside', initializer=0, dtype=tf.int32, trainable=False)

    def tower_fn(x):
        ctx = get_current_tower_context()
        w = tfv1.get_variable('w', initializer=1.0)
        step = 1 if ctx.is_main_training_tower else 10
        tfv1.add_to_collection(tfv1.GraphKeys.UPDATE_OPS, tfv1.assign_add(counter, step))
        return tf.reduce_sum(w * x, name='cost')

    func = TowerFunc(tower_fn, [tf.TensorSpec([None], tf.float32, 'x')])
    x = tf.constant([1.0, 2.0])
    with TrainTowerContext('tower0', index=0, total=2):
        cost0 = func(x)
    with TrainTowerContext('tower1', index=1, total=2):
        func(x)
    with tfv1.variable_scope(tfv1.get_variable_scope(), reuse=True):
        with PredictTowerContext('InferenceTower'):
            func(x)
    tfv1.add_to_collection(tfv1.GraphKeys.UPDATE_OPS, tfv1.assign_add(outside, 100))
    train_op = tfv1.train.GradientDescentOptimizer(0.01).minimize(cost0)
    return func, counter, outside, train_op


def train_steps(trainer, callbacks, train_op, steps=3):
    trainer.train_op = train_op
    trainer.train_with_defaults(callbacks=callbacks, monitors=[], steps_per_epoch=steps,
                                max_epoch=1, extra_callbacks=[])


def test_run_update_ops_skips_other_training_towers():
    func, counter, outside, train_op = build_two_towers()
    assert len(tfv1.get_collection(tfv1.GraphKeys.UPDATE_OPS)) == 3   # inference tower's dropped
    trainer = Trainer()
    trainer.towers = func.towers
    readback = ReadBack(counter, outside)
    train_steps(trainer, [RunUpdateOps(), readback], train_op)
    assert list(readback.values) == [3 * 1, 3 * 100]


def test_run_update_ops_without_towers_runs_everything():
    func, counter, outside, train_op = build_two_towers()
    readback = ReadBack(counter, outside)
    train_steps(Trainer(), [RunUpdateOps(), readback], train_op)
    assert list(readback.values) == [3 * 11, 3 * 100]
