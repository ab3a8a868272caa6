"""Variables in and out of sessions and files: checkpoint paths, ``.npz`` dumps, assignments.

Example::

    params = load_chkpt_vars('train_log/run1')          # {'fc0/W': ndarray, ...}
    params['fc0/W'] *= 0.5
    save_chkpt_vars(params, 'train_log/halved.npz')     # loadable with SmartInit / DictRestore

Checkpoints are TensorFlow V2 checkpoints (``<prefix>.index`` + ``<prefix>.data-*``), the
format written by ``tf.compat.v1.train.Saver`` and :class:`ModelSaver`.
"""

import os
import re
import zipfile

import numpy as np

from ..compat import tf, tfv1
from ..utils import logger
from ..utils.fs import write_atomically
from .common import get_op_tensor_name

__all__ = ['variable_of_tensor', 'SessionUpdate', 'dump_session_params', 'load_chkpt_vars', 'save_chkpt_vars',
           'load_checkpoint_vars', 'save_checkpoint_vars', 'get_all_checkpoints', 'load_npz_file',
           'get_checkpoint_path', 'CheckpointStateError', 'read_checkpoint_state', 'find_step_checkpoints',
           'verify_checkpoint', 'latest_intact_checkpoint', 'move_checkpoint_aside', 'checkpoint_files']


_FILE_SUFFIX = re.compile(r'\.(index|meta|data-\d+-of-\d+)$')
_DATA_SHARD = re.compile(r'\.data-(\d+)-of-(\d+)$')
_STATE_FILE = 'checkpoint'


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


_STATE_LINE = re.compile(r'^(model_checkpoint_path|all_model_checkpoint_paths)\s*:\s*"((?:[^"\\]|\\.)*)"$')
# TF's own Saver also records when each checkpoint was written.
_STATE_TIME_LINE = re.compile(
    r'^(all_model_checkpoint_timestamps|last_preserved_timestamp)\s*:\s*[-+.\deE]+$')
_STEP_PREFIX = re.compile(r'^(.+)-(\d+)$')


class CheckpointStateError(ValueError):
    """The ``checkpoint`` state file of a directory cannot be read."""


def read_checkpoint_state(dirname):
    """The checkpoint prefixes the ``checkpoint`` state file of ``dirname`` lists (absolute,
    oldest first, the latest last; [] when there is no state file).

    Raises:
        CheckpointStateError: the file is unreadable or not a checkpoint state (garbage,
            zeroed or cut short: every non-empty line must be a ``key: "path"`` entry).
    """
    dirname = os.path.abspath(dirname)
    state_file = os.path.join(dirname, _STATE_FILE)
    if not os.path.isfile(state_file):
        return []
    try:
        with open(state_file, 'rb') as f:
            text = f.read().decode('utf-8')
    except (OSError, UnicodeDecodeError) as err:
        raise CheckpointStateError("cannot read state file '{}': {}".format(state_file, err)) from err
    latest, listed = None, []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        if _STATE_TIME_LINE.match(line.strip()):
            continue
        match = _STATE_LINE.match(line.strip())
        if match is None:
            raise CheckpointStateError("state file '{}' is not a checkpoint state: line {} is {!r}".format(
                state_file, number, line[:60]))
        path = re.sub(r'\\(.)', r'\1', match.group(2))
        path = os.path.normpath(os.path.join(dirname, path))
        if match.group(1) == 'model_checkpoint_path':
            latest = path
        elif path not in listed:
            listed.append(path)
    if latest is None:
        raise CheckpointStateError("state file '{}' names no latest checkpoint".format(state_file))
    return [path for path in listed if path != latest] + [latest]


def find_step_checkpoints(dirname):
    """``{global_step: prefix}`` of the checkpoints named ``<name>-<step>`` in ``dirname``,
    found by their own files (an ``.index`` or a ``.data-*`` file), whatever the state file
    says. When several names share a step, the one with the newest file wins."""
    dirname = os.path.abspath(dirname)
    found = {}
    for fname in os.listdir(dirname):
        if fname.endswith('.index'):
            prefix = fname[:-len('.index')]
        else:
            match = _DATA_SHARD.search(fname)
            if match is None:
                continue
            prefix = fname[:match.start()]
        match = _STEP_PREFIX.match(prefix)
        if match is None:
            continue
        path = os.path.join(dirname, prefix)
        mtime = os.path.getmtime(os.path.join(dirname, fname))
        step = int(match.group(2))
        if step not in found or (found[step][0] != path and mtime > found[step][1]):
            found[step] = (path, mtime)
    return {step: path for step, (path, _) in found.items()}


def verify_checkpoint(prefix):
    """Check that checkpoint ``prefix`` reads back whole: its ``.index`` exists and parses,
    every data shard is there and long enough, and every tensor reads back with a correct
    checksum. Reads the whole checkpoint once, one tensor at a time.

    Raises:
        FileNotFoundError: there is no ``<prefix>.index``.
        ValueError: naming the checkpoint and what is wrong with it.
    """
    if not os.path.isfile(prefix + '.index'):
        raise FileNotFoundError("Checkpoint '{}' has no index: '{}' does not exist.".format(
            prefix, prefix + '.index'))
    reader = _checked_reader(prefix)
    for name in reader.get_variable_to_shape_map():
        _read_tensor(reader, prefix, name)


def _read_tensor(reader, prefix, name):
    try:
        return np.asarray(reader.get_tensor(name))
    except Exception as err:
        raise ValueError("Checkpoint '{}' is corrupt: cannot read tensor '{}': {}".format(
            prefix, name, err)) from err


def checkpoint_files(prefix):
    """The paths of the files of checkpoint ``prefix`` that exist: its ``.data-*`` shards, then its
    ``.index`` (not the temporary files of a write in progress)."""
    dirname, base = os.path.split(prefix)
    shards = sorted(os.path.join(dirname, f) for f in os.listdir(dirname or '.')
                    if f.startswith(base + '.data-') and _DATA_SHARD.search(f))
    return shards + ([prefix + '.index'] if os.path.isfile(prefix + '.index') else [])


def move_checkpoint_aside(prefix, tag):
    """Rename the ``.index``, ``.data-*`` and ``.resume*`` (resume state) files of checkpoint
    ``prefix`` to the prefix ``<prefix><tag>`` (``<prefix><tag>2``... when taken) and return
    that prefix. The index goes last, so no new prefix ever has an index without its data."""
    dirname, base = os.path.split(prefix)
    files = sorted(f[len(base):] for f in os.listdir(dirname)
                   if (f.startswith(base + '.data-') and _DATA_SHARD.search(f))
                   or f.startswith(base + '.resume'))
    files += ['.index'] if os.path.exists(prefix + '.index') else []
    number, target = 1, prefix + tag
    while any(os.path.exists(target + suffix) for suffix in files + ['.index']):
        number += 1
        target = '{}{}{}'.format(prefix, tag, number)
    for suffix in files:
        os.replace(prefix + suffix, target + suffix)
    return target


def _candidates_in(dirname):
    """The checkpoints of ``dirname`` to try, newest first, and the problem of its state file
    (None when it is fine): the state file's latest first and then its other entries, when
    the state file reads; then every ``<name>-<step>`` checkpoint found by its files, the
    highest step first."""
    problems, ordered = [], []
    try:
        listed = read_checkpoint_state(dirname)
    except CheckpointStateError as err:
        problems.append(str(err))
        listed = []
    if listed and not os.path.isfile(listed[-1] + '.index'):
        problems.append("state file '{}' points to checkpoint '{}', but '{}' does not exist".format(
            os.path.join(dirname, _STATE_FILE), os.path.basename(listed[-1]), listed[-1] + '.index'))
    for path in reversed(listed):
        if os.path.isfile(path + '.index') and path not in ordered:
            ordered.append(path)
    on_disk = find_step_checkpoints(dirname)
    reported = listed[-1:] if problems and listed else []   # its missing index is said already
    for step in sorted(on_disk, reverse=True):
        if on_disk[step] not in ordered and on_disk[step] not in reported:
            ordered.append(on_disk[step])
    return ordered, problems


def latest_intact_checkpoint(dirname, given=None):
    """The prefix of the newest checkpoint of ``dirname`` that reads back whole (see
    :func:`verify_checkpoint`), and the list of what was passed over on the way (a line
    each: a state file that does not read or names files that are gone, checkpoints that
    do not read back). The state file's latest checkpoint comes first; when it is missing,
    unreadable or broken, the other checkpoints are found by their own files.

    Raises:
        FileNotFoundError: there is no checkpoint at all.
        ValueError: there are checkpoints but none reads back (each one's problem is named).
    """
    given = dirname if given is None else given
    dirname = os.path.abspath(dirname)
    ordered, problems = _candidates_in(dirname)
    broken, corrupt = [], False
    for prefix in ordered:
        try:
            verify_checkpoint(prefix)
        except (OSError, ValueError) as err:
            broken.append(str(err).rstrip('.'))
            corrupt = corrupt or not isinstance(err, FileNotFoundError)
            continue
        return prefix, problems + ['skipped ' + msg for msg in broken]
    if not ordered and not os.path.isfile(os.path.join(dirname, _STATE_FILE)):
        raise FileNotFoundError(
            "No checkpoint found for '{}': directory '{}' has no '{}' state file (ModelSaver "
            "writes one next to its checkpoints) and no checkpoint files.".format(
                given, dirname, _STATE_FILE))
    error = ValueError if corrupt else FileNotFoundError
    raise error("No readable checkpoint found for '{}': {}.".format(given, '; '.join(problems + broken)))


def _checkpoint_from_state(dirname, given):
    """The prefix of the newest intact checkpoint of ``dirname``; one warning when something
    was passed over."""
    prefix, passed_over = latest_intact_checkpoint(dirname, given)
    if passed_over:
        logger.warn("Checkpoint directory '{}': using {}, the newest checkpoint that reads back whole; "
                    "passed over: {}.".format(os.path.abspath(dirname), os.path.basename(prefix),
                                              '; '.join(passed_over)))
    return prefix


def get_checkpoint_path(path):
    """The prefix of the checkpoint that ``path`` designates (an absolute path).

    ``path`` may be a checkpoint prefix (``train_log/model-100``), one of its files
    (``model-100.index``, ``model-100.data-00000-of-00001``, ``model-100.meta``), a directory
    of checkpoints or its ``checkpoint`` state file. A directory gives its newest checkpoint
    that reads back whole (:func:`latest_intact_checkpoint`): the state file's latest, or when
    that file is missing, unreadable, names files that are gone or a broken checkpoint, the
    newest ``<name>-<step>`` found by its files, with one warning saying what was passed over.

    Raises:
        FileNotFoundError: naming what was looked for, when there is no such checkpoint.
        ValueError: a directory holds checkpoints, but none reads back (each one named).

    Example::

        get_checkpoint_path('train_log/run1')  # '/abs/train_log/run1/model-5000'
    """
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError("A checkpoint path must be a str, got {!r} of type {}".format(
            path, type(path).__name__))
    given = os.fspath(path)
    path = os.path.expanduser(given)
    if not path:
        raise FileNotFoundError("An empty string is not a checkpoint path.")
    if os.path.isdir(path):
        path = _checkpoint_from_state(path, given)
    elif os.path.basename(path) == _STATE_FILE and os.path.isfile(path):
        path = _checkpoint_from_state(os.path.dirname(path) or '.', given)
    else:
        prefix = _FILE_SUFFIX.sub('', path)
        if prefix != path:
            logger.info("Checkpoint path '{}' is taken as the checkpoint prefix '{}'.".format(path, prefix))
            path = prefix
        if not os.path.isfile(path + '.index'):
            raise FileNotFoundError(
                "Checkpoint '{}' not found: '{}' does not exist (expected a checkpoint prefix such "
                "as 'train_log/model-100', one of its files, or a directory with a 'checkpoint' "
                "state file).".format(given, path + '.index'))
    return os.path.abspath(path)


def _checked_reader(prefix):
    """A ``CheckpointReader`` for ``prefix``, after checking that the checkpoint looks complete:
    a readable index, every data shard present, and data files large enough for every tensor.

    Raises ValueError naming the checkpoint when it is corrupt or incomplete. (Values are
    checksummed by TensorFlow; a corruption these cheap checks miss fails when they are read.)
    """
    try:
        reader = tfv1.train.NewCheckpointReader(prefix)
        shapes = reader.get_variable_to_shape_map()
        dtypes = reader.get_variable_to_dtype_map()
    except Exception as err:  # DataLossError, InvalidArgumentError... from a bad index
        raise ValueError("Checkpoint '{}' is corrupt or not a TensorFlow checkpoint: cannot read "
                         "'{}': {}".format(prefix, prefix + '.index', err)) from err
    shards = {}
    dirname = os.path.dirname(prefix) or '.'
    base = os.path.basename(prefix)
    for fname in os.listdir(dirname):
        match = _DATA_SHARD.search(fname)
        if match and fname[:match.start()] == base:
            shards[int(match.group(1))] = (int(match.group(2)), os.path.join(dirname, fname))
    totals = {n for n, _ in shards.values()}
    if shapes and not shards:
        raise ValueError("Checkpoint '{}' is incomplete: its index lists {} tensors but there is no "
                         "'{}.data-*' file.".format(prefix, len(shapes), prefix))
    if len(totals) > 1 or (shards and set(shards) != set(range(totals.pop()))):
        raise ValueError("Checkpoint '{}' is incomplete or mixed: found data shards {}.".format(
            prefix, sorted(os.path.basename(p) for _, p in shards.values())))
    expected = sum(int(np.prod(shape, dtype=np.int64)) * tf.as_dtype(dtypes[name]).size
                   for name, shape in shapes.items() if dtypes[name] != tf.string)
    actual = sum(os.path.getsize(p) for _, p in shards.values())
    if actual < expected:
        raise ValueError("Checkpoint '{}' is truncated: its data files hold {} bytes, its index "
                         "needs at least {}.".format(prefix, actual, expected))
    return reader


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
    reader = _checked_reader(prefix)
    return {name: _read_tensor(reader, prefix, name) for name in reader.get_variable_to_shape_map()}


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
    found = []
    start = prefix + '-'
    for fname in os.listdir(dir):
        step = fname[len(start):-len('.index')]
        if fname.startswith(start) and fname.endswith('.index') and step.isdigit():
            found.append((os.path.join(dir, fname), int(step)))
    return sorted(found, key=lambda item: item[1])


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
    moving-average summaries, gradient accumulators. Such variables are not reported when
    they are missing from a checkpoint, and are skipped when a predictor's graph has no
    place for them."""
    name = get_op_tensor_name(name)[0]
    return (name in _TRAINING_ONLY_NAMES or bool(_TRAINING_SLOT.search(name))
            or bool(_ADAM_POWER.search(name))
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
