"""Hyper-parameters: what a :class:`HyperParamSetter` reads and sets, a variable of the graph
(:class:`GraphVarParam`, e.g. the learning rate) or an attribute of a Python object
(:class:`ObjAttrParam`)."""

import numpy as np

from ..compat import tfv1
from ..tfutils.common import get_op_tensor_name

__all__ = ['HyperParam', 'GraphVarParam', 'ObjAttrParam']


class HyperParam:
    """Something a :class:`HyperParamSetter` can read and set.

    Subclasses implement :meth:`set_value` and :meth:`get_value`, may build ops in
    :meth:`setup_graph`, and set ``_readable_name``.
    """

    _readable_name = None

    def setup_graph(self):
        """Prepare (e.g. build ops) while the graph is not finalized; raise a clear error
        when the parameter does not exist."""

    def set_value(self, v):
        """Give the parameter the value ``v``."""
        raise NotImplementedError("{} must implement set_value()".format(type(self).__name__))

    def get_value(self):
        """The current value of the parameter."""
        raise NotImplementedError("{} must implement get_value()".format(type(self).__name__))

    @property
    def readable_name(self):
        """The name used in logs, in ``stats.json`` and in :class:`HumanHyperParamSetter`'s file."""
        return self._readable_name

    def __str__(self):
        return "{}({})".format(type(self).__name__, self.readable_name)


class GraphVarParam(HyperParam):
    """A variable of the graph, e.g. the learning rate, found by name.

    The variable must exist when the callbacks are set up (create it in the model, e.g.
    ``tf.get_variable('learning_rate', initializer=0.1, trainable=False)``). It is set with
    an assign op fed through a placeholder, both built in :meth:`setup_graph`, and read and
    set in the default session.

    Args:
        name (str): the variable's name, with or without ``:0``.
        shape (tuple): the shape of the values to set; ``()`` for a scalar.
    """

    def __init__(self, name, shape=()):
        if not isinstance(name, str):
            raise TypeError("GraphVarParam: name must be the name of a variable (str), got {!r}".format(name))
        self.name = name
        self.shape = shape
        self._readable_name, self.var_name = get_op_tensor_name(name)
        self.var = None
        self._graph = None

    def setup_graph(self):
        graph = tfv1.get_default_graph()
        if self._graph is graph:   # the same param shared by several setters
            return
        variables = tfv1.global_variables() + tfv1.local_variables()
        found = [v for v in variables if v.name == self.var_name]
        if not found:
            raise ValueError(self._not_found_message(variables))
        var = found[0]
        try:
            shape_ok = var.shape.is_compatible_with(self.shape)
        except (TypeError, ValueError):
            shape_ok = False
        if not shape_ok:
            raise ValueError("GraphVarParam: variable '{}' has shape {}, which does not match the "
                             "shape={!r} given for it.".format(self.var_name, var.shape, self.shape))
        self.var = var
        self._placeholder = tfv1.placeholder(var.dtype.base_dtype, shape=self.shape,
                                             name=self._readable_name.replace('/', '_') + '_feed')
        self._assign_op = var.assign(self._placeholder, read_value=False)
        self._graph = graph

    def _not_found_message(self, variables):
        base = self._readable_name.split('/')[-1]
        similar = [v.name for v in variables if v.name.split('/')[-1] == base + ':0']
        hint = " Variables with a similar name: {}.".format(', '.join(similar)) if similar else ""
        return ("GraphVarParam: there is no variable named '{}' in the graph.{} Create it in the "
                "model, e.g. tf.get_variable('{}', initializer=0.1, trainable=False), before the "
                "callbacks are set up.".format(self.var_name, hint, self._readable_name))

    def _session(self):
        if self.var is None:
            raise RuntimeError("GraphVarParam('{}'): setup_graph() must run before the variable is "
                               "read or set.".format(self.name))
        sess = tfv1.get_default_session()
        if sess is None:
            raise RuntimeError("GraphVarParam('{}'): there is no default session to read or set the "
                               "variable in.".format(self.name))
        return sess

    def set_value(self, v):
        sess = self._session()
        dtype = self.var.dtype.base_dtype
        value = np.asarray(v)
        if (dtype.is_integer or dtype.is_bool) and value.dtype.kind == 'f':
            if not np.all(np.isfinite(value)) or not np.array_equal(value, np.round(value)):
                raise ValueError("GraphVarParam: variable '{}' has type {} and cannot be set to {!r}."
                                 .format(self.var_name, dtype.name, v))
            value = value.astype(dtype.as_numpy_dtype)
        try:
            sess.run(self._assign_op, feed_dict={self._placeholder: value})
        except (ValueError, TypeError) as err:
            raise ValueError("GraphVarParam: cannot set variable '{}' (shape {}, {}) to {!r}: {}".format(
                self.var_name, self.var.shape, dtype.name, v, err)) from err

    def get_value(self):
        return self._session().run(self.var)


class ObjAttrParam(HyperParam):
    """An attribute of a Python object, e.g. the exploration rate of an RL player.

    Args:
        obj: the object.
        attrname (str): the attribute; it must exist when the callbacks are set up.
        readable_name (str): the name to show; defaults to ``attrname``.

    Example::

        ScheduledHyperParamSetter(ObjAttrParam(player, 'exploration'), [(0, 1.0), (100, 0.1)],
                                  interp='linear')
    """

    def __init__(self, obj, attrname, readable_name=None):
        if not isinstance(attrname, str):
            raise TypeError("ObjAttrParam: attrname must be a str, got {!r}".format(attrname))
        self.obj = obj
        self.attrname = attrname
        self._readable_name = attrname if readable_name is None else str(readable_name)

    def setup_graph(self):
        if not hasattr(self.obj, self.attrname):
            raise AttributeError("ObjAttrParam: {!r} has no attribute '{}' to use as a "
                                 "hyper-parameter.".format(self.obj, self.attrname))

    def set_value(self, v):
        setattr(self.obj, self.attrname, v)

    def get_value(self):
        return getattr(self.obj, self.attrname)
