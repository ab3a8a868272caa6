"""FeedfreePredictor, MultiThreadAsyncPredictor and remap_input_source (in predictors and in
real trainings)."""

import threading

import numpy as np
import pytest

from tensorpack_lite.callbacks.base import Callback
from tensorpack_lite.callbacks.inference import ScalarStats
from tensorpack_lite.callbacks.inference_runner import InferenceRunner
from tensorpack_lite.compat import tf, tfv1
from tensorpack_lite.dataflow import DataFromList
from tensorpack_lite.input_source import (FeedInput, QueueInput, StagingInput, TensorInput,
                                          remap_input_source)
from tensorpack_lite.input_source.input_source_base import FeedfreeInput
from tensorpack_lite.predict.base import OnlinePredictor
from tensorpack_lite.predict.concurrency import MultiThreadAsyncPredictor
from tensorpack_lite.predict.config import PredictConfig
from tensorpack_lite.predict.feedfree import FeedfreePredictor
from tensorpack_lite.tfutils.tower import TowerFunc
from tensorpack_lite.train import ModelDesc, SimpleTrainer, TrainConfig, launch_train_with_config

from helpers import AssignValues

W_VALUE = np.array([[1., 2.], [3., 4.], [5., 6.]], np.float32)
B_VALUE = np.array([10., 20.], np.float32)
RNG = np.random.RandomState(7)
X_BATCHES = [RNG.randn(n, 3).astype('float32') for n in (4, 2, 3)]
LABEL_BATCHES = [RNG.randint(0, 2, size=len(x)).astype('int32') for x in X_BATCHES]


class LinearModel(ModelDesc):
    """logits = x W + b, on inputs 'x' [None, 3] and 'label' [None]."""

    def inputs(self):
        return [tf.TensorSpec([None, 3], tf.float32, 'x'), tf.TensorSpec([None], tf.int32, 'label')]

    def build_graph(self, x, label):
        W = tfv1.get_variable('fc/W', [3, 2], initializer=tfv1.zeros_initializer())
        b = tfv1.get_variable('fc/b', [2], initializer=tfv1.zeros_initializer())
        logits = tf.identity(tf.matmul(x, W) + b, name='logits')
        return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=label, logits=logits),
                              name='cost')


def linear_config(output_names):
    return PredictConfig(model=LinearModel(), output_names=output_names,
                         session_init=AssignValues({'fc/W': W_VALUE, 'fc/b': B_VALUE}))


def dataflow(*components):
    """A DataFlow whose datapoints are the given batches, in order."""
    return DataFromList([list(c) for c in zip(*components)], shuffle=False)


# ----------------------------------------------------------------------------------------
# FeedfreePredictor

@pytest.mark.parametrize('kind', ['queue', 'feed'])
def test_feedfree_predictor_runs_through_the_source(kind):
    ds = dataflow(X_BATCHES, LABEL_BATCHES)
    source = QueueInput(ds) if kind == 'queue' else FeedInput(ds)
    pred = FeedfreePredictor(linear_config(['logits', 'label']), source)
    try:
        assert pred.graph.finalized
        for k in range(2 * len(X_BATCHES)):   # the source repeats its data
            logits, label = pred()
            x = X_BATCHES[k % 3]
            np.testing.assert_allclose(logits, x.dot(W_VALUE) + B_VALUE, rtol=1e-5)
            np.testing.assert_array_equal(label, LABEL_BATCHES[k % 3])
        with pytest.raises(TypeError, match=r"takes no inputs \(they come from its {}\), got 1".format(
                type(source).__name__)):
            pred(X_BATCHES[0])
    finally:
        pred.close()
    if kind == 'queue':
        assert not source.thread.is_alive()
    assert pred.sess._closed


def test_feedfree_predictor_tensor_input_and_end_of_data():
    def tower_fn(a):
        return tf.multiply(a, 3.0, name='tripled')

    dataset = tf.data.Dataset.from_tensor_slices(np.arange(4, dtype='float32').reshape(2, 2))
    iterator = tfv1.data.make_initializable_iterator(dataset)

    config = PredictConfig(tower_func=tower_fn, input_signature=[tf.TensorSpec([2], tf.float32, 'a')],
                           output_names=['tripled'], create_graph=False)
    pred = FeedfreePredictor(config, TensorInput(lambda: [iterator.get_next()]))
    try:
        pred.sess.run(iterator.initializer)
        np.testing.assert_allclose(pred()[0], [0., 3.])
        np.testing.assert_allclose(pred()[0], [6., 9.])
        with pytest.raises(tf.errors.OutOfRangeError):
            pred()
    finally:
        pred.close()


def test_feedfree_predictor_bad_arguments():
    source = QueueInput(dataflow(X_BATCHES, LABEL_BATCHES))
    with pytest.raises(TypeError, match='takes a PredictConfig'):
        FeedfreePredictor(None, source)
    with pytest.raises(TypeError, match='takes an InputSource'):
        FeedfreePredictor(linear_config(['logits']), dataflow(X_BATCHES, LABEL_BATCHES))
    config = linear_config(['logits'])
    config.return_input = True
    with pytest.raises(ValueError, match='return_input is not supported'):
        FeedfreePredictor(config, source)
    with pytest.raises(ValueError, match=r"output_names: Tensor 'nope:0' is not in tower"):
        FeedfreePredictor(linear_config(['nope']), source)
    with pytest.raises(RuntimeError, match='QueueInput is already set up'):
        FeedfreePredictor(linear_config(['logits']), source)


# ----------------------------------------------------------------------------------------
# remap_input_source

def test_remapped_source_gives_only_the_named_inputs():
    source = remap_input_source(QueueInput(dataflow(X_BATCHES)), ['x'])
    assert isinstance(source, FeedfreeInput)
    pred = FeedfreePredictor(linear_config(['logits', 'label']), source)
    try:
        x_t, label_t = pred._config.tower_func.towers[-1].inputs
        assert x_t.op.type == 'Identity' and x_t.op.inputs[0].op.type == 'QueueDequeueV2'   # counted
        assert label_t.op.type == 'Placeholder' and label_t.name == 'label:0'
        logits_t = pred._output_tensors[0]
        for x in X_BATCHES:
            np.testing.assert_allclose(pred._hooked_sess.run(logits_t), x.dot(W_VALUE) + B_VALUE, rtol=1e-5)
        with pytest.raises(tf.errors.InvalidArgumentError,
                           match="must feed a value for placeholder tensor 'label'"):
            pred()   # 'label' is needed but nothing feeds it
    finally:
        pred.close()


def test_remapped_source_in_another_order():
    def tower_fn(a, b):
        return tf.subtract(a, 2 * b, name='out')

    signature = [tf.TensorSpec([None], tf.float32, 'a'), tf.TensorSpec([None], tf.float32, 'b')]
    a_values = [np.array([1., 2.], 'float32'), np.array([5.], 'float32')]
    b_values = [np.array([10., 20.], 'float32'), np.array([-1.], 'float32')]
    source = remap_input_source(QueueInput(dataflow(b_values, a_values)), ['b', 'a'])
    pred = FeedfreePredictor(PredictConfig(tower_func=TowerFunc(tower_fn, signature), output_names=['out']),
                             source)
    try:
        for a, b in zip(a_values, b_values):
            np.testing.assert_allclose(pred()[0], a - 2 * b)
    finally:
        pred.close()


class ThreeInputs(ModelDesc):
    """cost = mean((w x - y)^2), w starting at 0.5; 'extra' is used only with use_extra."""

    def __init__(self, use_extra=False):
        self.use_extra = use_extra

    def inputs(self):
        return [tf.TensorSpec([None], tf.float32, 'x'), tf.TensorSpec([None], tf.float32, 'y'),
                tf.TensorSpec([None], tf.float32, 'extra')]

    def build_graph(self, x, y, extra):
        w = tfv1.get_variable('w', initializer=0.5)
        if self.use_extra:
            y = y + extra
        tf.reduce_sum(x, name='x_sum')
        return tf.reduce_mean(tf.square(w * x - y), name='cost')

    def optimizer(self):
        return tfv1.train.GradientDescentOptimizer(0.01)


class FirstCost(Callback):
    def __init__(self):
        self.costs = []

    def _before_run(self, ctx):
        return ['tower0/cost:0'] if self.trainer.tower_func.towers[0].ns_name else ['cost:0']

    def _after_run(self, ctx, values):
        self.costs.append(float(values.results[0]))


XS = [np.array([1., 2., 3.], 'float32'), np.array([-1., 4.], 'float32')]
YS = [np.array([0., 5., 1.], 'float32'), np.array([2., 2.], 'float32')]


def test_training_on_a_remapped_feed_input():
    source = remap_input_source(FeedInput(dataflow(YS, XS)), ['y', 'x'])   # the data gives [y, x]
    assert not isinstance(source, FeedfreeInput) and source.size() == 2
    recorder = FirstCost()
    launch_train_with_config(TrainConfig(model=ThreeInputs(), data=source, callbacks=[recorder],
                                         extra_callbacks=[], monitors=[], max_epoch=1), SimpleTrainer())
    # w is still 0.5 in the first step
    assert recorder.costs[0] == pytest.approx(np.mean(np.square(0.5 * XS[0] - YS[0])))

    with tfv1.Graph().as_default():
        source = remap_input_source(FeedInput(dataflow(YS, XS)), ['y', 'x'])
        config = TrainConfig(model=ThreeInputs(use_extra=True), data=source, extra_callbacks=[],
                             monitors=[], max_epoch=1)
        with pytest.raises(tf.errors.InvalidArgumentError, match="placeholder tensor 'extra'"):
            launch_train_with_config(config, SimpleTrainer())


def test_inference_runner_restarts_a_remapped_source_every_pass():
    # StagingInput stages every input: here the data gives all three
    train_source = remap_input_source(QueueInput(dataflow(YS, XS, XS)), ['y', 'extra', 'x'])
    assert isinstance(train_source, FeedfreeInput)
    val_source = remap_input_source(FeedInput(dataflow(XS, YS), infinite=False), ['x', 'y'])
    trainer = SimpleTrainer()
    launch_train_with_config(TrainConfig(
        model=ThreeInputs(), data=StagingInput(train_source),
        callbacks=[InferenceRunner(val_source, ScalarStats('x_sum'))],
        extra_callbacks=[], monitors=[], max_epoch=3), trainer)
    expected = np.mean([np.sum(x) for x in XS])
    assert [v for _, v in trainer.monitors.get_history('validation_x_sum')] == [pytest.approx(expected)] * 3


def test_remap_input_source_bad_arguments():
    with pytest.raises(TypeError, match='takes an InputSource'):
        remap_input_source(dataflow(XS), ['x'])
    with pytest.raises(TypeError, match='names must be a list'):
        remap_input_source(FeedInput(dataflow(XS)), 'x')
    with pytest.raises(ValueError, match='duplicate names'):
        remap_input_source(FeedInput(dataflow(XS)), ['x', 'x'])
    source = remap_input_source(FeedInput(dataflow(XS)), ['z'])
    with pytest.raises(ValueError,
                       match=r"\['z'\] are not inputs of the model, whose inputs are \['x', 'y', 'extra'\]"):
        source.setup(ThreeInputs().get_input_signature())


# ----------------------------------------------------------------------------------------
# MultiThreadAsyncPredictor

class BatchRecorder(OnlinePredictor):
    """Records the batch size of every call."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.batches = []
        self._batches_lock = threading.Lock()

    def _do_call(self, dp):
        with self._batches_lock:
            self.batches.append(len(dp[0]))
        return super()._do_call(dp)


def _linear_graph():
    x = tfv1.placeholder(tf.float32, [None, 3], name='x')
    W = tfv1.get_variable('W', initializer=tf.constant(W_VALUE))
    b = tfv1.get_variable('b', initializer=tf.constant(B_VALUE))
    y = tf.identity(tf.matmul(x, W) + b, name='y')
    total = tf.reduce_sum(x, axis=1, name='total')
    return x, y, total


@pytest.fixture
def session():
    """A session of the linear graph, not the default session."""
    x, y, total = _linear_graph()
    sess = tfv1.Session()
    try:
        sess.run(tfv1.global_variables_initializer())
        yield sess, x, y, total
    finally:
        sess.close()


def test_async_predictor_results_equal_the_synchronous_ones(session):
    sess, x, y, total = session
    workers = [BatchRecorder([x], [y, total], sess=sess) for _ in range(2)]
    sync = OnlinePredictor([x], [y, total], sess=sess)
    async_pred = MultiThreadAsyncPredictor(workers, batch_size=4)
    rows = np.random.RandomState(0).randn(23, 3).astype('float32')
    done = []
    futures = [async_pred.put_task([row], callback=done.append) for row in rows]   # queued before start
    async_pred.start()
    try:
        for row, future in zip(rows, futures):
            y_row, total_row = future.result(timeout=30)
            y_sync, total_sync = sync(row[None])
            # a batch may take another kernel than a single row: float32 rounding differs
            np.testing.assert_allclose(y_row, y_sync[0], rtol=1e-5)
            np.testing.assert_allclose(total_row, total_sync[0], rtol=1e-5)
            assert y_row.shape == (2,)
        # called synchronously, it is one task
        np.testing.assert_allclose(async_pred(rows[0])[0], sync(rows[:1])[0][0], rtol=1e-5)
    finally:
        async_pred.stop()
    assert not any(t.is_alive() for t in async_pred.threads)
    assert sorted(map(id, done)) == sorted(map(id, futures))   # every callback once, with its future
    batches = workers[0].batches + workers[1].batches
    # the 23 tasks were all waiting: a worker's batch is full unless the queue ran dry, which
    # happens once per worker; then the synchronous call makes a batch of its own
    assert sum(batches) == 24 and max(batches) == 4
    assert sum(1 for n in batches if n < 4) <= 3


def test_async_predictor_error_reaches_only_the_bad_task(session):
    sess, x, y, total = session
    async_pred = MultiThreadAsyncPredictor([OnlinePredictor([x], [y], sess=sess)], batch_size=4)
    good = np.ones(3, 'float32')
    futures = [async_pred.put_task([v]) for v in (good, np.ones(4, 'float32'), 2 * good, 3 * good)]
    async_pred.start()
    try:
        for k, scale in ((0, 1), (2, 2), (3, 3)):
            np.testing.assert_allclose(futures[k].result(timeout=30)[0], scale * good.dot(W_VALUE) + B_VALUE)
        with pytest.raises(ValueError, match=r"Cannot feed value of shape \(1, 4\)"):
            futures[1].result(timeout=30)
    finally:
        async_pred.stop()


def test_async_predictor_default_session_stop_and_bad_arguments(session):
    sess, x, y, total = session
    async_pred = MultiThreadAsyncPredictor([OnlinePredictor([x], [total])], batch_size=2)
    with pytest.raises(ValueError, match='a task is a list of 1 inputs'):
        async_pred.put_task([np.ones(3), np.ones(3)])
    with pytest.raises(RuntimeError, match='under `with sess.as_default'):
        async_pred.start()
    with sess.as_default():
        async_pred.start()
    try:
        assert async_pred.put_task([np.arange(3, dtype='float32')]).result(timeout=30)[0] == 3.0
    finally:
        async_pred.stop()
    with pytest.raises(RuntimeError, match=r'put_task\(\) after stop\(\)'):
        async_pred.put_task([np.ones(3)])

    waiting = MultiThreadAsyncPredictor([OnlinePredictor([x], [total], sess=sess)])
    future = waiting.put_task([np.ones(3)])
    waiting.stop()   # never started: the task is cancelled
    assert future.cancelled()

    with pytest.raises(TypeError, match=r'predictors\[1\] is not an OnlinePredictor'):
        MultiThreadAsyncPredictor([OnlinePredictor([x], [y]), 'p'])
    with pytest.raises(ValueError, match=r'predictors\[0\] has return_input=True'):
        MultiThreadAsyncPredictor([OnlinePredictor([x], [y], return_input=True)])
    with pytest.raises(ValueError, match='batch_size must be a positive int'):
        MultiThreadAsyncPredictor([OnlinePredictor([x], [y])], batch_size=0)
