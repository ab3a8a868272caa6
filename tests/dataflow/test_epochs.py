"""Epochs that produce nothing (dataflow.epochs): a DataFlow that buffers across epochs
(BatchDataByShape) keeps going in every loop that repeats epochs, in worker processes and in
process; one that can never produce anything ends with an error naming it and the count."""

import itertools

import numpy as np
import pytest

from tensorpack_lite.dataflow import (BatchDataByShape, DataFlow, DataFlowWorkerError, FixedSizeData,
                                      MultiProcessMapAndBatchData, MultiProcessRunner, MultiProcessRunnerZMQ,
                                      MultiThreadRunner, RepeatedData, send_dataflow_zmq)
from tensorpack_lite.dataflow.epochs import EmptyEpochs

from helpers.timing import run_or_hang


class OnePerEpoch(DataFlow):
    """One datapoint per epoch, [a (2,) array filled with the epoch's number] (1, 2, 3, ...)."""

    def __init__(self):
        self.epoch = 0

    def __iter__(self):
        self.epoch += 1
        yield [np.full((2,), self.epoch, np.int64)]


class Empty(DataFlow):
    """Never produces anything."""

    def __iter__(self):
        return iter(())


def buffering():
    """A real BatchDataByShape over OnePerEpoch: epochs 1 and 2 produce nothing, epoch 3 produces
    the batch of the datapoints of epochs 1, 2, 3 (kept across epochs), and so on."""
    return BatchDataByShape(OnePerEpoch(), 3, idx=0)


def first_batches(df, count):
    df.reset_state()
    try:
        return [dp[0][:, 0].tolist() for dp in itertools.islice(iter(df), count)]
    finally:
        if hasattr(df, 'close'):
            df.close()


EXPECTED = [[1, 2, 3], [4, 5, 6], [7, 8, 9]]


def test_batch_data_by_shape_buffers_across_epochs():
    df = buffering()
    df.reset_state()
    assert [len(list(df)) for _ in range(6)] == [0, 0, 1, 0, 0, 1]


@pytest.mark.parametrize('make', [
    lambda: RepeatedData(buffering(), -1),
    lambda: FixedSizeData(buffering(), 3),
    lambda: MultiThreadRunner(buffering, num_prefetch=4, num_thread=1),
    lambda: MultiProcessRunner(buffering(), num_prefetch=4, num_proc=1),
    lambda: MultiProcessRunnerZMQ(buffering(), num_proc=1),
], ids=['RepeatedData', 'FixedSizeData', 'MultiThreadRunner', 'MultiProcessRunner', 'MultiProcessRunnerZMQ'])
def test_loops_go_on_after_empty_epochs_of_a_buffering_dataflow(make):
    assert run_or_hang(first_batches, make(), 3) == EXPECTED


def test_map_and_batch_dispatcher_goes_on_after_empty_epochs():
    df = MultiProcessMapAndBatchData(buffering(), 1, lambda dp: [dp[0][:, 0] * 10], batch_size=1)
    df.reset_state()
    try:
        batches = run_or_hang(lambda: [b[0].tolist() for b in itertools.islice(iter(df), 2)])
    finally:
        df.close()
    assert batches == [[[10, 20, 30]], [[40, 50, 60]]]


def _always_empty_error_text(make):
    with pytest.raises((RuntimeError, DataFlowWorkerError)) as info:
        run_or_hang(first_batches, make(), 1)   # which closes it
    return str(info.value)


@pytest.mark.parametrize('make,owner', [
    (lambda: RepeatedData(Empty(), -1), 'RepeatedData(num=-1)'),
    (lambda: FixedSizeData(Empty(), 2), 'FixedSizeData'),
    (lambda: MultiThreadRunner(Empty, num_prefetch=4, num_thread=1), 'MultiThreadRunner'),
    (lambda: MultiProcessRunner(Empty(), num_prefetch=4, num_proc=1), 'MultiProcessRunner'),
    (lambda: MultiProcessRunnerZMQ(Empty(), num_proc=1), 'MultiProcessRunnerZMQ'),
], ids=['RepeatedData', 'FixedSizeData', 'MultiThreadRunner', 'MultiProcessRunner', 'MultiProcessRunnerZMQ'])
def test_a_dataflow_that_never_produces_ends_with_an_error_naming_it(make, owner):
    text = _always_empty_error_text(make)
    assert owner in text
    assert '10000 epochs in a row of Empty produced no datapoint' in text


def test_send_dataflow_zmq_of_an_always_empty_dataflow_fails(tmp_path):
    with pytest.raises(RuntimeError, match=r'send_dataflow_zmq: 10000 epochs in a row of Empty produced no'):
        run_or_hang(send_dataflow_zmq, Empty(), 'ipc://' + str(tmp_path / 'sock'), bind=True)


def test_the_count_restarts_after_a_productive_epoch_and_a_warning_comes_first(log_records):
    counter = EmptyEpochs(Empty(), 'Owner')
    for _ in range(EmptyEpochs.fail_after - 1):
        counter.epoch_ended(0)
    warnings = [m for m in log_records.messages() if 'epochs in a row' in m]
    assert warnings == ['Owner: 100 epochs in a row of Empty produced no datapoint (an error after 10000); '
                        'fine if it buffers across epochs, as BatchDataByShape does.']
    counter.epoch_ended(5)                       # a productive epoch: the run of empty ones is over
    for _ in range(EmptyEpochs.fail_after - 1):
        counter.epoch_ended(0)
    with pytest.raises(RuntimeError, match='Owner: 10000 epochs in a row of Empty'):
        counter.epoch_ended(0)
