"""FeedfreePredictor: run a model on the tensors of an InputSource, with nothing fed."""

from ..compat import enable_graph_mode
from ..input_source.input_source_base import InputSource
from ..loop.dispatch import Callbacks
from ..session.hooked_session import HookedSession
from ..tfutils.inference_tower import build_predict_tower
from ..tfutils.sesscreate import create_initialized_session
from .base import PredictorBase
from .config import PredictConfig

__all__ = ['FeedfreePredictor']


class FeedfreePredictor(PredictorBase):
    """A predictor whose inputs come from an :class:`InputSource` (e.g. a
    :class:`QueueInput` or a :class:`TFDatasetInput`) instead of the caller: each call
    ``predictor()`` takes the next inputs from the source and returns the outputs.

    The model is built once, in an inference tower without name prefix, on the source's
    tensors. The source's callbacks run as they would in a trainer, with this predictor in
    the trainer's place (they may use its ``sess``): they start before the first call (e.g.
    the thread filling a queue) and around every call (e.g. the hook of a
    :class:`FeedInput`, which works too). When the source runs out, a call raises what the
    source raises (``tf.errors.OutOfRangeError`` for a queue or a dataset). :meth:`close`
    stops the source and closes the session.

    Example::

        predictor = FeedfreePredictor(
            PredictConfig(model=MyModel(), output_names=['prob'], session_init=SmartInit(path)),
            QueueInput(BatchData(test_df, 64)))
        prob, = predictor()

    Attributes:
        graph (tf.Graph): the graph of the model.
        sess: its session.
    """

    def __init__(self, config, input_source):
        """
        Args:
            config (PredictConfig): the model and how to initialize it; ``return_input``
                must be False (name the inputs in ``output_names`` to get them).
            input_source (InputSource): not set up yet; it gives the inputs of the model's
                input signature.
        """
        if not isinstance(config, PredictConfig):
            raise TypeError("FeedfreePredictor takes a PredictConfig, got {!r}".format(config))
        if not isinstance(input_source, InputSource):
            raise TypeError("FeedfreePredictor takes an InputSource, got {!r}".format(input_source))
        if config.return_input:
            raise ValueError("FeedfreePredictor: return_input is not supported (nothing is given to a "
                             "call); put the names of the inputs into output_names instead.")
        if input_source.setup_done():
            raise RuntimeError("FeedfreePredictor: the InputSource {} is already set up (an InputSource "
                               "feeds one trainer or predictor)".format(type(input_source).__name__))
        self._config = config
        self._input_source = input_source
        enable_graph_mode()
        self.graph = config.make_graph()
        with self.graph.as_default():
            self._input_callbacks = Callbacks(input_source.setup(config.input_signature))
            tower = build_predict_tower(config.tower_func, input_source.get_input_tensors(), reuse=False)
            self._output_tensors = config.output_tensors(tower)
            self._input_callbacks.setup_graph(self)
        self.sess = create_initialized_session(self.graph, config.session_creator, config.session_init,
                                               type(self).__name__, finalize=config.create_graph)
        try:
            with self.graph.as_default(), self.sess.as_default():
                self._input_callbacks.before_train()
            self._hooked_sess = HookedSession(self.sess, self._input_callbacks.get_hooks())
        except Exception:
            self.sess.close()
            raise

    def _num_inputs(self):
        return 0

    def _do_call(self, dp):
        if dp:
            raise TypeError("FeedfreePredictor takes no inputs (they come from its {}), got {}".format(
                type(self._input_source).__name__, len(dp)))
        with self.sess.as_default():
            return self._hooked_sess.run(self._output_tensors)

    def close(self):
        """Stop the InputSource (its callbacks' ``after_train``) and close the session."""
        try:
            with self.sess.as_default():
                self._input_callbacks.after_train()
        finally:
            self.sess.close()
