"""All-reduce across the worker processes of a cluster through FIFO queues, over the path
TensorFlow's distributed runtime uses for any tensor that crosses tasks (``RecvTensor``).

Worker ``w`` owns one queue per peer ``v`` on its CPU, named ``to{w}_from{v}``. In each step,
worker ``w`` puts its contribution into the queue ``to{v}_from{w}`` of every peer (the enqueue
runs on the peer, which fetches the tensors from ``w``), takes one entry from each of its own
queues, and adds the contributions of all workers one after the other in worker order. Every
worker adds the same values in the same order, so every worker gets the same sum, bit for bit.
A step ends only once its contributions are in the peers' queues, and the queues hold two
entries, so no worker is ever more than one step ahead of another.

Why not the collective ops (``CollectiveReduceV2``)? Their transfers between processes
(``RecvBuf``) copy the data into a protocol buffer in 4 KiB strings, serialize, parse and copy
it again into the tensor; ``RecvTensor`` sends the tensor's buffer as it is and parses it
straight into the destination. Between 2 processes this moves 1.5-2x more data per second from
16 MB up; below, latency decides and both are about even. docs/distributed.md has the
measurements.

Bytes: each worker receives the data of every other worker, (N - 1) times the data: as much
as a ring all-reduce for N = 2, more beyond (a ring moves 2 (N - 1) / N times the data).

Example::

    exchange = QueueAllReduce(cluster)
    totals = exchange.sum([grad_a, grad_b])    # on every worker: the sums over the workers
    abort = exchange.build_abort()             # run when a worker is lost
"""

from ..compat import tf, tfv1
from .utils import sum_in_order

__all__ = ['QueueAllReduce']


def _worker_cpu(worker):
    return '/job:worker/task:{}/device:CPU:0'.format(worker)


class QueueAllReduce:
    """Sums tensors over the workers of a cluster (every worker builds the same calls in the
    same order).

    Args:
        cluster (ClusterConfig): the cluster and this worker.
        name (str): prefix of the queues' shared names.
    """

    CAPACITY = 2
    """Entries a queue holds: the current step and the next one of a worker that is ahead."""

    def __init__(self, cluster, name='tensorpack_lite/queue_allreduce'):
        self.cluster = cluster
        self.name = name
        self._incoming = []
        self._calls = 0

    @property
    def peers(self):
        """The other workers, in worker order."""
        return [k for k in range(self.cluster.num_worker) if k != self.cluster.task_index]

    def _queue(self, receiver, sender, call, tensors):
        shapes = [t.shape for t in tensors]
        if not all(shape.is_fully_defined() for shape in shapes):
            shapes = None
        with tf.device(_worker_cpu(receiver)):
            return tfv1.FIFOQueue(self.CAPACITY, [t.dtype.base_dtype for t in tensors], shapes=shapes,
                                  name='to{}_from{}'.format(receiver, sender),
                                  shared_name='{}/{}/to{}_from{}'.format(self.name, call, receiver, sender))

    def sum(self, tensors, decoders=None):
        """The sums over all workers of this worker's ``tensors``.

        Args:
            tensors (list[tf.Tensor]): this worker's contribution, as it travels.
            decoders (list): for each tensor, None (add it as it travels) or a function
                turning it into what is added (e.g. 16 bits into float32).

        Returns:
            list[tf.Tensor]: for each tensor, ``decode(x_0) + decode(x_1) + ...`` over the
            workers in worker order, computed once this worker's contribution is in every
            peer's queue.
        """
        decoders = [d or (lambda tensor: tensor) for d in (decoders or [None] * len(tensors))]
        me = self.cluster.task_index
        call = self._calls
        self._calls += 1
        with tf.name_scope('queue_allreduce'):
            sent = [self._queue(peer, me, call, tensors).enqueue(tensors) for peer in self.peers]
            # Grappler reassociates additions of a constant ((a + b) + c -> a + (b + c)), which
            # would change one worker's order of additions when its own contribution folds to a
            # constant; a PlaceholderWithDefault is never folded.
            received = {me: [tf.raw_ops.PlaceholderWithDefault(input=t, shape=t.shape) for t in tensors]}
            for peer in self.peers:
                queue = self._queue(me, peer, call, tensors)
                self._incoming.append(queue)
                entry = queue.dequeue()
                received[peer] = list(entry) if isinstance(entry, (list, tuple)) else [entry]
            with tf.control_dependencies(sent):
                workers = range(self.cluster.num_worker)
                return [sum_in_order([decode(received[worker][index]) for worker in workers])
                        for index, decode in enumerate(decoders)]

    def build_abort(self):
        """An op closing this worker's queues, so that a step waiting for a lost worker's
        contribution fails at once (None when nothing is built yet or there is no peer)."""
        if not self._incoming:
            return None
        with tf.name_scope('queue_allreduce_abort'):
            return tf.group(*[q.close(cancel_pending_enqueues=True) for q in self._incoming])
