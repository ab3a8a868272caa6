"""The InputSource implementations: placeholders fed from Python, TF queues filled by a
thread, tensors, constants, ZMQ, ``tf.data`` and staging areas.

Every source is used the same way by a trainer::

    callbacks = source.setup(input_signature)   # list of tf.TensorSpec
    tensors = source.get_input_tensors()        # once per tower
    # ... build the model on `tensors`, then train with `callbacks` registered.
"""

import contextlib
import threading
from itertools import chain

import numpy as np

from ..callbacks.base import Callback, CallbackFactory
from ..callbacks.concurrency import StartProcOrThread
from ..callbacks.graph import RunOp
from ..compat import tf, tfv1
from ..dataflow.base import DataFlow, DataFlowTerminated
from ..dataflow.common import RepeatedData
from ..tfutils.summary import add_moving_summary
from ..utils import logger
from ..utils.concurrency import ShareSessionThread, StoppableThread
from .input_source_base import FeedfreeInput, InputSource, build_or_reuse_placeholder

__all__ = ['PlaceholderInput', 'FeedInput', 'QueueInput', 'BatchQueueInput', 'TensorInput',
           'DummyConstantInput', 'ZMQInput', 'TFDatasetInput', 'StagingInput']


def _input_name(tensor_or_spec):
    return tensor_or_spec.name.split(':')[0]


# numpy kinds a value may have for each kind of input when it is converted on feeding:
# bool, ints and floats widen losslessly in meaning; floats never go into ints or bools.
_ACCEPTED_KINDS = {'b': 'b', 'i': 'biu', 'u': 'bu', 'f': 'biuf', 'c': 'biufc'}


def _dtype_fits(dtype, expected, strict):
    """Whether values of numpy ``dtype`` may feed a TF input of dtype ``expected``: exactly
    equal when ``strict``, otherwise of a kind that converts without changing meaning."""
    if expected == tf.string:
        return dtype.kind in 'SUO'
    target = np.dtype(expected.as_numpy_dtype)
    if strict:
        return dtype == target
    accepted = _ACCEPTED_KINDS.get(target.kind)
    return accepted is None or dtype.kind in accepted  # e.g. bfloat16: left to TensorFlow


class _DatapointChecker:
    """Turns datapoints into feeds for ``placeholders``, with a clear error for one that does
    not fit: wrong number of components, a shape the placeholder does not accept, or a dtype
    that would change meaning when converted (floats into an int input; with
    ``strict_dtype`` any other dtype). Runs once per datapoint, so it is kept cheap."""

    def __init__(self, owner, placeholders, strict_dtype=False):
        self.owner = owner
        self.placeholders = list(placeholders)
        self.strict_dtype = strict_dtype
        self._dims = [None if p.shape.rank is None else tuple(p.shape.as_list()) for p in placeholders]
        self._fits = {}  # (input index, numpy dtype) -> bool

    def feeds(self, dp):
        """The feed dict of datapoint ``dp``, after checking it."""
        if not isinstance(dp, (list, tuple)):
            raise TypeError("{}: a datapoint must be a list of {} components (one per input), got "
                            "{}".format(self.owner, len(self.placeholders), type(dp).__name__))
        if len(dp) != len(self.placeholders):
            raise ValueError("{}: the datapoint has {} components but there are {} inputs ({})".format(
                self.owner, len(dp), len(self.placeholders),
                ', '.join(_input_name(p) for p in self.placeholders)))
        for index, value in enumerate(dp):
            self._check_component(index, value)
        return dict(zip(self.placeholders, dp))

    def _check_component(self, index, value):
        placeholder = self.placeholders[index]
        if not isinstance(value, np.ndarray):
            try:
                value = np.asarray(value)
            except ValueError as err:  # e.g. a ragged nested list
                raise ValueError("{}: component {} of the datapoint, for input '{}', is not an "
                                 "array: {}".format(self.owner, index, _input_name(placeholder),
                                                    err)) from None
        dims = self._dims[index]
        if dims is not None and (len(dims) != value.ndim or any(
                d is not None and d != v for d, v in zip(dims, value.shape))):
            raise ValueError("{}: component {} of the datapoint has shape {}, which does not fit "
                             "input '{}' of shape {}".format(
                                 self.owner, index, value.shape, _input_name(placeholder), placeholder.shape))
        fits = self._fits.get((index, value.dtype))
        if fits is None:
            fits = self._fits[(index, value.dtype)] = _dtype_fits(
                value.dtype, placeholder.dtype.base_dtype, self.strict_dtype)
        if not fits:
            raise TypeError("{}: component {} of the datapoint has dtype {}, but input '{}' is "
                            "{}".format(self.owner, index, value.dtype, _input_name(placeholder),
                                        placeholder.dtype.base_dtype.name))


def _close_iterator(itr):
    """Finish a generator early, so that it releases what it holds (reentrancy guards,
    sockets...)."""
    close = getattr(itr, 'close', None)
    if close is not None:
        close()


class PlaceholderInput(InputSource):
    """Plain placeholders, one per input; nothing feeds them (the caller does)."""

    def _setup(self, input_signature):
        self._placeholders = [build_or_reuse_placeholder(spec) for spec in input_signature]

    def _get_input_tensors(self):
        return self._placeholders


class FeedInput(InputSource):
    """Feed the datapoints of a DataFlow into placeholders, one datapoint per hooked step.

    Args:
        ds (DataFlow): produces datapoints as lists, one component per input.
        infinite (bool): repeat ``ds`` forever; when False, the step after the last datapoint
            raises ``StopIteration``.

    Example::

        source = FeedInput(BatchData(DataFromList(data, shuffle=True), 32))
    """

    class _FeedCallback(Callback):
        """Adds the next datapoint as the ``feed_dict`` of every hooked run."""

        def __init__(self, source):
            self._source = source

        def _before_run(self, _):
            return tfv1.train.SessionRunArgs(fetches=[], feed_dict=self._source._next_feed())

    def __init__(self, ds, infinite=True):
        if not isinstance(ds, DataFlow):
            raise TypeError("FeedInput takes a DataFlow, got {!r}".format(ds))
        self.ds = ds
        self._iter_ds = RepeatedData(ds, -1) if infinite else ds
        self._itr = None
        self._ds_was_reset = False

    def _size(self):
        return len(self.ds)

    def _setup(self, input_signature):
        self._placeholders = [build_or_reuse_placeholder(spec) for spec in input_signature]
        self._checker = _DatapointChecker('FeedInput', self._placeholders)
        self._cb = FeedInput._FeedCallback(self)

    def _get_input_tensors(self):
        return self._placeholders

    def _get_callbacks(self):
        return [self._cb]

    def _reset_state(self):
        if not self._ds_was_reset:  # a DataFlow is reset once; each reset starts a new pass
            self._iter_ds.reset_state()
            self._ds_was_reset = True
        if self._itr is not None:
            _close_iterator(self._itr)
        self._itr = iter(self._iter_ds)

    def _next_feed(self):
        if self._itr is None:
            raise RuntimeError("FeedInput was not reset before its first step: register the "
                               "callbacks returned by setup(), or call reset_state().")
        return self._checker.feeds(next(self._itr))


class _EnqueueThread(ShareSessionThread, StoppableThread):
    """Puts datapoints into a TF queue, in the background, until stopped.

    ``make_iterator()`` gives the datapoints; each is fed to ``placeholders`` and enqueued.
    The thread ends when stopped, when the queue is closed, or when the datapoints run out or
    fail (the error is logged with its traceback). It closes the queue (cancelling pending
    enqueues) when it ends, so that a consumer gets ``OutOfRangeError`` rather than waiting
    forever. :meth:`stop` also closes the queue, which unblocks a pending enqueue.
    """

    def __init__(self, owner, queue, placeholders, make_iterator, strict_dtype=False):
        super(_EnqueueThread, self).__init__(name="EnqueueThread: {} to queue '{}'".format(
            owner, queue.name), daemon=True)
        self._owner = owner
        self._checker = _DatapointChecker(owner, placeholders, strict_dtype)
        self._make_iterator = make_iterator
        self._itr = None
        self.enqueue_op = queue.enqueue(placeholders)
        self.close_op = queue.close(cancel_pending_enqueues=True)
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
                    self.enqueue_op.run(feed_dict=self._checker.feeds(dp))
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
                    _close_iterator(self._itr)
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
            _close_iterator(self._itr)
        self._itr = iter(self._make_iterator())

    def stop(self):
        """Stop the thread and close the queue (which cancels a blocked enqueue)."""
        super(_EnqueueThread, self).stop()
        self._running.set()
        self._close_queue()

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


class _EnqueueingInput(FeedfreeInput):
    """What :class:`QueueInput` and :class:`ZMQInput` share: a FIFO queue of datapoints filled
    by an :class:`_EnqueueThread` (started before training, stopped after it), dequeued on the
    CPU, and a moving average of its size as a summary.

    Subclasses give ``_datapoints()`` (an iterable, called in the thread).
    """

    queue_capacity = 50
    _strict_dtype = False

    def __init__(self, queue=None):
        self.queue = queue
        self.thread = None
        self._last_dequeue = []

    def _datapoints(self):
        raise NotImplementedError()

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
                                         self._strict_dtype)
            self._dequeue_op = self.queue.dequeue(name='dequeue_for_reset')

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
            return ret

    def _create_ema_callbacks(self):
        """A callback keeping, with every step, a moving average of the queue's size, which
        is summarized as ``<scope>/queue_size`` (none where summaries are not allowed, e.g.
        inside a tower that is not the main training tower)."""
        with self.cached_name_scope():
            size = tf.cast(self.queue.size(), tf.float32, name='queue_size')
        updates = add_moving_summary(size, collection=None, decay=0.5)
        if not updates:
            return []
        cb = RunOp(updates[0].op, run_before=False, run_as_trigger=False, run_step=True)
        cb.name_scope = 'InputSource/EMA'
        return [cb]

    def _get_callbacks(self):
        # After the thread is stopped, its error (if any) fails the training run.
        return ([StartProcOrThread(self.thread), CallbackFactory(after_train=self._raise_thread_error)]
                + self._create_ema_callbacks())

    def _raise_thread_error(self, _):
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
        short_wait = tfv1.RunOptions(timeout_in_ms=50)
        self.thread.pause()
        while True:
            # Dequeueing also unblocks an enqueue the thread may be waiting on, so it can pause.
            paused = self.thread.wait_paused(0)
            try:
                sess.run(self._dequeue_op, options=short_wait)
            except tf.errors.DeadlineExceededError:  # the queue is empty
                if paused:  # ... and nothing can be added to it any more
                    break
        self.thread.reinitialize_dataflow()
        self.thread.resume()


class QueueInput(_EnqueueingInput):
    """Datapoints of a DataFlow, put into a TF queue by a background thread; each
    ``get_input_tensors()`` dequeues one datapoint per step.

    The thread starts before training and is stopped after it, closing the queue. An error in
    the DataFlow is logged and closes the queue, which ends training (``OutOfRangeError``)
    once the datapoints already queued are consumed.

    Args:
        ds (DataFlow): produces datapoints as lists, one component per input.
        queue (tf.compat.v1.QueueBase): the queue to use; by default a ``FIFOQueue`` of
            capacity 50 named ``input_queue``.

    Example::

        source = QueueInput(BatchData(df, 64))
    """

    def __init__(self, ds, queue=None):
        if not isinstance(ds, DataFlow):
            raise TypeError("{} takes a DataFlow, got {!r}".format(type(self).__name__, ds))
        super(QueueInput, self).__init__(queue)
        self.ds = ds
        self._inf_ds = RepeatedData(ds, -1)
        self._ds_was_reset = False

    def _size(self):
        return len(self.ds)

    def _reset_state(self):
        if not self._ds_was_reset:
            self._inf_ds.reset_state()
            self._ds_was_reset = True

    def _datapoints(self):
        return self._inf_ds


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

    def _size(self):
        return len(self.ds) // self.batch_size

    def _enqueue_placeholders(self):
        placehdrs = []
        for ph in self._input_placehdrs:
            shape = ph.shape
            if shape.rank is None or shape.rank == 0 or not shape[1:].is_fully_defined():
                raise ValueError("BatchQueueInput needs inputs whose shape is fully defined except "
                                 "for the batch dimension; input '{}' has shape {}".format(
                                     _input_name(ph), shape))
            placehdrs.append(tfv1.placeholder(ph.dtype, shape=shape[1:],
                                              name=_input_name(ph) + '-nobatch'))
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


class ZMQInput(_EnqueueingInput):
    """Datapoints received over ZeroMQ: a PULL socket takes messages made by
    :func:`tensorpack_lite.utils.serialize.dumps` (a list of numpy arrays, one per input, of
    the inputs' dtypes), and a background thread enqueues them into a TF queue as
    :class:`QueueInput` does.

    Unlike tensorpack's, which used a compiled TF op, this one is pure Python (pyzmq in the
    enqueue thread). A message that does not fit the inputs (number of components, dtype,
    shape) is logged with a clear error and ends training.

    Args:
        end_point (str): e.g. ``'ipc:///tmp/pipe'`` or ``'tcp://127.0.0.1:5555'``.
        hwm (int): high-water mark (messages buffered) of the socket.
        bind (bool): bind to ``end_point`` (senders connect); otherwise connect to it.

    Example (the sender, in another process)::

        sock = zmq.Context().socket(zmq.PUSH); sock.connect('ipc:///tmp/pipe')
        for dp in df:
            sock.send(dumps(dp), copy=False)
    """

    _strict_dtype = True

    def __init__(self, end_point, hwm, bind=True):
        super(ZMQInput, self).__init__()
        self._end_point = str(end_point)
        self._hwm = int(hwm)
        self._bind = bool(bind)

    def _datapoints(self):
        import zmq

        from ..utils.serialize import loads
        sock = zmq.Context.instance().socket(zmq.PULL)
        try:
            sock.set_hwm(self._hwm)
            if self._bind:
                sock.bind(self._end_point)
            else:
                sock.connect(self._end_point)
            while not self.thread.stopped():
                if sock.poll(int(self.thread.poll_interval * 1000)):
                    yield loads(sock.recv(copy=False).buffer)
        finally:
            sock.close(linger=0)


class TensorInput(FeedfreeInput):
    """Input tensors made by a function (e.g. reading from a queue the user built).

    Args:
        get_tensor_fn: called once per ``get_input_tensors()``; returns a list of tensors
            matching the input signature.
        size (int): number of steps in an epoch, if known.
    """

    def __init__(self, get_tensor_fn, size=None):
        if not callable(get_tensor_fn):
            raise TypeError("TensorInput takes a function, got {!r}".format(get_tensor_fn))
        self.get_tensor_fn = get_tensor_fn
        if size is not None:
            size = int(size)
            if size <= 0:
                raise ValueError("TensorInput: size must be positive, got {}".format(size))
        self._fixed_size = size

    def _setup(self, input_signature):
        self._spec = input_signature

    def _size(self):
        if self._fixed_size is None:
            raise NotImplementedError("The size of this TensorInput is unknown (size=None)")
        return self._fixed_size

    def _get_input_tensors(self):
        owner = type(self).__name__
        with self.cached_name_scope():
            ret = self.get_tensor_fn()
        if not isinstance(ret, (list, tuple)):
            raise TypeError("{}: the function must return a list of tensors, got {!r}".format(
                owner, ret))
        if len(ret) != len(self._spec):
            raise ValueError("{}: the function returned {} tensors for {} inputs".format(
                owner, len(ret), len(self._spec)))
        for tensor, spec in zip(ret, self._spec):
            if not tf.is_tensor(tensor):
                raise TypeError("{}: the function returned {!r} for input '{}', not a "
                                "tensor".format(owner, tensor, spec.name))
            if tensor.dtype.base_dtype != spec.dtype or not tensor.shape.is_compatible_with(spec.shape):
                raise ValueError("{}: tensor {} ({} {}) does not fit input '{}' ({} {})".format(
                    owner, tensor.name, tensor.dtype.name, tensor.shape, spec.name,
                    spec.dtype.name, spec.shape))
        return list(ret)


class DummyConstantInput(TensorInput):
    """Constant input tensors, filled with random values once: measures the speed of a model
    without any input pipeline.

    Args:
        shapes (list): one fully defined shape per input (the inputs' dtypes are used).

    Example::

        source = DummyConstantInput([[64, 224, 224, 3], [64]])
    """

    def __init__(self, shapes):
        self.shapes = [list(s) for s in shapes]
        self._values = None
        logger.warn("Using dummy input for debug!")
        super(DummyConstantInput, self).__init__(self._make_constants)

    def _setup(self, input_signature):
        super(DummyConstantInput, self)._setup(input_signature)
        if len(self.shapes) != len(input_signature):
            raise ValueError("DummyConstantInput: {} shapes given for {} inputs".format(
                len(self.shapes), len(input_signature)))
        rng = np.random.RandomState()
        self._values = []
        for shape, spec in zip(self.shapes, input_signature):
            if not spec.shape.is_compatible_with(shape):
                raise ValueError("DummyConstantInput: shape {} does not fit input '{}' of shape "
                                 "{}".format(shape, spec.name, spec.shape))
            self._values.append(self._random_value(rng, shape, spec.dtype))

    @staticmethod
    def _random_value(rng, shape, dtype):
        if dtype == tf.string:
            return np.full(shape, b'', dtype=object)
        if dtype.is_bool:
            return rng.rand(*shape) > 0.5
        if dtype.is_integer:
            return rng.randint(0, 10, size=shape).astype(dtype.as_numpy_dtype)
        return rng.rand(*shape).astype(dtype.as_numpy_dtype)

    def _make_constants(self):
        return [tf.constant(value, dtype=spec.dtype, name='dummy-{}'.format(spec.name or index))
                for index, (value, spec) in enumerate(zip(self._values, self._spec))]


class TFDatasetInput(FeedfreeInput):
    """Input tensors from a ``tf.data.Dataset``, through an initializable iterator that is
    initialized before training (and at every :meth:`reset_state`).

    Args:
        dataset (tf.data.Dataset): elements are tuples with one tensor per input, of the
            inputs' dtypes and compatible shapes.

    Example::

        ds = tf.data.Dataset.from_tensor_slices((images, labels)).batch(32).repeat()
        source = TFDatasetInput(ds)
    """

    def __init__(self, dataset):
        if not isinstance(dataset, tf.data.Dataset):
            raise TypeError("TFDatasetInput takes a tf.data.Dataset, got {!r}".format(dataset))
        self._dataset = dataset
        self._last_get_next = []

    def _setup(self, input_signature):
        self._spec = input_signature
        element = self._dataset.element_spec
        if not isinstance(element, tuple):
            element = (element,)
        if len(element) != len(input_signature):
            raise ValueError("TFDatasetInput: dataset elements have {} components, but there are "
                             "{} inputs ({})".format(
                                 len(element), len(input_signature),
                                 ', '.join(str(s.name) for s in input_signature)))
        for index, (comp, spec) in enumerate(zip(element, input_signature)):
            if not isinstance(comp, tf.TensorSpec):
                raise TypeError("TFDatasetInput: component {} of the dataset's elements is {}, "
                                "not a tensor".format(index, comp))
            if comp.dtype != spec.dtype or not comp.shape.is_compatible_with(spec.shape):
                raise ValueError("TFDatasetInput: component {} of the dataset's elements ({} {}) "
                                 "does not fit input '{}' ({} {})".format(
                                     index, comp.dtype.name, comp.shape, spec.name,
                                     spec.dtype.name, spec.shape))
        with self.cached_name_scope():
            self._iterator = tfv1.data.make_initializable_iterator(self._dataset)
            self._init_op = self._iterator.initializer

    def _reset_state(self):
        self._init_op.run()

    def _get_input_tensors(self):
        # as in QueueInput: the i-th call (tower) gets the i-th element of a step
        with tf.control_dependencies(self._last_get_next):
            ret = self._iterator.get_next()
        if isinstance(ret, tf.Tensor):
            ret = [ret]
        ret = list(ret)
        self._last_get_next = [ret[0].op]
        for tensor, spec in zip(ret, self._spec):
            tensor.set_shape(spec.shape)
        return ret

    @staticmethod
    def dataflow_to_dataset(df, types):
        """A ``tf.data.Dataset`` of the datapoints of ``df`` (reset here), one epoch of it.

        Args:
            df (DataFlow): produces datapoints as lists.
            types (list): the ``tf.DType`` of each component.
        """
        if not isinstance(df, DataFlow):
            raise TypeError("dataflow_to_dataset() takes a DataFlow, got {!r}".format(df))
        if not isinstance(types, (list, tuple)):
            raise TypeError("dataflow_to_dataset(): types must be a list of dtypes, got {!r}"
                            .format(types))
        df.reset_state()
        signature = tuple(tf.TensorSpec(shape=None, dtype=tf.as_dtype(t)) for t in types)

        def generate():
            for dp in df:
                yield tuple(dp)
        return tf.data.Dataset.from_generator(generate, output_signature=signature)


def _flatten_fetches(graph, fetches):
    """The ops that running ``fetches`` (nested lists/tuples/dicts of tensors, ops,
    variables or names) executes directly."""
    ops = []
    for item in tf.nest.flatten(fetches):
        if isinstance(item, str):
            item = graph.as_graph_element(item)
        op = item if isinstance(item, tf.Operation) else getattr(item, 'op', None)
        if isinstance(op, tf.Operation):
            ops.append(op)
    return ops


def _depends_on(ops, target):
    """Whether running ``ops`` runs ``target`` (through data or control dependencies)."""
    seen = set()
    stack = list(ops)
    while stack:
        op = stack.pop()
        if op is target:
            return True
        if op in seen:
            continue
        seen.add(op)
        stack.extend(t.op for t in op.inputs)
        stack.extend(op.control_inputs)
    return False


def _maybe_device(device):
    """``tf.device(device)``, or no change of device when it is None."""
    return tf.device(device) if device is not None else contextlib.nullcontext()


class StagingInput(FeedfreeInput):
    """Prefetch the tensors of another feed-free source into a ``StagingArea`` (e.g. on the
    GPU), so that each step consumes data that was staged during the previous one.

    Before the first step ``nr_stage`` elements are put into every area; then every hooked
    run that consumes the inputs also stages the next element.

    Args:
        input (FeedfreeInput): the source to prefetch from (not a StagingInput).
        nr_stage (int): elements staged ahead.
        device (str): where the staging areas live; by default the device in effect where
            :meth:`get_input_tensors` is called (each tower's device in data-parallel training).

    Example::

        source = StagingInput(QueueInput(df), nr_stage=1)
    """

    class StagingCallback(Callback):
        """Fills the staging areas before the first step, then stages one more element with
        every run that consumes one; empties them after training."""

        _chief_only = False

        def __init__(self, source, nr_stage):
            self._source = source
            self.nr_stage = nr_stage
            self._prefilled = False
            self._dependency_cache = {}

        def _setup_graph(self):
            self.stage_op = self._source._get_stage_op()
            unstage_ops = self._source._get_unstage_ops()
            if not unstage_ops:
                raise RuntimeError("StagingInput: get_input_tensors() was never called, so "
                                   "there is nothing to stage")
            self._check_dependency_op = unstage_ops[0].op
            self.fetches = tfv1.train.SessionRunArgs(
                fetches=[self.stage_op, tf.group(*unstage_ops, name='unstage_all')])
            self._clear_ops = [area.clear() for area in self._source._areas]

        def _prefill(self, sess):
            logger.info("Pre-filling StagingArea ...")
            for _ in range(self.nr_stage):
                sess.run(self.stage_op)
            logger.info("{} element(s) put into each StagingArea.".format(self.nr_stage))

        def _consumes_input(self, ctx):
            fetches = ctx.original_args.fetches
            ops = _flatten_fetches(self.graph, fetches)
            key = tuple(op.name for op in ops)
            if key not in self._dependency_cache:
                self._dependency_cache[key] = _depends_on(ops, self._check_dependency_op)
            return self._dependency_cache[key]

        def _before_run(self, ctx):
            # Not in before_train: the source's own callbacks (e.g. starting a queue's thread)
            # must have run first.
            if not self._prefilled:
                self._prefilled = True
                self._prefill(ctx.session)
            if self._consumes_input(ctx):
                return self.fetches
            return None

        def _after_train(self):
            try:
                self.trainer.sess.run(self._clear_ops)
            except Exception as err:
                logger.warn("StagingInput: could not empty the staging areas: {}".format(err))

    def __init__(self, input, nr_stage=1, device=None):
        if not isinstance(input, FeedfreeInput):
            raise TypeError("StagingInput only wraps a FeedfreeInput, got {!r}".format(input))
        if isinstance(input, StagingInput):
            raise TypeError("StagingInput cannot wrap another StagingInput")
        nr_stage = int(nr_stage)
        if nr_stage <= 0:
            raise ValueError("StagingInput: nr_stage must be positive, got {}".format(nr_stage))
        self._input = input
        self._nr_stage = nr_stage
        self._device = device
        self._areas = []
        self._stage_ops = []
        self._unstage_ops = []

    def _setup(self, input_signature):
        self._input.setup(input_signature)
        with self.cached_name_scope():
            pass  # fixes the name scope to use later

    def _get_callbacks(self):
        # The staging callback comes after the wrapped source's own callbacks.
        return self._input.get_callbacks() + [StagingInput.StagingCallback(self, self._nr_stage)]

    def _size(self):
        return self._input.size()

    def _get_input_tensors(self):
        from tensorflow.python.ops.data_flow_ops import StagingArea
        inputs = self._input.get_input_tensors()
        with self.cached_name_scope():
            with _maybe_device(self._device):
                area = StagingArea([t.dtype.base_dtype for t in inputs], shapes=None)
                self._stage_ops.append(area.put(inputs))
                outputs = area.get()
            self._areas.append(area)
            if isinstance(outputs, tf.Tensor):
                outputs = [outputs]
            outputs = list(outputs)
            for vin, vout in zip(inputs, outputs):
                vout.set_shape(vin.shape)
            self._unstage_ops.append(outputs)
            return outputs

    def _get_stage_op(self):
        with self.cached_name_scope():
            return tf.group(*self._stage_ops)

    def _get_unstage_ops(self):
        return list(chain.from_iterable(self._unstage_ops))
