"""Predictors with one inference tower per device, on one graph and one session.

* :class:`MultiTowerOfflinePredictor`: every tower reads the same placeholders; each
  tower has its own :class:`OnlinePredictor` (e.g. one per thread).
* :class:`DataParallelOfflinePredictor`: every tower has its own placeholders, and one call
  runs all towers on their own inputs at once.

Towers are GPU ids or device strings (``['/cpu:0', '/cpu:1']``); for virtual CPU devices give
the config a session creator with ``ConfigProto(device_count={'CPU': n})``.
"""

from ..compat import enable_graph_mode, tf
from ..graph_builder.devices import check_session_devices, interpret_towers, tower_device
from ..tfutils.inference_tower import build_or_reuse_placeholder, build_predict_tower
from ..tfutils.sesscreate import create_initialized_session
from ..utils import logger
from .base import OnlinePredictor
from .config import PredictConfig

__all__ = ['MultiTowerOfflinePredictor', 'DataParallelOfflinePredictor']


class _TowersOnOneSession:
    """Builds the inference towers of a PredictConfig (the first one creates the variables,
    the others reuse them) and then the session, initialized and checked for the devices."""

    def __init__(self, config, towers, owner):
        if not isinstance(config, PredictConfig):
            raise TypeError("{} takes a PredictConfig, got {!r}".format(owner, config))
        self.config = config
        self.owner = owner
        self.towers = interpret_towers(towers, owner)
        self.devices = [tower_device(t) for t in self.towers]
        self.names = ['tower{}'.format(t if isinstance(t, int) else index)
                      for index, t in enumerate(self.towers)]
        enable_graph_mode()
        self.graph = config.make_graph()

    def build(self, get_inputs):
        """Call the tower function in every tower on ``get_inputs(tower_name)`` (None: the
        placeholders of the input signature); returns the towers' (input tensors, output
        tensors)."""
        config = self.config
        result = []
        with self.graph.as_default():
            for index, (name, device) in enumerate(zip(self.names, self.devices)):
                tower = build_predict_tower(config.tower_func, get_inputs(name), name, device,
                                            reuse=index > 0)
                result.append((config.input_tensors(tower), config.output_tensors(tower)))
        return result

    def create_session(self):
        config = self.config
        sess = create_initialized_session(self.graph, config.session_creator, config.session_init,
                                          self.owner, finalize=config.create_graph)
        try:
            check_session_devices(sess, self.devices, self.owner)
        except Exception:
            sess.close()
            raise
        return sess


class MultiTowerOfflinePredictor(OnlinePredictor):
    """One inference tower per device, all fed by the same placeholders. Calling it runs
    the first tower; :meth:`get_predictor` gives the predictor of each tower.

    Example::

        predictor = MultiTowerOfflinePredictor(config, ['/cpu:0', '/cpu:1'])
        for k, p in enumerate(predictor.get_predictors()):
            start_worker_thread(p)      # each worker runs its own tower
    """

    def __init__(self, config, towers):
        """
        Args:
            config (PredictConfig): the model and how to initialize it.
            towers (int or list): GPU ids or device strings, one per tower.
        """
        builder = _TowersOnOneSession(config, towers, type(self).__name__)
        tensors = builder.build(lambda name: None)  # every tower reads the same placeholders
        self.graph = builder.graph
        sess = builder.create_session()
        self.predictors = [OnlinePredictor(inputs, outputs, config.return_input, sess)
                           for inputs, outputs in tensors]
        super().__init__(tensors[0][0], tensors[0][1], config.return_input, sess)

    def get_predictor(self, n):
        """The predictor of tower ``n`` (round-robin when ``n`` >= the number of towers)."""
        if n >= len(self.predictors):
            logger.warn("{}: predictor {} asked for, but there are {} towers; assigning round-robin.".format(
                type(self).__name__, n, len(self.predictors)))
        return self.predictors[n % len(self.predictors)]

    def get_predictors(self):
        """The predictors of all towers, in order."""
        return list(self.predictors)


class DataParallelOfflinePredictor(OnlinePredictor):
    """One inference tower per device, each with its own placeholders (``tower0_image``,
    ``tower1_image``...): one call runs all towers at once. It does not split or join
    batches: it takes the inputs of tower 0, then those of tower 1..., and returns the outputs
    in the same layout.

    Example::

        predictor = DataParallelOfflinePredictor(config, ['/cpu:0', '/cpu:1'])  # 1 input, 1 output
        logits0, logits1 = predictor(images[:64], images[64:])
    """

    def __init__(self, config, towers):
        """
        Args:
            config (PredictConfig): the model and how to initialize it.
            towers (int or list): GPU ids or device strings, one per tower.
        """
        builder = _TowersOnOneSession(config, towers, type(self).__name__)

        def tower_placeholders(name):
            return [build_or_reuse_placeholder(tf.TensorSpec(spec.shape, spec.dtype,
                                                             '{}_{}'.format(name, spec.name)))
                    for spec in config.input_signature]

        tensors = builder.build(tower_placeholders)
        self.graph = builder.graph
        sess = builder.create_session()
        super().__init__([t for inputs, _ in tensors for t in inputs],
                         [t for _, outputs in tensors for t in outputs], config.return_input, sess)
