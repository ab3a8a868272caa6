"""Horovod's TensorFlow API on MPI (mpi4py): the engine of ``HorovodTrainer`` where horovod
cannot be installed (TensorFlow 2.19+). Start the processes with ``mpiexec -n N``, ``srun``
or Kubeflow's MPI Operator::

    from tensorpack_lite.graph_builder import mpi_ops as hvd
    hvd.init()
    grads = hvd.grouped_allreduce(grads, op=hvd.Average)   # one fused MPI call

Every collective is a ``tf.numpy_function`` that runs one MPI collective on a numpy buffer;
a list of tensors (``grouped_allreduce``, ``broadcast_variables``) is packed into one buffer
(like Horovod's tensor fusion). Sums are bit-identical on every rank: float32/float64 use
MPI's Allreduce (MPICH gives every rank the same bits; the tests check it), fp16 compression
sends float16 and adds in float32, each slice on one rank in rank order, then gathers.

Collectives must run in the same order on every rank. Those created inside
:func:`ordered_collectives` (the trainer builds its tower in it) run in creation order.
When a rank calls :func:`shutdown`, the collectives it did not take part in fail on the
other ranks with :class:`PeerShutdownError`'s message instead of waiting forever (one it took
part in still completes everywhere); :func:`shutdown` then waits until every other rank has
shut down too. A rank that dies while the others wait for it (in a collective or in
:func:`shutdown`) makes them abort the job, naming its rank, pid and host: under ``mpiexec
-disable-auto-cleanup`` with :mod:`tensorpack_lite.cluster.mpi_rank` (plain ``mpiexec`` kills
every rank first). A rank on the same machine is named within a second (its process is gone);
on any machine, a rank whose heartbeat stops for :data:`PEER_TIMEOUT` seconds (it died, hangs,
or its link is cut) is named by the next rank in ring order. Heartbeats go through MPI's name
service, which the launcher serves, never on a connection between ranks.

:func:`traffic` counts what this rank's collectives moved (e.g. to check that a run with
gradient accumulation all-reduces once per update)::

    before = hvd.traffic()['allreduce']
    sess.run(train_op)
    calls, nbytes = hvd.traffic()['allreduce'] - before   # this step's reductions and bytes
"""

import atexit
import collections
import contextlib
import os
import signal
import socket
import sys
import threading
import time

import numpy as np

from ..cluster.mpi_rank import ABORT_FD_VARIABLE
from ..compat import tf, tfv1
from ..utils import logger
from ..utils.mpi_launcher import MPI_LAUNCHERS

__all__ = ['init', 'shutdown', 'is_initialized', 'rank', 'size', 'local_rank', 'local_size',
           'allreduce', 'grouped_allreduce', 'allgather', 'broadcast', 'broadcast_variables',
           'Average', 'Sum', 'Compression', 'Compressor', 'NoneCompressor', 'FP16Compressor',
           'ordered_collectives', 'engine_name', 'traffic', 'Traffic',
           'PeerShutdownError', 'SHUT_DOWN_MESSAGE', 'dead_local_peers', 'PEER_TIMEOUT',
           'check_launched_size', 'LAUNCHER_SIZES']

Sum = 'Sum'
Average = 'Average'

SHUT_DOWN_MESSAGE = 'MPI engine has been shut down'
"""In the error of a collective that another rank's :func:`shutdown` ended."""

PEER_TIMEOUT = float(os.environ.get('TENSORPACK_MPI_PEER_TIMEOUT', 10))
"""Seconds without a heartbeat from the previous rank, while this one waits for it, after which
it is taken for lost (``$TENSORPACK_MPI_PEER_TIMEOUT``, default 10)."""

_DONE_TAG = 8128
_WATCH_SECONDS = 0.5
_ABORT_SECONDS = 5


class Compressor:
    """How gradients travel: :attr:`wire_dtype` is the numpy type sent (None: unchanged).
    ``compress``/``decompress`` are Horovod's, for code that calls them."""
    wire_dtype = None

    @classmethod
    def compress(cls, tensor):
        """``(tensor as sent, context for decompress)``."""
        if cls.wire_dtype is None or not tensor.dtype.is_floating:
            return tensor, None
        return tf.cast(tensor, tf.as_dtype(cls.wire_dtype)), tensor.dtype

    @staticmethod
    def decompress(tensor, ctx):
        return tensor if ctx is None else tf.cast(tensor, ctx)


class NoneCompressor(Compressor):
    """Send tensors as they are."""


class FP16Compressor(Compressor):
    """Send floating-point tensors as float16 (added in float32, rounded once)."""
    wire_dtype = np.float16


class Compression:
    """The compressions, as ``hvd.Compression``."""
    none = NoneCompressor
    fp16 = FP16Compressor


class Traffic(collections.namedtuple('Traffic', ['calls', 'bytes'])):
    """What one kind of collective moved on this rank: ``calls``, the collectives (one buffer
    each: a :func:`grouped_allreduce` makes one per dtype; with fp16 compression each is two MPI
    calls), and ``bytes``, the size of the buffers this rank put in, as sent (float16 with
    compression; a broadcast's payload on every rank). Subtract two to get what happened in
    between."""

    __slots__ = ()

    def __add__(self, other):
        return Traffic(self.calls + other[0], self.bytes + other[1])

    def __sub__(self, other):
        return Traffic(self.calls - other[0], self.bytes - other[1])


_KINDS = ('allreduce', 'allgather', 'broadcast')


class PeerShutdownError(RuntimeError):
    """Another rank ended (called :func:`shutdown`) while this one waited for it."""


class _Heartbeats:
    """This rank's heartbeat, a count published anew by every :meth:`beat` in MPI's name
    service (``MPI_Publish_name``; hydra's mpiexec serves it), and the count of the previous
    rank in ring order, read with ``MPI_Lookup_name``: every rank is watched by another, so any
    set of lost ranks but all of them is seen. Heartbeats never use a connection between ranks:
    after a rank on another machine is killed, a send to it can crash MPICH's UCX module."""

    def __init__(self, MPI, rank, size, job):
        self.MPI = MPI
        self.previous = (rank - 1) % size
        self._mine, self._theirs = ['tensorpack_lite-beat-{}-{}'.format(job, r)
                                    for r in (rank, self.previous)]
        self._count, self._seen = 0, None
        MPI.Publish_name(self._mine, '0')
        self.published = self.heard = time.monotonic()

    def beat(self):
        """Publish the next count (:attr:`published`: when last done) and read the previous
        rank's (:attr:`heard`: when it last changed). Blocks while the launcher is out of reach."""
        self.MPI.Unpublish_name(self._mine, str(self._count))
        self._count += 1
        self.MPI.Publish_name(self._mine, str(self._count))
        self.published = time.monotonic()
        try:
            seen = self.MPI.Lookup_name(self._theirs)
        except self.MPI.Exception:
            return          # the previous rank is between its unpublish and publish
        if seen != self._seen:
            self._seen, self.heard = seen, time.monotonic()

    def stop(self):
        try:
            self.MPI.Unpublish_name(self._mine, str(self._count))
        except self.MPI.Exception:
            pass


class _Engine:
    """The communicators of this process and the waits of its collectives."""

    def __init__(self, MPI):
        self.MPI = MPI
        self.world = MPI.COMM_WORLD.Dup()
        self.control = MPI.COMM_WORLD.Dup()
        self.local = MPI.COMM_WORLD.Split_type(MPI.COMM_TYPE_SHARED)
        self.rank, self.size = self.world.Get_rank(), self.world.Get_size()
        self.local_rank, self.local_size = self.local.Get_rank(), self.local.Get_size()
        self.lock = threading.Lock()
        self.peers = _gather_peers(self.world, self.size)
        self.ended = {}                 # rank -> collectives it completed, for the ranks that shut down
        self.ended_by = None            # the first of them
        self._calls = 0                 # collectives started here; every rank starts the same ones
        self.traffic = {kind: Traffic(0, 0) for kind in _KINDS}
        self._done = []                 # (rank, buffer, request): each rank's end, not received yet
        for peer in range(self.size):
            if peer != self.rank:
                buffer = np.zeros(1, np.int64)
                self._done.append((peer, buffer, self.control.Irecv(buffer, source=peer, tag=_DONE_TAG)))
        self._waiting = None
        self._closed = False            # shut down here; the watchdog goes on until _finished
        self._finished = threading.Event()
        self.beats = self._start_heartbeats() if self.size > 1 else None
        self._threads = []
        if self.size > 1:
            self._threads.append(threading.Thread(target=self._watch_peers, name='mpi_ops-watchdog',
                                                  daemon=True))
        if self.beats is not None:
            self._threads.append(threading.Thread(target=self._beat, name='mpi_ops-heartbeat',
                                                  daemon=True))
        for thread in self._threads:
            thread.start()
        atexit.register(self._stop_threads)     # before mpi4py's MPI_Finalize (registered earlier)

    def _start_heartbeats(self):
        """:class:`_Heartbeats`, or None (with a warning) when a rank has no name service."""
        try:
            beats = _Heartbeats(self.MPI, self.rank, self.size, '{1}-{0}'.format(*self.peers[0]))
        except self.MPI.Exception as err:
            beats, reason = None, err
        everywhere = np.zeros(1, np.int32)
        self.world.Allreduce(np.array([int(beats is not None)], np.int32), everywhere, op=self.MPI.MIN)
        if everywhere[0]:
            return beats
        if beats is not None:
            beats.stop()
        logger.warn("MPI rank {}: no heartbeats ({}): a rank lost on another machine is not named; "
                    "the launcher ends the job or it waits.".format(
                        self.rank, 'another rank has no MPI name service' if beats is not None else reason))
        return None

    # ----- waiting ------------------------------------------------------------------------------

    def run(self, what, start, counted=None):
        """Call ``start()`` (which starts nonblocking collectives and returns their requests)
        under the lock and wait for them, or fail when another rank shut down before its part
        of this call. ``counted``: ``(kind, bytes)`` to add to :attr:`traffic` once started."""
        with self.lock:
            self._calls += 1
            self._check_open(what)
            requests = start()
            if counted is not None:
                kind, nbytes = counted
                self.traffic[kind] += (1, int(nbytes))
            self._waiting = (what, time.monotonic())
            try:
                for request in requests:
                    self._wait_for(request, what)
            finally:
                self._waiting = None

    def _wait_for(self, request, what):
        """Wait until ``request`` completes. A rank that shut down says how many collectives
        it completed: when it took part in this one (a collective may complete on one rank
        before the others), the wait goes on, else it fails at once. Between polls the thread
        yields its CPU (``sched_yield``): MPI's own wait spins, which starves the other ranks
        (and TensorFlow's threads) when processes outnumber the cores."""
        while not self._poll([request]):
            self._check_open(what)
            os.sched_yield()

    def _poll(self, requests):
        """Test ``requests`` and the ends of the other ranks once; True when all of
        ``requests`` completed. Ends that arrived are recorded in :attr:`ended`."""
        complete = self.MPI.Request.Testall(requests) if requests else True
        if self._done:      # one MPI call for all of them, not one per rank
            arrived = set(self.MPI.Request.Testsome([request for _, _, request in self._done]) or ())
            for index, (peer, buffer, _) in enumerate(self._done):
                if index in arrived:
                    self.ended[peer] = int(buffer[0])
                    if self.ended_by is None:
                        self.ended_by = peer
            self._done = [entry for index, entry in enumerate(self._done) if index not in arrived]
        return complete

    def _check_open(self, what):
        """Fail when this rank shut down, or another did before completing the current call."""
        if self._closed:
            raise PeerShutdownError("{}: {} on rank {}".format(what, SHUT_DOWN_MESSAGE, self.rank))
        if not self.ended:
            return
        early = sorted(peer for peer, completed in self.ended.items() if completed < self._calls)
        if early:
            raise PeerShutdownError("{}: {} by rank {}, which ended its training; rank {} stops "
                                    "waiting for it".format(what, SHUT_DOWN_MESSAGE, early[0], self.rank))

    def _beat(self):
        while not self._finished.wait(_WATCH_SECONDS):
            self.beats.beat()

    def _watch_peers(self):
        """While this rank waits for a collective or for the others' ends in :meth:`shutdown`,
        abort the job when a rank that did not shut down is lost: a rank on this machine whose
        process is gone (e.g. ``mpiexec -disable-auto-cleanup`` with
        :mod:`tensorpack_lite.cluster.mpi_rank`), the previous rank, whose heartbeat stopped for
        :data:`PEER_TIMEOUT` seconds, or this one, whose heartbeat cannot reach the launcher."""
        seen = None
        while not self._finished.wait(_WATCH_SECONDS):
            waiting = self._waiting
            if waiting is None:
                seen = None
                continue
            dead = [peer for peer in dead_local_peers(self.peers, self.rank) if peer not in self.ended]
            if dead and seen == (waiting, dead[0]) and self._waiting is waiting:
                logger.error("{} died while rank {} waited for it in {}; aborting the job.".format(
                    self._describe(dead[0]), self.rank, waiting[0]))
                self._abort()
            seen = (waiting, dead[0]) if dead else None
            if self.beats is not None and self._waiting is waiting:
                self._check_heartbeats(waiting[0])

    def _check_heartbeats(self, what):
        now, previous = time.monotonic(), self.beats.previous
        if now - self.beats.published > PEER_TIMEOUT:
            logger.error("{} has not reached the launcher for {:.1f} s (its link is cut?) while it waited "
                         "in {}; aborting the job.".format(
                             self._describe(self.rank), now - self.beats.published, what))
            self._abort()
        elif now - self.beats.heard > PEER_TIMEOUT and previous not in self.ended:
            logger.error("{} has not been heard from for {:.1f} s (it died, hangs or its link is cut) while "
                         "rank {} waited for it in {}; aborting the job.".format(
                             self._describe(previous), now - self.beats.heard, self.rank, what))
            self._abort()

    def _describe(self, rank):
        """``MPI rank r (pid p on host)``: a rank named for messages."""
        return "MPI rank {} (pid {} on {})".format(rank, *self.peers[rank])

    def _abort(self):
        """MPI_Abort on COMM_WORLD, which the launcher turns into the end of every rank (on
        another communicator, MPICH first messages each member itself, and waits forever for
        one behind a cut link). It returns when the launcher is out of reach (this rank's link
        is cut): the process exits then. It can deadlock in this process's exit while its other
        threads run (seen under load: every thread waiting on a lock, none able to run Python):
        an alarm, delivered by the kernel, ends the process after ``_ABORT_SECONDS`` (SIGALRM's
        default action) if it is still there."""
        _tell_the_launcher_wrapper()
        signal.alarm(_ABORT_SECONDS)
        self.MPI.COMM_WORLD.Abort(1)
        os._exit(1)

    def abort_on_uncaught_exceptions(self):
        """Make an exception that ends this rank's program before :meth:`shutdown` abort the
        job (as ``python -m mpi4py`` does): the other ranks may be waiting in a collective this
        rank will never join, and MPI_Finalize would wait for them."""
        previous = sys.excepthook

        def abort_after(kind, value, traceback):
            previous(kind, value, traceback)
            if not self._closed:
                logger.error("{} ended with an uncaught {} ({}) before shutting MPI down: aborting the job "
                             "(every rank ends).".format(self._describe(self.rank), kind.__name__, value))
                self._abort()

        sys.excepthook = abort_after

    # ----- end ----------------------------------------------------------------------------------

    def shutdown(self):
        """Tell the other ranks this one ended, then wait until each of them ended too (or
        was lost: the watchdog aborts the job then), as MPI_Finalize would."""
        if self._closed:
            return
        with self.lock:
            self._closed = True
            completed = np.array([self._calls], np.int64)
            sends = [self.control.Isend(completed, dest=peer, tag=_DONE_TAG)
                     for peer in range(self.size) if peer != self.rank]
            self._waiting = ('shutdown', time.monotonic())
            try:
                while not (self._poll(sends) and not self._done):
                    os.sched_yield()
            finally:
                self._waiting = None
                self._stop_threads()

    def _stop_threads(self):
        """End the watchdog and the heartbeats (MPI must not be called once finalized)."""
        self._finished.set()
        for thread in self._threads:
            thread.join(PEER_TIMEOUT)
        if self.beats is not None and not any(thread.is_alive() for thread in self._threads):
            self.beats.stop()
            self.beats = None


def _tell_the_launcher_wrapper():
    """Tell ``tensorpack_lite.cluster.mpi_rank`` (when it started this rank) that this rank is
    aborting the job, so that it ends at once if MPI_Abort crashes this process."""
    fd = os.environ.get(ABORT_FD_VARIABLE)
    if fd:
        try:
            os.write(int(fd), b'aborting\n')
        except (OSError, ValueError):
            pass    # best effort: the abort below must happen even when the wrapper is gone


_HOST_NAME_BYTES = 256


def _gather_peers(comm, size):
    """``[(pid, hostname)]`` of every rank. Only numbers and bytes cross the wire (mpi4py's
    lower-case methods would unpickle what a peer sends, code included: this engine never
    uses them; docs/security.md)."""
    pids = np.zeros(size, np.int64)
    comm.Allgather(np.array([os.getpid()], np.int64), pids)
    name = socket.gethostname().encode('utf-8')[:_HOST_NAME_BYTES].ljust(_HOST_NAME_BYTES, b'\0')
    names = np.zeros((size, _HOST_NAME_BYTES), np.uint8)
    comm.Allgather(np.frombuffer(name, np.uint8), names)
    return [(int(pid), bytes(row).rstrip(b'\0').decode('utf-8', 'replace')) for pid, row in zip(pids, names)]


def dead_local_peers(peers, rank):
    """The ranks in ``peers`` (``(pid, hostname)`` by rank) on this machine, other than ``rank``,
    whose process has ended."""
    import psutil
    host = socket.gethostname()
    dead = []
    for peer, (pid, peer_host) in enumerate(peers):
        if peer_host != host or peer == rank:
            continue
        try:
            alive = psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            alive = False
        if not alive:
            dead.append(peer)
    return dead


_engine = None


def _get():
    if _engine is None:
        raise ValueError("mpi_ops has not been initialized; call init() first.")
    return _engine


def init():
    """Start MPI (through mpi4py) and this module; returns nothing, as ``hvd.init()``."""
    global _engine
    if _engine is not None:
        return
    try:
        from mpi4py import MPI
    except ImportError as err:
        raise ImportError("tensorpack_lite's MPI engine needs mpi4py and an MPI: "
                          "pip install \"tensorpack_lite[mpi]\" ({})".format(err)) from err
    check_launched_size(MPI.COMM_WORLD.Get_size())
    _engine = _Engine(MPI)
    if _engine.size > 1:
        _engine.abort_on_uncaught_exceptions()
        logger.info("MPI rank {} of {} (local rank {} of {}) is pid {} on {}.".format(
            _engine.rank, _engine.size, _engine.local_rank, _engine.local_size, *_engine.peers[_engine.rank]))


_OTHER_MPI = "this mpi4py is built against another MPI; use that MPI's mpiexec"
LAUNCHER_SIZES = (
    ('SLURM_STEP_NUM_TASKS', "Slurm started {n} tasks in this step, but its MPI support is off "
                             "(MpiDefault=none, the default): start it with 'srun --mpi=pmi2' (or "
                             "--mpi=pmix), or set MpiDefault=pmi2 in slurm.conf"),
) + tuple((size, launcher + " started {n} processes: " + _OTHER_MPI) for _, size, launcher in MPI_LAUNCHERS)
"""(environment variable, what it means) of the launchers that tell their task count: Slurm's and
those of :data:`~tensorpack_lite.utils.mpi_launcher.MPI_LAUNCHERS`."""


def check_launched_size(size, environ=None):
    """Refuse an MPI world of ``size`` 1 when a launcher says it started more tasks: each
    would be a singleton and train alone on its shard, a silent wrong result."""
    environ = os.environ if environ is None else environ
    if size != 1:
        return
    for variable, meaning in LAUNCHER_SIZES:
        value = environ.get(variable, '')
        if value.isdigit() and int(value) > 1:
            raise RuntimeError("MPI sees 1 rank, but {}={}: {}. Each task would train alone.".format(
                variable, value, meaning.format(n=value)))


def shutdown():
    """End this rank's part: collectives that other ranks wait in fail with
    ``SHUT_DOWN_MESSAGE`` instead of hanging; returns when every rank has shut down.
    :func:`rank` etc. fail afterwards."""
    global _engine
    if _engine is not None:
        _engine.shutdown()
        _engine = None


def is_initialized():
    """Whether :func:`init` ran and :func:`shutdown` did not yet."""
    return _engine is not None


def rank():
    """This process's rank in the MPI world (0 .. :func:`size` - 1)."""
    return _get().rank


def size():
    """The number of ranks of the MPI world."""
    return _get().size


def local_rank():
    """This process's rank among the ranks on its machine."""
    return _get().local_rank


def local_size():
    """The number of ranks on this machine."""
    return _get().local_size


def traffic():
    """What this rank's collectives moved since :func:`init`: ``{'allreduce': Traffic(calls,
    bytes), 'allgather': ..., 'broadcast': ...}`` (see :class:`Traffic`; the engine's own
    exchanges, such as the ranks' pids at :func:`init`, are not counted)."""
    return dict(_get().traffic)    # (no lock: it is held while a collective waits)


def engine_name():
    """E.g. ``'mpi4py 4.1.2, MPICH 5.0.2'``."""
    import mpi4py
    from mpi4py import MPI
    vendor, version = MPI.get_vendor()
    return 'mpi4py {}, {} {}'.format(mpi4py.__version__, vendor, '.'.join(map(str, version)))


# ----- ordering -----------------------------------------------------------------------------------

_order = threading.local()


@contextlib.contextmanager
def ordered_collectives():
    """Inside, every collective op created runs after the one created before it (control
    dependencies), so that all ranks call MPI in the same order within a ``session.run``. Use
    it around graph pieces that always run together (a training tower and its gradients)."""
    previous = getattr(_order, 'chain', None)
    _order.chain = [None]
    try:
        yield
    finally:
        _order.chain = previous


def _numpy_collective(fn, inputs, dtypes, name):
    chain = getattr(_order, 'chain', None)
    after = [chain[0]] if chain is not None and chain[0] is not None else []
    with tf.control_dependencies(after):
        outputs = tf.numpy_function(fn, inputs, dtypes, name=name)
    if chain is not None:
        chain[0] = outputs[0].op
    return outputs


# ----- numpy side ---------------------------------------------------------------------------------

def _reduce(engine, arrays, op, wire_dtype):
    """The sums (averages) of ``arrays`` over the ranks, in one collective per dtype."""
    results = [None] * len(arrays)
    groups = {}
    for index, array in enumerate(arrays):
        groups.setdefault(array.dtype, []).append(index)
    for dtype, indices in groups.items():
        if op == Average and not np.issubdtype(dtype, np.floating):
            raise TypeError("mpi_ops.allreduce: op=Average needs floating-point tensors, got {}; "
                            "use op=Sum".format(dtype))
        flat = np.concatenate([np.ravel(arrays[i]) for i in indices]) if len(indices) > 1 \
            else np.ravel(arrays[indices[0]])
        if wire_dtype is not None and np.issubdtype(dtype, np.floating):
            total = _sum_compressed(engine, flat, wire_dtype).astype(dtype)
        else:
            total = np.empty_like(flat)
            engine.run('allreduce', lambda: [engine.world.Iallreduce(flat, total, op=engine.MPI.SUM)],
                       counted=('allreduce', flat.nbytes))
        if op == Average:
            total = (total / dtype.type(engine.size)).astype(dtype)
        offset = 0
        for i in indices:
            results[i] = total[offset:offset + arrays[i].size].reshape(arrays[i].shape)
            offset += arrays[i].size
    return results


def _sum_compressed(engine, flat, wire_dtype):
    """Send ``flat`` as ``wire_dtype``: each rank adds one slice of every rank's values in
    float32 in rank order, rounds it once, and all ranks gather the slices (bit-identical)."""
    n = engine.size
    chunk = -(-flat.size // n)
    wire = np.zeros(chunk * n, wire_dtype)
    wire[:flat.size] = flat
    received = np.empty((n, chunk), wire_dtype)
    engine.run('allreduce(fp16)', lambda: [engine.world.Ialltoall(wire, received)],
               counted=('allreduce', flat.size * wire.itemsize))
    mine = np.zeros(chunk, np.float32)
    for row in received:
        mine += row.astype(np.float32)
    mine = mine.astype(wire_dtype)
    gathered = np.empty(chunk * n, wire_dtype)
    engine.run('allreduce(fp16)', lambda: [engine.world.Iallgather(mine, gathered)])
    return gathered[:flat.size]


def _gather(engine, array):
    counts = np.zeros(engine.size, np.int64)
    engine.world.Allgather(np.array([array.shape[0] if array.ndim else 1], np.int64), counts)
    row = int(np.prod(array.shape[1:])) if array.ndim else 1
    out = np.empty((int(counts.sum()),) + array.shape[1:], array.dtype)
    send = np.ascontiguousarray(array)
    engine.run('allgather', lambda: [engine.world.Iallgatherv(send, [out, counts * row])],
               counted=('allgather', send.nbytes))
    return out


def _broadcast_bytes(engine, arrays, root_rank):
    payload = np.concatenate([np.ascontiguousarray(a).view(np.uint8).ravel() for a in arrays]) \
        if arrays else np.zeros(0, np.uint8)
    engine.run('broadcast', lambda: [engine.world.Ibcast(payload, root=root_rank)],
               counted=('broadcast', payload.nbytes))
    results, offset = [], 0
    for a in arrays:
        results.append(payload[offset:offset + a.nbytes].view(a.dtype).reshape(a.shape))
        offset += a.nbytes
    return results


# ----- TensorFlow side ----------------------------------------------------------------------------

def _check_op(op, compression):
    if op not in (Sum, Average):
        raise ValueError("mpi_ops.allreduce: op must be mpi_ops.Average or mpi_ops.Sum, got {!r}".format(op))
    if not (isinstance(compression, type) and issubclass(compression, Compressor)):
        raise TypeError("mpi_ops.allreduce: compression must be mpi_ops.Compression.none or .fp16, "
                        "got {!r}".format(compression))


def grouped_allreduce(tensors, op=Average, compression=Compression.none, name=None):
    """The sums (``op=Sum``) or means (``op=Average``) over the ranks of ``tensors``, packed
    into one buffer per dtype (one MPI call each). Differentiable: the gradient is the same
    reduction of the upstream gradients."""
    _check_op(op, compression)
    engine = _get()
    tensors = [tf.convert_to_tensor(t) for t in tensors]
    if not tensors:
        return []

    def reduce_numpy(*arrays):
        return _reduce(engine, list(arrays), op, compression.wire_dtype)

    @tf.custom_gradient
    def reduce(*xs):
        outputs = _numpy_collective(reduce_numpy, list(xs), [x.dtype for x in xs], name or 'MPIAllreduce')
        for out, x in zip(outputs, xs):
            out.set_shape(x.shape)

        def grad(*upstream):
            upstream = [tf.zeros_like(x) if g is None else tf.convert_to_tensor(g)
                        for g, x in zip(upstream, xs)]
            return grouped_allreduce(upstream, op=op, compression=compression)
        return list(outputs), grad

    return list(reduce(*tensors))


def allreduce(tensor, op=Average, compression=Compression.none, name=None):
    """The sum or mean of ``tensor`` over the ranks (an IndexedSlices is made dense first)."""
    return grouped_allreduce([tensor], op=op, compression=compression, name=name)[0]


def allgather(tensor, name=None):
    """The ``tensor`` of every rank concatenated along the first dimension, in rank order (the
    first dimension may differ between ranks)."""
    engine = _get()
    tensor = tf.convert_to_tensor(tensor)
    out, = _numpy_collective(lambda a: _gather(engine, a), [tensor], [tensor.dtype], name or 'MPIAllgather')
    out.set_shape(tf.TensorShape([None]).concatenate(tensor.shape[1:]) if tensor.shape.rank else [None])
    return out


def _check_root(root_rank):
    if not 0 <= root_rank < _get().size:
        raise ValueError("mpi_ops.broadcast: root_rank must be in [0, {}), got {}".format(
            _get().size, root_rank))


def broadcast(tensor, root_rank, name=None):
    """The ``tensor`` of rank ``root_rank``, on every rank."""
    _check_root(root_rank)
    engine = _get()
    tensor = tf.convert_to_tensor(tensor)
    out, = _numpy_collective(lambda a: _broadcast_bytes(engine, [a], root_rank), [tensor], [tensor.dtype],
                             name or 'MPIBroadcast')
    out.set_shape(tensor.shape)
    return out


def broadcast_variables(variables, root_rank):
    """An op that assigns the values of rank ``root_rank`` to ``variables`` on every rank (one
    broadcast for all of them)."""
    _check_root(root_rank)
    engine = _get()
    variables = list(variables)
    if not variables:
        return tf.no_op(name='MPIBroadcastVariables')
    values = [v.read_value() if hasattr(v, 'read_value') else tf.convert_to_tensor(v) for v in variables]
    outputs = _numpy_collective(lambda *a: _broadcast_bytes(engine, list(a), root_rank), values,
                                [v.dtype for v in values], 'MPIBroadcastVariables')
    for out, v in zip(outputs, values):
        out.set_shape(v.shape)
    return tf.group(*[tfv1.assign(v, out) for v, out in zip(variables, outputs)],
                    name='MPIBroadcastVariables')
