"""Sources that fill a TF queue from a background thread: :class:`QueueInput` (a DataFlow),
:class:`BatchQueueInput` (a DataFlow, batched by the queue) and :class:`ZMQInput` (messages
received over ZeroMQ)."""

import threading

from ..compat import tf, tfv1
from ..dataflow.base import DataFlow, DataFlowTerminated
from ..loop.callback import Callback, CallbackFactory
from ..tfutils.summary import add_moving_summary
from ..utils import logger
from ..utils.concurrency import ShareSessionThread, StoppableThread
from ..utils.zmq_security import CurveReceiver, DroppedMessages
from .data_position import DataPosition
from .datapoints import DatapointChecker, close_iterator, input_name
from .input_source_base import FeedfreeInput, build_or_reuse_placeholder

__all__ = ['QueueInput', 'BatchQueueInput', 'ZMQInput']


class _RunWithEveryStep(Callback):
    """Runs an op along with every hooked run (e.g. the update of a moving average)."""

    def __init__(self, op):
        self._fetches = tfv1.train.SessionRunArgs(op)

    def _before_run(self, _):
        return self._fetches


def _queue_attr(queue, name, default):
    """An attribute of the op that made ``queue`` (e.g. its ``capacity``), or ``default``."""
    try:
        return queue.queue_ref.op.get_attr(name)
    except (AttributeError, ValueError):
        return default


class _EnqueueThread(ShareSessionThread, StoppableThread):
    """Puts datapoints into a TF queue, in the background, until stopped.

    ``make_iterator()`` gives the datapoints; each is fed to ``placeholders`` and enqueued.
    One that does not fit them goes to ``on_misfit(error)``, which raises (the thread ends)
    or returns (the datapoint is skipped). The thread ends when stopped, when the
    queue is closed, or when the datapoints run out or fail (the error is logged with its
    traceback). It closes the queue when it ends, so that a consumer gets ``OutOfRangeError``
    rather than waiting forever.

    The end of a run is quiet: :meth:`stop` never makes a TF step fail (TensorFlow's runtime
    prints ``Local rendezvous is aborting with status: CANCELLED ...`` to stderr for every
    failed step, e.g. an enqueue cancelled by closing the queue). An enqueue blocked on a full
    queue is let through by taking one datapoint out, after which the thread sees that it was
    stopped and closes the queue itself, when nothing is pending.
    """

    def __init__(self, owner, queue, placeholders, make_iterator, on_misfit, strict_dtype=False,
                 names=None):
        super(_EnqueueThread, self).__init__(name="EnqueueThread: {} to queue '{}'".format(
            owner, queue.name), daemon=True)
        self._owner = owner
        self._checker = DatapointChecker(owner, placeholders, strict_dtype, names)
        self._on_misfit = on_misfit
        self._make_iterator = make_iterator
        self._itr = None
        self.enqueue_op = queue.enqueue(placeholders)
        self.close_op = queue.close(cancel_pending_enqueues=True)
        self._size_op = queue.size()
        self._take_one_op = queue.dequeue(name='dequeue_to_make_room')
        self._capacity = _queue_attr(queue, 'capacity', None)  # -1: unbounded; None: unknown
        self._floor = _queue_attr(queue, 'min_after_dequeue', 0)  # a dequeue below it blocks
        self._running = threading.Event()
        self._running.set()
        self._paused = threading.Event()
        self.error = None
        """The exception that ended the thread, if one did (re-raised after training)."""

    def run(self):
        with self.default_sess():
            try:
                self.reinitialize_dataflow()
                while not self.stopped():
                    if not self._running.is_set():
                        self._paused.set()
                        while not self._running.wait(self.poll_interval):
                            if self.stopped():
                                return
                        continue
                    try:
                        dp = next(self._itr)
                    except StopIteration:
                        if not self.stopped():
                            logger.info("[{}] The datapoints ran out.".format(self._owner))
                        return
                    try:
                        feeds = self._checker.feeds(dp)
                    except (TypeError, ValueError) as err:
                        self._on_misfit(err)
                        continue
                    self.enqueue_op.run(feed_dict=feeds)
            except (tf.errors.CancelledError, tf.errors.OutOfRangeError):
                pass  # the queue was closed: training is over
            except DataFlowTerminated:
                logger.info("[{}] The DataFlow has terminated.".format(self._owner))
            except Exception as err:
                if not (self.stopped() or self._session_closed()):
                    self.error = err
                    logger.exception("[{}] Exception in {}; closing the queue, which ends "
                                     "training:".format(self._owner, self.name))
            finally:
                self._close_queue()
                try:
                    close_iterator(self._itr)
                except Exception:
                    logger.exception("[{}] Error while closing the datapoint iterator:".format(
                        self._owner))
                logger.info("[{}] {} exited.".format(self._owner, self.name))

    def _session_closed(self):
        return self._sess is None or getattr(self._sess, '_closed', False)

    def _close_queue(self):
        if self._session_closed():
            return
        try:
            self._sess.run(self.close_op)
        except Exception:  # already closed, or the session is going away
            pass

    def reinitialize_dataflow(self):
        """Start a new iteration of the datapoints (the old one is closed)."""
        if self._itr is not None:
            close_iterator(self._itr)
        self._itr = iter(self._make_iterator())

    def make_room(self, sess, timeout_in_ms=50):
        """If an enqueue may be blocked on a full queue, take one datapoint out so that it
        finishes. Without a known capacity, dequeue one if any comes within ``timeout_in_ms``."""
        if self._capacity is None:
            try:
                sess.run(self._take_one_op, options=tfv1.RunOptions(timeout_in_ms=timeout_in_ms))
            except tf.errors.DeadlineExceededError:
                pass
        elif self._capacity >= 0 and sess.run(self._size_op) >= self._capacity:
            sess.run(self._take_one_op)

    def drain(self, sess):
        """Dequeue what the queue holds (down to its ``min_after_dequeue``), while paused."""
        for _ in range(sess.run(self._size_op) - self._floor):
            sess.run(self._take_one_op)

    def stop(self):
        """Stop the thread, quietly (see the class docstring). Call it once nothing else
        dequeues: then at most one more enqueue happens, and it finds room."""
        super(_EnqueueThread, self).stop()
        self._running.set()
        if self._session_closed():
            return
        if self._capacity is None:  # a blocked enqueue cannot be told apart: cancel it
            self._close_queue()
        else:
            self.make_room(self._sess)

    def pause(self):
        """Stop enqueueing after the current datapoint; :meth:`wait_paused` tells when."""
        self._paused.clear()
        self._running.clear()

    def wait_paused(self, timeout):
        """Whether the thread has paused (or is gone), waiting up to ``timeout`` seconds."""
        return self._paused.wait(timeout) or not self.is_alive()

    def resume(self):
        self._paused.clear()
        self._running.set()


def _check_graph_queue(queue, owner):
    """Raise if ``queue`` was made eagerly (TensorFlow 2's default before graph mode is on):
    such a queue has no op, and cannot be part of the training graph."""
    ref = getattr(queue, 'queue_ref', None)
    if tf.is_tensor(ref) and not tf.is_symbolic_tensor(ref):
        raise ValueError(
            "{}: the queue was made in eager mode (TensorFlow 2's default), outside any graph, so the "
            "training graph cannot use it. Call tf.compat.v1.disable_eager_execution() (or "
            "tf.compat.v1.disable_v2_behavior()) at the top of the program, before making the queue; "
            "or make the queue in a function called while the graph is built; or pass no queue and "
            "let {} make its own.".format(owner, owner))


class _EnqueueingInput(FeedfreeInput):
    """What :class:`QueueInput` and :class:`ZMQInput` share: a FIFO queue of datapoints filled
    by an :class:`_EnqueueThread` (started before training, stopped after it), dequeued on the
    CPU, and a moving average of its size as a summary.

    Subclasses give ``_datapoints()`` (an iterable, called in the thread).
    """

    queue_capacity = 50
    _strict_dtype = False

    thread_join_timeout = 5.0
    """Seconds to wait for the thread to end after training."""

    def __init__(self, queue=None):
        if queue is not None:
            _check_graph_queue(queue, type(self).__name__)
        self.queue = queue
        self.thread = None
        self._last_dequeue = []

    def _datapoints(self):
        raise NotImplementedError("{} must implement _datapoints()".format(type(self).__name__))

    def _misfit(self, error):
        """Called in the thread with the error of a datapoint that does not fit the inputs:
        raise it to end training (the default), or return to skip the datapoint."""
        raise error

    def _setup(self, input_signature):
        owner = type(self).__name__
        if not input_signature:
            raise ValueError("{} needs at least one input".format(owner))
        self._input_placehdrs = [build_or_reuse_placeholder(spec) for spec in input_signature]
        with self.cached_name_scope():
            enqueue_placehdrs = self._enqueue_placeholders()
            if self.queue is None:
                self.queue = self._create_queue(enqueue_placehdrs)
            if list(self.queue.dtypes) != [p.dtype for p in enqueue_placehdrs]:
                raise ValueError("{}: the queue's dtypes {} do not match the inputs' {}".format(
                    owner, [d.name for d in self.queue.dtypes],
                    [p.dtype.name for p in enqueue_placehdrs]))
            logger.info("Setting up the queue '{}' for CPU prefetching ...".format(self.queue.name))
            self.thread = _EnqueueThread(owner, self.queue, enqueue_placehdrs, self._datapoints,
                                         self._misfit, self._strict_dtype,
                                         names=[input_name(p) for p in self._input_placehdrs])

    def _enqueue_placeholders(self):
        return self._input_placehdrs

    def _create_queue(self, placehdrs):
        return tfv1.FIFOQueue(self.queue_capacity, [p.dtype for p in placehdrs], name='input_queue')

    def _dequeue(self):
        return self.queue.dequeue(name='input_deque')

    def _static_shape(self, placeholder):
        return placeholder.shape

    def _get_input_tensors(self):
        # Several towers dequeue in one step: each dequeue waits for the previous one, so
        # tower i always gets the i-th datapoint of the step.
        with tf.device('/cpu:0'), self.cached_name_scope(), \
                tf.control_dependencies(self._last_dequeue):
            ret = self._dequeue()
            if isinstance(ret, tf.Tensor):  # a queue of one component gives a bare tensor
                ret = [ret]
            if len(ret) != len(self._input_placehdrs):
                raise ValueError("{}: the queue gives {} tensors for {} inputs".format(
                    type(self).__name__, len(ret), len(self._input_placehdrs)))
            for tensor, placeholder in zip(ret, self._input_placehdrs):
                tensor.set_shape(self._static_shape(placeholder))
            self._last_dequeue = [ret[0].op]
            return self._after_dequeue(ret)

    def _after_dequeue(self, tensors):
        """The dequeued ``tensors`` as the towers get them (template: QueueInput counts them)."""
        return tensors

    def _create_ema_callbacks(self):
        """A callback keeping, with every step, a moving average of the queue's size, which
        is summarized as ``<scope>/queue_size`` (none where summaries are not allowed, e.g.
        inside a tower that is not the main training tower)."""
        with self.cached_name_scope():
            size = tf.cast(self.queue.size(), tf.float32, name='queue_size')
        updates = add_moving_summary(size, collection=None, decay=0.5)
        if not updates:
            return []
        return [_RunWithEveryStep(updates[0].op)]

    def _get_callbacks(self):
        return ([CallbackFactory(before_train=self._start_thread, after_train=self._stop_thread)]
                + self._create_ema_callbacks())

    def _start_thread(self, _):
        logger.info("Starting {} ...".format(self.thread.name))
        self.thread.start()

    def _stop_thread(self, cb):
        """Stop the thread after training; its error (if one ended it) fails the run. Not when
        the session is in an unknown state: stopping it runs ops in the session, and the thread
        (a daemon) cannot hold up the process's exit."""
        if not cb.session_usable("stopping {} (of {}) through its queue".format(
                self.thread.name, type(self).__name__)):
            return
        if self.thread.is_alive():
            logger.info("Stopping {} ...".format(self.thread.name))
            self.thread.stop()
            self.thread.join(self.thread_join_timeout)
            if self.thread.is_alive():
                logger.error("{}: {} is still alive {} sec after being stopped.".format(
                    type(self).__name__, self.thread.name, self.thread_join_timeout))
        if self.thread.error is not None:
            raise self.thread.error

    def refill_queue(self):
        """Empty the queue and restart the datapoints from a new iteration: the thread pauses,
        the queue is drained (in the default session), then the thread resumes.

        Call it between steps (e.g. from a callback), not while a step runs.
        """
        sess = tfv1.get_default_session()
        if sess is None:
            raise RuntimeError("{}.refill_queue() needs a default session".format(
                type(self).__name__))
        self.thread.pause()
        while not self.thread.wait_paused(0.01):
            self.thread.make_room(sess)  # the thread may be blocked on a full queue
        self.thread.drain(sess)
        self._discard_ahead(sess)
        self.thread.reinitialize_dataflow()
        self.thread.resume()

    def _discard_ahead(self, sess):
        """The datapoints produced but not dequeued were thrown away (template: QueueInput's
        data position forgets them)."""


class _DequeueCounter:
    """A local variable counting the datapoints the graph dequeued: what training consumed of
    a queue, exactly (the queue's size cannot tell it while the thread enqueues)."""

    def __init__(self):
        self.variable = tfv1.Variable(0, dtype=tf.int64, trainable=False, name='dequeued',
                                      collections=[tfv1.GraphKeys.LOCAL_VARIABLES])

    def start(self, sess):
        """Set the count to 0 (in ``sess``, when there is one): a session made without the
        local variables' initializer still counts."""
        if sess is not None:
            sess.run(self.variable.initializer)

    def counted(self, tensors, count):
        """``tensors`` (the outputs of one dequeue of ``count`` datapoints), counted when they
        are dequeued."""
        with tf.control_dependencies([tensors[0].op]):
            update = tfv1.assign_add(self.variable, count)
        with tf.control_dependencies([update]):
            return [tf.identity(t) for t in tensors]


class QueueInput(_EnqueueingInput):
    """Datapoints of a DataFlow, put into a TF queue by a background thread; each
    ``get_input_tensors()`` dequeues one datapoint per step.

    The thread starts before training and is stopped after it, closing the queue. An error in
    the DataFlow is logged and closes the queue, which ends training (``OutOfRangeError``)
    once the datapoints already queued are consumed.

    Args:
        ds (DataFlow): produces datapoints as lists, one component per input.
        queue (tf.compat.v1.QueueBase): the queue to use, made in graph mode (a queue made
            eagerly is a ValueError); by default a ``FIFOQueue`` of capacity 50 named
            ``input_queue``.

    Example::

        source = QueueInput(BatchData(df, 64))
    """

    def __init__(self, ds, queue=None):
        if not isinstance(ds, DataFlow):
            raise TypeError("{} takes a DataFlow, got {!r}".format(type(self).__name__, ds))
        super(QueueInput, self).__init__(queue)
        self.ds = ds
        self._ds_was_reset = False
        self._position = None
        self._dequeued = None

    datapoints_per_dequeue = 1
    """Datapoints one dequeue takes (what one tower consumes in a step)."""

    def _size(self):
        return len(self.ds)

    def _setup(self, input_signature):
        super()._setup(input_signature)
        capacity = _queue_attr(self.queue, 'capacity', None)
        # Produced ahead of training: the queue, one datapoint blocked on it, one being checked,
        # plus what a wrapper stages (StagingInput: a few per tower).
        ahead = (capacity if capacity is not None and capacity >= 0 else self.queue_capacity) + 64
        self._position = DataPosition(self.ds, type(self).__name__, history=ahead)
        with self.cached_name_scope():
            self._dequeued = _DequeueCounter()

    def _after_dequeue(self, tensors):
        return self._dequeued.counted(tensors, self.datapoints_per_dequeue)

    def _reset_state(self):
        if not self._ds_was_reset:
            self.ds.reset_state()
            self._ds_was_reset = True
            self._dequeued.start(tfv1.get_default_session())

    def _datapoints(self):
        return self._position.datapoints()

    def _get_state(self, held_back):
        dequeued = int(tfv1.get_default_session().run(self._dequeued.variable))
        return self._position.state_after(dequeued - held_back * self.datapoints_per_dequeue)

    def _set_state(self, state):
        self._position.restore(state)

    def _discard_ahead(self, sess):
        self._position.discard_after(int(sess.run(self._dequeued.variable)))


class BatchQueueInput(QueueInput):
    """Like :class:`QueueInput`, but the queue holds single datapoints and each step
    dequeues ``batch_size`` of them at once, stacked.

    Every input's shape must be fully defined except its first (batch) dimension.

    Args:
        ds (DataFlow): produces single (unbatched) datapoints.
        batch_size (int): datapoints per batch.
        queue: a queue of unbatched datapoints with fully defined shapes; by default a
            ``FIFOQueue`` of capacity 3000.
    """

    queue_capacity = 3000

    def __init__(self, ds, batch_size, queue=None):
        super(BatchQueueInput, self).__init__(ds, queue)
        self.batch_size = int(batch_size)
        if self.batch_size <= 0:
            raise ValueError("BatchQueueInput: batch_size must be positive, got {}".format(batch_size))
        self.datapoints_per_dequeue = self.batch_size

    def _size(self):
        return len(self.ds) // self.batch_size

    def _enqueue_placeholders(self):
        placehdrs = []
        for ph in self._input_placehdrs:
            shape = ph.shape
            if shape.rank is None or shape.rank == 0 or not shape[1:].is_fully_defined():
                raise ValueError("BatchQueueInput needs inputs whose shape is fully defined except "
                                 "for the batch dimension; input '{}' has shape {}".format(
                                     input_name(ph), shape))
            placehdrs.append(tfv1.placeholder(ph.dtype, shape=shape[1:],
                                              name=input_name(ph) + '-nobatch'))
        return placehdrs

    def _create_queue(self, placehdrs):
        return tfv1.FIFOQueue(self.queue_capacity, [p.dtype for p in placehdrs],
                              shapes=[p.shape for p in placehdrs], name='input_queue')

    def _dequeue(self):
        for shape in self.queue.shapes:
            if not shape.is_fully_defined():
                raise ValueError("BatchQueueInput needs a queue with fully defined shapes, got {}"
                                 .format(self.queue.shapes))
        return self.queue.dequeue_many(self.batch_size, name='input_deque')

    def _static_shape(self, placeholder):
        return tf.TensorShape([self.batch_size]).concatenate(placeholder.shape[1:])


class _PutDroppedMessages(Callback):
    """Puts how many messages a :class:`ZMQInput` has dropped so far, at every trigger."""

    STAT_NAME = 'ZMQInput/dropped_messages'

    def __init__(self, zmq_input):
        self._input = zmq_input

    def _trigger(self):
        self.trainer.monitors.put_scalar(self.STAT_NAME, self._input.dropped_messages)

    def _stat_names(self):
        return [self.STAT_NAME]

    def __str__(self):
        return 'ZMQInput-dropped-messages'


class ZMQInput(_EnqueueingInput):
    """Datapoints received over ZeroMQ: a PULL socket takes messages made by
    :func:`tensorpack_lite.utils.serialize.dumps` (a list of numpy arrays, one per input, of
    the inputs' dtypes), and a background thread enqueues them into a TF queue as
    :class:`QueueInput` does.

    Unlike tensorpack's, which used a compiled TF op, this one is pure Python (pyzmq in the
    enqueue thread). A message that cannot be decoded or does not fit the inputs (number of
    components, dtype, shape) is dropped: counted in :attr:`dropped_messages` (also put as the
    scalar ``ZMQInput/dropped_messages`` at every epoch's end) and logged with the error,
    which names the input. With ``strict=True`` such a message ends training instead.
    Messages are never unpickled.

    The channel is unauthenticated and unencrypted unless CURVE is turned on: at a TCP
    endpoint anyone who reaches the port can send. Prefer ``ipc://`` (file permissions apply)
    or ``tcp://127.0.0.1`` when the sender runs on the same machine.

    Args:
        end_point (str): e.g. ``'ipc:///tmp/pipe'`` or ``'tcp://127.0.0.1:5555'``.
        hwm (int): high-water mark (messages buffered) of the socket.
        bind (bool): bind to ``end_point`` (senders connect); otherwise connect to it.
        strict (bool): end training at the first bad message (tensorpack's behaviour).
        curve_keys: with ``curve_clients``, turns CURVE on (see
            :mod:`tensorpack_lite.utils.zmq_security`): this receiver's keypair (a
            ``CurveKeypair`` or the path of its ``.key_secret`` certificate).
        curve_clients (list): the public keys of the senders allowed in (z85 bytes or
            ``.key`` certificate paths); every other peer is refused at the handshake.

    Example (the sender, in another process)::

        sock = zmq.Context().socket(zmq.PUSH); sock.connect('ipc:///tmp/pipe')
        for dp in df:
            sock.send(dumps(dp), copy=False)
    """

    _strict_dtype = True

    def __init__(self, end_point, hwm, bind=True, *, strict=False, curve_keys=None,
                 curve_clients=None):
        super(ZMQInput, self).__init__()
        self._end_point = str(end_point)
        self._hwm = int(hwm)
        self._bind = bool(bind)
        self._strict = bool(strict)
        self._curve = CurveReceiver.from_arguments(type(self).__name__, curve_keys, curve_clients)
        self._dropped = DroppedMessages(type(self).__name__)

    @property
    def dropped_messages(self):
        """Messages dropped because they could not be decoded or did not fit the inputs."""
        return self._dropped.count

    def _misfit(self, error):
        if self._strict:
            raise error
        self._dropped.drop(error)

    def _get_callbacks(self):
        return super(ZMQInput, self)._get_callbacks() + [_PutDroppedMessages(self)]

    def _datapoints(self):
        import zmq

        from ..utils.serialize import loads
        ctx = zmq.Context()
        sock = ctx.socket(zmq.PULL)
        auth = None
        try:
            sock.set_hwm(self._hwm)
            if self._curve is not None:
                auth = self._curve.start_authenticator(ctx)
                self._curve.configure(sock)
            if self._bind:
                sock.bind(self._end_point)
            else:
                sock.connect(self._end_point)
            while not self.thread.stopped():
                if not sock.poll(int(self.thread.poll_interval * 1000)):
                    continue
                try:
                    dp = loads(sock.recv(copy=False).buffer)
                except Exception as err:
                    self._misfit(ValueError("ZMQInput: a message received on {} cannot be decoded "
                                            "({}: {})".format(self._end_point, type(err).__name__, err)))
                    continue
                yield dp
        finally:
            sock.close(linger=0)
            if auth is not None:
                auth.stop()
            ctx.term()
