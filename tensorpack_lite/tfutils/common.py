"""Common TensorFlow helpers: the default session config, the global step, lookups by name,
the TensorFlow version (and :func:`collect_env_info`, re-exported from ``collect_env``)."""

from ..compat import tf, tfv1
from ..utils.argtools import graph_memoized
from .collect_env import collect_env_info

__all__ = ['get_default_sess_config', 'get_global_step_var', 'get_global_step_value',
           'get_op_tensor_name', 'get_tensors_by_names', 'get_op_or_tensor_by_name',
           'get_tf_version_tuple', 'collect_env_info', 'check_tensor_names']


def get_default_sess_config(mem_fraction=0.99):
    """The ``tf.compat.v1.ConfigProto`` trainers use unless told otherwise.

    Soft placement is on (ops without a kernel on the asked device fall back to another),
    GPU memory grows on demand up to ``mem_fraction``. Thread pools are left to TensorFlow
    (tensorpack used one intra-op thread, which starves CPU-only training).
    """
    conf = tfv1.ConfigProto()
    conf.allow_soft_placement = True
    conf.gpu_options.per_process_gpu_memory_fraction = mem_fraction
    conf.gpu_options.allow_growth = True
    return conf


@graph_memoized
def get_global_step_var():
    """The global step variable of the default graph (int64 ``global_step:0``), created at the
    root variable scope when missing."""
    root_scope = tfv1.VariableScope(reuse=False, name='')
    with tfv1.variable_scope(root_scope), tfv1.name_scope(None):
        return tfv1.train.get_or_create_global_step()


def get_global_step_value():
    """The current value of the global step, read in the default session."""
    return int(tfv1.train.global_step(tfv1.get_default_session(), get_global_step_var()))


def get_op_tensor_name(name):
    """Split a name into ``(op_name, tensor_name)``; a bare op name means its output 0.

    Example: ``get_op_tensor_name('fc/W')`` and ``get_op_tensor_name('fc/W:0')`` both give
    ``('fc/W', 'fc/W:0')``.
    """
    if ':' in name and name.rsplit(':', 1)[1].isdigit():
        return name.rsplit(':', 1)[0], name
    return name, name + ':0'


def check_tensor_names(names, owner, arg='names', one_name=False, empty=True):
    """``names`` as a list, checked by the library's one rule for lists of tensor names: a list
    or tuple of non-empty str, each naming a tensor once (``'x'`` and ``'x:0'`` are one).

    Args:
        owner (str), arg (str): who takes ``names`` and as what, for the errors.
        one_name (bool): a single str stands for a list of it (else it is an error).
        empty (bool): whether a list of no name is fine.

    Raises:
        TypeError or ValueError, naming ``owner``, ``arg`` and the culprit.
    """
    if one_name and isinstance(names, str):
        names = [names]
    if isinstance(names, str) or not isinstance(names, (list, tuple)):
        raise TypeError("{}: {} must be a list of tensor names, got {!r}".format(owner, arg, names))
    for index, name in enumerate(names):
        if not isinstance(name, str) or not name:
            raise TypeError("{}: {} must hold tensor names (non-empty str), got {!r} at index {} of "
                            "{!r}".format(owner, arg, name, index, list(names)))
    if not names and not empty:
        raise ValueError("{}: {} must not be empty".format(owner, arg))
    tensors = [get_op_tensor_name(name)[1] for name in names]
    duplicates = sorted({t for t in tensors if tensors.count(t) > 1})
    if duplicates:
        raise ValueError("{}: {} has duplicate names {} in {!r}".format(owner, arg, duplicates, list(names)))
    return list(names)


def get_tensors_by_names(names):
    """The tensors of the default graph with the given names (``'x'`` means ``'x:0'``)."""
    graph = tfv1.get_default_graph()
    return [graph.get_tensor_by_name(get_op_tensor_name(n)[1]) for n in names]


def get_op_or_tensor_by_name(name):
    """A tensor when ``name`` names one (``'x:0'``), otherwise an op; a list maps elementwise.

    Raises KeyError naming what was not found.
    """
    graph = tfv1.get_default_graph()

    def lookup(n):
        if isinstance(n, (tf.Tensor, tf.Operation)):
            return n
        try:
            if ':' in n and n.rsplit(':', 1)[1].isdigit():
                return graph.get_tensor_by_name(n)
            return graph.get_operation_by_name(n)
        except (KeyError, ValueError) as err:
            raise KeyError("'{}' is neither a tensor nor an op in the graph: {}".format(n, err))

    if isinstance(name, (list, tuple)):
        return [lookup(n) for n in name]
    return lookup(name)


def get_tf_version_tuple():
    """The installed TensorFlow version as a tuple of ints, e.g. ``(2, 21)``."""
    return tuple(int(x) for x in tf.__version__.split('.')[:2])
