"""TowerFunc: a tower function with its input signature, which records the towers it builds;
their tensors are found through :class:`TowerTensorHandle`. :func:`check_input_signature` is
the one check of an input signature (a list of named ``tf.TensorSpec``).

Example::

    func = TowerFunc(tower_fn, [tf.TensorSpec([None, 3], tf.float32, 'x')])
    with TowerContext('', is_training=True):
        func(x)
    func.towers[0]['loss']
"""

from ..compat import tf, tfv1
from ..utils import logger
from .common import get_op_tensor_name
from .tower_context import get_current_tower_context

__all__ = ['check_input_signature', 'TowerFunc', 'TowerFuncWrapper', 'TowerTensorHandle',
           'TowerTensorHandles']


def check_input_signature(input_signature, owner='input_signature'):
    """``input_signature`` as a list, after checking that it holds ``tf.TensorSpec`` objects with
    unique names free of ``':'``, ``'/'`` and spaces; the errors name ``owner`` and the input.

    Args:
        input_signature (list[tf.TensorSpec]): the inputs of a model.
        owner (str): what the signature comes from, for errors (e.g. ``'Model.inputs()'``).
    """
    if isinstance(input_signature, (str, bytes)):
        input_signature = None
    try:
        signature = list(input_signature)
    except TypeError:
        raise TypeError("{} must be a list of tf.TensorSpec, got {!r}".format(
            owner, input_signature)) from None
    for index, spec in enumerate(signature):
        if not isinstance(spec, tf.TensorSpec):
            raise TypeError("{} must hold tf.TensorSpec, got {!r} at [{}]".format(owner, spec, index))
        name = spec.name
        if not isinstance(name, str) or not name:
            raise ValueError("{}[{}] has no name: every tf.TensorSpec of an input signature needs "
                             "a name ({!r})".format(owner, index, spec))
        bad = [c for c in (':', '/', ' ') if c in name]
        if bad:
            raise ValueError("Invalid input name '{}' in {}: it must not contain {}.".format(
                name, owner, ' or '.join(repr(c) for c in bad)))
    names = [spec.name for spec in signature]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ValueError("{} has duplicate names {}: '{}' appears twice in {}.".format(
            owner, duplicates, duplicates[0], names))
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
        self._input_signature = check_input_signature(input_signature)
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
