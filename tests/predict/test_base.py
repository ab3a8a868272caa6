"""Predictors (OnlinePredictor, OfflinePredictor), PredictConfig, and tfutils.varreplace."""

import numpy as np
import pytest

from tensorpack_lite.compat import tf, tfv1
from tensorpack_lite.predict import OfflinePredictor, OnlinePredictor, PredictConfig
from tensorpack_lite.tfutils import varreplace
from tensorpack_lite.tfutils.tower import TowerFunc

from helpers.callbacks import AssignValues
from helpers.models import B_VALUE, W_VALUE, LinearModel

X_VALUE = np.array([[1., 0., 0.], [1., 1., 1.], [0., -1., 2.]], np.float32)
EXPECTED = X_VALUE.dot(W_VALUE) + B_VALUE


def _linear_graph():
    x = tfv1.placeholder(tf.float32, [None, 3], name='x')
    W = tfv1.get_variable('W', initializer=tf.constant(W_VALUE))
    b = tfv1.get_variable('b', initializer=tf.constant(B_VALUE))
    y = tf.identity(tf.matmul(x, W) + b, name='y')
    return x, y


# ----- OnlinePredictor -------------------------------------------------------------------
@pytest.mark.quick
def test_online_predictor_explicit_session():
    x, y = _linear_graph()
    with tfv1.Session() as sess:
        sess.run(tfv1.global_variables_initializer())
        pred = OnlinePredictor([x], [y, 'W'], sess=sess)
        out = pred(X_VALUE)
        assert isinstance(out, list) and len(out) == 2
        np.testing.assert_allclose(out[0], EXPECTED)
        np.testing.assert_allclose(out[1], W_VALUE)
        # the callable is built once for the session and reused
        assert len(pred._callables) == 1
        np.testing.assert_allclose(pred(2 * X_VALUE)[0], 2 * X_VALUE.dot(W_VALUE) + B_VALUE)
        assert len(pred._callables) == 1


def test_online_predictor_default_session_at_call_time():
    _linear_graph()
    pred = OnlinePredictor(['x'], ['y:0'])      # names resolved in the session's graph
    with pytest.raises(RuntimeError, match='no session'):
        pred(X_VALUE)
    graph = tfv1.get_default_graph()
    with tfv1.Session() as sess1, tfv1.Session(graph=graph) as sess2:
        sess1.run(tfv1.global_variables_initializer())
        sess2.run(tfv1.global_variables_initializer())
        sess2.run(_var('b').assign([0., 0.]))
        with sess1.as_default():
            np.testing.assert_allclose(pred(X_VALUE)[0], EXPECTED)
        with sess2.as_default():     # another default session: runs there, b is zero there
            np.testing.assert_allclose(pred(X_VALUE)[0], X_VALUE.dot(W_VALUE))
        assert len(pred._callables) == 2
        assert pred.sess is None
    with tfv1.Session() as sess3:       # sess1 and sess2 are closed: their callables go
        sess3.run(tfv1.global_variables_initializer())
        with sess3.as_default():
            np.testing.assert_allclose(pred(X_VALUE)[0], EXPECTED)
        assert list(pred._callables) == [sess3]


def _var(name):
    return [v for v in tfv1.global_variables() if v.op.name == name][0]


def test_online_predictor_return_input_and_datapoint():
    x, y = _linear_graph()
    x2 = tfv1.placeholder(tf.float32, [], name='scale')
    z = tf.multiply(y, x2, name='z')
    with tfv1.Session() as sess:
        sess.run(tfv1.global_variables_initializer())
        pred = OnlinePredictor([x, x2], [z], return_input=True, sess=sess)
        inputs, outputs = pred(X_VALUE, np.float32(3))
        assert len(inputs) == 2 and inputs[0] is X_VALUE and inputs[1] == 3
        np.testing.assert_allclose(outputs[0], 3 * EXPECTED)
        # one list holding a whole datapoint, as older tensorpack code calls it
        inputs, outputs = pred([X_VALUE, np.float32(-1)])
        np.testing.assert_allclose(outputs[0], -EXPECTED)

        single = OnlinePredictor([x], [y], sess=sess)
        np.testing.assert_allclose(single([X_VALUE])[0], EXPECTED)
        # a nested python list is data, not a datapoint
        np.testing.assert_allclose(single([[1., 1., 1.]])[0], EXPECTED[1:2])


def test_online_predictor_wrong_number_of_inputs():
    x, y = _linear_graph()
    with tfv1.Session() as sess:
        sess.run(tfv1.global_variables_initializer())
        pred = OnlinePredictor([x], [y], sess=sess)
        with pytest.raises(ValueError, match=r"takes 1 inputs.*'x:0'.*got 2"):
            pred(X_VALUE, X_VALUE)
        with pytest.raises(ValueError, match=r"got 0"):
            pred()


def test_online_predictor_bad_arguments():
    x, y = _linear_graph()
    with pytest.raises(TypeError, match='input_tensors'):
        OnlinePredictor(x, [y])
    with pytest.raises(TypeError, match='output_tensors'):
        OnlinePredictor([x], [3])
    with tfv1.Session() as sess:
        with pytest.raises(ValueError, match="output tensor 'nope:0' is not in the graph"):
            OnlinePredictor([x], ['nope'], sess=sess)
    with tfv1.Graph().as_default():
        other = tfv1.Session()
    with pytest.raises(ValueError, match="input tensor 'x:0' is not in the graph"):
        OnlinePredictor([x], [y], sess=other)
    other.close()


# ----- OfflinePredictor ------------------------------------------------------------------
def test_offline_predictor_from_model():
    model = LinearModel()
    init = AssignValues({'fc/W': W_VALUE, 'fc/b': B_VALUE})
    outer = tfv1.get_default_graph()
    pred = OfflinePredictor(PredictConfig(model=model, input_names=['x'],
                                          output_names=['logits', 'prob:0', 'fc/W'],
                                          session_init=init))
    try:
        assert model.training_flags == [False]
        assert init.setup_graph_calls == 1
        assert pred.graph is not outer and pred.graph.finalized
        assert tfv1.get_default_graph() is outer and not outer.get_operations()
        logits, prob, W = pred(X_VALUE)
        np.testing.assert_allclose(W, W_VALUE)     # a variable's name gives its value
        np.testing.assert_allclose(logits, EXPECTED, rtol=1e-6)
        e = np.exp(EXPECTED - EXPECTED.max(axis=1, keepdims=True))
        np.testing.assert_allclose(prob, e / e.sum(axis=1, keepdims=True), rtol=1e-5)
        # ops of the tower have no prefix
        assert pred.output_tensors[0].name == 'logits:0'
    finally:
        pred.sess.close()


def test_offline_predictor_default_inputs_and_return_input():
    pred = OfflinePredictor(PredictConfig(model=LinearModel(), output_names=['cost'],
                                          return_input=True))     # W, b stay zero
    try:
        assert [t.name for t in pred.input_tensors] == ['x:0', 'label:0']
        labels = np.array([0, 1, 1], np.int32)
        inputs, (cost,) = pred(X_VALUE, labels)
        assert inputs[1] is labels
        np.testing.assert_allclose(cost, np.log(2.), rtol=1e-6)   # uniform over 2 classes
        with pytest.raises(ValueError, match=r"takes 2 inputs.*'x:0', 'label:0'"):
            pred(X_VALUE)
    finally:
        pred.sess.close()


def test_offline_predictor_tower_func_and_unknown_names():
    def tower_fn(a):
        v = tfv1.get_variable('v', initializer=tf.constant(2.))
        return tf.multiply(a, v, name='out')

    signature = [tf.TensorSpec([None], tf.float32, 'a')]
    pred = OfflinePredictor(PredictConfig(tower_func=tower_fn, input_signature=signature,
                                          output_names=['out']))
    try:
        np.testing.assert_allclose(pred(np.array([1., -3.], np.float32))[0], [2., -6.])
    finally:
        pred.sess.close()

    func = TowerFunc(tower_fn, signature)
    with pytest.raises(ValueError, match=r"output_names: Tensor 'nope:0' is not in tower"):
        OfflinePredictor(PredictConfig(tower_func=func, output_names=['out', 'nope']))
    with pytest.raises(ValueError, match=r"input_names: Tensor 'missing:0'"):
        OfflinePredictor(PredictConfig(tower_func=func, input_names=['missing'],
                                       output_names=['out']))


# ----- PredictConfig ---------------------------------------------------------------------
def test_predict_config_defaults_and_errors():
    config = PredictConfig(model=LinearModel(), output_names=['logits'])
    assert config.input_names == ['x', 'label']
    assert isinstance(config.tower_func, TowerFunc)
    assert [s.name for s in config.input_signature] == ['x', 'label']
    assert type(config.session_init).__name__ == 'JustCurrentSession'
    assert type(config.session_creator).__name__ == 'NewSessionCreator'

    def fn(a):
        return a
    signature = [tf.TensorSpec([None], tf.float32, 'a')]
    with pytest.raises(ValueError, match='neither'):
        PredictConfig(output_names=['y'])
    with pytest.raises(ValueError, match='not both'):
        PredictConfig(model=LinearModel(), tower_func=fn, input_signature=signature,
                      output_names=['y'])
    with pytest.raises(TypeError, match='model must be a ModelDescBase'):
        PredictConfig(model=fn, output_names=['y'])
    with pytest.raises(ValueError, match="tower_func fn is a plain function"):
        PredictConfig(tower_func=fn, output_names=['y'])
    with pytest.raises(TypeError, match='tower_func must be callable'):
        PredictConfig(tower_func='fn', input_signature=signature, output_names=['y'])
    with pytest.raises(ValueError, match='output_names is required'):
        PredictConfig(model=LinearModel())
    with pytest.raises(ValueError, match='output_names must not be empty'):
        PredictConfig(model=LinearModel(), output_names=[])
    with pytest.raises(TypeError, match='output_names must be a list'):
        PredictConfig(model=LinearModel(), output_names='logits')
    with pytest.raises(TypeError, match=r"input_names.*got 3"):
        PredictConfig(model=LinearModel(), input_names=['x', 3], output_names=['logits'])
    with pytest.raises(TypeError, match='session_init must be a SessionInit'):
        PredictConfig(model=LinearModel(), output_names=['logits'], session_init='ckpt')
    with pytest.raises(TypeError, match='session_creator'):
        PredictConfig(model=LinearModel(), output_names=['logits'], session_creator=object())
    with pytest.raises(ValueError, match="input_signature.*differs"):
        PredictConfig(tower_func=TowerFunc(fn, signature), output_names=['y'],
                      input_signature=[tf.TensorSpec([None], tf.float32, 'b')])
    with pytest.raises(TypeError, match='takes a PredictConfig'):
        OfflinePredictor({'model': LinearModel()})


# ----- varreplace ------------------------------------------------------------------------
def test_remap_variables_applies_fn():
    seen = []

    def double(var):
        seen.append(var)
        return var * 2

    x = tf.constant([[1., 2.]])
    with varreplace.remap_variables(double):
        w = tfv1.get_variable('w', initializer=tf.constant([[3.], [4.]]))
    y = tf.matmul(x, w)
    assert len(seen) == 1 and isinstance(seen[0], tf.Variable) and seen[0].op.name == 'w'
    assert not isinstance(w, tf.Variable)
    with tfv1.Session() as sess:
        sess.run(tfv1.global_variables_initializer())
        np.testing.assert_allclose(sess.run(y), [[22.]])            # (1*3 + 2*4) * 2
        np.testing.assert_allclose(sess.run(seen[0]), [[3.], [4.]])  # the variable itself


def test_freeze_variables_stop_gradient():
    with varreplace.freeze_variables(stop_gradient=True, skip_collection=False):
        frozen = tfv1.get_variable('frozen', initializer=1.)
    free = tfv1.get_variable('free', initializer=1.)
    loss = 3. * frozen + 5. * free
    grad_frozen, grad_free = tf.gradients(loss, [_var('frozen'), free])
    assert grad_frozen is None
    assert grad_free is not None
    # still trainable: only the gradient through this use is stopped
    assert [v.op.name for v in tfv1.trainable_variables()] == ['frozen', 'free']


def test_freeze_variables_skip_collection():
    with varreplace.freeze_variables(stop_gradient=False, skip_collection=True):
        frozen = tfv1.get_variable('frozen', initializer=1.)
        already_untrainable = tfv1.get_variable('counter', initializer=0., trainable=False)
    assert isinstance(frozen, tf.Variable)
    assert tfv1.trainable_variables() == []
    model_vars = tfv1.get_collection(tfv1.GraphKeys.MODEL_VARIABLES)
    assert [v.op.name for v in model_vars] == ['frozen']
    assert already_untrainable not in model_vars
    # the gradient still exists (nothing stops it): it is just not trained by default
    assert tf.gradients(2. * frozen, [frozen])[0] is not None


def test_custom_getter_scope_passes_args_and_keeps_name_scope():
    calls = []

    def my_getter(getter, *args, **kwargs):
        calls.append((args, dict(kwargs)))
        return getter(*args, **kwargs)

    with tfv1.variable_scope('outer'):
        with tfv1.name_scope('ns'):
            with varreplace.custom_getter_scope(my_getter):
                v = tfv1.get_variable('v', shape=[2], dtype=tf.float64,
                                      initializer=tfv1.ones_initializer(), trainable=False)
                op = tf.identity(v, name='op')
    assert len(calls) == 1
    args, kwargs = calls[0]
    name = args[0] if args else kwargs['name']
    assert name == 'outer/v'
    assert kwargs['shape'] == [2] and kwargs['dtype'] == tf.float64
    assert kwargs['trainable'] is False
    assert v.op.name == 'outer/v'
    assert op.name == 'outer/ns/op:0'       # no extra name scope
    with pytest.raises(TypeError, match='callable'):
        with varreplace.custom_getter_scope(None):
            pass
