"""Send a DataFlow over ZeroMQ to another process or machine, and receive it there.

The sender runs :func:`send_dataflow_zmq`; the receiver is either :class:`RemoteDataZMQ`
(a DataFlow) or :class:`~tensorpack_lite.input_source.ZMQInput` (an InputSource feeding a
trainer directly). Example, on the data machine::

    send_dataflow_zmq(BatchData(MyData(), 64), 'tcp://trainer-host:8877')

and on the training machine::

    TrainConfig(data=ZMQInput('tcp://0.0.0.0:8877', hwm=50), ...)   # or
    df = RemoteDataZMQ('tcp://0.0.0.0:8877'); df.reset_state()
"""

import itertools
import time

from ..utils import logger
from ..utils.serialize import dumps, dumps_frames, loads, loads_frames
from .base import DataFlow, DataFlowReentrantGuard

__all__ = ['send_dataflow_zmq', 'RemoteDataZMQ']

_FORMATS = {
    None: 'msgpack', 'msgpack': 'msgpack',
    'zmq_ops': 'msgpack',  # tensorpack's format for ZMQInput; ZMQInput here reads msgpack
    'frames': 'frames',
}


def send_dataflow_zmq(df, addr, hwm=50, format=None, bind=False, log_interval=60):
    """Run ``df`` forever (epoch after epoch) and send every datapoint to ``addr`` on a PUSH
    socket. Returns only through an exception (e.g. KeyboardInterrupt).

    Args:
        df (DataFlow): what to send; reset here.
        addr (str): a ZeroMQ endpoint, e.g. ``'tcp://127.0.0.1:8877'`` or ``'ipc:///tmp/pipe'``.
        hwm (int): high-water mark: datapoints queued before sending blocks.
        format (str): ``None`` / ``'msgpack'`` (one frame made by
            :func:`~tensorpack_lite.utils.serialize.dumps`: what :class:`ZMQInput` and
            :class:`RemoteDataZMQ` read); ``'zmq_ops'``, tensorpack's name for ZMQInput's
            format, means the same here; ``'frames'`` sends big arrays without copies
            (:func:`~tensorpack_lite.utils.serialize.dumps_frames`), read by
            :class:`RemoteDataZMQ` only.
        bind (bool): bind to ``addr`` rather than connect to it.
        log_interval (float): seconds between two logs of the sending speed.

    Raises:
        TypeError: a datapoint cannot be serialized; the message names the component
            (e.g. ``datapoint[1]['mask']``) and its type.
    """
    import zmq
    if format not in _FORMATS:
        raise ValueError("send_dataflow_zmq: unknown format {!r}; use one of {}".format(
            format, sorted(k for k in _FORMATS if k is not None)))
    multipart = _FORMATS[format] == 'frames'
    ctx = zmq.Context()
    socket = ctx.socket(zmq.PUSH)
    socket.set_hwm(int(hwm))
    try:
        if bind:
            socket.bind(addr)
        else:
            socket.connect(addr)
        df.reset_state()
        logger.info("Sending the datapoints of {} to {} ...".format(type(df).__name__, addr))
        last_log, sent_since = time.monotonic(), 0
        for epoch in itertools.count(1):
            count = 0
            for count, dp in enumerate(df, 1):
                if multipart:
                    socket.send_multipart(dumps_frames(dp), copy=False)
                else:
                    socket.send(dumps(dp), copy=False)
            if count == 0:
                raise RuntimeError("send_dataflow_zmq: an epoch of {} produced no datapoint".format(
                    type(df).__name__))
            sent_since += count
            elapsed = time.monotonic() - last_log
            if epoch == 1 or elapsed >= log_interval:
                logger.info("send_dataflow_zmq: {} epochs sent; {:.1f} datapoints/s".format(
                    epoch, sent_since / max(elapsed, 1e-9)))
                last_log, sent_since = time.monotonic(), 0
    finally:
        socket.close(linger=0)
        ctx.term()


def _decode(frames):
    """A datapoint from one ``dumps()`` message or from ``dumps_frames()`` frames."""
    if len(frames) == 1:
        return loads(frames[0].buffer)
    return loads_frames(frames)


class RemoteDataZMQ(DataFlow):
    """The datapoints sent by :func:`send_dataflow_zmq` (any format) from one or two
    endpoints; an infinite DataFlow.

    Args:
        addr1 (str): a ZeroMQ endpoint to receive from.
        addr2 (str): a second endpoint, or None.
        hwm (int): high-water mark of the PULL sockets.
        bind (bool): bind to the endpoints (senders connect); otherwise connect to them.

    Attributes:
        cnt1, cnt2: datapoints received from ``addr1`` and ``addr2``.
    """

    def __init__(self, addr1, addr2=None, hwm=50, bind=True):
        self._addrs = [addr1] + ([addr2] if addr2 is not None else [])
        self._hwm = int(hwm)
        self._bind = bool(bind)
        self._guard = DataFlowReentrantGuard(type(self).__name__)
        self.cnt1 = self.cnt2 = 0

    def reset_state(self):
        self.cnt1 = self.cnt2 = 0

    def __iter__(self):
        import zmq
        with self._guard:
            ctx = zmq.Context()
            sockets = []
            try:
                poller = zmq.Poller()
                for addr in self._addrs:
                    sock = ctx.socket(zmq.PULL)
                    sockets.append(sock)
                    sock.set_hwm(self._hwm)
                    if self._bind:
                        sock.bind(addr)
                    else:
                        sock.connect(addr)
                    poller.register(sock, zmq.POLLIN)
                while True:
                    for sock, _ in poller.poll():
                        dp = _decode(sock.recv_multipart(copy=False))
                        if sock is sockets[0]:
                            self.cnt1 += 1
                        else:
                            self.cnt2 += 1
                        yield dp
            finally:
                for sock in sockets:
                    sock.close(linger=0)
                ctx.term()
