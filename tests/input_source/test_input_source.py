"""Every InputSource: set up with a signature, trained on through a real Trainer (or run in a
session), batches checked value by value in the DataFlow's order; shutdown and errors."""

import faulthandler
import logging
import threading

import numpy as np
import pytest
import zmq

from tensorpack_lite.callbacks.base import Callback
from tensorpack_lite.compat import tf, tfv1
from tensorpack_lite.dataflow import BatchData, DataFlow, DataFromList
from tensorpack_lite.input_source import (BatchQueueInput, DummyConstantInput, FeedInput,
                                          PlaceholderInput, QueueInput, StagingInput, TensorInput,
                                          TFDatasetInput, ZMQInput)
from tensorpack_lite.tfutils.sesscreate import NewSessionCreator
from tensorpack_lite.tfutils.sessinit import JustCurrentSession
from tensorpack_lite.train.base import Trainer
from tensorpack_lite.utils.serialize import dumps

from helpers.processes import run_python
from helpers.timing import HANG_TIMEOUT, run_or_hang, wait_until

N, B = 12, 3  # datapoints, batch size: 4 batches per pass


@pytest.fixture(autouse=True)
def _no_hang(monkeypatch):
    """Kill the run with a traceback of every thread if a test hangs; the enqueue threads get as
    long as they need to end after training (a thread slowed down by CPU load is no error)."""
    for cls in (QueueInput, ZMQInput):
        monkeypatch.setattr(cls, 'thread_join_timeout', HANG_TIMEOUT)
    faulthandler.dump_traceback_later(3 * HANG_TIMEOUT, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()


def signature(batch=None):
    return [tf.TensorSpec([batch, 2], tf.float32, 'x'), tf.TensorSpec([batch], tf.int32, 'y')]


def single_signature():
    return [tf.TensorSpec([2], tf.float32, 'x'), tf.TensorSpec([], tf.int32, 'y')]


def datapoints(n=N):
    """Single datapoints: x = [i, i + 0.5], y = 10 * i."""
    return [[np.array([i, i + 0.5], dtype=np.float32), np.int32(10 * i)] for i in range(n)]


def batch(k, size=B):
    """The k-th batch of `datapoints()`, computed independently of BatchData."""
    idx = np.arange(k * size, (k + 1) * size)
    return np.stack([idx, idx + 0.5], axis=1).astype(np.float32), (10 * idx).astype(np.int32)


def batched_df(n=N):
    return BatchData(DataFromList(datapoints(n), shuffle=False), B)


class Recorder(Callback):
    """Fetches the input tensors with every hooked run that runs `only_for` (any run when
    None), and checks the end of training with `at_end(sess)`."""

    _chief_only = False

    def __init__(self, tensors, only_for=None, at_end=None, every_step=None):
        self._tensors = list(tensors)
        self._only_for = only_for
        self._at_end = at_end
        self._every_step = every_step
        self.batches = []
        self.end = None
        self.per_step = []

    def _before_run(self, ctx):
        if self._only_for is None or ctx.original_args.fetches is self._only_for:
            return tfv1.train.SessionRunArgs(fetches=self._tensors)
        return None

    def _after_run(self, ctx, values):
        if values.results is not None:
            self.batches.append(values.results)

    def _trigger_step(self):
        if self._every_step is not None:
            self.per_step.append(self._every_step(self.trainer.sess))

    def _after_train(self):
        if self._at_end is not None:
            self.end = self._at_end(self.trainer.sess)


def consuming_train_op(tensors):
    """A train op that consumes the inputs: adds sum(x) + sum(y) into a variable."""
    acc = tfv1.get_variable('acc', [], tf.float64, initializer=tfv1.zeros_initializer(),
                            trainable=False)
    total = sum(tf.reduce_sum(tf.cast(t, tf.float64)) for t in tensors)
    return acc, acc.assign_add(total).op


def train(callbacks, train_op, steps_per_epoch, max_epoch=1, trainer=None):
    trainer = trainer or Trainer()
    trainer.train_op = train_op
    trainer.train(list(callbacks), [], NewSessionCreator(), JustCurrentSession(),
                  steps_per_epoch, 1, max_epoch)
    return trainer


def assert_batches(recorded, ks):
    assert len(recorded) == len(ks)
    for (x, y), k in zip(recorded, ks):
        ex, ey = batch(k)
        np.testing.assert_array_equal(x, ex)
        np.testing.assert_array_equal(y, ey)
        assert x.dtype == np.float32 and y.dtype == np.int32


def expected_sum(ks):
    return sum(float(batch(k)[0].sum()) + float(batch(k)[1].sum()) for k in ks)


def run_source(source, steps_per_epoch, max_epoch=1, extra_end=None):
    """Set up `source`, train on it; returns (recorder, accumulated sum)."""
    cbs = source.setup(signature())
    tensors = source.get_input_tensors()
    acc, train_op = consuming_train_op(tensors)

    def at_end(sess):
        out = {'acc': sess.run(acc)}
        if extra_end is not None:
            out.update(extra_end(sess))
        return out
    rec = Recorder(tensors, at_end=at_end)
    train(cbs + [rec], train_op, steps_per_epoch, max_epoch)
    return rec


# --------------------------------------------------------------------------- PlaceholderInput

@pytest.mark.quick
def test_placeholder_input_gives_named_placeholders():
    source = PlaceholderInput()
    source.setup(signature())
    x, y = source.get_input_tensors()
    assert (x.name, y.name) == ('x:0', 'y:0')
    assert x.op.type == 'Placeholder' and x.shape.as_list() == [None, 2] and y.dtype == tf.int32


# --------------------------------------------------------------------------- FeedInput

@pytest.mark.quick
def test_feed_input_feeds_batches_in_order_and_repeats():
    source = FeedInput(batched_df())
    assert source.size() == N // B
    rec = run_source(source, steps_per_epoch=3, max_epoch=2)  # 6 steps: wraps after 4
    ks = [0, 1, 2, 3, 0, 1]
    assert_batches(rec.batches, ks)
    assert rec.end['acc'] == pytest.approx(expected_sum(ks))


def _feed_callback(source):
    cbs = source.setup(signature())
    return cbs[-1]


def test_feed_input_reset_restarts_the_iteration():
    source = FeedInput(batched_df())
    cb = _feed_callback(source)
    x_ph = source.get_input_tensors()[0]
    source.reset_state()
    first = [cb.before_run(None).feed_dict[x_ph] for _ in range(2)]
    source.reset_state()
    again = cb.before_run(None).feed_dict[x_ph]
    np.testing.assert_array_equal(first[0], batch(0)[0])
    np.testing.assert_array_equal(first[1], batch(1)[0])
    np.testing.assert_array_equal(again, batch(0)[0])


def test_feed_input_not_infinite_stops():
    source = FeedInput(batched_df(6), infinite=False)
    cb = _feed_callback(source)
    source.reset_state()
    cb.before_run(None)
    cb.before_run(None)
    with pytest.raises(StopIteration):
        cb.before_run(None)


@pytest.mark.parametrize('dp, words', [
    ([np.zeros((3, 2), np.float32)], ['1 components', '2 inputs', 'x, y']),
    ([np.zeros((3, 5), np.float32), np.zeros(3, np.int32)], ["input 'x'", '(3, 5)', '(None, 2)']),
    ([np.zeros((3, 2), np.float32), np.zeros((3, 1), np.int32)], ["input 'y'", '(3, 1)']),
], ids=['length', 'shape-x', 'shape-y'])
def test_feed_input_bad_datapoint_is_a_clear_error(dp, words):
    source = FeedInput(DataFromList([dp], shuffle=False))
    cb = _feed_callback(source)
    source.reset_state()
    with pytest.raises(ValueError) as info:
        cb.before_run(None)
    for word in words:
        assert word in str(info.value)


def test_feed_input_rejects_non_dataflow():
    with pytest.raises(TypeError, match='DataFlow'):
        FeedInput([[1, 2]])


# --------------------------------------------------------------------------- QueueInput

class WaitForFullQueue(Callback):
    """After each epoch, waits until the queue is full, so that the enqueue thread is blocked
    on it when training ends."""

    def __init__(self, queue, capacity):
        self._queue = queue
        self._capacity = capacity

    def _setup_graph(self):
        self._size = self._queue.size()

    def _after_epoch(self):
        assert wait_until(lambda: self.trainer.sess.run(self._size) >= self._capacity, interval=0.01)


def test_queue_input_order_values_and_clean_shutdown(log_records):
    queue = tfv1.FIFOQueue(2, [tf.float32, tf.int32], name='small_queue')
    source = QueueInput(batched_df(), queue=queue)
    assert source.size() == N // B
    cbs = source.setup(signature())
    assert source.queue is queue
    tensors = source.get_input_tensors()
    assert [t.shape.as_list() for t in tensors] == [[None, 2], [None]]
    assert all('cpu' in t.device.lower() for t in tensors)
    acc, train_op = consuming_train_op(tensors)
    is_closed = source.queue.is_closed()
    ema_vars = {v.op.name: v for v in tfv1.global_variables()}
    ema = ema_vars['EMA/QueueInput/queue_size']
    ema_updates = ema_vars['EMA/QueueInput/queue_size/local_step']
    summaries = [s.op.name for s in tfv1.get_collection(tfv1.GraphKeys.SUMMARIES)]
    assert 'QueueInput/queue_size-summary' in summaries

    def at_end(sess):
        return {'alive': source.thread.is_alive(), 'closed': sess.run(is_closed),
                'acc': sess.run(acc), 'ema': sess.run(ema), 'updates': sess.run(ema_updates)}
    rec = Recorder(tensors, at_end=at_end)
    run_or_hang(train, cbs + [WaitForFullQueue(queue, 2), rec], train_op, steps_per_epoch=5, max_epoch=2)
    ks = [k % 4 for k in range(10)]
    assert_batches(rec.batches, ks)
    assert rec.end['acc'] == pytest.approx(expected_sum(ks))
    assert rec.end['alive'] is False and rec.end['closed']
    assert 0 <= rec.end['ema'] <= 2 and rec.end['updates'] == 10  # updated with every step
    exits = [r for r in log_records if 'exited' in r.getMessage()]
    assert len(exits) == 1
    assert not any(r.levelno >= logging.ERROR for r in log_records)


class FailingDataFlow(DataFlow):
    """Three good batches, then an error."""

    def __iter__(self):
        for k in range(3):
            yield list(batch(k))
        raise ValueError('the DataFlow broke at batch 3')


EAGER_QUEUE_PROGRAM = """
import numpy as np
from tensorpack_lite.compat import enable_graph_mode, tf, tfv1
from tensorpack_lite.dataflow import DataFromList
from tensorpack_lite.input_source import BatchQueueInput, QueueInput

queue = tfv1.FIFOQueue(10, [tf.float32], name='module_level')   # eager: no trainer yet
df = DataFromList([[np.float32(1)]])
for make in (lambda: QueueInput(df, queue=queue), lambda: BatchQueueInput(df, 1, queue=queue)):
    try:
        make()
    except ValueError as err:
        print(err)
enable_graph_mode()
source = QueueInput(df, queue=tfv1.FIFOQueue(10, [tf.float32], name='in_graph'))
source.setup([tf.TensorSpec([], tf.float32, 'x')])
print('graph queue:', source.queue.name)
"""


def test_queue_input_refuses_an_eager_queue_saying_what_to_do():
    # a queue made at module level before any trainer is eager in TF2 (tensorpack fails on
    # 'Tensor.op is undefined when eager execution is enabled')
    lines = run_python(EAGER_QUEUE_PROGRAM).splitlines()
    assert lines[-1] == 'graph queue: in_graph'        # once graph mode is on, a queue is taken
    for owner, line in zip(['QueueInput', 'BatchQueueInput'], lines):
        assert line.startswith('{}: the queue was made in eager mode'.format(owner))
        for advice in ('tf.compat.v1.disable_eager_execution()', 'disable_v2_behavior()',
                       'in a function called while the graph is built',
                       'pass no queue and let {} make its own'.format(owner)):
            assert advice in line


def test_queue_input_dataflow_error_ends_training_promptly(log_records):
    source = QueueInput(FailingDataFlow())
    cbs = source.setup(signature())
    tensors = source.get_input_tensors()
    acc, train_op = consuming_train_op(tensors)
    rec = Recorder(tensors)
    with pytest.raises(ValueError, match='the DataFlow broke at batch 3'):  # re-raised after training
        run_or_hang(train, cbs + [rec], train_op, steps_per_epoch=100, max_epoch=3)
    assert_batches(rec.batches, [0, 1, 2])  # what was queued before the error, then the end
    assert rec.trainer.epoch_num == 1 and rec.trainer.local_step == 3
    assert not source.thread.is_alive()
    errors = [r for r in log_records if r.levelno >= logging.ERROR]
    assert errors and errors[0].exc_info is not None  # the thread logged it when it happened
    assert 'the DataFlow broke at batch 3' in str(errors[0].exc_info[1])


def test_queue_input_refill_queue_restarts_the_dataflow():
    source = QueueInput(DataFromList(datapoints(), shuffle=False))
    source.setup(single_signature())
    x, y = source.get_input_tensors()
    with tfv1.Session() as sess, sess.as_default():
        source.reset_state()
        source.thread.start()
        assert [sess.run(y) for _ in range(3)] == [0, 10, 20]
        source.refill_queue()
        assert [sess.run(y) for _ in range(3)] == [0, 10, 20]
        source.thread.stop()
        source.thread.join(HANG_TIMEOUT)
        assert not source.thread.is_alive()


# --------------------------------------------------------------------------- BatchQueueInput

def test_batch_queue_input_dequeues_batches():
    source = BatchQueueInput(DataFromList(datapoints(), shuffle=False), B)
    assert source.size() == N // B
    cbs = source.setup(signature())
    tensors = source.get_input_tensors()
    assert [t.shape.as_list() for t in tensors] == [[B, 2], [B]]
    acc, train_op = consuming_train_op(tensors)
    rec = Recorder(tensors, at_end=lambda sess: source.thread.is_alive())
    train(cbs + [rec], train_op, steps_per_epoch=6)
    assert_batches(rec.batches, [0, 1, 2, 3, 0, 1])
    assert rec.end is False


def test_batch_queue_input_needs_defined_shapes():
    source = BatchQueueInput(DataFromList(datapoints(), shuffle=False), B)
    with pytest.raises(ValueError, match="input 'x' has shape"):
        source.setup([tf.TensorSpec([None, None], tf.float32, 'x'),
                      tf.TensorSpec([None], tf.int32, 'y')])


# --------------------------------------------------------------------------- TensorInput

def test_tensor_input():
    ex, ey = batch(2)
    source = TensorInput(lambda: [tf.constant(ex), tf.constant(ey)], size=7)
    assert source.size() == 7
    source.setup(signature())
    x, y = source.get_input_tensors()
    with tfv1.Session() as sess:
        vx, vy = sess.run([x, y])
    np.testing.assert_array_equal(vx, ex)
    np.testing.assert_array_equal(vy, ey)
    with pytest.raises(NotImplementedError):
        TensorInput(lambda: []).size()


def test_tensor_input_wrong_tensors():
    source = TensorInput(lambda: [tf.zeros([3, 2])])
    source.setup(signature())
    with pytest.raises(ValueError, match='1 tensors for 2 inputs'):
        source.get_input_tensors()
    source = TensorInput(lambda: [tf.zeros([3, 2]), tf.zeros([3])])
    source.setup(signature())
    with pytest.raises(ValueError, match="input 'y'"):
        source.get_input_tensors()


# --------------------------------------------------------------------------- DummyConstantInput

def test_dummy_constant_input():
    source = DummyConstantInput([[4, 2], [4]])
    source.setup(signature())
    first = source.get_input_tensors()
    second = source.get_input_tensors()
    assert [t.dtype for t in first] == [tf.float32, tf.int32]
    with tfv1.Session() as sess:
        a = sess.run(first)
        b = sess.run(first)
        c = sess.run(second)
    assert a[0].shape == (4, 2) and a[1].shape == (4,)
    assert ((a[0] >= 0) & (a[0] < 1)).all() and len(np.unique(a[0])) > 1  # random, filled once
    for u, v, w in zip(a, b, c):
        np.testing.assert_array_equal(u, v)
        np.testing.assert_array_equal(u, w)
    with pytest.raises(ValueError, match='1 shapes given for 2 inputs'):
        DummyConstantInput([[4, 2]]).setup(signature())


# --------------------------------------------------------------------------- ZMQInput

def _sender(end_point, dps, bind, ready=None):
    """Sends every datapoint with PUSH, then keeps the socket until told to stop."""
    stop = threading.Event()
    ctx = zmq.Context.instance()
    sock = ctx.socket(zmq.PUSH)
    if bind:
        port = sock.bind_to_random_port('tcp://127.0.0.1')
        end_point.append('tcp://127.0.0.1:{}'.format(port))
    else:
        sock.connect(end_point)

    def send():
        try:
            for dp in dps:
                sock.send(dumps(dp))
            stop.wait(HANG_TIMEOUT)
        finally:
            sock.close(linger=0)
    th = threading.Thread(target=send, daemon=True)
    th.start()
    return stop, th


def test_zmq_input_receives_exact_values(tmp_path):
    end_point = 'ipc://' + str(tmp_path / 'pipe')
    source = ZMQInput(end_point, hwm=10, bind=True)
    rec = None
    stop, th = _sender(end_point, [list(batch(k)) for k in (0, 1, 2, 3, 0)], bind=False)
    try:
        rec = run_source(source, steps_per_epoch=5,
                         extra_end=lambda sess: {'alive': source.thread.is_alive()})
    finally:
        stop.set()
        th.join(5)
    assert_batches(rec.batches, [0, 1, 2, 3, 0])
    assert rec.end['acc'] == pytest.approx(expected_sum([0, 1, 2, 3, 0]))
    assert rec.end['alive'] is False


def test_zmq_input_bad_datapoint_names_the_input(log_records):
    x, y = batch(0)
    end_points = []
    stop, th = _sender(end_points, [[x, y], [x.astype(np.float64), y]], bind=True)
    source = ZMQInput(end_points[0], hwm=10, bind=False, strict=True)  # a bad message ends training
    try:
        with pytest.raises(TypeError) as info:  # re-raised after training, rather than a hang
            run_or_hang(run_source, source, steps_per_epoch=10)
    finally:
        stop.set()
        th.join(5)
    message = str(info.value)
    assert "input 'x'" in message and 'float64' in message and 'float32' in message
    errors = [r for r in log_records if r.levelno >= logging.ERROR]
    assert errors and str(errors[0].exc_info[1]) == message  # logged by the thread first


# --------------------------------------------------------------------------- TFDatasetInput

def test_tf_dataset_input_from_tensor_slices():
    xs = np.concatenate([batch(k)[0] for k in range(4)])
    ys = np.concatenate([batch(k)[1] for k in range(4)])
    ds = tf.data.Dataset.from_tensor_slices((xs, ys)).batch(B).repeat()
    rec = run_source(TFDatasetInput(ds), steps_per_epoch=3, max_epoch=2)
    ks = [0, 1, 2, 3, 0, 1]
    assert_batches(rec.batches, ks)
    assert rec.end['acc'] == pytest.approx(expected_sum(ks))


def test_tf_dataset_input_from_dataflow():
    ds = TFDatasetInput.dataflow_to_dataset(batched_df(), [tf.float32, tf.int32])
    rec = run_source(TFDatasetInput(ds.repeat()), steps_per_epoch=5)
    assert_batches(rec.batches, [0, 1, 2, 3, 0])


@pytest.mark.parametrize('as_dict', [False, True], ids=['lists', 'dicts'])
def test_tf_dataset_input_takes_a_dataflow(as_dict):
    # as tensorpack's: the DataFlow becomes a dataset of the inputs' dtypes at setup
    batches = [list(batch(k)) for k in range(4)]
    if as_dict:
        batches = [{'y': y, 'x': x} for x, y in batches]
    rec = run_source(TFDatasetInput(DataFromList(batches, shuffle=False)), steps_per_epoch=4)
    assert_batches(rec.batches, [0, 1, 2, 3])
    assert rec.end['acc'] == pytest.approx(expected_sum([0, 1, 2, 3]))


def test_tf_dataset_input_takes_nothing_else():
    with pytest.raises(TypeError, match='takes a tf.data.Dataset or a DataFlow, got'):
        TFDatasetInput([[1.0, 2]])


@pytest.mark.parametrize('element, words', [
    ((tf.zeros([3, 2]), tf.zeros([3])), ["input 'y'", 'float32', 'int32']),
    ((tf.zeros([3, 4]), tf.zeros([3], tf.int32)), ["input 'x'", '(3, 4)']),
    ((tf.zeros([3, 2]),), ['1 components', '2 inputs']),
], ids=['dtype', 'shape', 'count'])
def test_tf_dataset_input_bad_signature(element, words):
    source = TFDatasetInput(tf.data.Dataset.from_tensors(element))
    with pytest.raises(ValueError) as info:
        source.setup(signature())
    for word in words:
        assert word in str(info.value)


# --------------------------------------------------------------------------- StagingInput

def test_staging_input_same_sequence_as_the_queue():
    nr_stage = 2
    source = StagingInput(QueueInput(batched_df()), nr_stage=nr_stage)
    assert source.size() == N // B
    cbs = source.setup(signature())
    tensors = source.get_input_tensors()
    acc, train_op = consuming_train_op(tensors)
    area_size = source._areas[0].size()
    unrelated = tf.constant(1.0) + 1.0

    class TwoRunsPerStep(Trainer):
        """Also runs something that does not consume the inputs: it must not stage."""

        def run_step(self):
            self.hooked_sess.run(unrelated)
            self.hooked_sess.run(self.train_op)

    rec = Recorder(tensors, only_for=train_op, every_step=lambda sess: sess.run(area_size),
                   at_end=lambda sess: {'size': sess.run(area_size), 'acc': sess.run(acc)})
    train(cbs + [rec], train_op, steps_per_epoch=6, trainer=TwoRunsPerStep())
    ks = [0, 1, 2, 3, 0, 1]
    assert_batches(rec.batches, ks)
    assert rec.end['acc'] == pytest.approx(expected_sum(ks))
    assert rec.per_step == [nr_stage] * 6  # one put per consumed element, none for the rest
    assert rec.end['size'] == 0  # emptied after training


def test_staging_input_only_wraps_feedfree_inputs():
    with pytest.raises(TypeError, match='FeedfreeInput'):
        StagingInput(FeedInput(batched_df()))
    with pytest.raises(TypeError, match='another StagingInput'):
        StagingInput(StagingInput(QueueInput(batched_df())))


def test_staging_areas_follow_the_tower_device():
    """In data-parallel training each tower's staging area lives on that tower's device,
    whatever device the wrapped source dequeues on."""
    source = StagingInput(QueueInput(batched_df()))
    source.setup(signature())
    devices = []
    for index in range(2):
        with tf.device('/cpu:{}'.format(index)):
            outputs = source.get_input_tensors()
        devices.append(outputs[0].device)
    assert [d.lower().endswith('cpu:{}'.format(i)) for i, d in enumerate(devices)] == [True, True], devices
    pinned = StagingInput(QueueInput(batched_df()), device='/cpu:1')
    pinned.setup(signature())
    with tf.device('/cpu:0'):
        assert pinned.get_input_tensors()[0].device.lower().endswith('cpu:1')


# --------------------------------------------------------------------------- dict datapoints

class DictDataFlow(DataFlow):
    """The batches of `batched_df()` as dicts keyed by input name, 'y' first (the order of the
    keys must not matter), with `extra` added to each."""

    def __init__(self, df, extra=None, drop=None):
        self.df, self.extra, self.drop = df, extra or {}, drop

    def __len__(self):
        return len(self.df)

    def reset_state(self):
        self.df.reset_state()

    def __iter__(self):
        for x, y in self.df:
            dp = {'y': y, 'x': x}
            dp.update(self.extra)
            dp.pop(self.drop, None)
            yield dp


def dict_df(n=N, **kwargs):
    return DictDataFlow(batched_df(n), **kwargs)


@pytest.mark.parametrize('make', [
    lambda df: FeedInput(df), lambda df: QueueInput(df),
    lambda df: StagingInput(QueueInput(df), nr_stage=1)], ids=['feed', 'queue', 'staging-queue'])
def test_dict_datapoints_feed_inputs_by_name(make):
    rec = run_source(make(dict_df()), steps_per_epoch=5)
    ks = [0, 1, 2, 3, 0]
    assert_batches(rec.batches, ks)
    assert rec.end['acc'] == pytest.approx(expected_sum(ks))


def test_dict_datapoints_in_batch_queue_input():
    singles = DataFromList([{'y': y, 'x': x} for x, y in datapoints()], shuffle=False)
    source = BatchQueueInput(singles, B)
    cbs = source.setup(signature())
    tensors = source.get_input_tensors()
    acc, train_op = consuming_train_op(tensors)
    rec = Recorder(tensors)
    train(cbs + [rec], train_op, steps_per_epoch=4)
    assert_batches(rec.batches, [0, 1, 2, 3])


def test_dict_datapoints_in_tf_dataset_input():
    ds = TFDatasetInput.dataflow_to_dataset(dict_df(), [tf.float32, tf.int32], names=['x', 'y'])
    rec = run_source(TFDatasetInput(ds.repeat()), steps_per_epoch=5)
    assert_batches(rec.batches, [0, 1, 2, 3, 0])
    with tf.Graph().as_default():
        ds = TFDatasetInput.dataflow_to_dataset(dict_df(), [tf.float32, tf.int32])
        element = tfv1.data.make_one_shot_iterator(ds).get_next()
        with tfv1.Session() as sess, pytest.raises(
                tf.errors.InvalidArgumentError,
                match='datapoints of DictDataFlow are dicts; give the input name of each component'):
            sess.run(element)


def test_dict_datapoint_missing_or_extra_key_is_an_error_naming_it():
    source = FeedInput(dict_df(drop='y'))
    cb = _feed_callback(source)
    source.reset_state()
    with pytest.raises(KeyError, match="FeedInput: the datapoint .a dict. has no key for input 'y' "
                                       r"\(its keys: x\)"):
        cb.before_run(None)
    source = FeedInput(dict_df(extra={'z': np.zeros(3)}))
    cb = _feed_callback(source)
    source.reset_state()
    with pytest.raises(KeyError, match=r"FeedInput: the datapoint .a dict. has key 'z', which is not an "
                                       r"input \(the inputs: x, y\)"):
        cb.before_run(None)


def test_queue_input_dict_datapoint_missing_key_ends_training_naming_it():
    source = QueueInput(dict_df(drop='x'))
    cbs = source.setup(signature())
    acc, train_op = consuming_train_op(source.get_input_tensors())
    with pytest.raises(KeyError, match="QueueInput: the datapoint .a dict. has no key for input 'x'"):
        train(cbs, train_op, steps_per_epoch=2)


def test_a_datapoint_of_another_type_is_a_clear_error():
    source = FeedInput(DataFromList([np.zeros(2)], shuffle=False))
    cb = _feed_callback(source)
    source.reset_state()
    with pytest.raises(TypeError, match='FeedInput: a datapoint must be a list of 2 components .one per '
                                        'input. or a dict keyed by input name, got ndarray'):
        cb.before_run(None)
