"""utils.outbox.Outbox: items sent in order by a thread of their own, kept and retried while the
receiver fails or hangs, with one warning; the putting thread never waits."""

import logging
import threading

from helpers.logs import capture_logs
from helpers.timing import wait_until
from tensorpack_lite.utils.outbox import Outbox, PermanentSendError


class Receiver:
    """Takes up to ``take`` items per call (all by default); ``down`` makes calls raise,
    ``hold`` (an Event) makes them wait for it."""

    def __init__(self, take=None):
        self.got, self.calls, self.take = [], 0, take
        self.down = False
        self.hold = None

    def __call__(self, items):
        self.calls += 1
        if self.hold is not None:
            self.hold.wait()
        if self.down:
            raise ConnectionRefusedError("[Errno 111] Connection refused")
        taken = items[:self.take] if self.take else items
        self.got += taken
        return len(taken)


class QuickRetry(Outbox):
    FIRST_PAUSE = MAX_PAUSE = 0.01


def warnings_of(logs):
    return logs.messages_at(logging.WARNING)


def test_items_arrive_in_order_in_batches_and_drain_waits_for_them():
    receiver = Receiver(take=3)
    outbox = Outbox(receiver, 'test receiver', batch_size=5)
    for i in range(20):
        outbox.put(i)
    assert outbox.drain(120)
    assert receiver.got == list(range(20)) and outbox.sent == 20 and outbox.pending == 0
    assert outbox.close() == []


def test_a_receiver_that_is_down_keeps_the_items_warns_once_and_gets_them_all_when_it_is_back():
    receiver = Receiver()
    receiver.down = True
    with capture_logs() as logs:
        outbox = QuickRetry(receiver, 'test receiver')
        for i in range(5):
            outbox.put(i)
        assert wait_until(lambda: receiver.calls >= 3)     # failed three times
        assert outbox.failing and not outbox.drain(120)    # returns at once while it fails
        for i in range(5, 10):
            outbox.put(i)
        receiver.down = False
        assert wait_until(lambda: not outbox.failing) and outbox.drain(120)
    assert receiver.got == list(range(10))
    assert warnings_of(logs) == [
        "test receiver did not take the values (ConnectionRefusedError: [Errno 111] Connection refused). "
        "Training goes on; the values are kept (at most 100000) and sent when it answers."]
    assert "test receiver answers again: sending the values kept meanwhile." in logs.messages()
    assert outbox.close() == []          # its thread ends with it


def test_a_receiver_that_hangs_counts_as_failing_after_answer_timeout_and_close_returns_what_is_unsent():
    """close() returns what no send has: 'a', handed to the hung call, is not returned, and
    reaches the receiver once when the call ends."""
    receiver = Receiver()
    receiver.hold = threading.Event()
    with capture_logs() as logs:
        outbox = Outbox(receiver, 'test receiver', answer_timeout=0.05)
        outbox.put('a')
        assert wait_until(lambda: outbox.failing)
        outbox.put('b')           # the put that finds the call past its timeout warns
        assert not outbox.drain(120)                   # does not wait for the hung call
        assert not receiver.hold.is_set() and receiver.got == []
        assert outbox.close() == ['b'] and outbox.in_flight == 1
    assert warnings_of(logs) == ["test receiver did not answer within 0.05 s. Training goes on; the values "
                                 "are kept (at most 100000) and sent when it answers."]
    receiver.hold.set()
    assert wait_until(lambda: receiver.got == ['a'])
    assert outbox.sent == 1 and receiver.calls == 1


def close_while_a_send_runs(receiver_ends):
    """close(timeout) called while a send of ['a', 'b'] holds; the send ends (``receiver_ends``)
    once close() waits. Returns (what close returned, the receiver, the outbox)."""
    receiver = Receiver(take=1)
    receiver.hold = threading.Event()
    outbox = Outbox(receiver, 'test receiver')
    outbox.put('a')
    outbox.put('b')
    assert wait_until(lambda: receiver.calls == 1)
    outbox.put('c')                                  # not handed to the running send
    returned = []
    closing = threading.Thread(target=lambda: returned.append(outbox.close(timeout=120)))
    closing.start()
    assert wait_until(lambda: outbox.closed)
    receiver_ends(receiver)
    receiver.hold.set()
    closing.join(120)
    assert not closing.is_alive()
    return returned[0], receiver, outbox


def test_close_waits_for_a_send_in_progress_and_returns_what_it_did_not_take():
    returned, receiver, outbox = close_while_a_send_runs(lambda receiver: None)
    assert receiver.got == ['a'] and returned == ['b', 'c'] and outbox.in_flight == 0


def test_close_returns_the_items_of_a_send_that_failed_while_it_waited():
    def fail(receiver):
        receiver.down = True
    returned, receiver, outbox = close_while_a_send_runs(fail)
    assert receiver.got == [] and returned == ['a', 'b', 'c'] and outbox.in_flight == 0
    assert receiver.calls == 1                       # closed: not tried again


def test_past_max_items_the_oldest_are_dropped_with_one_warning():
    receiver = Receiver()
    receiver.hold = threading.Event()     # the first call takes item 0 and waits
    with capture_logs() as logs:
        outbox = Outbox(receiver, 'test receiver', max_items=3, batch_size=1)
        outbox.put(0)
        assert wait_until(lambda: receiver.calls == 1)
        for i in range(1, 7):
            outbox.put(i)
        receiver.hold.set()
        assert outbox.drain(120)
    assert receiver.got == [0, 5, 6] and outbox.dropped == 4     # the one in flight is never dropped
    assert warnings_of(logs) == ["test receiver: 3 values are waiting to be sent: the oldest are dropped "
                                 "from now on (training goes on)."]
    assert outbox.close() == []


def test_items_the_receiver_refuses_for_good_are_dropped_with_an_error():
    def send(items):
        if items[0] == 'bad':
            raise PermanentSendError(1, "INVALID_PARAMETER_VALUE: no")
        received.extend(items)
        return len(items)
    received = []
    with capture_logs() as logs:
        outbox = Outbox(send, 'test receiver', batch_size=1)
        for item in ('a', 'bad', 'b'):
            outbox.put(item)
        assert outbox.drain(120)
    assert received == ['a', 'b']
    assert logs.messages_at(logging.ERROR) == ["test receiver: refused 1 value(s), dropped: "
                                               "INVALID_PARAMETER_VALUE: no"]
    assert outbox.close() == []
