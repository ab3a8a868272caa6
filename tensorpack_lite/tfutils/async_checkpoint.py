"""Checkpoints written without holding training: :class:`BackgroundCheckpointWriter` copies the
variables into host-memory shadows (the only part that holds the step), then writes the shadows
to disk in a thread while training goes on. :class:`CheckpointWriter` is the same protocol,
writing in the calling thread.

The files are those of a ``tf.compat.v1.train.Saver`` over the original variables (V2 format,
the original names): they restore into the original variables.

Example (what :class:`~tensorpack_lite.callbacks.ModelSaver` does)::

    writer = BackgroundCheckpointWriter(tf.compat.v1.global_variables())   # at graph setup
    ...
    writer.copy(sess)                                  # between two steps: holds the step
    writer.start_save(sess, 'train_log/model', step, on_complete)    # returns at once
    ...
    writer.close()                                     # at the end: the save in flight completes

What TensorFlow leaves when a save is cut short: the V2 format writes the data file under a
temporary name (``<prefix>.data-00000-of-00001.tempstate<n>``), renames it, and only then writes
``<prefix>.index`` (also through a temporary name and a rename; a sharded saver writes its parts
in ``<prefix>_temp/`` and merges them, the index last). So an ``.index`` exists only beside
complete data files: a write killed at any point leaves temporaries and perhaps complete data
files, never an index of a half-written checkpoint.
"""

import contextlib
import os
import shutil
import threading

from ..compat import tf, tfv1

__all__ = ['CheckpointWriter', 'BackgroundCheckpointWriter', 'CheckpointSaveError',
           'remove_checkpoint_files', 'checkpoint_identity', 'host_cpu']

_TEMPSTATE = '.tempstate'


class CheckpointSaveError(RuntimeError):
    """Writing checkpoint :attr:`prefix` failed; the original error is ``__cause__``. Its files
    were removed (an earlier checkpoint of that name that the write did not touch is kept)."""

    def __init__(self, prefix, error):
        super().__init__("could not write checkpoint {} ({}: {})".format(prefix, type(error).__name__, error))
        self.prefix = prefix
        self.error = error


def host_cpu(device):
    """The CPU of the machine (job and task) of ``device``: ``'/job:worker/task:1/device:CPU:0'``
    for ``'/job:worker/task:1/device:GPU:0'``, ``'/device:CPU:0'`` for ``''``."""
    spec = tf.DeviceSpec.from_string(device or '')
    return spec.replace(device_type='CPU', device_index=0).to_string()


def _checkpoint_file_names(prefix):
    """The names in the directory of ``prefix`` of its ``.index`` and ``.data-*`` files (none
    when the directory is missing)."""
    dirname, base = os.path.split(prefix)
    try:
        names = os.listdir(dirname or '.')
    except FileNotFoundError:
        return []
    wanted = (base + '.index', base + '.data-')
    return sorted(f for f in names if f.startswith(wanted) and _TEMPSTATE not in f)


def checkpoint_identity(prefix):
    """What tells whether checkpoint ``prefix`` was rewritten: ``(name, inode, size, mtime)`` of
    its ``.index`` and data files (empty when it does not exist)."""
    dirname = os.path.dirname(prefix)
    identity = []
    for name in _checkpoint_file_names(prefix):
        with contextlib.suppress(FileNotFoundError):
            info = os.stat(os.path.join(dirname, name))
            identity.append((name, info.st_ino, info.st_size, info.st_mtime_ns))
    return tuple(identity)


def _remove_file(path):
    with contextlib.suppress(FileNotFoundError):
        os.remove(path)


def _is_temporary(base, fname):
    """Whether ``fname`` is a temporary file TensorFlow writes for checkpoint ``base``."""
    return fname.startswith(base + '_temp') or (fname.startswith(base + '.') and _TEMPSTATE in fname)


def remove_checkpoint_files(prefix, companions=(), temporaries_only=False):
    """Delete checkpoint ``prefix``: its ``.index`` first (so that a half-deleted checkpoint is
    never taken for a complete one), then the ``companions`` (paths of files that belong to
    it, e.g. its ``.resume``), then its data shards and TensorFlow's temporary files; only the
    temporaries with ``temporaries_only``."""
    dirname, base = os.path.split(prefix)
    if not temporaries_only:
        for path in [prefix + '.index'] + list(companions):
            _remove_file(path)
    for fname in os.listdir(dirname or '.'):
        path = os.path.join(dirname, fname)
        if fname.startswith(base + '_temp'):
            shutil.rmtree(path, ignore_errors=True)
        elif _is_temporary(base, fname) or (fname.startswith(base + '.data-') and not temporaries_only):
            _remove_file(path)


class _Save:
    """One checkpoint being written: ``<path_prefix>-<global_step>``."""

    def __init__(self, path_prefix, global_step):
        self.path_prefix = path_prefix
        self.global_step = int(global_step)
        self.target = '{}-{}'.format(path_prefix, self.global_step)
        self.earlier = checkpoint_identity(self.target)   # an earlier checkpoint of that name
        self.thread = None
        self.error = None         # the CheckpointSaveError of a failed write
        self.discarded = False    # abandoned before its files were complete
        self.committing = False   # its files are complete and ``done`` runs


class CheckpointWriter:
    """Writes checkpoints with ``saver`` in the calling thread: :meth:`start_save` returns once
    the checkpoint is complete (``done`` included). The protocol of
    :class:`BackgroundCheckpointWriter`, where :meth:`copy`, :meth:`wait` and :meth:`close` matter.

    Args:
        saver (tf.compat.v1.train.Saver): the saver of the checkpoints.
        companions (callable): ``companions(prefix)``: the paths of the files that ``done``
            writes beside checkpoint ``prefix`` (e.g. its ``.resume``), removed with it when its
            write fails. Default: none.
    """

    def __init__(self, saver, companions=None):
        self.saver = saver
        self._companions = companions or (lambda prefix: [])

    def companions(self, prefix):
        """The files that belong to checkpoint ``prefix`` besides TensorFlow's."""
        return list(self._companions(prefix))

    @property
    def in_flight(self):
        """The prefix of the checkpoint being written in the background, or None."""
        return None

    def copy(self, sess):
        """Make the values to save (nothing here: the saver reads the variables themselves)."""

    def start_save(self, sess, path_prefix, global_step, done):
        """Write checkpoint ``<path_prefix>-<global_step>``, then call ``done(path)``. A failure
        (of either) removes its files and raises :class:`CheckpointSaveError`."""
        self._write(_Save(path_prefix, global_step), sess, done)

    def wait(self):
        """Block until the save in flight is complete; raise its :class:`CheckpointSaveError`."""

    def close(self, finish=True):
        """No save is in flight after this. ``finish=False`` discards an unfinished one; the
        prefix of a discarded checkpoint is returned (None when there was none)."""
        return None

    def _write(self, save, sess, done):
        try:
            path = self.saver.save(sess, save.path_prefix, global_step=save.global_step,
                                   write_meta_graph=False, write_state=False)
            if self._may_complete(save):
                done(path)
        except Exception as err:
            with contextlib.suppress(OSError):   # e.g. the directory is gone: nothing to remove
                self._remove_partial(save)
            raise CheckpointSaveError(save.target, err) from err

    def _may_complete(self, save):
        """Whether the files of ``save``, now written, become a checkpoint (``done`` runs)."""
        return True

    def _remove_partial(self, save):
        """Remove what ``save`` wrote: everything when it made or changed the checkpoint's files,
        else only TensorFlow's temporaries (an earlier checkpoint of that name stays as it was)."""
        untouched = bool(save.earlier) and checkpoint_identity(save.target) == save.earlier
        remove_checkpoint_files(save.target, self.companions(save.target), temporaries_only=untouched)


class BackgroundCheckpointWriter(CheckpointWriter):
    """Writes checkpoints of ``variables`` in a thread, from copies of them taken between two
    steps.

    At construction (graph setup) it builds one shadow variable per variable on ``device``
    (in the collection :attr:`COLLECTION` only: no initializer, restore or other saver sees
    them, and the first copy gives them their values), the op that copies every variable
    into its shadow, and a V2 saver that writes the shadows under the original names.

    :meth:`copy` holds training only while the variables are copied; :meth:`start_save`
    writes in a daemon thread; at most one save is in flight (the next :meth:`copy` or
    :meth:`start_save` waits for it). A failed write is raised, as
    :class:`CheckpointSaveError`, by the next :meth:`copy`, :meth:`wait` or :meth:`close`.

    Memory: one more copy of the saved variables in host memory, for as long as the session
    lives (allocated by the first copy).

    Args:
        variables (list): the variables a ``tf.compat.v1.train.Saver`` would save.
        device (str): where the shadows live: the CPU of the process that runs the session.
            In a distributed graph whose variables are on other tasks (parameter servers), the
            CPU of this worker, e.g. ``host_cpu(get_global_step_var().device)``.
        companions (callable): as for :class:`CheckpointWriter`.
        name (str): the name scope of what it builds.
    """

    COLLECTION = 'background_checkpoint_shadows'

    def __init__(self, variables, device='/cpu:0', companions=None, name='background_checkpoint'):
        variables = list(variables)
        with tfv1.name_scope(name), tfv1.device(device):
            self.shadows = [self._make_shadow(var) for var in variables]
            # validate_shape=False: the first copy also initializes the shadows.
            self.copy_op = tf.group(*[tfv1.assign(shadow, var, validate_shape=False)
                                      for var, shadow in zip(variables, self.shadows)], name='copy')
            saver = tfv1.train.Saver(
                var_list={var.op.name: shadow for var, shadow in zip(variables, self.shadows)},
                max_to_keep=0, write_version=tfv1.train.SaverDef.V2, save_relative_paths=True)
        super().__init__(saver, companions)
        self._lock = threading.Lock()
        self._save = None   # the _Save in flight

    def _make_shadow(self, var):
        """A reference variable: the copy writes into its buffer in place (a resource
        variable's assign would share the source's buffer instead, and the next update of the
        source would copy it inside a training step)."""
        shape, dtype = var.shape, var.dtype.base_dtype
        return tfv1.Variable(lambda: tf.zeros(shape, dtype), trainable=False, collections=[self.COLLECTION],
                             name=var.op.name, use_resource=False, dtype=dtype)

    @property
    def in_flight(self):
        save = self._save
        return None if save is None else save.target

    def copy(self, sess):
        """Wait for the save in flight, then copy the variables into the shadows."""
        self.wait()
        sess.run(self.copy_op)

    def start_save(self, sess, path_prefix, global_step, done):
        """Write the shadows (as :meth:`copy` left them) to checkpoint
        ``<path_prefix>-<global_step>`` in a thread, which then calls ``done(path)``."""
        self.wait()
        save = _Save(path_prefix, global_step)
        save.thread = threading.Thread(target=self._run, args=(save, sess, done), daemon=True,
                                       name='BackgroundCheckpointWriter')
        self._save = save
        save.thread.start()

    def _run(self, save, sess, done):
        try:
            self._write(save, sess, done)
        except CheckpointSaveError as err:
            save.error = err

    def _may_complete(self, save):
        with self._lock:
            save.committing = not save.discarded
        if save.discarded:   # abandoned while TensorFlow wrote: its files go now
            self._remove_partial(save)
        return save.committing

    def wait(self):
        save = self._save
        if save is None:
            return
        save.thread.join()
        self._save = None
        if save.error is not None:
            raise save.error

    def close(self, finish=True):
        """``finish``: :meth:`wait`. Else stop waiting for the save in flight unless its files
        are complete already (then it is finished): its thread removes what it wrote as soon
        as TensorFlow returns (removing files under TensorFlow could let it write an index
        beside missing data), and never lists it. Returns the prefix of the discarded
        checkpoint, or None."""
        if finish:
            self.wait()
            return None
        save, self._save = self._save, None
        if save is None:
            return None
        with self._lock:
            save.discarded = not save.committing
        if save.discarded:
            return save.target
        save.thread.join()   # only ``done`` is left: short
        return None
