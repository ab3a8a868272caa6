"""All-reduce across the worker processes of a cluster through FIFO queues, over the path
TensorFlow's distributed runtime uses for any tensor that crosses tasks (``RecvTensor``).

Worker ``v`` keeps an outbox for each peer ``w`` on its CPU, named ``from{v}_to{w}``. In each
step, worker ``w`` puts its contribution into its outbox for every peer (on its own CPU),
takes one entry out of every peer's outbox for ``w`` (the dequeue runs on the peer, and the
entry comes over to ``w``), and adds the contributions of all workers one after the other in
worker order. Every worker adds the same values in the same order, so every worker gets the
same sum, bit for bit. A worker's step needs every peer's contribution of the same step, so
no worker is ever more than one step ahead of another, and an outbox never holds more than
two entries.

Why pull rather than push (each worker enqueuing into its peers' queues)? A push step waits
for two messages one after the other (the peer's part of the step, then its request for the
data); a pull step sends both at once. Measured between 2 processes on 2 cores in the same
runs, pull moved 10-18% more data per second at every size (docs/distributed.md).

The price of pulling: a worker's last step ends before its peers have taken its last
contribution, so a worker must keep its server up until they have. :meth:`build_done_signals`
builds the exchange that tells it when.

Why not the collective ops (``CollectiveReduceV2``)? Their transfers between processes
(``RecvBuf``) copy the data into a protocol buffer in 4 KiB strings, serialize, parse and copy
it again into the tensor; ``RecvTensor`` sends the tensor's buffer as it is and parses it
straight into the destination. Between 2 processes this moves 1.5-2x more data per second from
16 MB up. docs/distributed.md has the measurements.

Bytes: each worker receives the data of every other worker, (N - 1) times the data: as much
as a ring all-reduce for N = 2, more beyond (a ring moves 2 (N - 1) / N times the data).

Example::

    exchange = QueueAllReduce(cluster)
    totals = exchange.sum([grad_a, grad_b])    # on every worker: the sums over the workers
    abort = exchange.build_abort()             # run when a worker is lost
    done = exchange.build_done_signals()       # after the last step: done.sends, done.receive
"""

from collections import namedtuple

from ..compat import tf, tfv1
from .devices import task_cpu
from .utils import sum_in_order

__all__ = ['QueueAllReduce', 'DoneSignals']


DoneSignals = namedtuple('DoneSignals', ['sends', 'receive'])
DoneSignals.__doc__ = """The exchange at the end of training (queues or sockets).

``sends``: ``{peer: op}``, each op telling that peer that this worker has taken its last
contributions (run each once, after the last step; an op fails alone when its peer is
gone). ``receive``: waits for one peer's word and returns the peer's index (run it until
every peer has spoken: then every peer has this worker's last contributions); it may also
return -1 after a while without a word (sockets: after 1 s; queues wait as long as the run's
timeout allows)."""


class QueueAllReduce:
    """Sums tensors over the workers of a cluster (every worker builds the same calls in the
    same order).

    Args:
        cluster (ClusterConfig): the cluster and this worker.
        name (str): prefix of the queues' shared names.
    """

    CAPACITY = 2
    """Entries an outbox holds: the current step and the next one of a worker that is ahead."""

    failure = None
    """Always None: a failed queue op reports its own error to the session."""

    def __init__(self, cluster, name='tensorpack_lite/queue_allreduce'):
        self.cluster = cluster
        self.name = name
        self._used = []
        self._calls = 0

    @property
    def peers(self):
        """The other workers, in worker order."""
        return [k for k in range(self.cluster.num_worker) if k != self.cluster.task_index]

    def _outbox(self, sender, receiver, call, tensors):
        shapes = [t.shape for t in tensors]
        if not all(shape.is_fully_defined() for shape in shapes):
            shapes = None
        with tf.device(task_cpu('worker', sender)):
            queue = tfv1.FIFOQueue(self.CAPACITY, [t.dtype.base_dtype for t in tensors], shapes=shapes,
                                   name='from{}_to{}'.format(sender, receiver),
                                   shared_name='{}/{}/from{}_to{}'.format(self.name, call, sender, receiver))
        self._used.append(queue)
        return queue

    def sum(self, tensors, compressions=None):
        """The sums over all workers of this worker's ``tensors``.

        Args:
            tensors (list[tf.Tensor]): this worker's contribution, as it travels.
            compressions (list): for each tensor, None (add it as it travels) or the
                :class:`~tensorpack_lite.graph_builder.compression.GradientCompression` it
                travels with (what is added is its ``decode``).

        Returns:
            list[tf.Tensor]: for each tensor, ``decode(x_0) + decode(x_1) + ...`` over the
            workers in worker order, computed once this worker's contribution is in its
            outbox for every peer.
        """
        decoders = [c.decode if c is not None else (lambda tensor: tensor)
                    for c in (compressions or [None] * len(tensors))]
        me = self.cluster.task_index
        call = self._calls
        self._calls += 1
        with tf.name_scope('queue_allreduce'):
            with tf.device(task_cpu('worker', me)):
                sent = [self._outbox(me, peer, call, tensors).enqueue(tensors) for peer in self.peers]
                # Grappler reassociates additions of a constant ((a + b) + c -> a + (b + c)),
                # which would change one worker's order of additions when its own contribution
                # folds to a constant; a PlaceholderWithDefault is never folded.
                received = {me: [tf.raw_ops.PlaceholderWithDefault(input=t, shape=t.shape) for t in tensors]}
            for peer in self.peers:
                outbox = self._outbox(peer, me, call, tensors)
                with tf.device(task_cpu('worker', peer)):
                    entry = outbox.dequeue()
                received[peer] = list(entry) if isinstance(entry, (list, tuple)) else [entry]
            with tf.device(task_cpu('worker', me)), tf.control_dependencies(sent):
                workers = range(self.cluster.num_worker)
                return [sum_in_order([decode(received[worker][index]) for worker in workers])
                        for index, decode in enumerate(decoders)]

    def connect(self, sess, timeout=None, step_timeout=None):
        """Nothing to do: the queues are found by their shared names (the same interface as
        :class:`~tensorpack_lite.graph_builder.socket_allreduce.SocketAllReduce`)."""

    def build_abort(self):
        """An op closing every queue this worker's steps use (its outboxes and its peers'
        outboxes for it), so that a step waiting for a lost worker fails at once (None when
        nothing is built yet or there is no peer)."""
        if not self._used:
            return None
        with tf.name_scope('queue_allreduce_abort'):
            return tf.group(*[q.close(cancel_pending_enqueues=True) for q in self._used])

    def build_done_signals(self):
        """The :class:`DoneSignals` of this worker (None when there is no peer)."""
        if not self.peers:
            return None
        me = self.cluster.task_index

        def inbox(worker):
            with tf.device(task_cpu('worker', worker)):
                return tfv1.FIFOQueue(len(self.peers), [tf.int32], shapes=[[]],
                                      name='done_to{}'.format(worker),
                                      shared_name='{}/done/to{}'.format(self.name, worker))

        with tf.name_scope('queue_allreduce_done'):
            sends = {}
            for peer in self.peers:
                with tf.device(task_cpu('worker', peer)):
                    sends[peer] = inbox(peer).enqueue([tf.constant(me, tf.int32)], name='to{}'.format(peer))
            with tf.device(task_cpu('worker', me)):
                receive = inbox(me).dequeue()
            return DoneSignals(sends, receive)
