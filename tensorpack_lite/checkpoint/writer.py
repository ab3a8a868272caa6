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
    writer.start_save(sess, 'train_log/model', step, commit, then)   # returns at once
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
import threading

from ..compat import tf, tfv1
from ..utils import logger
from .files import checkpoint_identity, remove_checkpoint

__all__ = ['CheckpointWriter', 'BackgroundCheckpointWriter', 'CheckpointSaveError', 'host_cpu']


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
        self.committing = False   # its files are complete and ``commit`` runs


class CheckpointWriter:
    """Writes checkpoints with ``saver`` in the calling thread: :meth:`start_save` returns once
    the checkpoint is complete (``commit`` and ``then`` included). The protocol of
    :class:`BackgroundCheckpointWriter`, where :meth:`copy`, :meth:`wait` and :meth:`close` matter.

    Args:
        saver (tf.compat.v1.train.Saver): the saver of the checkpoints.
        companions (callable): ``companions(prefix)``: the paths of the files that ``commit``
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

    def start_save(self, sess, path_prefix, global_step, commit, then=None):
        """Write checkpoint ``<path_prefix>-<global_step>``, then call ``commit(path)`` (e.g. write
        its resume state and list it), then ``then(path)`` (e.g. delete older checkpoints).
        A failure of the write or of ``commit``
        (of either) removes its files and raises :class:`CheckpointSaveError`."""
        self._write(_Save(path_prefix, global_step), sess, commit, then)

    def wait(self):
        """Block until the save in flight is complete; raise its :class:`CheckpointSaveError`."""

    def close(self, finish=True):
        """No save is in flight after this. ``finish=False`` discards an unfinished one; the
        prefix of a discarded checkpoint is returned (None when there was none)."""
        return None

    def _write(self, save, sess, commit, then):
        try:
            path = self.saver.save(sess, save.path_prefix, global_step=save.global_step,
                                   write_meta_graph=False, write_state=False)
            committed = self._may_complete(save)
            if committed:
                commit(path)
        except Exception as err:
            with contextlib.suppress(OSError):   # e.g. the directory is gone: nothing to remove
                self._remove_partial(save)
            raise CheckpointSaveError(save.target, err) from err
        if committed and then is not None:
            self._after_commit(then, path)

    @staticmethod
    def _after_commit(then, path):
        """``then(path)`` once checkpoint ``path`` is complete and listed: what fails there (e.g.
        deleting an older checkpoint) costs that checkpoint nothing, and training goes on."""
        try:
            then(path)
        except Exception as err:
            logger.warn("After checkpoint {} was written: {}: {} (the checkpoint is kept; training goes "
                        "on).".format(path, type(err).__name__, err))

    def _may_complete(self, save):
        """Whether the files of ``save``, now written, become a checkpoint (``commit`` runs)."""
        return True

    def _remove_partial(self, save):
        """Remove what ``save`` wrote: everything when it made or changed the checkpoint's files,
        else only TensorFlow's temporaries (an earlier checkpoint of that name stays as it was)."""
        untouched = bool(save.earlier) and checkpoint_identity(save.target) == save.earlier
        remove_checkpoint(save.target, self.companions(save.target), temporaries_only=untouched)


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

    def start_save(self, sess, path_prefix, global_step, commit, then=None):
        """Write the shadows (as :meth:`copy` left them) to checkpoint
        ``<path_prefix>-<global_step>`` in a thread, which then calls ``commit(path)`` and
        ``then(path)``."""
        self.wait()
        save = _Save(path_prefix, global_step)
        save.thread = threading.Thread(target=self._run, args=(save, sess, commit, then), daemon=True,
                                       name='BackgroundCheckpointWriter')
        self._save = save
        save.thread.start()

    def _run(self, save, sess, commit, then):
        try:
            self._write(save, sess, commit, then)
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
        save.thread.join()   # only ``commit`` and ``then`` are left: short
        return None
