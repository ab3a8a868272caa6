"""Towers: building the same model function several times in one graph.

A *tower* is one call of a model-building function ("tower function") under a
:class:`TowerContext`. Data-parallel training builds one training tower per device, and
inference builds further towers on the same graph. The rules every tower function follows:

1. It gets its inputs as arguments and builds the graph from them only.
2. It creates variables with ``tf.compat.v1.get_variable`` (never ``tf.Variable``), so that
   they are created once, by the tower that owns variables (the first training tower, or a
   tower with its own ``vs_name``), and *reused* by every other tower: those towers run
   under a variable scope with ``reuse=True``.
3. It finds out whether it is training from :func:`get_current_tower_context` (e.g. to
   switch batch normalization), not from a Python flag of its own.
4. Names that start with ``tower`` are reserved for towers (``tower0``, ``tower1``...): do not
   give your own variables or scopes such names, or a tower name will collide with them.

Example::

    def tower_fn(image, label):
        W = tf.compat.v1.get_variable('W', [784, 10])
        logits = tf.matmul(image, W)
        return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
            labels=label, logits=logits), name='loss')

    func = TowerFunc(tower_fn, [tf.TensorSpec([None, 784], tf.float32, 'image'),
                                tf.TensorSpec([None], tf.int32, 'label')])
    with TrainTowerContext('tower0', index=0, total=2):
        func(image0, label0)          # creates W, and op 'tower0/loss'
    with TrainTowerContext('tower1', index=1, total=2):
        func(image1, label1)          # reuses W, creates op 'tower1/loss'
    func.towers[1]['loss']            # the tensor 'tower1/loss:0'
    func.towers.training()[0]['image']   # image0, the input fed to tower0
"""

from ..compat import tf, tfv1
from ..utils import logger
from ..utils.gpu import get_num_gpu
from ..utils.naming import MOVING_SUMMARY_OPS_KEY
from .collection import CollectionGuard
from .common import get_op_tensor_name

__all__ = ['BaseTowerContext', 'TrainTowerContext', 'PredictTowerContext', 'TowerContext',
           'get_current_tower_context', 'TowerFunc', 'TowerFuncWrapper',
           'TowerTensorHandle', 'TowerTensorHandles', 'build_predict_tower']


_current_tower_context = None


def get_current_tower_context():
    """The tower context being built right now, or None outside any tower."""
    return _current_tower_context


class BaseTowerContext(object):
    """The context a tower is built in: its name scope, variable scope, and role.

    Do not use it directly: use :class:`TrainTowerContext`, :class:`PredictTowerContext` or
    :func:`TowerContext`. Subclasses define :attr:`is_training`,
    :attr:`is_main_training_tower`, :attr:`has_own_variables` and :meth:`_keys_to_freeze`.

    Entering the context

    * opens a variable scope: ``vs_name`` (or the current one when ``vs_name`` is empty) if the
      tower has its own variables, otherwise the current variable scope with ``reuse=True``;
    * opens the name scope ``ns_name`` (absolute, unless empty or equal to ``vs_name``, whose
      variable scope already opened it);
    * starts a :class:`CollectionGuard`, which discards what the tower adds to the frozen
      collections.

    Towers cannot be nested, and a tower's name scope must be new in the graph.
    """

    def __init__(self, ns_name, vs_name=''):
        """
        Args:
            ns_name (str): the name scope of the tower's ops, e.g. ``'tower0'``; may be empty.
            vs_name (str): the variable scope of the tower's own variables; empty means the
                current variable scope. Needs a non-empty ``ns_name``.
        """
        for arg, value in (('ns_name', ns_name), ('vs_name', vs_name)):
            if not isinstance(value, str):
                raise TypeError("{}: {} must be a str, got {!r}".format(
                    type(self).__name__, arg, value))
            if value.endswith('/') or value.startswith('/'):
                raise ValueError("{}: {}={!r} must not start or end with '/'".format(
                    type(self).__name__, arg, value))
        if vs_name and not ns_name:
            raise ValueError("{}: vs_name={!r} needs a non-empty ns_name".format(
                type(self).__name__, vs_name))
        self._ns_name = ns_name
        self._vs_name = vs_name
        self._guard = None
        self._scopes = None

    # ----- what a tower is --------------------------------------------------------------
    @property
    def name(self):
        """Same as :attr:`ns_name`."""
        return self._ns_name

    @property
    def ns_name(self):
        """The name scope of the tower's ops."""
        return self._ns_name

    @property
    def vs_name(self):
        """The variable scope of the tower's own variables ('' means the current one)."""
        return self._vs_name

    @property
    def is_training(self):
        """Whether this tower is built for training."""
        raise NotImplementedError()

    @property
    def is_main_training_tower(self):
        """Whether this is the first training tower (the one that owns summaries)."""
        raise NotImplementedError()

    @property
    def has_own_variables(self):
        """Whether the tower creates variables, rather than reusing existing ones."""
        raise NotImplementedError()

    @property
    def index(self):
        """The index of this tower among the towers built together."""
        return 0

    @property
    def total(self):
        """How many towers are built together."""
        return 1

    def _keys_to_freeze(self):
        """The collections whose additions inside this tower are discarded on exit."""
        raise NotImplementedError()

    def get_collection_in_tower(self, key):
        """The items this tower added to collection ``key``, in order. Additions to frozen
        collections are discarded on exit, and so not returned after it."""
        if self._guard is None:
            raise RuntimeError("{} has not been entered yet.".format(self))
        return self._guard.get_collection_in_tower(key)

    # ----- entering and leaving ---------------------------------------------------------
    def _check_can_enter(self):
        """Raise for a context that cannot be entered here (subclasses add checks)."""
        if _current_tower_context is not None:
            raise RuntimeError("Cannot enter {} inside {}: towers cannot be nested.".format(
                self, _current_tower_context))
        if self._guard is not None:
            raise RuntimeError("{} has already been entered once; make a new one.".format(self))
        if self._ns_name:
            graph = tfv1.get_default_graph()
            with graph.name_scope(None):
                free_name = graph.unique_name(self._ns_name, mark_as_used=False)
            prefix = self._ns_name + '/'
            clash = next((op.name for op in graph.get_operations()
                          if op.name == self._ns_name or op.name.startswith(prefix)), None)
            if free_name != self._ns_name or clash is not None:
                raise ValueError(
                    "Name conflict for {}: the name scope '{}' is already used in the graph "
                    "({}). Use another tower name, and do not give your own scopes or ops "
                    "tower-like names.".format(
                        self, self._ns_name, "e.g. by op '{}'".format(clash) if clash
                        else "a new scope of that name would be '{}'".format(free_name)))

    def _make_scopes(self):
        scopes = []
        current_vs = tfv1.get_variable_scope()
        if self.has_own_variables:
            if self._vs_name:
                scopes.append(tfv1.variable_scope(self._vs_name))
            else:
                scopes.append(tfv1.variable_scope(current_vs))
        else:
            scopes.append(tfv1.variable_scope(current_vs, reuse=True))
        if self._ns_name and self._ns_name != self._vs_name:
            scopes.append(tfv1.name_scope(self._ns_name + '/'))
        return scopes

    def __enter__(self):
        global _current_tower_context
        self._check_can_enter()
        self._guard = CollectionGuard(self._ns_name,
                                      check_diff=not self.is_main_training_tower,
                                      freeze_keys=self._keys_to_freeze())
        self._scopes = self._make_scopes() + [self._guard]
        entered = []
        try:
            for scope in self._scopes:
                scope.__enter__()
                entered.append(scope)
            name_scope = tfv1.get_default_graph().get_name_scope()
            if name_scope != self._ns_name:
                raise ValueError(
                    "Name conflict: inside {} the name scope is '{}' instead of '{}'. Give the "
                    "tower another name, or enter it outside of other name scopes.".format(
                        self, name_scope, self._ns_name))
            if self._ns_name and self._ns_name != self._vs_name:
                # an absolute name scope does not reserve its name: reserve it, so that a
                # later tower or scope of the same name is detected as a conflict
                graph = tfv1.get_default_graph()
                with graph.name_scope(None):
                    graph.unique_name(self._ns_name, mark_as_used=True)
        except Exception:
            for scope in reversed(entered):
                scope.__exit__(None, None, None)
            raise
        _current_tower_context = self
        return self

    def __exit__(self, exc_type, exc_val, exc_tb):
        global _current_tower_context
        _current_tower_context = None
        new_trainables = []
        if exc_type is None and not self.has_own_variables:
            new_trainables = self._guard.get_collection_in_tower(
                tfv1.GraphKeys.TRAINABLE_VARIABLES)
        for scope in reversed(self._scopes):
            scope.__exit__(exc_type, exc_val, exc_tb)
        if new_trainables:
            raise ValueError(
                "{} reuses variables but created new trainable variables: {}. Create variables "
                "with tf.compat.v1.get_variable, in the tower that owns variables.".format(
                    self, ', '.join(v.name for v in new_trainables)))
        return False

    def __str__(self):
        return "{}(ns_name='{}', vs_name='{}', is_training={})".format(
            type(self).__name__, self._ns_name, self._vs_name, self.is_training)

    __repr__ = __str__


class TrainTowerContext(BaseTowerContext):
    """The context of a training tower.

    The tower with ``index == 0`` is the main training tower: it creates the variables and
    owns the summaries. Towers with ``index > 0`` reuse its variables (unless given their own
    ``vs_name``), and what they add to the summary collections is discarded.

    It must be entered at the root variable scope.

    Example::

        with TrainTowerContext('tower1', index=1, total=2):
            loss = tower_fn(*inputs)     # reuses tower0's variables; ops named 'tower1/...'
    """

    def __init__(self, ns_name, vs_name='', index=0, total=1):
        """
        Args:
            ns_name (str): name scope of the tower, conventionally ``'tower{index}'``.
            vs_name (str): give the tower its own variables under this variable scope.
            index (int): index of this tower, ``0 <= index < total``.
            total (int): number of training towers.
        """
        super(TrainTowerContext, self).__init__(ns_name, vs_name)
        index, total = int(index), int(total)
        if not 0 <= index < total:
            raise ValueError("TrainTowerContext '{}': index={} must be in [0, total={})".format(
                ns_name, index, total))
        self._index = index
        self._total = total
        self._check_variable_scope()
        self._initial_vs_reuse = bool(tfv1.get_variable_scope().reuse)
        if vs_name and self._initial_vs_reuse:
            raise ValueError("TrainTowerContext '{}' has vs_name='{}', which asks for its own "
                             "variables, but the variable scope has reuse=True.".format(
                                 ns_name, vs_name))

    def _check_variable_scope(self):
        vs = tfv1.get_variable_scope().name
        if vs:
            raise ValueError("TrainTowerContext '{}' must be used at the root variable scope, "
                             "not inside variable scope '{}'.".format(self._ns_name, vs))

    def _check_can_enter(self):
        self._check_variable_scope()
        super(TrainTowerContext, self)._check_can_enter()

    @property
    def is_training(self):
        return True

    @property
    def index(self):
        return self._index

    @property
    def total(self):
        return self._total

    @property
    def is_main_training_tower(self):
        return self._index == 0

    @property
    def has_own_variables(self):
        if self._initial_vs_reuse:
            return False
        return self._index == 0 or bool(self._vs_name)

    def _keys_to_freeze(self):
        if self._index == 0:
            return []
        return [tfv1.GraphKeys.SUMMARIES, MOVING_SUMMARY_OPS_KEY]


class PredictTowerContext(BaseTowerContext):
    """The context of an inference tower.

    It has its own variables unless the variable scope it is created under has
    ``reuse=True`` (build it under ``tf.compat.v1.variable_scope(tf.compat.v1.
    get_variable_scope(), reuse=True)`` to share the training variables; it also re-enters
    that scope with reuse). Summaries, moving summaries and update ops added inside are
    discarded: an inference tower must not change training state.

    Example::

        with tf.compat.v1.variable_scope(tf.compat.v1.get_variable_scope(), reuse=True):
            with PredictTowerContext('InferenceTower'):
                prob = tower_fn(image)
    """

    def __init__(self, ns_name, vs_name=''):
        super(PredictTowerContext, self).__init__(ns_name, vs_name)
        self._initial_vs_reuse = bool(tfv1.get_variable_scope().reuse)

    @property
    def is_training(self):
        return False

    @property
    def is_main_training_tower(self):
        return False

    @property
    def has_own_variables(self):
        return not self._initial_vs_reuse

    def _keys_to_freeze(self):
        return [tfv1.GraphKeys.SUMMARIES, MOVING_SUMMARY_OPS_KEY, tfv1.GraphKeys.UPDATE_OPS]


def build_predict_tower(tower_func, inputs, tower_name, device=0, vs_name=''):
    """Call ``tower_func(*inputs)`` as an inference tower ``tower_name`` that reuses the
    training variables, on GPU ``device`` (-1, or any id where there is no GPU: the CPU; or a
    device string such as ``'/cpu:1'``), at the root name scope, and return its :class:`TowerTensorHandle`."""
    if isinstance(device, str):
        device_name = device
    elif device >= 0 and get_num_gpu() > 0:
        device_name = '/gpu:{}'.format(device)
    else:
        device_name = '/cpu:0'  # also for a GPU id on a machine without GPUs
    logger.info("Building inference tower '{}' on device {}{} ...".format(
        tower_name, device_name, " with variable scope '{}'".format(vs_name) if vs_name else ''))
    with tfv1.name_scope(None), tfv1.variable_scope(tfv1.get_variable_scope(), reuse=True), \
            tf.device(device_name), PredictTowerContext(tower_name, vs_name=vs_name):
        tower_func(*inputs)
    return tower_func.towers[tower_name]


def TowerContext(tower_name, is_training, vs_name=''):
    """A :class:`TrainTowerContext` (index 0 of 1) when ``is_training``, else a
    :class:`PredictTowerContext`."""
    if is_training:
        return TrainTowerContext(tower_name, vs_name=vs_name)
    return PredictTowerContext(tower_name, vs_name=vs_name)


def _check_input_signature(input_signature):
    try:
        signature = list(input_signature)
    except TypeError:
        raise TypeError("input_signature must be a list of tf.TensorSpec, got {!r}".format(
            input_signature))
    names = []
    for spec in signature:
        if not all(hasattr(spec, attr) for attr in ('name', 'shape', 'dtype')):
            raise TypeError("input_signature must hold tf.TensorSpec, got {!r}".format(spec))
        name = spec.name
        if not isinstance(name, str) or not name:
            raise ValueError("Every tf.TensorSpec of input_signature needs a name: {!r}".format(
                spec))
        bad = [c for c in (':', '/', ' ') if c in name]
        if bad:
            raise ValueError("Invalid input name '{}' in input_signature: it must not contain "
                             "{}.".format(name, ' or '.join(repr(c) for c in bad)))
        if name in names:
            raise ValueError("Input name '{}' appears twice in input_signature {}.".format(
                name, [s.name for s in signature]))
        names.append(name)
    return signature


class TowerFunc(object):
    """A tower function with its input signature; it records every tower it builds.

    Call it under a tower context with one tensor per entry of the signature; it returns what
    the function returns, and :attr:`towers` gives a :class:`TowerTensorHandle` per call.
    Wrapping a TowerFunc again returns it unchanged.

    Example::

        func = TowerFunc(tower_fn, [tf.TensorSpec([None, 3], tf.float32, 'x')])
        with TowerContext('', is_training=True):
            func(x)
        func.towers[0]['loss']
    """

    def __new__(cls, tower_fn, input_signature):
        if isinstance(tower_fn, TowerFunc):
            return tower_fn
        return super(TowerFunc, cls).__new__(cls)

    def __init__(self, tower_fn, input_signature):
        """
        Args:
            tower_fn (callable): builds one tower from its input tensors.
            input_signature (list[tf.TensorSpec]): one spec per input, with unique names
                that contain no ``':'``, ``'/'`` or space.
        """
        if tower_fn is self:   # TowerFunc(a_tower_func, ...) returned the existing object
            if list(input_signature) != self._input_signature:
                logger.warning("TowerFunc is wrapped again with another input_signature; the "
                               "existing signature {} is kept.".format(
                                   [s.name for s in self._input_signature]))
            return
        if not callable(tower_fn):
            raise TypeError("TowerFunc needs a callable tower function, got {!r}".format(
                tower_fn))
        self._tower_fn = tower_fn
        self._input_signature = _check_input_signature(input_signature)
        self._handles = []

    def __call__(self, *args):
        ctx = get_current_tower_context()
        if ctx is None:
            raise RuntimeError("TowerFunc {} must be called inside a tower context (e.g. "
                               "`with TowerContext('', is_training=True):`).".format(
                                   getattr(self._tower_fn, '__name__', self._tower_fn)))
        if len(args) != len(self._input_signature):
            raise ValueError("TowerFunc expects {} inputs {}, got {}.".format(
                len(self._input_signature), [s.name for s in self._input_signature],
                len(args)))
        outputs = self._tower_fn(*args)
        self._handles.append(TowerTensorHandle(ctx, args, outputs, self._input_signature))
        return outputs

    @property
    def tower_fn(self):
        """The wrapped function."""
        return self._tower_fn

    @property
    def towers(self):
        """A :class:`TowerTensorHandles` of the towers built so far, in order."""
        return TowerTensorHandles(self._handles)

    @property
    def input_signature(self):
        """The list of tf.TensorSpec of the inputs."""
        return list(self._input_signature)

    @property
    def inputs_desc(self):
        """Same as :attr:`input_signature`."""
        return self.input_signature


TowerFuncWrapper = TowerFunc


class TowerTensorHandles(object):
    """A list of :class:`TowerTensorHandle`, indexable by position or by tower name."""

    def __init__(self, handles):
        self._handles = list(handles)
        self._by_name = {h.ns_name: h for h in self._handles}

    def __len__(self):
        return len(self._handles)

    def __iter__(self):
        return iter(self._handles)

    def __getitem__(self, name_or_index):
        """``handles[0]`` is the first tower; ``handles['tower1']`` the tower of that name."""
        if isinstance(name_or_index, int):
            return self._handles[name_or_index]
        try:
            return self._by_name[name_or_index]
        except KeyError:
            raise KeyError("No tower named '{}'; towers: {}".format(
                name_or_index, list(self._by_name)))

    def training(self):
        """The training towers only."""
        return TowerTensorHandles([h for h in self._handles if h.is_training])

    def inference(self):
        """The inference towers only."""
        return TowerTensorHandles([h for h in self._handles if not h.is_training])


class TowerTensorHandle(object):
    """Access to the tensors, variables and collections of one tower built by a TowerFunc.

    Names are given without the tower prefix: ``handle['loss']`` is ``'tower0/loss:0'`` in
    tower ``tower0``; a name of the input signature gives the tensor fed to that tower.
    """

    def __init__(self, ctx, inputs, outputs, input_signature=None):
        self._ctx = ctx
        self._graph = tfv1.get_default_graph()
        self._inputs = list(inputs)
        self._outputs = outputs
        self._input_by_name = {}
        if input_signature is not None:
            if len(input_signature) != len(self._inputs):
                raise ValueError("Tower '{}' got {} inputs for an input signature of {}.".format(
                    ctx.ns_name, len(self._inputs), len(input_signature)))
            self._input_by_name = {get_op_tensor_name(spec.name)[1]: tensor
                                   for spec, tensor in zip(input_signature, self._inputs)}

    @property
    def ns_name(self):
        """The tower's name scope."""
        return self._ctx.ns_name

    @property
    def vs_name(self):
        """The tower's variable scope ('' when it is the root or the shared one)."""
        return self._ctx.vs_name

    @property
    def is_training(self):
        """Whether the tower was built for training."""
        return self._ctx.is_training

    @property
    def inputs(self):
        """The tensors the tower was called with."""
        return list(self._inputs)

    @property
    def outputs(self):
        """What the tower function returned."""
        return self._outputs

    def _prefixed(self, prefix, name):
        name = get_op_tensor_name(name)[1]
        return name, (prefix + '/' + name if prefix else name)

    def get_tensor(self, name):
        """The tensor ``name`` of this tower, named without the tower prefix; or else the
        input of the signature named ``name``. Raises KeyError naming tensor and tower."""
        name, full_name = self._prefixed(self.ns_name, name)
        try:
            tensor = self._graph.get_tensor_by_name(full_name)
        except (KeyError, ValueError):
            tensor = None
        fed = self._input_by_name.get(name)
        if fed is not None:
            if tensor is not None and tensor is not fed:
                logger.warning("'{}' in tower '{}' names both the tensor '{}' and the input '{}'; "
                               "using the input.".format(name, self.ns_name, tensor.name,
                                                         fed.name))
            return fed
        if tensor is None:
            raise KeyError("Tensor '{}' is not in tower '{}': the graph has no '{}', and it is "
                           "not an input name {}.".format(
                               name, self.ns_name, full_name,
                               [n.rsplit(':', 1)[0] for n in self._input_by_name]))
        return tensor

    def get_tensors(self, names):
        """:meth:`get_tensor` of each name."""
        return [self.get_tensor(name) for name in names]

    def __getitem__(self, name):
        return self.get_tensor(name)

    def get_variable(self, name):
        """The variable ``name`` under the tower's variable scope (a ``tf.Variable`` when it
        is in a variable collection, else the tensor of that name)."""
        name, full_name = self._prefixed(self.vs_name, name)
        for key in (tfv1.GraphKeys.GLOBAL_VARIABLES, tfv1.GraphKeys.LOCAL_VARIABLES):
            for var in self._graph.get_collection(key):
                if var.name == full_name:
                    return var
        try:
            return self._graph.get_tensor_by_name(full_name)
        except (KeyError, ValueError):
            raise KeyError("Variable '{}' of tower '{}' not found: the graph has no '{}'.".format(
                name, self.ns_name, full_name))

    def get_variables(self, names):
        """:meth:`get_variable` of each name."""
        return [self.get_variable(name) for name in names]

    def get_collection(self, key):
        """The items the tower added to collection ``key`` (none for frozen collections)."""
        return self._ctx.get_collection_in_tower(key)

    def __str__(self):
        return "TowerTensorHandle(ns_name='{}', is_training={})".format(
            self.ns_name, self.is_training)

    __repr__ = __str__
