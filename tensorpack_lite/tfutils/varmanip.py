"""Variables in and out of sessions and files: checkpoint paths, ``.npz`` dumps, assignments.

Example::

    params = load_chkpt_vars('train_log/run1')          # {'fc0/W': ndarray, ...}
    params['fc0/W'] *= 0.5
    save_chkpt_vars(params, 'train_log/halved.npz')     # loadable with SmartInit / DictRestore

Checkpoints are TensorFlow V2 checkpoints (``<prefix>.index`` + ``<prefix>.data-*``), the
format written by ``tf.compat.v1.train.Saver`` and :class:`ModelSaver`; finding and checking them
is ``tensorpack_lite.checkpoint``'s (``get_checkpoint_path`` and its neighbours are importable
here too, as in tensorpack).
"""

import os
import re
import zipfile

import numpy as np

from ..checkpoint.directory import find_step_checkpoints, get_checkpoint_path, latest_intact_checkpoint
from ..checkpoint.files import checkpoint_files, move_checkpoint_aside
from ..checkpoint.state_file import CheckpointStateError, read_checkpoint_state
from ..checkpoint.verify import checked_reader, read_tensor, verify_checkpoint
from ..compat import tf, tfv1
from ..utils import logger
from ..utils.fs import write_atomically
from .common import get_op_tensor_name
from .weight_average import is_average_name

__all__ = ['variable_of_tensor', 'is_reference_variable', 'SessionUpdate', 'dump_session_params',
           'load_chkpt_vars', 'save_chkpt_vars',
           'load_checkpoint_vars', 'save_checkpoint_vars', 'get_all_checkpoints', 'load_npz_file',
           'get_checkpoint_path', 'CheckpointStateError', 'read_checkpoint_state', 'find_step_checkpoints',
           'verify_checkpoint', 'latest_intact_checkpoint', 'move_checkpoint_aside', 'checkpoint_files']
# The checkpoint names above come from the package that owns checkpoints (tensorpack_lite.checkpoint):
# they stay importable here, tensorpack's path.


def variable_of_tensor(tensor):
    """The variable ``tensor`` stands for (the resource handle of a resource variable, e.g. the
    tensor ``'W:0'`` of variable ``W``, or the tensor of a ref variable), or None when it is an
    ordinary tensor. Fetching the variable gives its value, where the handle gives a handle."""
    if not isinstance(tensor, tf.Tensor):
        return None
    if tensor.dtype != tf.resource and tensor.op.type not in ('VariableV2', 'Variable'):
        return None
    for key in (tfv1.GraphKeys.GLOBAL_VARIABLES, tfv1.GraphKeys.LOCAL_VARIABLES):
        for var in tensor.graph.get_collection(key):
            if var.name == tensor.name:
                return var
    return None


def is_reference_variable(var):
    """True for a TF1 reference variable (a ``VariableV2`` op, what ``get_variable`` makes after
    ``tf.compat.v1.disable_v2_behavior()`` or ``disable_resource_variables()``), False for a
    resource variable. A reference variable's reads alias the buffer its updates write in place."""
    return var.op.type in ('VariableV2', 'Variable')


def _pickle_refusal(path, where=''):
    return ValueError(
        "'{}' holds an object array or a pickle{}, which could only be read by unpickling it; "
        "pickles are never loaded from a weights file (unpickling can run arbitrary code). Save "
        "the weights as plain arrays instead: np.savez('weights.npz', **weights_dict).".format(
            path, where))


def _np_load(path, load):
    """``load()``, with numpy's refusal of a pickle turned into an error naming ``path``."""
    try:
        return load()
    except ValueError as err:
        if 'allow_pickle' in str(err):
            raise _pickle_refusal(path) from None
        raise ValueError("Cannot read a dict of variables from '{}': {}".format(path, err)) from err
    except Exception as err:
        raise ValueError("Cannot read a dict of variables from '{}': {}".format(path, err)) from err


def load_npz_file(path):
    """The dict of arrays in an ``.npz`` file.

    Nothing is unpickled: a pickle or an object array (such as tensorpack's old ``np.save()``
    of a dict in an ``.npy`` file) is an error naming the file."""
    if not os.path.isfile(path):
        raise FileNotFoundError("File '{}' does not exist.".format(path))
    logger.info("Loading a dict of variables from {} ...".format(path))
    loaded = _np_load(path, lambda: np.load(path, allow_pickle=False))
    if isinstance(loaded, np.ndarray):
        raise ValueError("'{}' holds a single {} array of shape {}, not a dict of variables; "
                         "save the weights with np.savez('weights.npz', **weights_dict).".format(
                             path, loaded.dtype, loaded.shape))
    with loaded:
        result = {}
        for name in loaded.files:
            try:
                result[name] = loaded[name]
            except ValueError as err:
                if 'allow_pickle' in str(err):
                    raise _pickle_refusal(path, " (member '{}')".format(name)) from None
                raise ValueError("Cannot read member '{}' of '{}': {}".format(name, path, err)) from err
        return result


def load_chkpt_vars(path):
    """Every tensor of a checkpoint, or every array of an ``.npz`` file (see
    :func:`load_npz_file`), as ``{name: ndarray}`` (names without ``:0``).

    ``path`` is an ``.npz`` file or anything :func:`get_checkpoint_path` accepts.
    """
    if os.fspath(path).endswith('.npz'):
        return {get_op_tensor_name(name)[0]: value for name, value in load_npz_file(path).items()}
    prefix = get_checkpoint_path(path)
    reader = checked_reader(prefix)
    return {name: read_tensor(reader, prefix, name) for name in reader.get_variable_to_shape_map()}


load_checkpoint_vars = load_chkpt_vars
"""The same as :func:`load_chkpt_vars` (tensorpack 0.11's newer name)."""


def _atomic_savez(path, arrays):
    """Write ``arrays`` as a compressed ``.npz`` to ``path`` via a temporary file + rename, so
    that ``path`` is either the old file or the complete new one."""
    def write(f):
        # Written entry by entry (the .npz layout) rather than through np.savez, whose
        # keyword arguments would clash with keys such as 'file'.
        with zipfile.ZipFile(f, 'w', compression=zipfile.ZIP_DEFLATED, allowZip64=True) as zf:
            for key, value in arrays.items():
                with zf.open(key + '.npy', 'w', force_zip64=True) as entry:
                    np.lib.format.write_array(entry, np.asanyarray(value), allow_pickle=False)
    write_atomically(path, write)


def save_chkpt_vars(dic, path):
    """Save ``{name: value}`` to ``path``: an ``.npz`` when the name ends with ``.npz``,
    otherwise a TensorFlow checkpoint with prefix ``path``.

    The checkpoint is written in a fresh graph and session (nothing of the default graph is
    touched), with the given names as keys (a trailing ``:0`` is dropped) and the values'
    dtypes. No ``checkpoint`` state file is written, so a training directory's state is left
    alone. The ``.npz`` keeps the names as given and is replaced atomically.
    """
    if not isinstance(dic, dict):
        raise TypeError("save_chkpt_vars() takes a dict of name -> value, got {}".format(
            type(dic).__name__))
    path = os.path.expanduser(os.fspath(path))
    if path.endswith('.npy'):
        raise ValueError("save_chkpt_vars(): '{}' ends with .npy; save a dict to '.npz' or to a "
                         "checkpoint prefix instead.".format(path))
    for name in dic:
        if not isinstance(name, str):
            raise TypeError("save_chkpt_vars(): variable names must be str, got {!r}".format(name))
    logger.info("Variables to save to {}: {}".format(path, ', '.join(sorted(dic))))
    dirname = os.path.dirname(os.path.abspath(path))
    os.makedirs(dirname, exist_ok=True)
    if path.endswith('.npz'):
        _atomic_savez(path, {k: np.asarray(v) for k, v in dic.items()})
        return
    values = {}
    for name, value in dic.items():
        key = get_op_tensor_name(name)[0]
        if key in values:
            raise ValueError("save_chkpt_vars(): '{}' is given twice (with and without ':0')".format(key))
        values[key] = np.asarray(value)
    with tf.Graph().as_default() as graph:
        var_list, feeds = {}, {}
        for index, (key, value) in enumerate(sorted(values.items())):
            # A placeholder rather than a constant: big values stay out of the GraphDef.
            init = tfv1.placeholder(tf.as_dtype(value.dtype), shape=value.shape)
            var_list[key] = tfv1.Variable(init, name='v{}'.format(index), trainable=False)
            feeds[init] = value
        with tfv1.Session(graph=graph) as sess:
            sess.run(tfv1.global_variables_initializer(), feed_dict=feeds)
            saver = tfv1.train.Saver(var_list=var_list, write_version=tfv1.train.SaverDef.V2)
            saver.save(sess, os.path.abspath(path), write_meta_graph=False, write_state=False)


save_checkpoint_vars = save_chkpt_vars
"""The same as :func:`save_chkpt_vars` (tensorpack 0.11's newer name)."""


def get_all_checkpoints(dir, prefix='model'):
    """The checkpoints ``<prefix>-<step>`` in directory ``dir``, found by their ``.index``
    files, as a list of ``(path of the .index file, step)`` sorted by step. A path can be
    given to :func:`load_checkpoint_vars` or :class:`SaverRestore`.

    Example::

        get_all_checkpoints('train_log/run1')
        # [('train_log/run1/model-500.index', 500), ('train_log/run1/model-1000.index', 1000)]
    """
    found = find_step_checkpoints(dir, name=prefix)
    return [(os.path.join(dir, os.path.basename(found[step])) + '.index', step) for step in sorted(found)]


def dump_session_params(path):
    """Save the values of the default session's trainable and model variables (those that are
    also global variables, e.g. not the global step nor optimizer slots) to an ``.npz`` file,
    written atomically. Keys are the variable names (``fc0/W:0``); load it with
    :func:`~tensorpack_lite.tfutils.sessinit.SmartInit`.
    """
    path = os.path.expanduser(os.fspath(path))
    if not path.endswith('.npz'):
        raise ValueError("dump_session_params() writes an .npz file; '{}' does not end with "
                         ".npz".format(path))
    sess = tfv1.get_default_session()
    if sess is None:
        raise RuntimeError("dump_session_params() needs a default session "
                           "(use it inside `with sess.as_default():`).")
    global_names = {v.name for v in tfv1.global_variables()}
    variables, seen = [], set()
    for v in (tfv1.get_collection(tfv1.GraphKeys.TRAINABLE_VARIABLES) +
              tfv1.get_collection(tfv1.GraphKeys.MODEL_VARIABLES)):
        if v.name in global_names and v.name not in seen:
            seen.add(v.name)
            variables.append(v)
    values = sess.run(variables)
    save_chkpt_vars({v.name: value for v, value in zip(variables, values)}, path)


# Slots of tf.compat.v1.train optimizers are named '<variable>/<optimizer name>' plus '_1', '_2'
# for the second and third slot of one variable (Adam's m and v, centered RMSProp's mg...).
_TRAINING_SLOT = re.compile(r'/(Adam|Momentum|Adadelta|RMSProp|Adagrad|AdagradDA|Ftrl|ProximalAdagrad'
                            r'|AccumGrad)(_\d+)?$')
# Adam's power accumulators live under the optimizer's name scope ('optimize/beta1_power'),
# with '_1'... when several Adam optimizers share a graph.
_ADAM_POWER = re.compile(r'(^|/)beta[12]_power(_\d+)?$')
_TRAINING_ONLY_NAMES = ('global_step', 'learning_rate')


def is_training_name(name):
    """Whether ``name`` looks like a variable that only training uses: the global step, the
    learning rate, optimizer slots and accumulators (``W/Adam``, ``optimize/beta1_power``...),
    moving-average summaries, gradient accumulators, the weight averages of ``WeightAverage``.
    Such variables are not reported when they are missing from a checkpoint, and are skipped
    when a predictor's graph has no place for them."""
    name = get_op_tensor_name(name)[0]
    return (name in _TRAINING_ONLY_NAMES or bool(_TRAINING_SLOT.search(name))
            or bool(_ADAM_POWER.search(name)) or is_average_name(name)
            or name.startswith(('EMA/', 'AccumGrad', 'apply_gradients')) or '/EMA/' in name)


def _convert_dtype(value, var):
    """``value`` cast to the variable's dtype; TypeError when the cast would change the kind
    of number (e.g. float to int) or overflow."""
    vartype = var.dtype.base_dtype
    if vartype == tf.string:
        return value
    target = np.dtype(vartype.as_numpy_dtype)
    if value.dtype == target:
        return value
    name = var.op.name
    if not np.can_cast(value.dtype, target, casting='same_kind'):
        raise TypeError("Cannot load a value of dtype {} into variable '{}' of dtype {}.".format(
            value.dtype, name, target))
    if np.can_cast(value.dtype, target, casting='safe'):
        return value.astype(target)
    if target.kind in 'iu':
        info = np.iinfo(target)
        if value.size and (value.min() < info.min or value.max() > info.max):
            raise TypeError("Values of '{}' do not fit its dtype {} (they range from {} to {}).".format(
                name, target, value.min(), value.max()))
    with np.errstate(over='ignore', invalid='ignore'):
        converted = value.astype(target)
    if target.kind in 'fc' and np.any(np.isinf(converted) & ~np.isinf(value)):
        raise TypeError("Values of '{}' overflow its dtype {}.".format(name, target))
    logger.warn("Variable '{}' has dtype {}; the value of dtype {} is cast to it.".format(
        name, target, value.dtype))
    return converted


class SessionUpdate:
    """Assigns values to variables of a session, without adding ops to the graph (it feeds
    the variables' initializers), so it also works once the graph is finalized.

    Args:
        sess (tf.compat.v1.Session): the session.
        vars_to_update (list[tf.Variable]): the variables :meth:`update` may assign.

    Example::

        upd = SessionUpdate(sess, tfv1.global_variables())
        upd.update({'fc0/W:0': np.zeros((64, 64), 'float32')})
    """

    def __init__(self, sess, vars_to_update):
        self.sess = sess
        self.name_map = {v.name: v for v in vars_to_update}

    @staticmethod
    def relaxed_value_for_var(value, var, ignore_mismatch=False):
        """``value`` made loadable into ``var``: reshaped when the shapes differ only by axes
        of length 1, cast when the dtypes are of the same kind (e.g. float64 to float32).

        A shape mismatch beyond that raises ValueError naming the variable and both shapes,
        or returns None (with a warning) when ``ignore_mismatch``. Incompatible dtypes raise
        TypeError.
        """
        name = var.op.name
        value = np.asarray(value)
        varshape = var.shape
        if varshape.is_fully_defined():
            want = tuple(varshape.as_list())
            squeezable = tuple(d for d in value.shape if d != 1) == tuple(d for d in want if d != 1)
            if value.shape != want and squeezable:
                logger.warn("The value for '{}' is reshaped from {} to {}.".format(name, value.shape, want))
                value = value.reshape(want)
        if not varshape.is_compatible_with(value.shape):
            msg = "Cannot load an array of shape {} into variable '{}' of shape {}.".format(
                value.shape, name, tuple(varshape.as_list()) if varshape.is_fully_defined() else varshape)
            if ignore_mismatch:
                logger.warn(msg + " It is skipped.")
                return None
            raise ValueError(msg)
        return _convert_dtype(value, var)

    def update(self, prms):
        """Assign ``{variable name: value}``; names may be given with or without ``:0`` and
        must be among ``vars_to_update`` (KeyError naming the unknown ones otherwise)."""
        prms = {get_op_tensor_name(k)[1]: v for k, v in prms.items()}
        unknown = sorted(set(prms) - set(self.name_map))
        if unknown:
            raise KeyError("SessionUpdate cannot assign {}: not among the variables it updates ({})".format(
                ', '.join(unknown), ', '.join(sorted(self.name_map)) or 'none'))
        fetches, feeds = [], {}
        for name, value in prms.items():
            var = self.name_map[name]
            fetches.append(var.initializer)
            feeds[var.initializer.inputs[1]] = self.relaxed_value_for_var(value, var)
        if fetches:
            self.sess.run(fetches, feed_dict=feeds)
