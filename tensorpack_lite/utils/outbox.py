"""A queue of items sent by a thread of its own, retried while the receiver does not take them,
so that the thread that puts them never waits (e.g. values for an experiment tracker's server).

Example::

    outbox = Outbox(send=lambda items: server.log(items) or len(items), name='tracker')
    outbox.put({'step': 1, 'loss': 0.5})     # returns at once
    ...
    if not outbox.drain(timeout=30):          # at the end: wait while the receiver takes them
        save(outbox.close())                  # what it did not take, to send another time
"""

import collections
import threading
import time

from . import logger

__all__ = ['Outbox', 'PermanentSendError']


class PermanentSendError(Exception):
    """Raised by a ``send`` function for an item the receiver refuses for good (it is dropped
    and logged; retrying would not help). ``args[0]``: the number of leading items refused."""

    def __init__(self, count, reason):
        super().__init__(count, reason)
        self.count = int(count)
        self.reason = reason


class Outbox:
    """Items put here are given to ``send`` by a daemon thread, in order.

    ``send(items)`` gets the queued items (at most ``batch_size``), sends some leading part of
    them and returns how many it sent. When it raises, nothing was taken: the items stay, one
    warning says so (the first time only), and the thread tries again after a pause that
    doubles up to :attr:`MAX_PAUSE`. Once it succeeds again, one line says so. A
    :class:`PermanentSendError` drops the leading items it counts, with an error log.

    A call of ``send`` that takes longer than ``answer_timeout`` seconds counts as failed for
    the warning and for :meth:`drain` (a receiver that hangs is one that does not answer); if
    it then succeeds, its items count as sent.

    At most ``max_items`` are kept: past that the oldest are dropped, and one warning says how
    many when it starts. The thread that puts items never waits for the receiver.

    Args:
        send (callable): ``send(list) -> int`` (see above).
        name (str): names the receiver in the log, e.g. ``"MLflowMonitor (http://host:5000)"``.
        max_items (int): the most items kept.
        batch_size (int): the most items given to one call of ``send``.
        answer_timeout (float): seconds after which a call of ``send`` counts as failed.
    """

    FIRST_PAUSE = 0.5
    MAX_PAUSE = 30.0

    def __init__(self, send, name, max_items=100000, batch_size=1000, answer_timeout=10.0):
        if int(max_items) < 1 or int(batch_size) < 1:
            raise ValueError("Outbox({}): max_items and batch_size must be positive, got {} and {}".format(
                name, max_items, batch_size))
        self._send = send
        self.name = name
        self.max_items = int(max_items)
        self.batch_size = int(batch_size)
        self.answer_timeout = float(answer_timeout)
        self._items = collections.deque()
        self._cond = threading.Condition()
        self._closing = False
        self._sending = 0            # items handed to the current call of send
        self._call_started = None    # time.monotonic() when the current call of send began
        self._failed_call = False
        self._warned = False

        self.sent = 0
        self.in_flight = 0
        """The items of the send still running when :meth:`close` returned."""
        self.dropped = 0
        """Items dropped because more than ``max_items`` were waiting."""
        self._warned_full = False
        self._thread = threading.Thread(target=self._run, name='Outbox-' + name, daemon=True)
        self._thread.start()

    def put(self, item):
        """Queue ``item``; returns at once."""
        with self._cond:
            if self._closing:
                raise RuntimeError("Outbox({}) is closed".format(self.name))
            self._items.append(item)
            if len(self._items) > self.max_items and len(self._items) > self._sending:
                self._drop_oldest()
            self._cond.notify_all()
            stalled = self._stalled_for()
        if stalled is not None:
            self._warn_once("did not answer within {:g} s".format(self.answer_timeout))

    def _drop_oldest(self):
        # never an item handed to the running send: the one after them
        del self._items[self._sending]
        self.dropped += 1
        if not self._warned_full:
            self._warned_full = True
            logger.warn("{}: {} values are waiting to be sent: the oldest are dropped from now on "
                        "(training goes on).".format(self.name, self.max_items))

    def _stalled_for(self):
        """Seconds the current call of send has run past ``answer_timeout``, or None (call with
        the lock held)."""
        if self._call_started is None:
            return None
        past = time.monotonic() - self._call_started - self.answer_timeout
        return past if past >= 0 else None

    @property
    def failing(self):
        """True from a failed call of send (or one running past ``answer_timeout``) until a call
        succeeds."""
        with self._cond:
            return self._failing()

    def _failing(self):
        return self._failed_call or self._stalled_for() is not None

    @property
    def pending(self):
        """The items not sent yet."""
        with self._cond:
            return len(self._items)

    def drain(self, timeout):
        """Wait until every item was sent, while the receiver takes them, at most ``timeout``
        seconds; True when the outbox is empty. Returns at once while sends fail."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._items and not self._failing():
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                if self._call_started is not None:   # wake up when the call would stall
                    left = min(left, self._call_started + self.answer_timeout - time.monotonic() + 0.01)
                self._cond.wait(max(left, 0.01))
            return not self._items

    @property
    def closed(self):
        """Whether :meth:`close` was called."""
        with self._cond:
            return self._closing

    def close(self, timeout=0.0):
        """Stop sending and return, oldest first, the items not sent: the caller may keep them
        for another time. A send in progress is waited for at most ``timeout`` seconds (what it
        did not take is returned). The items of a send still running then are not returned, since
        it may yet deliver them (returning them would send them twice): :attr:`in_flight` says
        how many."""
        deadline = time.monotonic() + timeout
        with self._cond:
            self._closing = True
            self._cond.notify_all()
            while self._sending:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
            self.in_flight = self._sending
            return list(self._items)[self._sending:]

    def _run(self):
        pause = self.FIRST_PAUSE
        while True:
            with self._cond:
                while not self._items and not self._closing:
                    self._cond.wait()
                if self._closing:
                    return
                batch = [self._items[i] for i in range(min(len(self._items), self.batch_size))]
                self._sending = len(batch)
                self._call_started = time.monotonic()
            try:
                done = self._send(batch)
            except PermanentSendError as err:
                done = err.count
                logger.error("{}: refused {} value(s), dropped: {}".format(self.name, err.count, err.reason))
            except Exception as err:
                self._failed(err)
                with self._cond:
                    self._cond.wait(pause)    # close() cuts the pause short
                pause = min(2 * pause, self.MAX_PAUSE)
                continue
            self._succeeded(int(done))
            pause = self.FIRST_PAUSE

    def _warn_once(self, what):
        with self._cond:
            if self._warned:
                return
            self._warned = True
        logger.warn("{} {}. Training goes on; the values are kept (at most {}) and sent when it "
                    "answers.".format(self.name, what, self.max_items))

    def _failed(self, err):
        with self._cond:
            self._failed_call = True
            self._call_started = None
            self._sending = 0
            self._cond.notify_all()
        text = str(err).strip().splitlines()
        self._warn_once("did not take the values ({}: {})".format(
            type(err).__name__, text[0][:300] if text else ''))

    def _succeeded(self, done):
        with self._cond:
            recovered = self._failing()
            self._failed_call = False
            self._call_started = None
            for _ in range(min(done, len(self._items))):
                self._items.popleft()
            self._sending = 0
            self.sent += done
            self._cond.notify_all()
        if recovered:
            logger.info("{} answers again: sending the values kept meanwhile.".format(self.name))
