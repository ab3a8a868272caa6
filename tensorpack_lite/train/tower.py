"""Trainers that build their model through a tower function.

:class:`TowerTrainer` keeps the :class:`TowerFunc` the model was built with, so inference
towers (and predictors) can be built on the same variables at any time before the graph is
finalized. :class:`SingleCostTrainer` builds training towers from a cost function, an
optimizer function and an :class:`InputSource`; its subclasses decide where the towers go.
"""

import contextlib

from ..callbacks.accumulation import AccumulatorState
from ..compat import tf, tfv1
from ..graph_builder.accumulation import GradientAccumulator
from ..input_source.input_source_base import InputSource
from ..loop.callback import Callback
from ..precision.loss_scale import LossScaleOptimizer
from ..predict.base import OnlinePredictor
from ..tfutils.cost_terms import terms_to_check
from ..tfutils.gradient_order import ordered_gradients
from ..tfutils.gradproc import FilterNoneGrad
from ..tfutils.inference_tower import build_predict_tower
from ..tfutils.tower_context import get_current_tower_context
from ..tfutils.tower_func import TowerFunc
from ..tfutils.varmanip import is_reference_variable
from ..utils.argtools import call_only_once, is_int, memoized, memoized_method
from .base import Trainer

__all__ = ['TowerTrainer', 'SingleCostTrainer']


def _batch_size_of(inputs):
    """The batch dimension of the first input that has one (a scalar tensor), or None."""
    for tensor in inputs:
        if isinstance(tensor, tf.Tensor) and tensor.shape.ndims != 0:
            return tf.shape(tensor, name='replica_batch_size')[0]
    return None


class _ReplicaBatchProbe(Callback):
    """Reads the batch of the first training tower in the first step of every epoch (an
    extra fetch of one scalar): ``value``, None before the first step."""

    _chief_only = False

    def __init__(self, batch_size):
        self._batch_size = batch_size
        self.value = None

    def _before_run(self, ctx):
        loop = self.trainer.loop
        if (loop.local_step == 0 or self.value is None) and loop.is_first_run_of_step:
            return [self._batch_size]
        return None

    def _after_run(self, run_context, run_values):
        if run_values.results:
            self.value = int(run_values.results[0])

    def _get_state(self):     # a run resumed mid-epoch has the value of the epoch's first step
        return None if self.value is None else {'value': self.value, 'world_size': self.trainer.world_size}

    def _set_state(self, state):    # but one resumed with another world size reads it again
        if state.get('world_size', self.trainer.world_size) == self.trainer.world_size:
            self.value = int(state['value'])


class TowerTrainer(Trainer):
    """A trainer whose model is built by a :class:`TowerFunc` (``trainer.tower_func``).

    Every call of the tower function is recorded: ``trainer.towers`` lists them, and
    :meth:`get_predictor` builds an inference tower sharing the training variables.
    """

    _tower_func = None

    def __init__(self):
        super().__init__()
        self._predictors = []

    @property
    def tower_func(self):
        """The :class:`TowerFunc` that builds the model."""
        return self._tower_func

    @tower_func.setter
    def tower_func(self, func):
        if not isinstance(func, TowerFunc):
            raise TypeError("tower_func must be a TowerFunc, got {!r}".format(func))
        self._tower_func = func

    @property
    def input_signature(self):
        """The list of ``tf.TensorSpec`` the tower function takes."""
        return self.tower_func.input_signature

    @property
    def inputs_desc(self):
        """Old name of :attr:`input_signature`."""
        return self.input_signature

    @property
    def towers(self):
        """The :class:`TowerTensorHandles` of every tower built so far."""
        if self._tower_func is None:
            raise RuntimeError("{} has no tower_func yet: towers exist once the graph is set up".format(
                type(self).__name__))
        return self.tower_func.towers

    def get_predictor(self, input_names, output_names, device=0):
        """An :class:`OnlinePredictor` running an inference tower built on the training
        variables (built once per device, before the graph is finalized).

        Args:
            input_names (list[str]): names of inputs of the input signature or of tensors
                in the tower.
            output_names (list[str]): names of tensors in the tower.
            device (int): GPU id to build the tower on; -1 for the CPU.

        Example::

            predictor = trainer.get_predictor(['image'], ['prob'])
            prob, = predictor(images)   # once the session exists; in any thread
        """
        return self._get_predictor(tuple(input_names), tuple(output_names), int(device))

    @memoized_method
    def _get_predictor(self, input_names, output_names, device):
        if self._tower_func is None:
            raise RuntimeError("get_predictor() needs trainer.tower_func to be set")
        tower_name = 'tower-pred-{}'.format(device) if device >= 0 else 'tower-pred-cpu'
        try:
            tower = self.tower_func.towers[tower_name]
        except KeyError:
            tower = build_predict_tower(self.tower_func, None, tower_name, device,
                                        self.vs_name_for_predictor(device))
        predictor = OnlinePredictor(tower.get_tensors(list(input_names)),
                                    tower.get_tensors(list(output_names)), sess=self.sess)
        self._predictors.append(predictor)
        return predictor

    def initialize(self, session_creator, session_init):
        """As :meth:`Trainer.initialize`; then the predictors made by :meth:`get_predictor`
        before the session existed run in ``trainer.sess``, so they work from any thread (e.g.
        a thread pool of an evaluation callback), not only under ``sess.as_default()``."""
        super().initialize(session_creator, session_init)
        for predictor in self._predictors:
            if predictor.sess is None:
                predictor.sess = self.sess

    def vs_name_for_predictor(self, device):
        """The variable scope inference towers read their variables from ('' = the main one)."""
        return ''


class SingleCostTrainer(TowerTrainer):
    """Base class of trainers that minimize one cost, built from a cost function, an
    optimizer function and an InputSource.

    Subclasses implement ``_setup_graph(input, get_cost_fn, get_opt_fn)``, which builds the
    towers (usually through :meth:`_make_get_grad_fn`), sets ``self.train_op`` and returns
    extra callbacks. These attributes tune gradient computation:
    """

    COLOCATE_GRADIENTS_WITH_OPS = True
    """Compute each gradient on the device of its forward op."""

    GATE_GRADIENTS = False
    """Passed to ``Optimizer.compute_gradients`` (``GATE_OP`` when True, ``GATE_NONE`` otherwise;
    ``GATE_GRAPH`` whatever it says when a variable is a TF1 reference variable)."""

    ORDER_GRADIENTS = True
    """Build the training towers under :func:`~tensorpack_lite.tfutils.gradient_order.ordered_gradients`:
    a ``BiasAdd`` hands on its output gradient after the bias gradient, a ``MatMul`` computes
    its weight gradient after the gradient it hands on. Same values; on a CPU, 4-5 % faster
    on AlexNet and VGG-16 (the rest of the backward pass stays as :attr:`GATE_GRADIENTS` says)."""

    AGGREGATION_METHOD = None
    """``tf.AggregationMethod`` used to add up gradients (None: TensorFlow's default)."""

    XLA_COMPILE = False
    """Compile the forward and backward pass of each tower with XLA."""

    CHECK_COST = True
    """Stop training with a ``FloatingPointError`` naming the step as soon as a tower's cost is
    NaN or infinite, before its gradients are applied (not with ``XLA_COMPILE``). The check
    tests the terms the cost adds up but a weight decay (which the step does not compute
    otherwise; a weight that is not finite shows in the other terms): see
    :mod:`~tensorpack_lite.tfutils.cost_terms`. When False, a multi-process trainer reduces the
    towers' costs with the gradients instead, so that every process reads the step's mean cost
    (for ``RollbackOnAnomaly``)."""

    _COST_CHECK_MARK = 'is not finite'

    _loss_scale = None
    _replica_batch = None     # the batch size tensor of the first training tower
    _batch_probe = None

    _accumulate = 1
    _accumulator = None
    _tower_costs = ()     # the training towers' costs, in tower order, once built (none with XLA)
    _tower_grads = ()     # the training towers' gradients of an update, in tower order, once built
    _tower_grad_norms = None

    def _shared_costs(self):
        """The training towers' costs for a multi-process trainer's all-reduce (once, while it
        builds it): none while :attr:`CHECK_COST` stops at a non-finite cost (nothing then
        reads them). With ``accumulate`` > 1, each the mean over the update's micro-batches:
        only the update's run reduces."""
        costs = [] if self.CHECK_COST else list(self._tower_costs)
        if self._accumulator is not None:
            costs = [self._accumulator.add_cost(cost) for cost in costs]
        return costs

    def _shared_gradient_norms(self):
        """With the costs, the global norm of each training tower's gradients of the update
        (before they are averaged across towers and processes), for the same all-reduce."""
        return [] if self.CHECK_COST or not self._tower_costs else self.tower_gradient_norms()

    def tower_gradient_norms(self):
        """The global norm (float32) of each training tower's gradients of the step (of the
        update, with ``accumulate``), in tower order, built on the first call once the towers
        are (``RollbackOnAnomaly(watch_gradient_norm=True)``)."""
        if self._tower_grad_norms is None:
            norms = []
            for grads in self._tower_grads:
                gradients = [g for g, _ in grads]
                with tf.device(gradients[0].device if gradients else None), tf.name_scope('grad_norm'):
                    norms.append(tf.cast(tf.linalg.global_norm(gradients), tf.float32))
            self._tower_grad_norms = norms
        return list(self._tower_grad_norms)

    @property
    def checks_cost(self):
        """Whether a non-finite cost stops training (:attr:`CHECK_COST`, unless the towers are
        compiled with XLA or the loss is scaled, where a step with an overflow is skipped
        instead); known once the graph is set up."""
        return self.CHECK_COST and not self.XLA_COMPILE and self._loss_scale is None

    @property
    def accumulate(self):
        """K, the micro-batches of one update (1: every step updates). Set it (or
        ``TrainConfig(accumulate=K)``) before the graph is set up: each step then runs one
        micro-batch, and every K-th step reduces the mean of the K micro-batches' gradients across
        towers and processes, once, and applies it (see
        :class:`~tensorpack_lite.graph_builder.accumulation.GradientAccumulator` and
        docs/trainer.md "Gradient accumulation")."""
        return self._accumulate

    @accumulate.setter
    def accumulate(self, value):
        if self._graph_set_up():
            raise RuntimeError("{}.accumulate must be set before the graph is set up".format(
                type(self).__name__))
        if not is_int(value) or value < 1:
            raise ValueError("{}.accumulate (micro-batches per update) must be an int >= 1, got {!r}".format(
                type(self).__name__, value))
        self._accumulate = int(value)

    @property
    def accumulator(self):
        """The :class:`GradientAccumulator` of a run with ``accumulate`` > 1 (None otherwise)."""
        return self._accumulator

    @property
    def global_batch(self):
        """The datapoints of one step, all replicas together: the first training tower's batch
        (read in the first step of each epoch) times :attr:`world_size`; None before."""
        if self._batch_probe is None or self._batch_probe.value is None:
            return None
        return self._batch_probe.value * self.world_size

    def _graph_set_up(self):
        return self._tower_func is not None

    def _loss_scale_device(self):
        """Where the :class:`DynamicLossScale` state lives (template; None: where the
        trainer's device scope puts it)."""
        return None

    def _with_loss_scale_update(self, train_op):
        """``train_op`` followed by the once-a-step update of the loss scale (template: the
        parameter-server trainers update it inside the chief's apply instead)."""
        return self._loss_scale.update_after(train_op)

    def _step_fetch(self):
        """The train op, or with accumulation, the accumulate op in the first K - 1 steps of an
        update."""
        accumulator = self._accumulator
        if accumulator is None or accumulator.updates_at(self.loop.global_step):
            return self.train_op
        return accumulator.accumulate_op

    def run_step(self):
        try:
            super().run_step()
        except tf.errors.InvalidArgumentError as err:
            if self._COST_CHECK_MARK not in (err.message or ''):
                raise
            loop = self.loop
            raise FloatingPointError(
                "{} at global step {} (epoch {}, step {} of the epoch); no update of that step "
                "was applied.".format(err.message.split('\n')[0], loop.global_step + 1,
                                      loop.epoch_num, loop.local_step + 1)) from err

    def _checked_gradients(self, cost, grads):
        """``grads`` made to wait for a check that ``cost`` is finite (see :attr:`CHECK_COST`):
        of the terms it adds up, all but its weight decay
        (:func:`~tensorpack_lite.tfutils.cost_terms.terms_to_check`)."""
        checks = []
        for term in terms_to_check(cost):
            culprit = '' if term is cost else ' (its term {})'.format(term.name)
            checks.append(tf.debugging.check_numerics(
                term, "The cost {} {}{}".format(cost.name, self._COST_CHECK_MARK, culprit)))
        with tf.control_dependencies(checks):
            return [(tf.IndexedSlices(tf.identity(g.values), g.indices, g.dense_shape)
                     if isinstance(g, tf.IndexedSlices) else tf.identity(g), v) for g, v in grads]

    @call_only_once
    def setup_graph(self, input_signature, input, get_cost_fn, get_opt_fn):
        """Build the training graph.

        Args:
            input_signature (list[tf.TensorSpec]): the inputs of ``get_cost_fn``.
            input (InputSource): where the inputs come from.
            get_cost_fn: a function taking the input tensors and returning a scalar cost.
            get_opt_fn: a function returning a ``tf.compat.v1.train.Optimizer``.
        """
        if not isinstance(input, InputSource):
            raise TypeError("setup_graph() takes an InputSource, got {!r}; wrap a DataFlow in "
                            "FeedInput or QueueInput".format(input))
        if input.setup_done():
            raise RuntimeError("{} was already set up: an InputSource feeds one trainer".format(input))
        if self.mixed_precision is not None:
            self.mixed_precision.prepare_graph(tfv1.get_default_graph())
        get_opt_fn = self._with_loss_scaling(get_opt_fn)
        tower_func = TowerFunc(get_cost_fn, input_signature)
        self._tower_costs, self._tower_grads, self._tower_grad_norms = [], [], None
        if self._accumulate > 1:
            self._accumulator = GradientAccumulator(self._accumulate)
        self.tower_func = tower_func
        input_callbacks = input.setup(input_signature)
        train_callbacks = self._setup_graph(input, tower_func, get_opt_fn)
        if self._loss_scale is not None:
            self.train_op = self._with_loss_scale_update(self.train_op)
            self._loss_scale.add_summaries()
        if self._accumulator is not None:
            self.train_op = self._accumulator.after_update(self.train_op)
            self._accumulation_built(self._accumulator.accumulate_op)
            train_callbacks = list(train_callbacks) + [AccumulatorState(self._accumulator)]
        if self._replica_batch is not None:
            self._batch_probe = _ReplicaBatchProbe(self._replica_batch)
            train_callbacks = list(train_callbacks) + [self._batch_probe]
        self.register_callback(input_callbacks + list(train_callbacks))

    def _accumulation_built(self, accumulate_op):
        """With ``accumulate`` > 1, once the graph is built: ``accumulate_op`` is what the first
        K - 1 steps of an update run (template: a trainer whose hooks fetch what the update
        reduces leaves those runs alone)."""

    def _with_loss_scaling(self, get_opt_fn):
        """``get_opt_fn`` memoized; with ``mixed_precision`` 'fp16', its optimizer wrapped in
        a :class:`LossScaleOptimizer` (the scale's variables are made here, outside towers)."""
        precision = self.mixed_precision
        if precision is not None:
            self._loss_scale = precision.new_loss_scale(device=self._loss_scale_device())
        if self._loss_scale is None:
            return memoized(get_opt_fn)

        @memoized
        def get_scaled_opt():
            return LossScaleOptimizer(get_opt_fn(), self._loss_scale)
        return get_scaled_opt

    @property
    def loss_scale(self):
        """The :class:`DynamicLossScale` of an 'fp16' run (None otherwise)."""
        return self._loss_scale

    def _setup_graph(self, input, get_cost_fn, get_opt_fn):
        """Build the towers and ``self.train_op``; return a list of callbacks."""
        raise NotImplementedError("{} must implement _setup_graph()".format(type(self).__name__))

    def _make_get_grad_fn(self, input, get_cost_fn, get_opt_fn):
        """A function that, called inside a TrainTowerContext, builds one tower on the next
        input tensors and returns its list of (gradient, variable)."""
        if not input.setup_done():
            raise RuntimeError("The InputSource must be set up before the towers are built")

        def compute_grads(*inputs):
            with self._forward_scope():
                cost = get_cost_fn(*inputs)
            if not isinstance(cost, tf.Tensor):
                raise TypeError("The cost function must return the cost tensor, got {!r}".format(cost))
            if cost.shape.ndims != 0:
                raise ValueError("The cost must be a scalar, got {} with shape {}".format(
                    cost.name, cost.shape))
            ctx = get_current_tower_context()
            if not ctx.is_training:
                return None
            if not self.XLA_COMPILE:     # (inside an XLA cluster, the cost is not a tensor to fetch)
                self._tower_costs.append(cost)
            optimizer = get_opt_fn()
            if not isinstance(optimizer, tfv1.train.Optimizer):
                raise TypeError("The optimizer function must return a tf.compat.v1.train.Optimizer, "
                                "got {!r}".format(optimizer))
            variables = self._trainable_variables(ctx)
            grads = optimizer.compute_gradients(
                cost, var_list=variables, gate_gradients=self._gate_for(variables),
                colocate_gradients_with_ops=self.COLOCATE_GRADIENTS_WITH_OPS,
                aggregation_method=self.AGGREGATION_METHOD)
            grads = FilterNoneGrad().process(grads)
            if self.checks_cost:
                grads = self._checked_gradients(cost, grads)
            return grads

        def accumulated(grads):
            grads = grads if self._accumulator is None else self._accumulator.add_tower(grads)
            self._tower_grads.append(grads)
            return grads

        def get_grad_fn():
            inputs = input.get_input_tensors()
            if self._replica_batch is None:
                self._replica_batch = _batch_size_of(inputs)
            if not self.XLA_COMPILE:
                return accumulated(compute_grads(*inputs))
            variables = []

            def xla_body(*tensors):
                pairs = compute_grads(*tensors)
                variables.extend(var for _, var in pairs)
                return [grad for grad, _ in pairs]

            grads = tf.xla.experimental.compile(xla_body, inputs)
            return accumulated(list(zip(grads, variables)))

        return get_grad_fn

    def _forward_scope(self):
        """What a training tower's forward graph is built under."""
        return ordered_gradients() if self.ORDER_GRADIENTS else contextlib.nullcontext()

    def _gate_for(self, variables):
        """The ``gate_gradients`` of ``compute_gradients``: ``GATE_GRAPH`` when a variable is a
        reference variable (TF1's, e.g. after ``disable_v2_behavior()``), whose reads alias the
        buffer an update writes in place: an update may otherwise run while a gradient that reads
        the variable (another layer's, or another tower's) is still to be computed, so the step
        computes with half-updated weights. Resource variables are read as snapshots, so they
        keep ``GATE_OP`` / ``GATE_NONE`` by :attr:`GATE_GRADIENTS`."""
        if any(is_reference_variable(var) for var in variables):
            return tfv1.train.Optimizer.GATE_GRAPH
        return tfv1.train.Optimizer.GATE_OP if self.GATE_GRADIENTS else tfv1.train.Optimizer.GATE_NONE

    @staticmethod
    def _trainable_variables(ctx):
        if ctx.has_own_variables:
            return ctx.get_collection_in_tower(tfv1.GraphKeys.TRAINABLE_VARIABLES)
        return tfv1.trainable_variables()
