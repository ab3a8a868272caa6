"""ZeroMQ between a parallel DataFlow and its worker processes: the sockets of one side
(:class:`Sockets`), a worker that reports its failure through them (:class:`ZMQWorker`), and the
parent's receiving end, which watches the workers while it waits (:class:`ZMQCollector`).
"""

import os
import time

from .workers import DataFlowWorkerError, ProcessWorker, describe_exit

__all__ = ['Sockets', 'ZMQWorker', 'ZMQCollector']


def _zmq():
    try:
        import zmq
    except ImportError:
        raise ImportError("This DataFlow needs pyzmq: pip install pyzmq") from None
    return zmq


class Sockets(object):
    """A ZeroMQ context and its sockets, closed together by :meth:`close` (a no-op in a
    forked child, which must not touch its parent's sockets).

    The sockets are held here, not only in pyzmq's weak set of the context's sockets: when a
    dataflow in a reference cycle is garbage-collected, the collector clears the weak
    references into the cycle before it runs the dataflow's cleanup, and terminating a
    context whose sockets are still open (but no longer in its set) waits for ever."""

    copy_below = 256 << 10
    """Frames smaller than this (bytes) are copied into their message rather than lent to
    ZeroMQ: a lent frame costs pyzmq a message to its garbage-collection thread (a wake-up
    and the GIL) when ZeroMQ is done with it, more than copying a few hundred KiB."""

    def __init__(self):
        self.zmq = _zmq()
        self.context = self.zmq.Context()
        self._sockets = []
        self._owner_pid = os.getpid()

    def socket(self, kind, hwm):
        """A new socket of ``kind`` (``zmq.PUSH``...) with high-water mark ``hwm``, closed with the others."""
        sock = self.context.socket(kind)
        self._sockets.append(sock)
        sock.set_hwm(hwm)
        sock.copy_threshold = self.copy_below
        return sock

    def close(self, linger=0.0):
        """Close the sockets (waiting up to ``linger`` seconds to send what is queued)."""
        if os.getpid() != self._owner_pid:
            return
        linger_ms = int(linger * 1000)
        for sock in self._sockets:
            sock.close(linger=linger_ms)   # a closed socket ignores it
        self._sockets = []
        self.context.destroy(linger=linger_ms)  # closes any other socket, then terminates


_ERROR_TAG = b''  # first frame of a worker's error report (a datapoint's header is never empty)


class ZMQWorker(ProcessWorker):
    """A worker process with ZeroMQ sockets (``self.pipes``, a :class:`Sockets` made by
    ``_open``), whose error report goes to the parent through its ``self.results`` socket."""

    pipes = None

    def _report(self, text):
        if self.pipes is not None:
            self.results.send_multipart([_ERROR_TAG, text.encode('utf-8')])

    def _close(self):
        if self.pipes is not None:
            self.pipes.close(linger=ZMQCollector.report_grace)


class ZMQCollector(object):
    """Receives multi-part messages from worker processes on a PULL socket, watching the
    workers at the same time: a worker's error report or death raises
    :class:`DataFlowWorkerError` at once, and silence is reported by ``watch``
    (an :class:`IdleWatch`). ``worker_of(frames)`` tells which worker sent a message."""

    report_grace = 1.0
    """Seconds to wait, after a worker ended, for the error report it may have sent."""

    def __init__(self, pull_socket, workers, watch, worker_of):
        zmq = _zmq()
        self.socket = pull_socket
        self.workers = workers
        self.watch, self.worker_of = watch, worker_of
        self._poller = zmq.Poller()
        self._poller.register(pull_socket, zmq.POLLIN)
        for fd in workers.sentinels:
            self._poller.register(fd, zmq.POLLIN)

    def recv(self, timeout=None):
        """The frames of the next message that is not an error report; None if ``timeout``
        seconds pass first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        self.watch.start_wait()
        while True:
            wait = self.watch.seconds_left(until=deadline)
            wait_ms = None if wait is None else max(0, int(wait * 1000) + 1)
            ready = dict(self._poller.poll(wait_ms))
            if len(ready) > (self.socket in ready):  # a worker ended: do not wait for the others
                self._raise_for_dead_worker()
            if self.socket in ready:
                frames = self._check(self.socket.recv_multipart(copy=False))
                self.watch.heard(self.worker_of(frames))
                return frames
            if deadline is not None and time.monotonic() >= deadline:
                return None
            self.watch.check()

    def _check(self, frames):
        if frames[0].bytes == _ERROR_TAG:
            raise DataFlowWorkerError(frames[1].bytes.decode('utf-8', 'replace'))
        return frames

    def _raise_for_dead_worker(self):
        dead = self.workers.dead()
        if dead is None:
            return
        name, proc = dead
        deadline = time.time() + self.report_grace
        while self.socket.poll(max(0, int((deadline - time.time()) * 1000))):
            self._check(self.socket.recv_multipart(copy=False))  # raises on the report
        raise DataFlowWorkerError("{} (pid {}) {} without reporting an error (killed, or out of "
                                  "memory?)".format(name, proc.pid, describe_exit(proc.exitcode)))
