"""Tower contexts, tower functions and their handles (tfutils/tower.py, tfutils/collection.py)."""

import logging

import numpy as np
import pytest

from tensorpack_lite.compat import tf, tfv1
from tensorpack_lite.tfutils.collection import CollectionGuard
from tensorpack_lite.tfutils.tower import (
    PredictTowerContext, TowerContext, TowerFunc, TowerFuncWrapper, TowerTensorHandles,
    TrainTowerContext, get_current_tower_context)

SIG = [tf.TensorSpec([None, 3], tf.float32, 'x'), tf.TensorSpec([None], tf.float32, 'y')]


def linear_tower(x, y):
    """y_hat = x W + b, squared loss; adds a summary and an update op."""
    W = tfv1.get_variable('W', [3, 1], initializer=tfv1.constant_initializer(0.5))
    b = tfv1.get_variable('b', [1], initializer=tfv1.zeros_initializer())
    pred = tf.identity(tf.squeeze(tf.matmul(x, W) + b, axis=1), name='pred')
    loss = tf.reduce_mean(tf.square(pred - y), name='loss')
    tfv1.summary.scalar('loss-summary', loss)
    tfv1.add_to_collection(tfv1.GraphKeys.UPDATE_OPS, tf.identity(b, name='fake_update'))
    tfv1.add_to_collection('MOVING_SUMMARY_OPS', tf.identity(loss, name='fake_moving'))
    return loss


def placeholders(suffix=''):
    return (tfv1.placeholder(tf.float32, [None, 3], name='x' + suffix),
            tfv1.placeholder(tf.float32, [None], name='y' + suffix))


def feed(inputs, xv, yv):
    return {inputs[0]: xv, inputs[1]: yv}


@pytest.mark.quick
def test_second_training_tower_reuses_variables_and_drops_summaries():
    in0, in1 = placeholders('0'), placeholders('1')
    with TrainTowerContext('tower0', index=0, total=2) as ctx0:
        assert get_current_tower_context() is ctx0
        assert ctx0.is_training and ctx0.is_main_training_tower and ctx0.has_own_variables
        loss0 = linear_tower(*in0)
    assert get_current_tower_context() is None
    trainables = list(tfv1.trainable_variables())
    summaries = list(tfv1.get_collection(tfv1.GraphKeys.SUMMARIES))
    updates = list(tfv1.get_collection(tfv1.GraphKeys.UPDATE_OPS))
    moving = list(tfv1.get_collection('MOVING_SUMMARY_OPS'))
    assert sorted(v.name for v in trainables) == ['W:0', 'b:0']
    assert len(summaries) == 1 and len(moving) == 1 and len(updates) == 1

    with TrainTowerContext('tower1', index=1, total=2) as ctx1:
        assert (ctx1.index, ctx1.total, ctx1.name, ctx1.ns_name) == (1, 2, 'tower1', 'tower1')
        assert not ctx1.is_main_training_tower and not ctx1.has_own_variables
        assert tfv1.get_variable_scope().reuse
        W1 = tfv1.get_variable('W')
        loss1 = linear_tower(*in1)
    assert W1 is trainables[[v.name for v in trainables].index('W:0')]
    assert tfv1.trainable_variables() == trainables
    assert not any('tower1/' in v.name for v in tfv1.global_variables())
    assert loss0.name == 'tower0/loss:0' and loss1.name == 'tower1/loss:0'
    # summaries and moving summaries come from tower 0 only; update ops are kept
    assert tfv1.get_collection(tfv1.GraphKeys.SUMMARIES) == summaries
    assert tfv1.get_collection('MOVING_SUMMARY_OPS') == moving
    assert len(tfv1.get_collection(tfv1.GraphKeys.UPDATE_OPS)) == 2
    assert [op.name for op in ctx1.get_collection_in_tower(tfv1.GraphKeys.UPDATE_OPS)] == \
        ['tower1/fake_update:0']
    assert ctx1.get_collection_in_tower(tfv1.GraphKeys.SUMMARIES) == []

    xv = np.array([[1., 2., 3.], [0., 0., 1.]], np.float32)
    yv = np.array([1., 2.], np.float32)
    with tfv1.Session() as sess:
        sess.run(tfv1.global_variables_initializer())
        sess.run(W1.assign([[1.], [0.], [0.]]))
        l0, l1 = sess.run([loss0, loss1], {**feed(in0, xv, yv), **feed(in1, xv, yv)})
    expected = np.mean(((xv @ np.array([[1.], [0.], [0.]]))[:, 0] - yv) ** 2)
    assert l0 == pytest.approx(expected) and l1 == pytest.approx(expected)


def test_tower_with_vs_name_has_own_variables():
    with TrainTowerContext('tower0', index=0, total=2):
        linear_tower(*placeholders('0'))
    with TrainTowerContext('tower1', vs_name='tower1', index=1, total=2) as ctx:
        assert ctx.has_own_variables and ctx.vs_name == 'tower1'
        loss = linear_tower(*placeholders('1'))
    names = sorted(v.name for v in tfv1.trainable_variables())
    assert names == ['W:0', 'b:0', 'tower1/W:0', 'tower1/b:0']
    assert loss.name == 'tower1/loss:0'
    new_vars = ctx.get_collection_in_tower(tfv1.GraphKeys.TRAINABLE_VARIABLES)
    assert [v.name for v in new_vars] == ['tower1/W:0', 'tower1/b:0']


def test_predict_tower_reuses_variables_and_freezes_collections():
    with TowerContext('', is_training=True) as train_ctx:
        assert isinstance(train_ctx, TrainTowerContext)
        loss = linear_tower(*placeholders())
    assert loss.name == 'loss:0'
    before = {key: list(tfv1.get_collection(key)) for key in
              (tfv1.GraphKeys.SUMMARIES, tfv1.GraphKeys.UPDATE_OPS, 'MOVING_SUMMARY_OPS')}
    variables = list(tfv1.global_variables())

    with tfv1.variable_scope(tfv1.get_variable_scope(), reuse=True):
        ctx = TowerContext('InferenceTower', is_training=False)
    assert isinstance(ctx, PredictTowerContext)
    with ctx:
        assert not ctx.is_training and not ctx.is_main_training_tower
        assert not ctx.has_own_variables
        pred_loss = linear_tower(*placeholders('_pred'))
        # inside the tower the additions are visible...
        assert len(ctx.get_collection_in_tower(tfv1.GraphKeys.UPDATE_OPS)) == 1
    # ...and dropped on exit
    for key, items in before.items():
        assert tfv1.get_collection(key) == items, key
    assert ctx.get_collection_in_tower(tfv1.GraphKeys.UPDATE_OPS) == []
    assert tfv1.global_variables() == variables
    assert pred_loss.name == 'InferenceTower/loss:0'

    # a prediction tower outside a reuse scope wants its own variables: TF refuses to recreate W
    with pytest.raises(ValueError, match='W already exists'):
        with PredictTowerContext('Other'):
            linear_tower(*placeholders('_other'))
    assert get_current_tower_context() is None


def test_nesting_raises_and_leaves_no_context():
    with TrainTowerContext('tower0'):
        with pytest.raises(RuntimeError, match='cannot be nested'):
            with PredictTowerContext('pred'):
                pass
        assert get_current_tower_context().ns_name == 'tower0'
    assert get_current_tower_context() is None


def test_name_scope_conflicts_raise():
    with tfv1.name_scope('tower0'):
        tf.constant(1.0, name='c')
    with pytest.raises(ValueError, match="Name conflict.*'tower0'"):
        with TrainTowerContext('tower0'):
            pass
    # a tower name used twice is a conflict as well, even without ops inside
    with TrainTowerContext('tower1', index=0, total=1):
        pass
    with pytest.raises(ValueError, match="Name conflict.*'tower1'"):
        with tfv1.variable_scope(tfv1.get_variable_scope(), reuse=True):
            with PredictTowerContext('tower1'):
                pass
    # a tower entered under another name scope gets a different scope: clear error
    with tfv1.name_scope('outer'):
        with pytest.raises(ValueError, match="name scope is 'outer' instead of ''"):
            with TrainTowerContext(''):
                pass
    assert get_current_tower_context() is None
    assert tfv1.get_default_graph().get_name_scope() == ''


def test_bad_train_tower_arguments():
    with pytest.raises(ValueError, match='index=2'):
        TrainTowerContext('tower2', index=2, total=2)
    with tfv1.variable_scope('model'):
        with pytest.raises(ValueError, match="inside variable scope 'model'"):
            TrainTowerContext('tower0')
    with pytest.raises(ValueError, match='needs a non-empty ns_name'):
        TrainTowerContext('', vs_name='v')


def test_new_trainable_variable_in_reusing_tower_raises():
    with TrainTowerContext('tower0', index=0, total=2):
        tfv1.get_variable('W', [1])
    with pytest.raises(ValueError, match='created new trainable variables: tower1/extra:0'):
        with TrainTowerContext('tower1', index=1, total=2):
            tfv1.Variable(1.0, name='extra')
    assert get_current_tower_context() is None


def test_towerfunc_handles_and_lookups(caplog):
    func = TowerFunc(linear_tower, SIG)
    assert TowerFunc(func, SIG) is func
    assert TowerFuncWrapper is TowerFunc
    assert [s.name for s in func.input_signature] == ['x', 'y'] == \
        [s.name for s in func.inputs_desc]
    in0, in1, inp = placeholders('0'), placeholders('1'), placeholders('p')
    with TrainTowerContext('tower0', index=0, total=2):
        func(*in0)
    with TrainTowerContext('tower1', index=1, total=2):
        func(*in1)
    with tfv1.variable_scope(tfv1.get_variable_scope(), reuse=True):
        with PredictTowerContext('pred'):
            # a tensor named like an input, inside the tower
            tf.constant(7.0, name='y')
            func(*inp)

    towers = func.towers
    assert isinstance(towers, TowerTensorHandles) and len(towers) == 3
    assert [h.ns_name for h in towers] == ['tower0', 'tower1', 'pred']
    assert [h.ns_name for h in towers.training()] == ['tower0', 'tower1']
    assert [h.ns_name for h in towers.inference()] == ['pred']
    assert towers['tower1'] is towers[1]
    assert towers.training()[1] is towers[1]
    with pytest.raises(KeyError, match="No tower named 'tower9'"):
        towers['tower9']

    t1 = towers['tower1']
    assert t1.is_training and not towers['pred'].is_training
    assert t1.get_tensor('loss').name == 'tower1/loss:0'
    assert t1['pred:0'].name == 'tower1/pred:0'
    assert t1.outputs is t1['loss']
    assert t1.inputs == list(in1)
    assert t1['x'] is in1[0] and t1.get_tensors(['y', 'loss']) == [in1[1], t1['loss']]
    assert towers[0]['x'] is in0[0]
    W = t1.get_variable('W')
    assert isinstance(W, tf.Variable) and W is towers[0].get_variable('W:0')
    assert [v.name for v in t1.get_variables(['W', 'b'])] == ['W:0', 'b:0']
    assert [t.name for t in t1.get_collection(tfv1.GraphKeys.UPDATE_OPS)] == \
        ['tower1/fake_update:0']
    assert t1.get_collection(tfv1.GraphKeys.SUMMARIES) == []
    assert [t.name for t in towers[0].get_collection(tfv1.GraphKeys.SUMMARIES)] == \
        ['tower0/loss-summary:0']

    # 'pred/y:0' exists, but the input named 'y' wins, with a warning
    caplog.set_level(logging.WARNING, logger='tensorpack_lite')
    lg = logging.getLogger('tensorpack_lite')
    lg.addHandler(caplog.handler)
    try:
        assert towers['pred']['y'] is inp[1]
    finally:
        lg.removeHandler(caplog.handler)
    assert "names both the tensor 'pred/y:0' and the input 'yp:0'" in caplog.text

    with pytest.raises(KeyError, match="'nothing:0' is not in tower 'tower1'"):
        t1['nothing']
    with pytest.raises(KeyError, match="Variable 'V:0' of tower 'tower0'"):
        towers[0].get_variable('V')

    # the handles give the values the towers compute
    xv = np.array([[1., 1., 1.]], np.float32)
    with tfv1.Session() as sess:
        sess.run(tfv1.global_variables_initializer())
        values = sess.run([h['pred'] for h in towers],
                          {in0[0]: xv, in1[0]: 2 * xv, inp[0]: 3 * xv})
    assert [float(v[0]) for v in values] == [1.5, 3.0, 4.5]


def test_towerfunc_errors():
    for bad in ('a:b', 'in/put', 'has space'):
        with pytest.raises(ValueError, match="Invalid input name '{}'".format(bad)):
            TowerFunc(linear_tower, [tf.TensorSpec([None], tf.float32, bad)])
    with pytest.raises(ValueError, match="'x' appears twice"):
        TowerFunc(linear_tower, [tf.TensorSpec([], tf.float32, 'x')] * 2)
    with pytest.raises(ValueError, match='needs a name'):
        TowerFunc(linear_tower, [tf.TensorSpec([], tf.float32)])
    func = TowerFunc(linear_tower, SIG)
    with pytest.raises(RuntimeError, match='inside a tower context'):
        func(*placeholders())
    assert len(func.towers) == 0
    with TrainTowerContext('tower0'):
        with pytest.raises(ValueError, match=r"expects 2 inputs \['x', 'y'\], got 1"):
            func(placeholders()[0])


def test_collection_guard_order_freeze_and_diff_log(caplog):
    tfv1.add_to_collection('things', 'old')
    guard = CollectionGuard('t', check_diff=True, freeze_keys=['frozen'])
    lg = logging.getLogger('tensorpack_lite')
    lg.addHandler(caplog.handler)
    try:
        with guard:
            for item in ('c', 'a', 'b'):
                tfv1.add_to_collection('things', item)
            tfv1.add_to_collection('frozen', 'gone')
            tfv1.add_to_collection('brand_new', 1)
            tfv1.get_variable('v', [1])   # variable collections are expected to change
            assert guard.get_collection_in_tower('frozen') == ['gone']
    finally:
        lg.removeHandler(caplog.handler)
    assert "Collections created in tower 't': brand_new (1 items)" in caplog.text
    assert "Collections resized in tower 't': things: 1 -> 4" in caplog.text
    assert 'VARIABLES' not in caplog.text
    tfv1.add_to_collection('things', 'after')
    assert guard.get_collection_in_tower('things') == ['c', 'a', 'b']
    assert tfv1.get_collection('things') == ['old', 'c', 'a', 'b', 'after']
    assert tfv1.get_collection('frozen') == []
    assert guard.get_collection_in_tower('frozen') == []
    assert guard.get_collection_in_tower('never') == []


@pytest.mark.parametrize('visible, device, expected', [
    ('', 0, '/device:CPU:0'),        # a GPU id on a machine without GPUs: the CPU
    ('', -1, '/device:CPU:0'),
    ('0,1', 1, '/device:GPU:1'),     # with GPUs: the GPU asked for
    ('', '/cpu:1', '/device:CPU:1'),
])
def test_predict_tower_device(monkeypatch, visible, device, expected):
    from tensorpack_lite.tfutils.tower import build_predict_tower
    monkeypatch.setenv('CUDA_VISIBLE_DEVICES', visible)
    with TowerContext('', is_training=True):
        linear_tower(*placeholders())
    func = TowerFunc(linear_tower, SIG)
    handle = build_predict_tower(func, placeholders('_p'), 'tower-pred', device)
    assert handle['pred'].device == expected
