"""HookedSession: a session whose ``run`` also runs the ``before_run``/``after_run`` of hooks."""

import numpy as np

from ..compat import tf, tf_internal, tfv1
from .caller_thread import run_in_caller_thread
from .failure import leaves_session_unusable, note_session_error

__all__ = ['HookedSession', 'RunRequests', 'CheckedFeeds']


# TensorFlow's names used at every run, looked up once (a lookup through TensorFlow's module
# wrappers costs a fraction of a microsecond, and a step makes dozens).
_FETCHABLE = (tf.Tensor, tf.Operation, tf.Variable, str)
_GRAPH_VALUES = (tf.Tensor, tf.Variable)
_SessionRunArgs = tfv1.train.SessionRunArgs
_SessionRunContext = tfv1.train.SessionRunContext
_SessionRunValues = tfv1.train.SessionRunValues
_SessionRunHook = tfv1.train.SessionRunHook
_CallableOptions = tf_internal('core.protobuf.config_pb2').CallableOptions


class _NotCacheable(Exception):
    pass


_NOT_COMPILED = object()


def _fetch_key(fetches):
    """A hashable description of a fetch structure made of tensors, ops, variables, names,
    lists, tuples and dicts; raises _NotCacheable for anything else."""
    if isinstance(fetches, _FETCHABLE):   # the common case first (list comprehensions: no generator frames)
        return fetches
    if type(fetches) is dict:  # sess.run gives back an OrderedDict, defaultdict... as such
        return (dict, *[(k, _fetch_key(v)) for k, v in fetches.items()])
    if isinstance(fetches, (list, tuple)):
        return (type(fetches), *[_fetch_key(f) for f in fetches])
    raise _NotCacheable()


def _int_fits(value, dtype):
    """Whether the Python int ``value`` keeps its value as numpy ``dtype`` (``sess.run``'s check;
    never for strings)."""
    if dtype is object:
        return False
    return dtype(np.array(value).astype(dtype)) == value


class _CompiledRun:
    """One fetch structure and feed list compiled into a session callable.

    The structure is flattened once into the tensors to fetch and the ops to run; each call
    runs the callable and puts the values back into the structure, as ``sess.run`` would.
    Where it is safe and wins (:func:`~tensorpack_lite.session.caller_thread.run_in_caller_thread`,
    asked with the first run's fed arrays), the ops run in the caller's thread;
    :attr:`in_caller_thread` says whether they do.
    """

    def __init__(self, sess, fetches, feed_tensors, fed_values=()):
        self._graph = sess.graph
        self._tensors = {}
        self._targets = []
        self._template = self._flatten(fetches)
        self._feeds = [(t, t.dtype.as_numpy_dtype,
                        None if t.shape.rank is None else tuple(t.shape.as_list())) for t in feed_tensors]
        options = _CallableOptions()
        options.feed.extend(t.name for t in feed_tensors)
        options.fetch.extend(t.name for t in self._tensors)
        options.target.extend(op.name for op in self._targets)
        self.in_caller_thread = run_in_caller_thread(list(self._tensors) + self._targets, fed_values,
                                                     getattr(sess, '_config', None))
        if self.in_caller_thread:
            options.run_options.inter_op_thread_pool = -1
        try:   # builds the executors: grappler's passes run here
            self._callable = sess._make_callable_from_options(options)
        except Exception as err:
            note_session_error(err)
            raise

    def _flatten(self, fetches):
        if isinstance(fetches, (list, tuple)):
            return type(fetches)(self._flatten(f) for f in fetches)
        if isinstance(fetches, dict):
            return {k: self._flatten(v) for k, v in fetches.items()}
        element = self._graph.as_graph_element(fetches, allow_tensor=True, allow_operation=True)
        if isinstance(element, tf.Operation):
            self._targets.append(element)
            return None
        return self._tensors.setdefault(element, len(self._tensors))

    def _rebuild(self, template, values):
        if template is None:
            return None
        if type(template) is int:
            return values[template]
        if isinstance(template, dict):
            return {k: self._rebuild(v, values) for k, v in template.items()}
        rebuilt = [self._rebuild(t, values) for t in template]
        return rebuilt if type(template) is list else type(template)(rebuilt)

    def __call__(self, feeds, unchecked):
        """Run with ``feeds`` (in the order compiled); the values of the tensors in
        ``unchecked`` are converted and checked first, the others used as they are."""
        if unchecked:
            arrays = [self._convert(spec, value) if tensor in unchecked else value
                      for spec, (tensor, value) in zip(self._feeds, feeds.items())]
        else:
            arrays = feeds.values()
        try:
            values = self._callable(*arrays)
        except Exception as err:
            note_session_error(err)
            raise
        return self._rebuild(self._template, values)

    @staticmethod
    def _convert(spec, value):
        """``value`` as the array ``sess.run`` would feed, with the same shape check."""
        tensor, dtype, dims = spec
        if isinstance(value, int) and not _int_fits(value, dtype):
            raise TypeError("Type of feed value {} with type {} is not compatible with Tensor {} of "
                            "type {}".format(value, type(value), tensor.name, tensor.dtype.name))
        if type(value) is np.ndarray and value.dtype == dtype:
            array = value
        else:
            array = np.asarray(value, dtype=dtype)
        if dims is not None and (len(dims) != array.ndim or any(
                d is not None and d != n for d, n in zip(dims, array.shape))):
            raise ValueError("Cannot feed value of shape {} for Tensor {}, which has shape {}".format(
                array.shape, tensor.name, tensor.shape))
        return array


def _run(sess, fetches, feed_dict, options=None, run_metadata=None):
    """``sess.run``, its errors marked by :func:`note_session_error`."""
    try:
        return sess.run(fetches, feed_dict=feed_dict, options=options, run_metadata=run_metadata)
    except Exception as err:
        note_session_error(err)
        raise


class _CallableCache:
    """Compiled session callables for the fetch and feed structures a training loop repeats.

    ``sess.run`` analyses its fetches and feeds again on every call, which costs a short step
    much of its time; a callable compiled once for the same structure skips that. The
    structure is compared by content on every call, so a hook that changes its fetches gets
    a new callable. Fed values are converted and their shapes checked as ``sess.run`` would,
    with the same kind of error. Anything unusual (sparse tensors, tensors as feed values, a
    TensorFlow without session callables) goes through ``sess.run``.
    """

    max_entries = 32

    def __init__(self, sess):
        self._sess = sess
        self._compiled = {}
        self._usable = hasattr(sess, '_make_callable_from_options')

    def run(self, fetches, feeds, unchecked):
        """Run ``fetches`` with ``feeds``, whose values are arrays checked by their maker except
        those of the tensors in ``unchecked`` (which may be anything ``sess.run`` takes)."""
        try:
            if not self._usable or (unchecked and any(isinstance(feeds.get(t), _GRAPH_VALUES)
                                                      for t in unchecked)):
                raise _NotCacheable()
            key = (_fetch_key(fetches), tuple(feeds))  # a feed key a callable cannot take compiles to None
        except _NotCacheable:
            return _run(self._sess, fetches, feeds or None)
        compiled = self._compiled.get(key, _NOT_COMPILED)
        if compiled is _NOT_COMPILED:
            if len(self._compiled) >= self.max_entries:
                self._compiled.clear()
            compiled = self._compiled[key] = self._compile(fetches, feeds)
        if compiled is None:
            return _run(self._sess, fetches, feeds or None)
        return compiled(feeds, unchecked)

    def _compile(self, fetches, feeds):
        """A compiled run, or None where only ``sess.run`` will do (it also reports errors in
        its own words)."""
        graph = self._sess.graph
        try:
            feed_tensors = [graph.as_graph_element(k, allow_tensor=True, allow_operation=False)
                            for k in feeds]
            return _CompiledRun(self._sess, fetches, feed_tensors, list(feeds.values()))
        except (TypeError, ValueError, KeyError, tf.errors.InvalidArgumentError) as err:
            if leaves_session_unusable(err):
                raise   # from inside TensorFlow: sess.run would wait for ever
            return None  # e.g. a fed tensor that is also fetched: allowed by sess.run only


_NOTHING_UNCHECKED = frozenset()


class CheckedFeeds(dict):
    """A feed dict whose values were checked by whoever made it: numpy arrays of exactly their
    tensor's dtype, of a shape the tensor accepts. :class:`HookedSession` feeds them as they are
    (the values of any other feed dict are converted and checked as ``sess.run`` would).

    Args:
        feeds: the feeds (a dict or pairs).
        unchecked: the tensors among them whose values were not checked (when feeds of both
            kinds were merged).
    """

    def __init__(self, feeds=(), unchecked=()):
        super().__init__(feeds)
        self.unchecked = frozenset(unchecked) if unchecked else _NOTHING_UNCHECKED


class RunRequests:
    """What several requesters (hooks, callbacks) ask of one session run, merged: their
    fetches (kept apart, by the key each is added under), their feeds and their run options.

    Args:
        kind (str): what the requesters are, for errors ('Hook', 'Callback').
        feed_dict (dict): the caller's own feeds; a requester may not feed them again.
        options (tf.compat.v1.RunOptions): the caller's own run options.
    """

    def __init__(self, kind, feed_dict=None, options=None):
        self._kind = kind
        self.fetches = {}
        self.feeds = dict(feed_dict) if feed_dict else {}
        """The merged feeds; when a single requester fed, its own dict (read it, do not change it)."""
        self._feeds_owned = True
        self.unchecked = set(self.feeds)
        """The fed tensors whose values did not come checked (see :class:`CheckedFeeds`)."""
        self.options = options
        self.options_added = False
        """Whether a requester asked for run options."""

    def add(self, key, requester, request):
        """Add ``request`` (a ``SessionRunArgs`` or None) of ``requester``; its fetches are
        kept under ``key``. A tensor fed twice is a RuntimeError naming the requester."""
        if request is None:
            return
        if request.fetches is not None:
            self.fetches[key] = request.fetches
        feed_dict = request.feed_dict
        if feed_dict:
            if not isinstance(feed_dict, dict):
                feed_dict = dict(feed_dict)
            if not self.feeds:   # the usual case: one requester feeds; its dict is used as it is
                self.feeds, self._feeds_owned = feed_dict, False
            else:
                if not self._feeds_owned:
                    self.feeds, self._feeds_owned = dict(self.feeds), True
                for tensor, value in feed_dict.items():
                    if tensor in self.feeds:
                        raise RuntimeError("{} {} feeds {}, which is already fed by the caller or another "
                                           "{}.".format(self._kind, requester, tensor, self._kind.lower()))
                    self.feeds[tensor] = value
            self.unchecked.update(feed_dict.unchecked if isinstance(feed_dict, CheckedFeeds) else feed_dict)
        if request.options is not None:
            if not self.options_added:
                merged = tfv1.RunOptions()
                if self.options is not None:
                    merged.MergeFrom(self.options)
                self.options = merged
                self.options_added = True
            self.options.MergeFrom(request.options)

    def checked_feeds(self):
        """The merged feeds as a :class:`CheckedFeeds` that marks the unchecked ones (the single
        feeding requester's own when it is one already); None when nothing is fed."""
        if not self.feeds:
            return None
        if isinstance(self.feeds, CheckedFeeds) and self.feeds.unchecked == self.unchecked:
            return self.feeds
        return CheckedFeeds(self.feeds, self.unchecked)


def _overrides(hook, method):
    """Whether ``hook`` has a ``method`` of its own (not ``SessionRunHook``'s, which does nothing)."""
    return (method in getattr(hook, '__dict__', ())
            or getattr(type(hook), method, None) is not getattr(_SessionRunHook, method))


class HookedSession:
    """Wraps a ``tf.compat.v1.Session`` so that every :meth:`run` lets each hook add fetches,
    feeds and run options beforehand (``hook.before_run``) and see their values afterwards
    (``hook.after_run``). The caller gets back exactly what it fetched.

    Any hook may call ``run_context.request_stop()``; :meth:`should_stop` then returns True.
    The plain session (``trainer.sess``) triggers no hook. Runs without run options go
    through cached ``make_callable``s (see ``_CallableCache``). An error raised inside
    TensorFlow that is not an ``OpError`` is marked as leaving the session unusable
    (:mod:`~tensorpack_lite.session.failure`).
    """

    def __init__(self, sess, hooks):
        self._sess = sess
        self._hooks = list(hooks)
        # (index, hook) of the hooks that act before / after a run: a hook whose class keeps
        # SessionRunHook's do-nothing method is not called there (an index keys a hook's fetches).
        self._asking = [(i, hook) for i, hook in enumerate(self._hooks) if _overrides(hook, 'before_run')]
        self._receiving = [(i, hook) for i, hook in enumerate(self._hooks) if _overrides(hook, 'after_run')]
        self._stop_requested = False
        self._cache = _CallableCache(sess)

    @property
    def session(self):
        """The wrapped ``tf.compat.v1.Session``."""
        return self._sess

    @property
    def graph(self):
        return self._sess.graph

    def should_stop(self):
        return self._stop_requested

    def run(self, fetches, feed_dict=None, options=None, run_metadata=None):
        if not self._hooks:
            return _run(self._sess, fetches, feed_dict, options, run_metadata)
        context = _SessionRunContext(original_args=_SessionRunArgs(fetches, feed_dict), session=self._sess)
        requests = RunRequests('Hook', feed_dict, options)
        for index, hook in self._asking:
            requests.add(index, hook, hook.before_run(context))
        hook_fetches, feeds, options = requests.fetches, requests.feeds, requests.options
        if requests.options_added and run_metadata is None:
            run_metadata = tfv1.RunMetadata()
        combined = {'caller': fetches, 'hooks': hook_fetches}
        if options is not None or run_metadata is not None:
            outputs = _run(self._sess, combined, feeds or None, options, run_metadata)
        else:
            outputs = self._cache.run(combined, feeds, requests.unchecked)
        hook_results = outputs['hooks']
        for index, hook in self._receiving:
            hook.after_run(context, _SessionRunValues(
                results=hook_results.get(index), options=options, run_metadata=run_metadata))
        if context.stop_requested:
            self._stop_requested = True
        return outputs['caller']

    def close(self):
        self._sess.close()
