"""PredictConfig: everything needed to build a model for inference and run it."""

from ..compat import tfv1
from ..graph_builder.model_desc import ModelDescBase
from ..tfutils.common import check_tensor_names
from ..tfutils.sesscreate import NewSessionCreator
from ..tfutils.sessinit import JustCurrentSession, SessionInit
from ..tfutils.tower_func import TowerFunc
from ..utils import logger

__all__ = ['PredictConfig']


class PredictConfig(object):
    """How to build, initialize and query a model for inference.

    The graph comes from one of

    1. ``model``: a :class:`ModelDescBase`; its ``build_graph`` is the tower function and
       its ``inputs()`` the input signature;
    2. ``tower_func``: a :class:`TowerFunc` (it knows its input signature);
    3. ``tower_func``: a plain function, together with ``input_signature``.

    Example::

        config = PredictConfig(model=MyModel(),
                               input_names=['image'],
                               output_names=['logits', 'prob'],
                               session_init=SaverRestore('train_log/model-1000'))
        predictor = OfflinePredictor(config)
        logits, prob = predictor(image_batch)
    """

    def __init__(self, model=None, tower_func=None, input_signature=None,
                 input_names=None, output_names=None,
                 session_creator=None, session_init=None,
                 return_input=False, create_graph=True):
        """
        Args:
            model (ModelDescBase): the model; excludes ``tower_func`` and
                ``input_signature``.
            tower_func (callable or TowerFunc): builds the inference graph from the input
                tensors (positional arguments).
            input_signature (list[tf.TensorSpec]): the inputs of a plain ``tower_func``.
            input_names (list[str]): the tensors fed when the predictor is called, in order:
                names of the input signature, or of any tensor in the tower. Defaults to all
                inputs of the signature.
            output_names (list[str]): the tensors to compute, named inside the tower (e.g.
                ``'logits'`` for the op created by ``tf.identity(x, name='logits')``).
            session_creator (tf.compat.v1.train.SessionCreator): defaults to
                :class:`NewSessionCreator`.
            session_init (SessionInit): how to fill the variables, e.g. from a checkpoint;
                defaults to :class:`JustCurrentSession` (variables keep their initializers'
                values).
            return_input (bool): see :class:`PredictorBase`.
            create_graph (bool): build the predictor in a new ``tf.Graph`` (default), or in
                the default graph of the time the predictor is built.
        """
        if model is not None:
            if tower_func is not None or input_signature is not None:
                raise ValueError("PredictConfig: give either `model`, or `tower_func` (with "
                                 "`input_signature` for a plain function), not both.")
            if not isinstance(model, ModelDescBase):
                raise TypeError("PredictConfig: model must be a ModelDescBase, got {!r}".format(
                    model))
            self.input_signature = model.get_input_signature()
            self.tower_func = TowerFunc(model.build_graph, self.input_signature)
        else:
            if tower_func is None:
                raise ValueError("PredictConfig needs `model` or `tower_func` to build the "
                                 "graph; got neither.")
            if isinstance(tower_func, TowerFunc):
                if input_signature is not None and \
                        list(input_signature) != tower_func.input_signature:
                    raise ValueError(
                        "PredictConfig: input_signature {} differs from the signature {} of "
                        "the TowerFunc; leave input_signature out.".format(
                            [s.name for s in input_signature],
                            [s.name for s in tower_func.input_signature]))
                input_signature = tower_func.input_signature
            elif not callable(tower_func):
                raise TypeError("PredictConfig: tower_func must be callable, got {!r}".format(
                    tower_func))
            elif input_signature is None:
                raise ValueError("PredictConfig: tower_func {} is a plain function: give its "
                                 "input_signature too (or wrap it in a TowerFunc).".format(
                                     getattr(tower_func, '__name__', tower_func)))
            self.tower_func = TowerFunc(tower_func, input_signature)
            self.input_signature = self.tower_func.input_signature

        if input_names is None:
            input_names = [spec.name for spec in self.input_signature]
        self.input_names = check_tensor_names(input_names, 'PredictConfig', 'input_names')
        if not self.input_names:
            logger.warning("PredictConfig has empty input_names: the predictor takes no "
                           "inputs.")
        if output_names is None:
            raise ValueError("PredictConfig: output_names is required (the names of the "
                             "tensors to predict).")
        self.output_names = check_tensor_names(output_names, 'PredictConfig', 'output_names', empty=False)

        if session_creator is None:
            session_creator = NewSessionCreator()
        if not callable(getattr(session_creator, 'create_session', None)):
            raise TypeError("PredictConfig: session_creator must be a tf.compat.v1.train."
                            "SessionCreator, got {!r}".format(session_creator))
        self.session_creator = session_creator

        if session_init is None:
            session_init = JustCurrentSession()
        if not isinstance(session_init, SessionInit):
            raise TypeError("PredictConfig: session_init must be a SessionInit, got {!r}".format(
                session_init))
        self.session_init = session_init

        self.return_input = bool(return_input)
        self.create_graph = bool(create_graph)

    def make_graph(self):
        """The graph to build the model in: a new one (``create_graph``), else the default
        graph."""
        if self.create_graph:
            return tfv1.Graph()
        return tfv1.get_default_graph()

    def input_tensors(self, tower):
        """The tensors of ``input_names`` in ``tower`` (a :class:`TowerTensorHandle`); an
        unknown name is a ValueError naming it."""
        return self._lookup(tower, self.input_names, 'input_names')

    def output_tensors(self, tower):
        """The tensors of ``output_names`` in ``tower``, as :meth:`input_tensors`."""
        return self._lookup(tower, self.output_names, 'output_names')

    @staticmethod
    def _lookup(tower, names, arg):
        try:
            return tower.get_tensors(names)
        except KeyError as err:
            raise ValueError("PredictConfig.{}: {}".format(arg, err.args[0] if err.args else err)) from err

    def __repr__(self):
        return "PredictConfig(input_names={}, output_names={})".format(
            self.input_names, self.output_names)
