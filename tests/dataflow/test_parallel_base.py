"""dataflow.parallel_base: what the parallel DataFlows share -- starting once, releasing what was
made on every way out, failing for good after a worker failure."""

import functools

import pytest

from tensorpack_lite.dataflow.parallel_base import Closable, ParallelBase, len_or_minus_one, thread_error
from tensorpack_lite.dataflow.raw import DataFromGenerator, DataFromList
from tensorpack_lite.dataflow.workers import DataFlowWorkerError


class Parts(ParallelBase):
    """A ParallelBase without processes: it 'makes' two parts, logging their release, and reads
    what ``source`` returns."""

    def __init__(self, released, fail_at_start=False):
        super(Parts, self).__init__()
        self.released, self.fail_at_start = released, fail_at_start

    def reset_state(self):
        with self._starting():
            self._on_close(functools.partial(self.released.append, 'made first'))
            self._on_close(functools.partial(self.released.append, 'made last'))
            if self.fail_at_start:
                raise OSError('no more descriptors')

    def read(self, source):
        return self._from_workers(source)

    def __iter__(self):   # three datapoints from the 'workers'
        yield from self._iterate(lambda: 7, 3)


def failing():
    raise DataFlowWorkerError('worker #1 raised ValueError: boom')


def test_close_releases_in_reverse_order_once():
    released = []
    df = Parts(released)
    df.reset_state()
    assert list(df) == [7, 7, 7]
    df.close()
    df.close()
    assert released == ['made last', 'made first']
    with pytest.raises(RuntimeError, match='Parts was closed'):
        df.read(lambda: 7)


def test_a_failed_start_releases_what_was_made_and_reset_runs_once():
    released = []
    df = Parts(released, fail_at_start=True)
    with pytest.raises(OSError, match='no more descriptors'):
        df.reset_state()
    assert released == ['made last', 'made first']
    with pytest.raises(RuntimeError, match=r'Parts.reset_state\(\) was called twice'):
        df.reset_state()


def test_reading_before_reset_and_after_a_worker_failure():
    released = []
    df = Parts(released)
    with pytest.raises(RuntimeError, match=r'call reset_state\(\) before iterating'):
        df.read(lambda: 7)
    df.reset_state()
    with pytest.raises(DataFlowWorkerError, match='boom') as first:
        df.read(failing)
    assert released == ['made last', 'made first']   # the failure closed it
    with pytest.raises(DataFlowWorkerError) as again:
        df.read(lambda: 7)
    assert again.value is first.value


def test_a_closable_never_started_closes_quietly():
    Closable().close()


def test_thread_error_names_the_thread_and_keeps_the_cause():
    try:
        raise KeyError('missing')
    except KeyError as err:
        error = thread_error('Runner thread #2', err)
    assert isinstance(error, DataFlowWorkerError) and error.__cause__ is not None
    assert str(error).startswith("Runner thread #2 raised KeyError: 'missing'\n"
                                 "--- traceback in the thread ---")
    assert "raise KeyError('missing')" in str(error)


def test_len_or_minus_one():
    assert len_or_minus_one(DataFromList([[1], [2], [3]])) == 3
    assert len_or_minus_one(DataFromGenerator(lambda: iter([[1]]))) == -1
