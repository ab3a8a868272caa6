"""input_source/data_position.py: an input source's position is what training consumed (not what
its thread or staging area prefetched), it survives a new process as data, and a DataFlow without
the state protocol is resumed by dropping the consumed part of its epoch, said in one line."""

import numpy as np
import pytest

from tensorpack_lite.compat import tf, tfv1
from tensorpack_lite.dataflow import DataFromGenerator, DataFromList
from tensorpack_lite.input_source import FeedInput, QueueInput, StagingInput
from tensorpack_lite.input_source.data_position import DataPosition
from tensorpack_lite.utils.serialize import dumps, loads

from helpers.logs import capture_logs
from helpers.timing import wait_until

N = 10


def numbers():
    return DataFromList([[np.int64(i)] for i in range(N)], shuffle=True)


def signature():
    return [tf.TensorSpec([], tf.int64, 'x')]


def fed_values(source, count):
    """The next ``count`` values a FeedInput feeds."""
    return [int(next(iter(source._next_feed().values()))) for _ in range(count)]


def test_feed_input_resumes_where_training_was_in_a_new_source():
    with tfv1.Graph().as_default():
        first = FeedInput(numbers())
        first.setup(signature())
        first.reset_state()
        seen = fed_values(first, 13)                 # an epoch and 3 of the next
        state = loads(dumps(first.get_state()))
        expected = fed_values(first, 2 * N)
    with tfv1.Graph().as_default():
        again = FeedInput(numbers())
        again.setup(signature())
        again.reset_state()
        again.set_state(state)
        assert fed_values(again, 2 * N) == expected
    assert sorted(seen[:N]) == list(range(N)) and state['epoch_datapoints'] == 3


def test_queue_input_reports_what_was_dequeued_not_what_its_thread_prefetched():
    with tfv1.Graph().as_default():
        source = QueueInput(numbers())
        source.setup(signature())
        x, = source.get_input_tensors()
        with tfv1.Session() as sess, sess.as_default():
            source.reset_state()
            source.thread.start()
            try:
                taken = [int(sess.run(x)) for _ in range(4)]
                # the thread runs ahead: the queue holds 50
                assert wait_until(lambda: source._position.produced >= 4 + 2 * N)
                state = source.get_state()
                later = [int(sess.run(x)) for _ in range(N)]
            finally:
                source.thread.stop()
                source.thread.join(10)
    assert state['epoch_datapoints'] == 4
    with tfv1.Graph().as_default():
        again = FeedInput(numbers())
        again.setup(signature())
        again.reset_state()
        again.set_state(state)
        assert fed_values(again, N) == later
    assert len(set(taken)) == 4


def test_staging_input_does_not_count_what_its_areas_hold():
    with tfv1.Graph().as_default():
        inner = QueueInput(numbers())
        source = StagingInput(inner, nr_stage=2)
        source.setup(signature())
        x, = source.get_input_tensors()
        stage = source._get_stage_op()
        with tfv1.Session() as sess, sess.as_default():
            source.reset_state()
            inner.reset_state()
            inner.thread.start()
            try:
                sess.run(stage)
                sess.run(stage)                      # 2 staged ahead
                for _ in range(3):
                    sess.run([x, stage])             # 3 consumed, 2 still staged
                assert not inner.reports_position
                assert inner.get_state()['epoch_datapoints'] == 5
                assert source.get_state()['epoch_datapoints'] == 3
            finally:
                inner.thread.stop()
                inner.thread.join(10)


def test_a_dataflow_without_state_drops_the_consumed_part_of_its_epoch_and_says_so():
    def gen():
        yield from ([np.int64(i)] for i in range(N))

    with tfv1.Graph().as_default():
        first = FeedInput(DataFromGenerator(gen))
        first.setup(signature())
        first.reset_state()
        fed_values(first, 13)
        state = loads(dumps(first.get_state()))
    assert state == {'dataflow': None, 'epoch_datapoints': 3}
    with tfv1.Graph().as_default(), capture_logs() as logs:
        again = FeedInput(DataFromGenerator(gen))
        again.setup(signature())
        again.reset_state()
        again.set_state(state)
        assert fed_values(again, N) == list(range(3, N)) + [0, 1, 2]
    line, = [m for m in logs.messages() if 're-iterated' in m]
    assert 'FeedInput: resumed without the DataFlow\'s state (DataFromGenerator' in line
    assert 'dropped the 3 datapoint(s) training had consumed of it, in ' in line


def test_a_state_no_longer_kept_is_an_error_naming_the_source():
    position = DataPosition(numbers(), 'QueueInput', history=3)
    position.ds.reset_state()
    stream = position.datapoints()
    for _ in range(8):
        next(stream)
    assert position.state_after(8)['epoch_datapoints'] == 8
    with pytest.raises(ValueError,
                       match=r'QueueInput: the state after datapoint 2 is not kept \(kept: 5..8\)'):
        position.state_after(2)
