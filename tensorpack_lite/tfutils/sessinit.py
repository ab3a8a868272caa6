"""Session initializers: what the variables hold when training starts.

A :class:`SessionInit` may add ops to the graph in :meth:`SessionInit.setup_graph` (called
before the graph is finalized) and fills the session in :meth:`SessionInit.run_init`;
subclasses implement ``_setup_graph`` and ``_run_init``.

Most scripts only need :func:`SmartInit`, which picks the right initializer::

    TrainConfig(..., session_init=SmartInit('train_log/run1'))          # latest checkpoint
    PredictConfig(..., session_init=SmartInit('pretrained.npz'))        # a dict of arrays
"""

import os

import numpy as np

from ..checkpoint.directory import get_checkpoint_path
from ..checkpoint.verify import checked_reader
from ..compat import tf, tfv1
from ..utils import logger
from .common import get_op_tensor_name
from .varmanip import SessionUpdate, is_training_name, load_npz_file
from .weight_average import average_name, averaged_values

__all__ = ['SessionInit', 'JustCurrentSession', 'SaverRestore', 'SaverRestoreRelaxed',
           'DictRestore', 'AveragedRestore', 'ChainInit', 'SmartInit', 'get_model_loader']


class SessionInit:
    """Base class of session initializers.

    Example, in a custom training script::

        init = SaverRestore('train_log/model-1000')
        init.init(sess)
    """

    def init(self, sess):
        """Set up the graph, then initialize ``sess``."""
        self.setup_graph()
        self.run_init(sess)

    def setup_graph(self):
        """Add the ops this initializer needs to the default graph, before it is finalized."""
        self._setup_graph()

    def run_init(self, sess):
        """Initialize ``sess`` (after :meth:`setup_graph`)."""
        self._run_init(sess)

    def _setup_graph(self):
        """Add the ops this initializer needs, before the graph is finalized."""

    def _run_init(self, sess):
        """Initialize ``sess``."""


class JustCurrentSession(SessionInit):
    """Leaves the session as its creator made it (the variables keep their initial values)."""


def _log_mismatch(names, present_in, absent_in):
    if names:
        logger.warn("The following variables are in the {}, but not found in the {}: {}".format(
            present_in, absent_in, ', '.join(sorted(names))))


def _log_training_only_skipped(owner, names, what):
    """One info line for the training-only variables (global step, learning rate, optimizer
    slots) a source holds and the graph does not: expected when a predictor loads a training
    checkpoint, so not worth a warning."""
    if names:
        logger.info("{}: skipping {} training-only {} the graph does not have (global step, learning "
                    "rate, optimizer slots...): {}".format(owner, len(names), what, ', '.join(sorted(names))))


def _log_unmatched(owner, source, items, graph_only, source_only):
    """The report of the names found on one side only, for every initializer: a warning for
    the graph's variables missing from ``source`` and one for ``source``'s other names; the
    training-only names ``source`` holds get one info line, the graph's are not mentioned."""
    _log_mismatch([n for n in graph_only if not is_training_name(n)], 'graph', source)
    _log_training_only_skipped(owner, [n for n in source_only if is_training_name(n)],
                               '{} of the {}'.format(items, source))
    _log_mismatch([n for n in source_only if not is_training_name(n)], source, 'graph')


def _shape_str(shape):
    return str(list(shape))


class SaverRestore(SessionInit):
    """Restores the variables of the graph from a TensorFlow checkpoint.

    Every global variable that is also in the checkpoint is restored; variables missing from
    the checkpoint are logged by name and keep their initial values, and so are checkpoint
    tensors the graph does not use. A variable whose shape (or dtype) differs from the
    checkpoint's is an error naming both (see :class:`SaverRestoreRelaxed` to skip those).

    Args:
        model_path (str): anything :func:`~tensorpack_lite.tfutils.varmanip.get_checkpoint_path`
            accepts: a checkpoint prefix, one of its files, or a directory (its newest
            checkpoint that reads back whole, with a warning naming those passed over). A
            missing or corrupt checkpoint is an error here.
        prefix (str): restore checkpoint tensor ``W`` into graph variable ``prefix/W``.
        ignore (tuple[str]): names of variables (graph or checkpoint names, ``:0`` optional)
            not to restore, e.g. ``['learning_rate']``.

    Attribute ``path`` is the resolved checkpoint prefix.

    Example::

        SaverRestore('train_log/run1/model-1000', ignore=['global_step'])
    """

    def __init__(self, model_path, prefix=None, ignore=()):
        if isinstance(model_path, str) and model_path.endswith(('.npz', '.npy')):
            raise ValueError("SaverRestore takes a TensorFlow checkpoint, got '{}'; load a dict of "
                             "arrays with DictRestore or SmartInit.".format(model_path))
        self.path = get_checkpoint_path(model_path)
        checked_reader(self.path)  # a corrupt checkpoint fails now, not when training starts
        self.prefix = prefix.rstrip('/') if prefix else None
        if isinstance(ignore, str):
            ignore = [ignore]
        self.ignore = {get_op_tensor_name(name)[0] for name in ignore}
        self.saver = None

    def _checkpoint_name(self, var):
        name = var.op.name
        if self.prefix and name.startswith(self.prefix + '/'):
            name = name[len(self.prefix) + 1:]
        return name

    def _match_vars(self, reader):
        """``[(checkpoint name, variable)]`` for the graph variables found in the checkpoint;
        logs the names found on one side only."""
        in_checkpoint = reader.get_variable_to_shape_map()
        matched, used, missing = [], {}, []
        for var in tfv1.global_variables():
            name = self._checkpoint_name(var)
            if name in self.ignore or var.op.name in self.ignore:
                if name in in_checkpoint:
                    logger.info("Variable {} is ignored: not restored from the checkpoint.".format(
                        var.op.name))
                    used[name] = var
                continue
            if name in in_checkpoint:
                if name in used:
                    raise ValueError("Both graph variables '{}' and '{}' would be restored from "
                                     "checkpoint tensor '{}'.".format(used[name].op.name, var.op.name, name))
                used[name] = var
                matched.append((name, var))
            else:
                missing.append(var.op.name)
        _log_unmatched('SaverRestore', 'checkpoint', 'tensors', missing,
                       [name for name in in_checkpoint if name not in used])
        return matched

    @staticmethod
    def _mismatch(reader, name, var):
        """A description of how ``var`` and checkpoint tensor ``name`` disagree in shape or
        dtype (a Saver restores neither), or None."""
        shape = reader.get_variable_to_shape_map()[name]
        if not var.shape.is_compatible_with(shape):
            return "'{}': shape {} in the graph, {} in the checkpoint".format(
                var.op.name, _shape_str(var.shape.as_list()), _shape_str(shape))
        dtype = reader.get_variable_to_dtype_map()[name]
        if dtype != var.dtype.base_dtype:
            return "'{}': dtype {} in the graph, {} in the checkpoint".format(
                var.op.name, var.dtype.base_dtype.name, dtype.name)
        return None

    def _setup_graph(self):
        reader = checked_reader(self.path)
        matched = self._match_vars(reader)
        mismatches = [m for m in (self._mismatch(reader, n, v) for n, v in matched) if m]
        if mismatches:
            raise ValueError("Cannot restore checkpoint '{}' into the graph: {}. Use "
                             "SaverRestoreRelaxed (or SmartInit(..., ignore_mismatch=True)) to skip "
                             "these variables.".format(self.path, '; '.join(mismatches)))
        self.saver = tfv1.train.Saver(var_list=dict(matched), name='restore') if matched else None
        self._num_restored = len(matched)

    def _run_init(self, sess):
        if self.saver is None:
            logger.warn("No variable of the graph is in checkpoint {}: nothing restored.".format(self.path))
            return
        logger.info("Restoring {} variables from checkpoint {} ...".format(self._num_restored, self.path))
        try:
            self.saver.restore(sess, self.path)
        except (tf.errors.OpError, ValueError) as err:
            raise ValueError("Cannot restore checkpoint '{}' (corrupt or changed since it was "
                             "opened): {}".format(self.path, err)) from err


class SaverRestoreRelaxed(SaverRestore):
    """Like :class:`SaverRestore`, but variables whose shape (or kind of dtype) differs from
    the checkpoint's are skipped, with a warning naming them and both shapes; the others are
    restored by assignment (float64 values are cast to a float32 variable and so on). It adds
    no ops to the graph.

    Example, fine-tuning with a new classifier of another size::

        SaverRestoreRelaxed('pretrained/model-10000')
    """

    def _setup_graph(self):
        reader = checked_reader(self.path)
        self._pairs, skipped = [], []
        for name, var in self._match_vars(reader):
            shape = reader.get_variable_to_shape_map()[name]
            dtype = reader.get_variable_to_dtype_map()[name]
            if not var.shape.is_compatible_with(shape):
                skipped.append("{} (shape {} in the graph, {} in the checkpoint)".format(
                    var.op.name, _shape_str(var.shape.as_list()), _shape_str(shape)))
            elif dtype != var.dtype.base_dtype and not np.can_cast(
                    dtype.as_numpy_dtype, var.dtype.base_dtype.as_numpy_dtype, casting='same_kind'):
                skipped.append("{} (dtype {} in the graph, {} in the checkpoint)".format(
                    var.op.name, var.dtype.base_dtype.name, dtype.name))
            else:
                self._pairs.append((name, var))
        if skipped:
            logger.warn("SaverRestoreRelaxed: these variables differ from checkpoint {} and keep "
                        "their initial values: {}".format(self.path, ', '.join(skipped)))

    def _run_init(self, sess):
        if not hasattr(self, '_pairs'):
            self._setup_graph()
        logger.info("Restoring {} variables from checkpoint {} ...".format(len(self._pairs), self.path))
        reader = checked_reader(self.path)
        values = {}
        for name, var in self._pairs:
            try:
                values[var.name] = reader.get_tensor(name)
            except Exception as err:
                raise ValueError("Checkpoint '{}' is corrupt: cannot read tensor '{}': {}".format(
                    self.path, name, err)) from err
        SessionUpdate(sess, [var for _, var in self._pairs]).update(values)


class DictRestore(SessionInit):
    """Assigns values from a dict ``{variable name: ndarray}`` (names with or without ``:0``).

    Every global variable the dict names is restored. As in tensorpack, names on one side
    only are logged, one warning each way (pretrained weights with a classifier the graph
    lacks load into a detector's backbone); training-only names (``global_step``,
    ``learning_rate``, optimizer slots such as ``W/Adam``) get one info line instead. A value
    of the wrong shape is a ValueError naming the variable and both shapes, unless
    ``ignore_mismatch`` (then it is skipped with a warning). Values are cast to the
    variable's dtype when of the same kind (float64 to float32...). Adds no ops to the graph.

    Args:
        variable_dict (dict): ``{variable name: value}``.
        ignore_mismatch (bool): skip values whose shape differs instead of failing.
        strict (bool): refuse names that are not variables of the graph (training-only
            names excepted), with an error naming them.

    Example::

        DictRestore(dict(np.load('pretrained.npz')))
    """

    def __init__(self, variable_dict, ignore_mismatch=False, *, strict=False):
        if not isinstance(variable_dict, dict):
            raise TypeError("DictRestore takes a dict of variable name -> value, got {}".format(
                type(variable_dict).__name__))
        self._prms = {}
        for name, value in variable_dict.items():
            if not isinstance(name, str):
                raise TypeError("DictRestore: variable names must be str, got {!r}".format(name))
            key = get_op_tensor_name(name)[1]
            if key in self._prms:
                raise ValueError("DictRestore: variable '{}' is given twice (with and without "
                                 "':0')".format(key))
            self._prms[key] = value
        self._ignore_mismatch = bool(ignore_mismatch)
        self._strict = bool(strict)
        self._values = None

    def _setup_graph(self):
        variables = tfv1.global_variables()
        graph_names = {v.name for v in variables}
        absent = sorted(get_op_tensor_name(n)[0] for n in self._prms if n not in graph_names)
        unknown = [name for name in absent if not is_training_name(name)]
        if unknown and self._strict:
            raise ValueError("DictRestore(strict=True): {} name(s) are not variables of the graph: {}. "
                             "Without strict=True they are logged and the other variables "
                             "restored.".format(len(unknown), ', '.join(unknown)))
        _log_unmatched('DictRestore', 'dict', 'names',
                       [v.op.name for v in variables if v.name not in self._prms], absent)
        self._vars, self._values = [], {}
        for var in variables:
            if var.name in self._prms:
                value = SessionUpdate.relaxed_value_for_var(self._prms[var.name], var,
                                                            ignore_mismatch=self._ignore_mismatch)
                if value is not None:
                    self._vars.append(var)
                    self._values[var.name] = value

    def _run_init(self, sess):
        if self._values is None:
            self._setup_graph()
        logger.info("Restoring {} variables from a dict ...".format(len(self._values)))
        SessionUpdate(sess, self._vars).update(self._values)


class AveragedRestore(SessionInit):
    """Restores the variables from a checkpoint (or a dict) of a run trained with
    :class:`~tensorpack_lite.callbacks.WeightAverage`, each weight from its average
    (``WeightAverage/<name>``); variables without one (BatchNorm's statistics...) from their own
    value. What ``SmartInit(..., averaged=True)`` gives. A source without any average is an error.
    Otherwise as :class:`DictRestore` (names on one side only are logged; ``ignore_mismatch``).

    Args:
        source (str or dict): a checkpoint (prefix, one of its files, or a directory: its
            newest intact checkpoint), an ``.npz`` file, or a dict ``{name: value}``.
        ignore_mismatch (bool): skip values whose shape differs instead of failing.

    Example::

        PredictConfig(model=Model(), session_init=AveragedRestore('train_log/run1'),
                      input_names=['image'], output_names=['prob'])
    """

    def __init__(self, source, ignore_mismatch=False):
        if isinstance(source, dict):
            self.path, self._values = None, source
        elif isinstance(source, (str, os.PathLike)):
            path = os.path.expanduser(os.fspath(source))
            if path.endswith(('.npz', '.npy')):
                self.path, self._values = path, load_npz_file(path)
            else:
                self.path, self._values = get_checkpoint_path(path), None
                checked_reader(self.path)  # a corrupt checkpoint fails now
        else:
            raise TypeError("AveragedRestore takes a checkpoint path or directory, an .npz file or a dict, "
                            "got {!r}".format(source))
        self._ignore_mismatch = bool(ignore_mismatch)
        self._restore = None

    def _source_values(self):
        """The source's values the graph's variables need: their averages where the source has
        them, else their own (a checkpoint is not read whole: no optimizer slots)."""
        if self._values is not None:
            return self._values
        reader = checked_reader(self.path)
        present = reader.get_variable_to_shape_map()
        values = {}
        for var in tfv1.global_variables():
            for name in (average_name(var.op.name), var.op.name):
                if name in present:
                    values[name] = reader.get_tensor(name)
        return values

    def _setup_graph(self):
        values, replaced = averaged_values(self._source_values())
        where = "checkpoint '{}'".format(self.path) if self.path else "the dict"
        if not replaced:
            raise ValueError("AveragedRestore: {} holds no weight averages (variables 'WeightAverage/...'): "
                             "was it trained with the WeightAverage callback?".format(where))
        logger.info("AveragedRestore: {} weights from their averages in {}.".format(replaced, where))
        self._restore = DictRestore(values, ignore_mismatch=self._ignore_mismatch)
        self._restore.setup_graph()

    def _run_init(self, sess):
        if self._restore is None:
            self._setup_graph()
        self._restore.run_init(sess)


class ChainInit(SessionInit):
    """Runs several initializers in order; a later one overwrites what an earlier one set.

    Example::

        ChainInit([SaverRestore('imagenet/model-100000'), DictRestore({'fc/W': w})])
    """

    def __init__(self, sess_inits):
        sess_inits = list(sess_inits)
        for index, init in enumerate(sess_inits):
            if not isinstance(init, SessionInit):
                raise TypeError("ChainInit: sess_inits[{}] is not a SessionInit: {!r}".format(index, init))
        self.inits = sess_inits

    def _setup_graph(self):
        for init in self.inits:
            init.setup_graph()

    def _run_init(self, sess):
        for init in self.inits:
            init.run_init(sess)


def SmartInit(obj, *, ignore_mismatch=False, strict=False, averaged=False):
    """The :class:`SessionInit` for ``obj``:

    * None, '' or an empty list: :class:`JustCurrentSession`;
    * a :class:`SessionInit`: itself;
    * a dict ``{name: ndarray}``, or the path of an ``.npz`` file: :class:`DictRestore`
      (an ``.npy`` file holding a pickled dict, tensorpack's older format, is refused: it
      is never unpickled);
    * a checkpoint prefix, one of its files or a directory of checkpoints (its newest that
      reads back whole): :class:`SaverRestore` (:class:`SaverRestoreRelaxed` when
      ``ignore_mismatch``);
    * a list of these: :class:`ChainInit`, applied in order.

    ``ignore_mismatch`` skips variables whose shape differs instead of failing. Names on
    one side only are logged, except that ``strict`` refuses a dict's (or ``.npz``'s) names
    the graph does not have (see :class:`DictRestore`).
    A path that does not exist raises FileNotFoundError, anything else TypeError.

    ``averaged=True`` loads the weight averages a run trained with
    :class:`~tensorpack_lite.callbacks.WeightAverage` kept, onto the weights
    (:class:`AveragedRestore`, for a checkpoint, an ``.npz`` file, a dict or a list of these):
    the switch for predictors and export (docs/callbacks.md, "Weight averaging").

    Example::

        SmartInit(['imagenet.npz', 'train_log/finetune'])
        SmartInit('train_log/run1', averaged=True)      # the averaged weights of its newest checkpoint
    """
    if averaged:
        if isinstance(obj, (list, tuple)) and obj:
            return ChainInit([SmartInit(x, ignore_mismatch=ignore_mismatch, averaged=True) for x in obj])
        if not isinstance(obj, (str, os.PathLike, dict)) or not obj:
            raise TypeError("SmartInit(..., averaged=True) takes a checkpoint path or directory, an .npz "
                            "file, a dict or a list of these, got {!r}".format(obj))
        return AveragedRestore(obj, ignore_mismatch=ignore_mismatch)
    if obj is None or (isinstance(obj, (str, list, tuple)) and len(obj) == 0):
        return JustCurrentSession()
    if isinstance(obj, SessionInit):
        return obj
    if isinstance(obj, (list, tuple)):
        return ChainInit([SmartInit(x, ignore_mismatch=ignore_mismatch, strict=strict) for x in obj])
    if isinstance(obj, dict):
        return DictRestore(obj, ignore_mismatch=ignore_mismatch, strict=strict)
    if isinstance(obj, (str, os.PathLike)):
        path = os.path.expanduser(os.fspath(obj))
        if path.endswith(('.npz', '.npy')):
            return DictRestore(load_npz_file(path), ignore_mismatch=ignore_mismatch, strict=strict)
        return (SaverRestoreRelaxed if ignore_mismatch else SaverRestore)(path)
    raise TypeError("SmartInit cannot initialize variables from {!r} of type {}; it takes a "
                    "checkpoint path or directory, an .npz file, a dict, a SessionInit, None, or a "
                    "list of these.".format(obj, type(obj).__name__))


def get_model_loader(obj, *, ignore_mismatch=False, strict=False):
    """The same as :func:`SmartInit` (as in tensorpack 0.11); kept for old scripts.

    Example::

        get_model_loader('imagenet.npz', ignore_mismatch=True)  # DictRestore, shape mismatches skipped
    """
    return SmartInit(obj, ignore_mismatch=ignore_mismatch, strict=strict)
