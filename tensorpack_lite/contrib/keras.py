"""Train a Keras 2 model (the ``tf_keras`` package) with tensorpack_lite's trainers, towers
and callbacks.

:class:`KerasModel` builds the Keras model inside the tower function, so every tower the
trainer builds (training towers on several devices, inference towers of an
:class:`InferenceRunner` or a predictor) gets it: the first tower builds the model and owns
its variables, towers that reuse variables call that model again, and the towers of a
replicated trainer build a copy of their own. Each tower is built with the Keras learning
phase fixed (1 in training towers, 0 in inference towers), so Dropout and BatchNormalization
behave as they should without anything fed. The BatchNormalization updates of the main
training tower go to ``UPDATE_OPS`` (run by the default ``RunUpdateOps``), and the Keras
regularization losses are added to the cost. :class:`KerasPhaseCallback` feeds the learning
phase to models built by hand in a ``ModelDesc``.

Needs ``tf_keras`` (``pip install "tensorpack_lite[keras]"``) and ``TF_USE_LEGACY_KERAS=1`` in
the environment before TensorFlow is imported, so that ``tf.keras`` is ``tf_keras`` too.
See docs/keras.md.
"""

import warnings
from contextlib import contextmanager

from ..callbacks.base import Callback
from ..callbacks.inference import ScalarStats
from ..callbacks.inference_runner import InferenceRunner, InferenceRunnerBase
from ..compat import tf, tfv1
from ..graph_builder.devices import local_collections
from ..models.regularize import regularize_cost_from_collection
from ..tfutils.common import get_op_tensor_name
from ..tfutils.summary import add_moving_summary
from ..tfutils.tower_context import get_current_tower_context
from ..train.base import Trainer
from ..train.distributed import DistributedTrainerBase
from ..train.interface import apply_default_prefetch
from ..train.trainers import SimpleTrainer, SyncMultiGPUTrainerParameterServer
from ..utils import logger
from ..utils.gpu import get_num_gpu

_INSTALL_HINT = ('pip install "tensorpack_lite[keras]" (or `pip install tf_keras` of the version of '
                 'your TensorFlow), and set the environment variable TF_USE_LEGACY_KERAS=1 before '
                 'TensorFlow is imported so that tf.keras is Keras 2 too')

try:
    import tf_keras as keras
except ImportError as err:
    raise ImportError("tensorpack_lite.contrib.keras needs Keras 2, the `tf_keras` package, which could "
                      "not be imported ({}). Keras 3 cannot be used. Install it: {}.".format(
                          err, _INSTALL_HINT)) from err

__all__ = ['KerasPhaseCallback', 'setup_keras_trainer', 'KerasModel']

TOTAL_LOSS_NAME = 'total_loss'
LEARNING_PHASE_NAME = 'keras_learning_phase'


def _name_uids():
    """Keras's counters of automatic layer names in the current graph (a dict), or None where
    this tf_keras has none."""
    try:
        from tf_keras.src.backend import get_default_graph_uid_map
    except ImportError:   # pragma: no cover - every tf_keras 2.x has it
        return None
    return get_default_graph_uid_map()


@contextmanager
def _learning_phase_scope(phase):
    """The Keras learning phase fixed to ``phase`` (0 or 1) in the current graph."""
    scope = keras.backend.learning_phase_scope(phase)
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')   # deprecated in Keras, but the way to fix it for a graph
        scope.__enter__()
    try:
        yield
    except BaseException as err:
        if not scope.__exit__(type(err), err, err.__traceback__):
            raise
    else:
        scope.__exit__(None, None, None)


def _learning_phase_tensor(graph):
    """The learning phase placeholder Keras made in ``graph`` if some layer reads it, else None."""
    try:
        tensor = graph.get_tensor_by_name(LEARNING_PHASE_NAME + ':0')
    except KeyError:
        return None
    return tensor if tensor.consumers() else None


class _ReplicaVariables(object):
    """Keras creates its variables with ``tf.compat.v1.Variable``, not ``get_variable``: make
    those of a replica tower local variables, as the replicated trainers want."""

    def __enter__(self):
        def creator(next_creator, **kwargs):
            kwargs['collections'] = local_collections(kwargs.get('collections'))
            return next_creator(**kwargs)
        self._scope = tfv1.variable_creator_scope(creator)
        return self._scope.__enter__()

    def __exit__(self, *exc):
        return self._scope.__exit__(*exc)


class KerasModelCaller(object):
    """Calls ``get_model`` in the towers: the first call (the main training tower) builds the
    model, whose variables are named as Keras names them (without the tower's name scope);
    a tower that reuses variables calls that model on its inputs; a tower with variables of
    its own (a replica ``towerK``) builds a copy under its name, with the same layer names.
    Every tower is built with the Keras learning phase of its context (1 when training).

    A call returns ``(model, outputs, updates)``: the model used, the list of the tower's
    outputs and, for a model called again, the update ops that call made."""

    def __init__(self, get_model):
        if not callable(get_model):
            raise TypeError("get_model must be a function taking the input tensors and returning a "
                            "tf_keras Model, got {!r}".format(get_model))
        self.get_model = get_model
        self.cached_model = None
        self._name_uids = None

    def __call__(self, *input_tensors):
        ctx = get_current_tower_context()
        graph = tfv1.get_default_graph()
        with _learning_phase_scope(1 if ctx.is_training else 0):
            if self.cached_model is None:
                uids = _name_uids()
                self._name_uids = None if uids is None else dict(uids)
                with graph.name_scope(None):
                    model = self.cached_model = self._build(input_tensors)
                return model, list(model.outputs), []
            if ctx.has_own_variables and ctx.vs_name:
                uids = _name_uids()
                if uids is not None and self._name_uids is not None:
                    uids.clear()
                    uids.update(self._name_uids)   # the same layer names as the main model
                with graph.name_scope(ctx.vs_name + '/'), _ReplicaVariables():
                    model = self._build(input_tensors)
                return model, list(model.outputs), []
            model = self.cached_model
            before = set(model.updates)
            outputs = model(list(input_tensors) if len(input_tensors) > 1 else input_tensors[0])
            outputs = list(outputs) if isinstance(outputs, (list, tuple)) else [outputs]
            return model, outputs, [op for op in model.updates if op not in before]

    def _build(self, input_tensors):
        model = self.get_model(*input_tensors)
        if not isinstance(model, keras.Model):
            raise TypeError(
                "get_model must return a tf_keras Model (Keras 2), got {!r}. A Keras 3 model cannot be used: "
                "build it with `import tf_keras as keras`, or set TF_USE_LEGACY_KERAS=1 before TensorFlow "
                "is imported so that tf.keras is tf_keras.".format(type(model)))
        if not model.outputs:
            raise ValueError("The model returned by get_model has no outputs: build it on the input tensors "
                             "it is given (e.g. keras.layers.InputLayer(input_tensor=x) or "
                             "keras.Model(x, y))")
        return model


class _FeedLearningPhase(tfv1.train.SessionRunHook):
    def __init__(self, tensor, value):
        self._feed = {tensor: value}

    def before_run(self, _):
        return tfv1.train.SessionRunArgs(fetches=[], feed_dict=self._feed)


class KerasPhaseCallback(Callback):
    """Feeds Keras's learning phase placeholder: ``isTrain`` in the trainer's runs, and False
    in the runs of every :class:`InferenceRunner` (through a hook registered with it).

    Needed by a Keras model called in a ``ModelDesc`` without a fixed learning phase (its
    Dropout and BatchNormalization then read the placeholder, which defaults to inference).
    :class:`KerasModel` and :func:`setup_keras_trainer` fix the learning phase of each tower
    and add this callback only when a layer still reads the placeholder. Without such a
    layer in the graph the callback does nothing.

    Args:
        isTrain (bool): the value fed in the trainer's runs.
    """

    def __init__(self, isTrain):
        if not isinstance(isTrain, bool):
            raise TypeError("KerasPhaseCallback: isTrain must be a bool, got {!r}".format(isTrain))
        self._isTrain = isTrain
        self._learning_phase = None

    def _setup_graph(self):
        self._learning_phase = _learning_phase_tensor(self.graph)
        if self._learning_phase is None:
            logger.info("KerasPhaseCallback: no layer reads the Keras learning phase; nothing to feed.")
            return
        logger.info("Using Keras learning phase {} in the graph!".format(self._learning_phase.name))
        for cb in self.trainer.callbacks:
            if isinstance(cb, InferenceRunnerBase):
                cb.register_hook(_FeedLearningPhase(self._learning_phase, False))

    def _before_run(self, _):
        if self._learning_phase is None:
            return None
        return tfv1.train.SessionRunArgs(fetches=[], feed_dict={self._learning_phase: self._isTrain})


def _check_name(tensor, name):
    found = get_op_tensor_name(tensor.name)[0].split('/')[-1]
    if found != name:
        raise ValueError("The tensor for '{}' is named {}: another op of the tower already has that name; "
                         "rename it".format(name, tensor.name))


def _as_list(value, what):
    if isinstance(value, str):
        return [value]
    if value is None:
        return []
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise TypeError("{} must be a str or a list of str, got {!r}".format(what, value))
    return list(value)


def _reduced(fn, name, target, output, scope):
    with tfv1.name_scope(scope):
        value = fn(target, output)
    value = tf.reduce_mean(tf.cast(value, tf.float32), name=name)
    _check_name(value, name)
    return value


def _regularization(model, own_model):
    """The regularization cost of a training tower, ``regularize_cost``: the Keras losses of
    its model (all of them for a model of its own; those on weights for a shared one) and
    the REGULARIZATION_LOSSES collection."""
    from_collection = regularize_cost_from_collection(name='regularize_cost_from_collection')
    losses = model.losses if own_model else model.get_losses_for(None)
    losses = [tf.cast(loss, tf.float32) for loss in losses]
    return tf.add_n([from_collection] + losses, name='regularize_cost')


def setup_keras_trainer(trainer, get_model, input_signature, target_signature, input, optimizer, loss,
                        metrics):
    """Set up ``trainer`` (a ``SingleCostTrainer``) to train a Keras model.

    Args:
        trainer (SingleCostTrainer): the trainer.
        get_model: a function taking the input tensors and returning a ``tf_keras.Model``
            built on them; it is part of the tower function.
        input_signature (list[tf.TensorSpec]): the inputs of the model.
        target_signature (list[tf.TensorSpec]): the targets, one for each output.
        input (InputSource): the training data (inputs then targets in each datapoint).
        optimizer (tf.compat.v1.train.Optimizer): the optimizer.
        loss (list[str]): a Keras loss for each output, e.g. ``'categorical_crossentropy'``.
        metrics (list[str]): Keras metrics, the k-th one for the k-th output.

    Each tower's cost is ``total_loss`` = the mean of each loss (a tensor named after it) + the
    regularization (``regularize_cost``); these and the metrics get moving summaries.
    """
    if not isinstance(optimizer, tfv1.train.Optimizer):
        raise TypeError("optimizer must be a tf.compat.v1.train.Optimizer (Keras optimizers are not "
                        "supported), got {!r}".format(optimizer))
    loss = _as_list(loss, 'loss')
    metrics = _as_list(metrics, 'metrics')
    if not loss:
        raise ValueError("No loss was given!")
    input_signature, target_signature = list(input_signature), list(target_signature)
    caller = KerasModelCaller(get_model)
    num_inputs = len(input_signature)

    def get_cost(*tensors):
        ctx = get_current_tower_context()
        own_model = caller.cached_model is None or ctx.has_own_variables
        model, outputs, updates = caller(*tensors[:num_inputs])
        targets = list(tensors[num_inputs:])
        if not len(outputs) == len(targets) == len(loss):
            raise ValueError("The Keras model has {} outputs for {} targets and {} losses; they must be "
                             "as many".format(len(outputs), len(targets), len(loss)))
        if ctx.is_main_training_tower:
            for op in (model.updates if own_model else updates):
                tfv1.add_to_collection(tfv1.GraphKeys.UPDATE_OPS, op)
        loss_tensors = [_reduced(keras.losses.get(name), name, targets[k], outputs[k], 'keras_loss')
                        for k, name in enumerate(loss)]
        extra = [_regularization(model, own_model)] if ctx.is_training else []
        total = tf.add_n(loss_tensors + extra, name=TOTAL_LOSS_NAME)
        add_moving_summary(total, *(loss_tensors + extra))
        if metrics and (ctx.is_main_training_tower or not ctx.is_training):
            if len(metrics) > len(outputs):
                raise ValueError("{} metrics for {} outputs: give one metric per output".format(
                    len(metrics), len(outputs)))
            add_moving_summary(*[_reduced(keras.metrics.get(name), name, targets[k], outputs[k],
                                          'keras_metric') for k, name in enumerate(metrics)])
        return total

    trainer.setup_graph(input_signature + target_signature, input, get_cost, lambda: optimizer)
    if _learning_phase_tensor(tfv1.get_default_graph()) is not None:
        trainer.register_callback(KerasPhaseCallback(True))


class KerasModel(object):
    """A Keras-like front end: ``compile()`` then ``fit()`` a Keras model on a tensorpack
    trainer.

    Args:
        get_model: a function taking the input tensors (one per entry of
            ``input_signature``) and returning a ``tf_keras.Model`` built on them, e.g. a
            ``Sequential`` starting with ``InputLayer(input_tensor=x)``. It is called in the
            tower function (see :class:`KerasModelCaller`).
        input_signature (list[tf.TensorSpec]): the model's inputs.
        target_signature (list[tf.TensorSpec]): the targets, one per output.
        input (InputSource or DataFlow): the training data, ``[inputs..., targets...]``.
        trainer (Trainer): default: ``SimpleTrainer`` on one GPU or none,
            ``SyncMultiGPUTrainerParameterServer`` on all GPUs otherwise. Distributed trainers
            are not supported.

    Example::

        model = KerasModel(get_model, [tf.TensorSpec([None, 28, 28, 1], tf.float32, 'images')],
                           [tf.TensorSpec([None, 10], tf.float32, 'labels')], input=QueueInput(df))
        model.compile(optimizer=tf.train.AdamOptimizer(1e-3), loss='categorical_crossentropy',
                      metrics='categorical_accuracy')
        model.fit(validation_data=test_df, steps_per_epoch=len(df), max_epoch=10)
    """

    def __init__(self, get_model, input_signature=None, target_signature=None, input=None, trainer=None):
        if not callable(get_model):
            raise TypeError("KerasModel: get_model must be callable, got {!r}".format(get_model))
        for what, value in (('input_signature', input_signature), ('target_signature', target_signature),
                            ('input', input)):
            if value is None:
                raise ValueError("KerasModel: argument '{}' is required".format(what))
        self.get_model = get_model
        self.input_signature = list(input_signature)
        self.target_signature = list(target_signature)
        if trainer is None:
            num_gpu = get_num_gpu()
            trainer = SimpleTrainer() if num_gpu <= 1 else SyncMultiGPUTrainerParameterServer(num_gpu)
        if not isinstance(trainer, Trainer):
            raise TypeError("KerasModel: trainer must be a Trainer, got {!r}".format(trainer))
        if isinstance(trainer, DistributedTrainerBase):
            raise TypeError("KerasModel does not support distributed trainers ({})".format(
                type(trainer).__name__))
        self.input = apply_default_prefetch(input, trainer)
        self.trainer = trainer
        self._stats_to_inference = None

    def compile(self, optimizer, loss, metrics=None):
        """Build the training graph.

        Args:
            optimizer (tf.compat.v1.train.Optimizer): the optimizer.
            loss (str or list[str]): a Keras loss per output.
            metrics (str or list[str]): Keras metrics, one per output.
        """
        loss, metrics = _as_list(loss, 'loss'), _as_list(metrics, 'metrics')
        self._stats_to_inference = loss + metrics + [TOTAL_LOSS_NAME]
        setup_keras_trainer(self.trainer, get_model=self.get_model, input_signature=self.input_signature,
                            target_signature=self.target_signature, input=self.input, optimizer=optimizer,
                            loss=loss, metrics=metrics)

    def fit(self, validation_data=None, **kwargs):
        """Train.

        Args:
            validation_data (DataFlow or InputSource): if given, an :class:`InferenceRunner`
                computing the losses, metrics and ``total_loss`` on it (as ``validation_<name>``)
                runs after every epoch; it is the first of the callbacks.
            kwargs: the arguments of :meth:`Trainer.train_with_defaults`.
        """
        if self._stats_to_inference is None:
            raise RuntimeError("KerasModel.fit() needs compile() first")
        callbacks = list(kwargs.pop('callbacks', None) or [])
        if validation_data is not None:
            callbacks.insert(0, InferenceRunner(validation_data, ScalarStats(self._stats_to_inference)))
        self.trainer.train_with_defaults(callbacks=callbacks, **kwargs)
