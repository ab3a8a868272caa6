"""All-reduce across the worker processes of a cluster over direct TCP connections between
them, driven by one Python op (``tf.numpy_function``) per all-reduce call.

Each worker opens one connection to every other worker for every call (:meth:`connect`,
once the session exists; the workers learn each other's ports through TensorFlow queues).
In a step, the call's op sends this worker's tensors to every peer (one thread per peer),
receives every peer's tensors in 1 MB chunks straight into preallocated buffers, and adds
each chunk as soon as it has arrived, in worker order: ``((x_0 + x_1) + x_2) + ...``. Every
worker adds the same values in the same order, so every worker gets the same sum, bit for bit,
and the same bits as :class:`QueueAllReduce`.

Why: through TensorFlow's runtime a tensor crosses processes as a gRPC message (``RecvTensor``
or ``RecvBuf``): framed, copied into the message, parsed and copied out again. A socket moves
the tensor's bytes with one copy into the kernel on one side and one copy out of it (into the
receive buffer) on the other, like Horovod's Gloo, and the additions overlap the receiving.
Between 2 processes on 2 cores this moved 1.4-2.2x as much data per second as the queues and
1.1-9x as much as Horovod's Gloo at 1-64 MB (docs/distributed.md).

What it needs: every worker accepts TCP connections from the others on one more port (any
free one, or ``TENSORPACK_LITE_SOCKET_PORT``) of the host its TF_CONFIG address names.

Bytes: each worker receives the data of every other worker, (N - 1) times the data.

Example::

    exchange = SocketAllReduce(cluster)
    totals = exchange.sum([grad_a, grad_b])    # on every worker: the sums over the workers
    ...                                        # create the session, then before the first step:
    exchange.connect(sess, timeout=300)
    abort = exchange.build_abort()             # run when a worker is lost
    done = exchange.build_done_signals()       # after the last step: done.sends, done.receive
"""

import os
import select
import socket
import struct
import sys
import time
from concurrent import futures

import numpy as np

from ..compat import tf, tfv1
from ..utils import logger
from .queue_allreduce import DoneSignals
from .devices import task_cpu
from .utils import sum_in_order

__all__ = ['SocketAllReduce', 'PORT_VARIABLE']

PORT_VARIABLE = 'TENSORPACK_LITE_SOCKET_PORT'
"""The environment variable naming the port a worker listens on for its peers (default: any
free port)."""

_HELLO = struct.Struct('!8sii')
_MAGIC = b'tplsock1'
_ALIGN = 64   # TensorFlow takes a py_func's result without copying only when it is aligned so


def _aligned_empty(size, dtype):
    raw = np.empty(size * dtype.itemsize + _ALIGN, np.uint8)
    offset = -raw.ctypes.data % _ALIGN
    return raw[offset:offset + size * dtype.itemsize].view(dtype)


class _CallBuffers:
    """The arrays of one all-reduce call: a receive buffer per tensor (reused every step) and
    the results (reused once TensorFlow has released them)."""

    KEEP = 3

    def __init__(self):
        self._received = {}
        self._results = {}

    def receive_buffer(self, index, like):
        buffer = self._received.get(index)
        if buffer is None or buffer.shape != like.shape or buffer.dtype != like.dtype:
            buffer = self._received[index] = np.empty_like(like)
        return buffer

    def result(self, key, size, dtype):
        kept = self._results.setdefault(key, [])
        for array in kept:
            # 3 references: the list, the loop variable and getrefcount's argument
            if sys.getrefcount(array) <= 3 and array.size == size and array.dtype == dtype:
                return array
        array = _aligned_empty(size, np.dtype(dtype))
        if len(kept) < self.KEEP:
            kept.append(array)
        return array


class SocketAllReduce:
    """Sums tensors over the workers of a cluster through TCP connections between them (every
    worker builds the same calls in the same order, and calls :meth:`connect` before the first
    step).

    Args:
        cluster (ClusterConfig): the cluster and this worker.
        name (str): prefix of the queues' shared names (port exchange).
        timeout (float): seconds a step may wait for a peer's data, or :meth:`connect` for
            the peers.
    """

    CHUNK_BYTES = 1 << 20
    """Received data is added in chunks of this many bytes, while the next chunk arrives."""

    HELLO_TIMEOUT = 5.0
    """Seconds a new connection has to say which worker and call it is (a peer says it at
    once; anything else connecting to the port is dropped)."""

    def __init__(self, cluster, name='tensorpack_lite/socket_allreduce', timeout=300.0):
        self.cluster = cluster
        self.name = name
        self.timeout = timeout
        self._num_calls = 0
        self._sockets = {}        # (call, peer) -> socket
        self._buffers = []        # per call
        self._listener = None
        self._port = None
        self._port_ops = None
        self._sender = None
        self._done = set()
        self.failure = None
        """The error (a ``tf.errors.OpError``) of the last step that failed here: a py_func
        op's own errors reach the session as UnknownError, with this message inside."""

    @property
    def peers(self):
        """The other workers, in worker order."""
        return [k for k in range(self.cluster.num_worker) if k != self.cluster.task_index]

    # ----- graph -------------------------------------------------------------------------------

    def sum(self, tensors, compressions=None):
        """The sums over all workers of this worker's ``tensors``.

        Args:
            tensors (list[tf.Tensor]): this worker's contribution, as it travels (flat).
            compressions (list): for each tensor, None (add it as it travels) or the
                :class:`~tensorpack_lite.graph_builder.compression.GradientCompression` it
                travels with (what is added is its ``decode``).

        Returns:
            list[tf.Tensor]: for each tensor, ``decode(x_0) + decode(x_1) + ...`` over the
            workers in worker order, flat. Uncompressed tensors are added by the exchange op
            as the data arrives; compressed ones are decoded and added by TensorFlow's ops
            after it (numpy converts 16-bit floats an element at a time).
        """
        compressions = compressions or [None] * len(tensors)
        if not self.peers:
            return [tf.identity(t) if c is None else c.decode(t) for t, c in zip(tensors, compressions)]
        call = self._num_calls
        self._num_calls += 1
        self._buffers.append(_CallBuffers())
        self._build_port_exchange()
        summed_here = [c is None for c in compressions]
        out_dtypes = []
        for tensor, here in zip(tensors, summed_here):
            out_dtypes += [tensor.dtype.base_dtype] * (1 if here else len(self.peers))

        def exchange(*arrays):
            return self._exchange(call, arrays, summed_here)

        me = self.cluster.task_index
        with tf.name_scope('socket_allreduce'), tf.device(task_cpu('worker', me)):
            outputs = iter(tf.numpy_function(exchange, list(tensors), out_dtypes,
                                             name='exchange{}'.format(call)))
            totals = []
            for tensor, compression in zip(tensors, compressions):
                if compression is None:
                    totals.append(next(outputs))
                    continue
                # the own contribution through a PlaceholderWithDefault: see QueueAllReduce.sum
                received = {me: tf.raw_ops.PlaceholderWithDefault(input=tensor, shape=tensor.shape)}
                for peer in self.peers:
                    received[peer] = next(outputs)
                    received[peer].set_shape(tensor.shape)
                totals.append(sum_in_order([compression.decode(received[worker])
                                            for worker in range(self.cluster.num_worker)]))
        for total, tensor in zip(totals, tensors):
            total.set_shape(tensor.shape)
        return totals

    def _port_queue(self, worker):
        with tf.device(task_cpu('worker', worker)):
            return tfv1.FIFOQueue(len(self.peers), [tf.int32, tf.int32], shapes=[[], []],
                                  name='ports_to{}'.format(worker),
                                  shared_name='{}/ports/to{}'.format(self.name, worker))

    def _build_port_exchange(self):
        if self._port_ops is not None:
            return
        self._listener = self._listen()
        self._port = self._listener.getsockname()[1]
        me = self.cluster.task_index
        with tf.name_scope('socket_allreduce_ports'):
            publish = []
            for peer in self.peers:
                with tf.device(task_cpu('worker', peer)):
                    publish.append(self._port_queue(peer).enqueue([tf.constant(me), tf.constant(self._port)]))
            with tf.device(task_cpu('worker', me)):
                collect = self._port_queue(me).dequeue()
        self._port_ops = (tf.group(*publish), collect)

    def _listen(self):
        """The listening socket, on every interface (IPv4 and IPv6 where the system has both)."""
        given = os.environ.get(PORT_VARIABLE, '')
        try:
            port = int(given or 0)
            if socket.has_dualstack_ipv6():
                return socket.create_server(('', port), family=socket.AF_INET6, backlog=64,
                                            dualstack_ipv6=True)
            return socket.create_server(('', port), backlog=64)
        except (ValueError, OverflowError, OSError) as err:
            raise RuntimeError(
                "SocketAllReduce: {} cannot listen on port {!r} ({}={!r}): {}. On one machine give each "
                "worker a port of its own, or leave {} unset for any free port.".format(
                    self._describe(self.cluster.task_index), given or 0, PORT_VARIABLE, given, err,
                    PORT_VARIABLE)) from err

    def build_abort(self):
        """An op shutting every connection of this worker down and closing its port queue, so
        that a step, or :meth:`connect`, waiting for a lost worker fails at once (None when
        nothing is built yet or there is no peer)."""
        if self._port_ops is None:
            return None
        with tf.name_scope('socket_allreduce_abort'):
            shut = tf.numpy_function(self._shut_down, [], tf.int32, name='shut_down')
            closed = self._port_queue(self.cluster.task_index).close(cancel_pending_enqueues=True)
            return tf.group(shut, closed, name='abort')

    def build_done_signals(self):
        """The :class:`~tensorpack_lite.graph_builder.queue_allreduce.DoneSignals` of this
        worker (None when there is no peer or nothing is built): a worker says it is done by
        closing its sending side of every connection to the peer; the receive op waits up to
        1 s until every connection of some peer has ended, and returns -1 if none has."""
        if self._port_ops is None:
            return None
        with tf.name_scope('socket_allreduce_done'):
            sends = {peer: tf.numpy_function(lambda peer=peer: self._send_done(peer), [], tf.int32,
                                             name='to{}'.format(peer))
                     for peer in self.peers}
            receive = tf.numpy_function(self._receive_done, [], tf.int32, name='receive')
        return DoneSignals(sends, receive)

    # ----- connections -------------------------------------------------------------------------

    def connect(self, sess, timeout=None, step_timeout=None):
        """Connect to every peer, once per call (run by every worker once the session exists,
        after every call is built; ``step_timeout``, if given, replaces :attr:`timeout` for
        the steps). Nothing to do when nothing is built. A peer that does not answer is a
        DeadlineExceededError or UnavailableError naming it."""
        if step_timeout is not None:
            self.timeout = step_timeout
        if self._port_ops is None or self._sockets:
            return
        timeout = self.timeout if timeout is None else timeout
        options = tfv1.RunOptions(timeout_in_ms=int(timeout * 1000))
        publish, collect = self._port_ops
        sess.run(publish, options=options)
        ports = self._collect_ports(sess, collect, timeout)
        me = self.cluster.task_index
        for peer in (p for p in self.peers if p > me):
            for call in range(self._num_calls):
                try:
                    sock = socket.create_connection((self.cluster.host('worker', peer), ports[peer]),
                                                    timeout=timeout)
                    sock.sendall(_HELLO.pack(_MAGIC, me, call))
                except OSError as err:
                    self._raise_for(peer, err, timeout)
                self._sockets[(call, peer)] = sock
        self._accept_lower_peers(timeout)
        for sock in self._sockets.values():
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.settimeout(self.timeout)
        # a thread per peer and call: the sends of calls running at once never queue behind each other
        self._sender = futures.ThreadPoolExecutor(len(self._sockets), thread_name_prefix='socket-allreduce')
        logger.info("{}: gradients travel over TCP, port {} here, {} connection(s) to {} peer(s).".format(
            self._describe(me), self._port, len(self._sockets), len(self.peers)))

    def _collect_ports(self, sess, collect, timeout):
        """{peer: port} of every peer, as they publish them (a DeadlineExceededError naming the
        peers that did not within ``timeout`` seconds)."""
        ports = {}
        deadline = time.monotonic() + timeout
        while len(ports) < len(self.peers):
            left_ms = max(1, int((deadline - time.monotonic()) * 1000))
            try:
                sender, port = sess.run(collect, options=tfv1.RunOptions(timeout_in_ms=left_ms))
            except tf.errors.DeadlineExceededError:
                missing = ', '.join(self._describe(p) for p in self.peers if p not in ports)
                raise tf.errors.DeadlineExceededError(
                    None, None, "SocketAllReduce: {} did not publish its port within {:g} s".format(
                        missing, timeout)) from None
            ports[int(sender)] = int(port)
        return ports

    def _accept_lower_peers(self, timeout):
        """Accept the connections of every call from every peer of a lower index."""
        me = self.cluster.task_index
        expected = {(call, peer) for call in range(self._num_calls) for peer in self.peers if peer < me}
        self._listener.settimeout(timeout)
        try:
            while expected:
                try:
                    sock, _ = self._listener.accept()
                except OSError as err:
                    self._raise_for(min(peer for _, peer in expected), err, timeout)
                sock.settimeout(min(timeout, self.HELLO_TIMEOUT))
                try:
                    magic, peer, call = _HELLO.unpack(self._receive_exactly(sock, _HELLO.size))
                except (OSError, struct.error):
                    magic, peer, call = None, None, None
                if magic != _MAGIC or (call, peer) not in expected:
                    sock.close()      # not one of ours (a port scan, a health check)
                    continue
                expected.discard((call, peer))
                self._sockets[(call, peer)] = sock
        finally:
            self._listener.close()

    @staticmethod
    def _receive_exactly(sock, size):
        data = bytearray(size)
        SocketAllReduce._receive_into(sock, memoryview(data))
        return bytes(data)

    @staticmethod
    def _receive_into(sock, view):
        got = 0
        while got < len(view):
            count = sock.recv_into(view[got:])
            if not count:
                raise ConnectionError('the connection was closed')
            got += count

    # ----- one step ----------------------------------------------------------------------------

    def _describe(self, peer):
        return self.cluster.describe('worker', peer)

    def _exchange(self, call, arrays, summed_here):
        """Send ``arrays`` to every peer and receive theirs: for each array, its sum over the
        workers if ``summed_here``, else the peers' arrays in worker order."""
        if not self._sockets:
            raise tf.errors.FailedPreconditionError(
                None, None, "SocketAllReduce: connect() was not called before the first step")
        sockets = {peer: self._sockets[(call, peer)] for peer in self.peers}
        arrays = [np.ascontiguousarray(a) for a in arrays]
        sending = {peer: self._sender.submit(self._send, sock, arrays) for peer, sock in sockets.items()}
        try:
            results = []
            for index, (array, here) in enumerate(zip(arrays, summed_here)):
                if here:
                    results.append(self._sum_one(self._buffers[call], index, array, sockets))
                else:
                    results.extend(self._receive_one(self._buffers[call], index, array, sockets))
            for peer, future in sending.items():
                try:
                    error = future.exception(timeout=self.timeout + 1)
                except futures.TimeoutError as err:
                    error = err
                self._raise_for(peer, error)
        except BaseException as err:
            for sock in sockets.values():
                self._shut(sock)
            if isinstance(err, tf.errors.OpError):
                self.failure = err
            raise
        return results

    @staticmethod
    def _send(sock, arrays):
        for array in arrays:
            sock.sendall(memoryview(array).cast('B'))

    def _raise_for(self, peer, error, seconds=None):
        """Raise ``error`` (if any) of the connection to ``peer`` as a ``tf.errors`` error
        naming the peer (``seconds``: the timeout that ran out, default :attr:`timeout`)."""
        if error is None:
            return
        if isinstance(error, (socket.timeout, TimeoutError, futures.TimeoutError)):
            raise tf.errors.DeadlineExceededError(None, None, "SocketAllReduce: {} sent or took no data "
                                                  "within {:g} s".format(self._describe(peer),
                                                                         seconds or self.timeout))
        if isinstance(error, OSError):
            raise tf.errors.UnavailableError(None, None, "SocketAllReduce: the connection to {} failed: "
                                             "{}".format(self._describe(peer), error))
        raise error

    def _receive_range(self, peer, sock, into, start, end):
        """Receive the elements ``start:end`` of ``into`` (a flat array) from ``peer``."""
        try:
            self._receive_into(sock, memoryview(into).cast('B')[start * into.itemsize:end * into.itemsize])
        except OSError as err:
            self._raise_for(peer, err)

    def _receive_chunks(self, peer, sock, into):
        """Receive ``into`` from ``peer`` chunk by chunk; yields each chunk's element range
        once it is in."""
        step = max(1, self.CHUNK_BYTES // max(1, into.itemsize))
        for start in range(0, into.size, step):
            end = min(into.size, start + step)
            self._receive_range(peer, sock, into, start, end)
            yield start, end

    def _sum_one(self, buffers, index, mine, sockets):
        """This array's sum over the workers in worker order, each chunk of a peer's data
        added as soon as it has arrived."""
        total = buffers.result((index, 'sum'), mine.size, mine.dtype)
        received = buffers.receive_buffer(index, mine)
        me = self.cluster.task_index
        first_peer = 1 if me == 0 else 0
        for worker in range(self.cluster.num_worker):
            if worker == me:
                if me != 0:
                    np.add(total, mine, out=total)
                continue
            for start, end in self._receive_chunks(worker, sockets[worker], received):
                chunk = slice(start, end)
                if worker != first_peer:
                    np.add(total[chunk], received[chunk], out=total[chunk])
                elif me == 0:
                    np.add(mine[chunk], received[chunk], out=total[chunk])
                else:
                    np.copyto(total[chunk], received[chunk])
        return total

    def _receive_one(self, buffers, index, mine, sockets):
        """The peers' arrays of this index, in worker order."""
        arrays = []
        for peer, sock in sockets.items():
            array = buffers.result((index, peer), mine.size, mine.dtype)
            self._receive_range(peer, sock, array, 0, array.size)
            arrays.append(array)
        return arrays

    # ----- the end -----------------------------------------------------------------------------

    @staticmethod
    def _shut(sock, how=socket.SHUT_RDWR):
        try:
            sock.shutdown(how)
        except OSError:
            pass   # already closed by the peer

    def _shut_down(self):
        for sock in list(self._sockets.values()) + [self._listener]:
            self._shut(sock)
        return np.int32(len(self._sockets))

    def _send_done(self, peer):
        for (_, receiver), sock in self._sockets.items():
            if receiver == peer:
                sock.shutdown(socket.SHUT_WR)
        return np.int32(peer)

    def _ended_peers(self):
        """Peers not yet reported done whose every connection has ended."""
        connected = {peer for _, peer in self._sockets}
        return [peer for peer in self.peers if peer not in self._done and peer not in connected]

    def _receive_done(self):
        ended = self._ended_peers()
        if not ended:
            open_sockets = {sock: key for key, sock in self._sockets.items()}
            readable, _, _ = select.select(list(open_sockets), [], [], 1.0)
            for sock in readable:
                key = open_sockets[sock]
                if sock.recv(1):
                    raise tf.errors.InternalError(None, None, "SocketAllReduce: {} sent data after its last "
                                                  "step".format(self._describe(key[1])))
                sock.close()
                del self._sockets[key]
            ended = self._ended_peers()
        if not ended:
            return np.int32(-1)
        self._done.add(ended[0])
        return np.int32(ended[0])
