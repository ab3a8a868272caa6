"""FeedfreePredictor, MultiThreadAsyncPredictor and remap_input_source (in predictors and in
real trainings)."""

import threading

import numpy as np
import pytest

from tensorpack_lite.compat import tf, tfv1
from tensorpack_lite.predict.base import OnlinePredictor
from tensorpack_lite.predict.concurrency import MultiThreadAsyncPredictor


W_VALUE = np.array([[1., 2.], [3., 4.], [5., 6.]], np.float32)


B_VALUE = np.array([10., 20.], np.float32)


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
