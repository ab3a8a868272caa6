"""Predictors: call a graph like a function, arrays in, arrays out.

Example::

    predictor = OfflinePredictor(PredictConfig(model=MyModel(), output_names=['logits'],
                                               session_init=my_init))
    logits, = predictor(image_batch)            # one array per input name

    # or, on tensors of a graph that already has a session:
    predictor = OnlinePredictor([x], [y])
    with sess.as_default():
        y_value, = predictor(x_value)
"""

import threading
import weakref
from abc import ABCMeta, abstractmethod

import numpy as np

from ..compat import enable_graph_mode, tf, tfv1
from ..tfutils.common import get_op_tensor_name
from ..tfutils.inference_tower import build_predict_tower
from ..tfutils.sesscreate import create_initialized_session
from ..tfutils.varmanip import variable_of_tensor
from ..utils.argtools import log_once
from .config import PredictConfig

__all__ = ['PredictorBase', 'AsyncPredictorBase', 'OnlinePredictor', 'OfflinePredictor']


class PredictorBase(metaclass=ABCMeta):
    """Base class of predictors.

    Call a predictor with one array per input: ``predictor(x1, x2)``. For compatibility
    with older tensorpack code, a single list holding one array per input (a datapoint) is
    accepted too: ``predictor([x1, x2])``.

    Attributes:
        return_input (bool): when True, a call returns ``(inputs, outputs)`` instead of
            ``outputs``, ``inputs`` being the list of arrays it was given.

    Subclasses implement :meth:`_do_call`, and may tell the number of inputs through
    :meth:`_num_inputs`.
    """

    return_input = False

    def __call__(self, *args):
        """
        Args:
            args: one array per input, in order.

        Returns:
            list: one array per output (``(inputs, outputs)`` when :attr:`return_input`).
        """
        dp = self._as_datapoint(args)
        outputs = self._do_call(dp)
        if self.return_input:
            return dp, outputs
        return outputs

    def _as_datapoint(self, args):
        """The list of inputs of a call, unwrapping a single datapoint argument."""
        if len(args) == 1 and isinstance(args[0], (list, tuple)):
            expected = self._num_inputs()
            candidate = list(args[0])
            if expected is None:
                unwrap = True
            elif expected == 1:
                # a 1-input predictor called with [array]; a plain nested list is data
                unwrap = len(candidate) == 1 and isinstance(candidate[0], np.ndarray)
            else:
                unwrap = len(candidate) == expected
            if unwrap:
                log_once("A predictor was called with one list holding all inputs; call it "
                         "with one positional argument per input instead.", 'warn')
                return candidate
        return list(args)

    def _num_inputs(self):
        """The number of inputs a call takes, or None when unknown."""
        return None

    @abstractmethod
    def _do_call(self, dp):
        """
        Args:
            dp (list): the inputs, one per input of the predictor.

        Returns:
            the outputs.
        """


class AsyncPredictorBase(PredictorBase):
    """Base class of predictors that run tasks in workers of their own.

    Subclasses implement :meth:`put_task` and :meth:`start`; calling the predictor puts one
    task and waits for its result.
    """

    @abstractmethod
    def put_task(self, dp, callback=None):
        """
        Args:
            dp (list): the inputs of one task.
            callback: called with the ``Future`` once it is done (from a worker thread, or
                right away when it is already done); ``future.result()`` gives the outputs.

        Returns:
            concurrent.futures.Future: the outputs.
        """

    @abstractmethod
    def start(self):
        """Start the workers."""

    def _do_call(self, dp):
        return self.put_task(dp).result()


def _tensor_label(t):
    return t if isinstance(t, str) else getattr(t, 'name', repr(t))


class OnlinePredictor(PredictorBase):
    """Runs given tensors of an existing graph in a session.

    A ``Session.make_callable`` is built once per session the predictor runs in, so a call
    costs little more than the computation.

    Example::

        x = tf.compat.v1.placeholder(tf.float32, [None, 3], name='x')
        y = tf.identity(tf.matmul(x, W) + b, name='y')
        predictor = OnlinePredictor(['x'], [y], sess=sess)
        y_value, = predictor(np.ones((2, 3), np.float32))

    Attributes:
        sess: the session given to the constructor (None: the default session at each call).
        input_tensors, output_tensors (list): as given, names normalized to tensor names
            (``'x'`` becomes ``'x:0'``).
    """

    ACCEPT_OPTIONS = False
    """Whether the callables take ``options`` and ``run_metadata``
    (see ``Session.make_callable``)."""

    def __init__(self, input_tensors, output_tensors, return_input=False, sess=None):
        """
        Args:
            input_tensors (list): the tensors to feed (``tf.Tensor`` or names), one per
                argument of a call.
            output_tensors (list): the tensors (or names) to compute and return.
            return_input (bool): see :class:`PredictorBase`.
            sess (tf.compat.v1.Session): the session to run in. If None, each call runs in
                the default session of the calling thread (``with sess.as_default():``).
        """
        self.input_tensors = self._normalize(input_tensors, 'input_tensors')
        self.output_tensors = self._normalize(output_tensors, 'output_tensors')
        self.return_input = bool(return_input)
        self.sess = sess
        self._callables = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()
        if sess is not None:
            self._get_callable(sess)

    @staticmethod
    def _normalize(tensors, arg):
        if isinstance(tensors, (str, tf.Tensor)) or not isinstance(tensors, (list, tuple)):
            raise TypeError("OnlinePredictor: {} must be a list of tensors or names, got "
                            "{!r}".format(arg, tensors))
        result = []
        for t in tensors:
            if isinstance(t, str):
                result.append(get_op_tensor_name(t)[1])
            elif isinstance(t, (tf.Tensor, tf.Operation, tf.Variable)):
                result.append(t)
            else:
                raise TypeError("OnlinePredictor: every item of {} must be a tensor or a "
                                "name, got {!r}".format(arg, t))
        return result

    def _num_inputs(self):
        return len(self.input_tensors)

    def _get_callable(self, sess):
        func = self._callables.get(sess)
        if func is not None:
            return func
        with self._lock:
            func = self._callables.get(sess)
            if func is None:
                # a callable refers to its session, so weak keys alone do not free closed
                # sessions: drop them here
                for old in [s for s in self._callables if getattr(s, '_closed', False)]:
                    del self._callables[old]
                feeds = [self._resolve(sess.graph, t, 'input') for t in self.input_tensors]
                outputs = [self._resolve(sess.graph, t, 'output') for t in self.output_tensors]
                # a resource variable's handle is fetched as the variable: its value
                variables = [variable_of_tensor(t) for t in outputs]
                fetches = [t if var is None else var for t, var in zip(outputs, variables)]
                func = sess.make_callable(fetches=fetches, feed_list=feeds,
                                          accept_options=self.ACCEPT_OPTIONS)
                self._callables[sess] = func
        return func

    @staticmethod
    def _resolve(graph, t, kind):
        if isinstance(t, str):
            try:
                return graph.get_tensor_by_name(t)
            except (KeyError, ValueError) as err:
                raise ValueError("OnlinePredictor: {} tensor '{}' is not in the graph of the "
                                 "session: {}".format(kind, t, err)) from err
        if t.graph is not graph:
            raise ValueError("OnlinePredictor: {} tensor '{}' is not in the graph of the "
                             "session it runs in.".format(kind, t.name))
        return t

    def _do_call(self, dp):
        if len(dp) != len(self.input_tensors):
            raise ValueError("OnlinePredictor takes {} inputs, one per tensor of {}, but got "
                             "{}.".format(len(self.input_tensors),
                                          [_tensor_label(t) for t in self.input_tensors],
                                          len(dp)))
        sess = self.sess
        if sess is None:
            sess = tfv1.get_default_session()
            if sess is None:
                raise RuntimeError("OnlinePredictor has no session: give it `sess=` or call "
                                   "it under `with sess.as_default():`.")
        return self._get_callable(sess)(*dp)


class OfflinePredictor(OnlinePredictor):
    """A predictor that builds its own graph and session from a :class:`PredictConfig`.

    The model is built once, as an inference tower without name prefix
    (``PredictTowerContext('')``), so ``get_current_tower_context().is_training`` is False in
    it; then the session is created by ``config.session_creator``, filled by
    ``config.session_init``, and the graph is finalized (when the config created it).

    Example::

        predictor = OfflinePredictor(PredictConfig(
            model=MyModel(), input_names=['image'], output_names=['prob'],
            session_init=SaverRestore('train_log/model-1000')))
        prob, = predictor(images)

    Attributes:
        graph (tf.Graph): the graph of the model.
        sess: its session.
    """

    def __init__(self, config):
        """
        Args:
            config (PredictConfig): the model and how to initialize it.
        """
        if not isinstance(config, PredictConfig):
            raise TypeError("OfflinePredictor takes a PredictConfig, got {!r}".format(config))
        enable_graph_mode()
        self.graph = config.make_graph()
        with self.graph.as_default():
            tower = build_predict_tower(config.tower_func, reuse=False)
            input_tensors, output_tensors = config.input_tensors(tower), config.output_tensors(tower)
        sess = create_initialized_session(self.graph, config.session_creator, config.session_init,
                                          type(self).__name__, finalize=config.create_graph)
        with self.graph.as_default():
            try:
                super(OfflinePredictor, self).__init__(
                    input_tensors, output_tensors, config.return_input, sess)
            except Exception:
                sess.close()
                raise
