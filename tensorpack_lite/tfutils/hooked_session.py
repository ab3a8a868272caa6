"""HookedSession: a session whose ``run`` also runs the ``before_run``/``after_run`` of hooks."""

import numpy as np

from ..compat import tf, tfv1

__all__ = ['HookedSession']


class _NotCacheable(Exception):
    pass


def _fetch_key(fetches):
    """A hashable description of a fetch structure made of tensors, ops, variables, names,
    lists, tuples and dicts; raises _NotCacheable for anything else."""
    if isinstance(fetches, (tf.Tensor, tf.Operation, tf.Variable, str)):
        return fetches
    if isinstance(fetches, (list, tuple)):
        return (type(fetches),) + tuple(_fetch_key(f) for f in fetches)
    if isinstance(fetches, dict):
        return (dict,) + tuple((k, _fetch_key(v)) for k, v in fetches.items())
    raise _NotCacheable()


class _CallableCache:
    """Compiled ``Session.make_callable``s for the fetch and feed structures a training loop
    repeats.

    ``sess.run`` analyses its fetches and feeds again on every call, which costs a feed-free
    or feeding step much of its Python time; a callable made once for the same structure
    skips that. The structure is compared by content on every call, so a hook that changes
    its fetches gets a new callable. Fed values are converted and their shapes checked as
    ``sess.run`` would, with the same kind of error.
    """

    max_entries = 32

    def __init__(self, sess):
        self._sess = sess
        self._callables = {}

    def run(self, fetches, feeds):
        try:
            key = (_fetch_key(fetches), tuple(_fetch_key(k) for k in feeds))
            if any(isinstance(v, (tf.Tensor, tf.Variable)) for v in feeds.values()):
                raise _NotCacheable()
        except _NotCacheable:
            return self._sess.run(fetches, feed_dict=feeds or None)
        entry = self._callables.get(key)
        if entry is None:
            if len(self._callables) >= self.max_entries:
                self._callables.clear()
            feed_tensors = [self._sess.graph.as_graph_element(k) for k in feeds]
            runner = self._sess.make_callable(fetches, feed_list=feed_tensors)
            entry = self._callables[key] = (runner, feed_tensors)
        runner, feed_tensors = entry
        return runner(*[self._convert(t, v) for t, v in zip(feed_tensors, feeds.values())])

    @staticmethod
    def _convert(tensor, value):
        array = np.asarray(value, dtype=tensor.dtype.as_numpy_dtype)
        if not tensor.shape.is_compatible_with(array.shape):
            raise ValueError("Cannot feed value of shape {} for Tensor {}, which has shape {}".format(
                array.shape, tensor.name, tensor.shape))
        return array


class HookedSession:
    """Wraps a ``tf.compat.v1.Session`` so that every :meth:`run` lets each hook add fetches,
    feeds and run options beforehand (``hook.before_run``) and see their values afterwards
    (``hook.after_run``). The caller gets back exactly what it fetched.

    Any hook may call ``run_context.request_stop()``; :meth:`should_stop` then returns True.
    The plain session (``trainer.sess``) triggers no hook. Runs without run options go
    through cached ``make_callable``s (see ``_CallableCache``).
    """

    def __init__(self, sess, hooks):
        self._sess = sess
        self._hooks = list(hooks)
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
            return self._sess.run(fetches, feed_dict=feed_dict, options=options, run_metadata=run_metadata)
        context = tfv1.train.SessionRunContext(
            original_args=tfv1.train.SessionRunArgs(fetches, feed_dict), session=self._sess)
        hook_fetches = {}
        feeds = dict(feed_dict) if feed_dict else {}
        merged_options = None
        for index, hook in enumerate(self._hooks):
            request = hook.before_run(context)
            if request is None:
                continue
            if request.fetches is not None:
                hook_fetches[index] = request.fetches
            if request.feed_dict:
                for key, value in request.feed_dict.items():
                    if key in feeds:
                        raise RuntimeError("Hook {} feeds {}, which is already fed by the caller "
                                           "or another hook.".format(hook, key))
                    feeds[key] = value
            if request.options is not None:
                if merged_options is None:
                    merged_options = tfv1.RunOptions()
                    if options is not None:
                        merged_options.MergeFrom(options)
                merged_options.MergeFrom(request.options)
        if merged_options is not None:
            options = merged_options
            if run_metadata is None:
                run_metadata = tfv1.RunMetadata()
        combined = {'caller': fetches, 'hooks': hook_fetches}
        if options is not None or run_metadata is not None:
            outputs = self._sess.run(combined, feed_dict=feeds or None, options=options,
                                     run_metadata=run_metadata)
        else:
            outputs = self._cache.run(combined, feeds)
        hook_results = outputs['hooks']
        for index, hook in enumerate(self._hooks):
            hook.after_run(context, tfv1.train.SessionRunValues(
                results=hook_results.get(index), options=options, run_metadata=run_metadata))
        if context.stop_requested:
            self._stop_requested = True
        return outputs['caller']

    def close(self):
        self._sess.close()
