"""Send a DataFlow over ZeroMQ to another process or machine, and receive it there.

The sender runs :func:`send_dataflow_zmq`; the receiver is either :class:`RemoteDataZMQ`
(a DataFlow) or :class:`~tensorpack_lite.input_source.ZMQInput` (an InputSource feeding a
trainer directly). Example, on the data machine::

    send_dataflow_zmq(BatchData(MyData(), 64), 'tcp://trainer-host:8877')

and on the training machine::

    TrainConfig(data=ZMQInput('tcp://0.0.0.0:8877', hwm=50), ...)   # or
    df = RemoteDataZMQ('tcp://0.0.0.0:8877'); df.reset_state()

The channel is unauthenticated and unencrypted unless CURVE keys are given (see
:mod:`tensorpack_lite.utils.zmq_security`): on a TCP endpoint anyone who can reach the port
can send. Prefer ``ipc://`` or ``tcp://127.0.0.1`` when both sides run on one machine. A
message that is not a valid datapoint is dropped and counted (``dropped_messages``), unless
the receiver is ``strict``; nothing received is ever unpickled.
"""

import itertools
import time

from ..utils import logger
from ..utils.serialize import dumps, dumps_frames, loads, loads_frames
from ..utils.zmq_security import CurveReceiver, CurveSender, DroppedMessages
from .base import DataFlow, DataFlowReentrantGuard
from .epochs import EmptyEpochs
from .state import without_position

__all__ = ['send_dataflow_zmq', 'RemoteDataZMQ']

_FORMATS = {
    None: 'msgpack', 'msgpack': 'msgpack',
    'zmq_ops': 'msgpack',  # tensorpack's format for ZMQInput; ZMQInput here reads msgpack
    'frames': 'frames',
}


def send_dataflow_zmq(df, addr, hwm=50, format=None, bind=False, log_interval=60, *,
                      curve_keys=None, curve_server_key=None):
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
        curve_keys: with ``curve_server_key``, turns CURVE on: this sender's keypair (a
            :class:`~tensorpack_lite.utils.zmq_security.CurveKeypair` or the path of its
            ``.key_secret`` certificate), whose public key the receiver must allow.
        curve_server_key: the receiver's public key (z85 bytes or its ``.key`` certificate).

    Raises:
        TypeError: a datapoint cannot be serialized; the message names the component
            (e.g. ``datapoint[1]['mask']``) and its type.
    """
    import zmq
    if format not in _FORMATS:
        raise ValueError("send_dataflow_zmq: unknown format {!r}; use one of {}".format(
            format, sorted(k for k in _FORMATS if k is not None)))
    multipart = _FORMATS[format] == 'frames'
    curve = CurveSender.from_arguments('send_dataflow_zmq', curve_keys, curve_server_key)
    ctx = zmq.Context()
    socket = ctx.socket(zmq.PUSH)
    socket.set_hwm(int(hwm))
    try:
        if curve is not None:
            curve.configure(socket)
        if bind:
            socket.bind(addr)
        else:
            socket.connect(addr)
        df.reset_state()
        logger.info("Sending the datapoints of {} to {} ...".format(type(df).__name__, addr))
        last_log, sent_since = time.monotonic(), 0
        empty = EmptyEpochs(df, 'send_dataflow_zmq')
        for epoch in itertools.count(1):
            count = 0
            for count, dp in enumerate(df, 1):
                if multipart:
                    socket.send_multipart(dumps_frames(dp), copy=False)
                else:
                    socket.send(dumps(dp), copy=False)
            empty.epoch_ended(count)
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
        dp = loads(frames[0].buffer)
    else:
        dp = loads_frames(frames)
    if not isinstance(dp, (list, dict)):
        raise TypeError("the message holds a {}, not a datapoint (a list or a dict)".format(
            type(dp).__name__))
    return dp


class RemoteDataZMQ(DataFlow):
    """The datapoints sent by :func:`send_dataflow_zmq` (any format) from one or two
    endpoints; an infinite DataFlow.

    A message that cannot be decoded (or is not a list or dict) is dropped, counted in
    :attr:`dropped_messages` and logged, unless ``strict``. Decoding never unpickles.

    Args:
        addr1 (str): a ZeroMQ endpoint to receive from.
        addr2 (str): a second endpoint, or None.
        hwm (int): high-water mark of the PULL sockets.
        bind (bool): bind to the endpoints (senders connect); otherwise connect to them.
        strict (bool): raise on the first bad message instead of dropping it.
        curve_keys: with ``curve_clients``, turns CURVE on (authenticated, encrypted; see
            :mod:`tensorpack_lite.utils.zmq_security`): this receiver's keypair (a
            ``CurveKeypair`` or the path of its ``.key_secret`` certificate).
        curve_clients (list): the public keys of the senders allowed in (z85 bytes or
            ``.key`` certificate paths); every other peer is refused at the handshake.

    Attributes:
        cnt1, cnt2: datapoints received from ``addr1`` and ``addr2``.
    """

    def __init__(self, addr1, addr2=None, hwm=50, bind=True, *, strict=False,
                 curve_keys=None, curve_clients=None):
        self._addrs = [addr1] + ([addr2] if addr2 is not None else [])
        self._hwm = int(hwm)
        self._bind = bool(bind)
        self._strict = bool(strict)
        self._curve = CurveReceiver.from_arguments(type(self).__name__, curve_keys, curve_clients)
        self._guard = DataFlowReentrantGuard(type(self).__name__)
        self._dropped = DroppedMessages(type(self).__name__)
        self.cnt1 = self.cnt2 = 0

    @property
    def dropped_messages(self):
        """Messages dropped because they were not valid datapoints."""
        return self._dropped.count

    def reset_state(self):
        self.cnt1 = self.cnt2 = 0

    def __iter__(self):
        import zmq
        with self._guard:
            ctx = zmq.Context()
            sockets = []
            auth = None
            try:
                if self._curve is not None:
                    auth = self._curve.start_authenticator(ctx)
                poller = zmq.Poller()
                for addr in self._addrs:
                    sock = ctx.socket(zmq.PULL)
                    sockets.append(sock)
                    sock.set_hwm(self._hwm)
                    if self._curve is not None:
                        self._curve.configure(sock)
                    if self._bind:
                        sock.bind(addr)
                    else:
                        sock.connect(addr)
                    poller.register(sock, zmq.POLLIN)
                while True:
                    for sock, _ in poller.poll():
                        try:
                            dp = _decode(sock.recv_multipart(copy=False))
                        except Exception as err:
                            if self._strict:
                                raise ValueError("{} (strict): a message received on {} is not a "
                                                 "valid datapoint: {}: {}".format(
                                                     type(self).__name__, self._addrs[sockets.index(sock)],
                                                     type(err).__name__, err)) from err
                            self._dropped.drop(err)
                            continue
                        if sock is sockets[0]:
                            self.cnt1 += 1
                        else:
                            self.cnt2 += 1
                        yield dp
            finally:
                for sock in sockets:
                    sock.close(linger=0)
                if auth is not None:
                    auth.stop()
                ctx.term()

    get_state, set_state = without_position(
        "it receives what a sender sends, and the sender's position is not known here",
        "the datapoints are whatever the sender sends next")
