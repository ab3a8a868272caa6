"""Tower contexts: the name scope, variable scope and role (training or inference) a tower
is built in. :func:`get_current_tower_context` tells a model which tower it is in.

Example::

    with TrainTowerContext('tower0', index=0, total=2):
        build_model(...)      # get_current_tower_context().is_training is True
"""

from ..compat import tfv1
from ..utils.naming import MOVING_SUMMARY_OPS_KEY
from .collection import CollectionGuard

__all__ = ['BaseTowerContext', 'TrainTowerContext', 'PredictTowerContext', 'TowerContext',
           'get_current_tower_context']


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
        raise NotImplementedError("{} must implement is_training".format(type(self).__name__))

    @property
    def is_main_training_tower(self):
        """Whether this is the first training tower (the one that owns summaries)."""
        raise NotImplementedError("{} must implement is_main_training_tower".format(type(self).__name__))

    @property
    def has_own_variables(self):
        """Whether the tower creates variables, rather than reusing existing ones."""
        raise NotImplementedError("{} must implement has_own_variables".format(type(self).__name__))

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
        raise NotImplementedError("{} must implement _keys_to_freeze()".format(type(self).__name__))

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


def TowerContext(tower_name, is_training, vs_name=''):
    """A :class:`TrainTowerContext` (index 0 of 1) when ``is_training``, else a
    :class:`PredictTowerContext`."""
    if is_training:
        return TrainTowerContext(tower_name, vs_name=vs_name)
    return PredictTowerContext(tower_name, vs_name=vs_name)
