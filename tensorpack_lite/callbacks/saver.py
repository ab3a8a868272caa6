"""Callbacks that write checkpoints: the latest ones (:class:`ModelSaver`) and the best one
by some statistic (:class:`MinSaver`, :class:`MaxSaver`).

Example::

    callbacks=[ModelSaver(),                      # train_log/run1/model-<global_step>
               InferenceRunner(...),              # puts 'val-error'
               MinSaver('val-error')]             # train_log/run1/min-val-error

A checkpoint is ``<prefix>.index`` plus ``<prefix>.data-*`` files; load one with
:func:`~tensorpack_lite.tfutils.sessinit.SmartInit` (``SmartInit('train_log/run1/min-val-error')``).
"""

import contextlib
import functools
import json
import os
import time
import weakref
from datetime import datetime

from ..checkpoint.commit import CheckpointCommit, Rotation
from ..checkpoint.copy import copy_checkpoint, recover_copy
from ..checkpoint.directory import clean_interrupted_writes, get_checkpoint_path, step_of
from ..checkpoint.remote import is_remote_url, mirror_for, mirror_of_url
from ..checkpoint.writer import BackgroundCheckpointWriter, CheckpointSaveError, CheckpointWriter, host_cpu
from ..compat import tfv1
from ..loop.callback import Callback
from ..tfutils.common import get_global_step_var
from ..utils import logger
from .stat_reader import StatReader

__all__ = ['ModelSaver', 'MinSaver', 'MaxSaver', 'CheckpointWriteError']


def _default_checkpoint_dir(checkpoint_dir):
    """``checkpoint_dir``, or the logger directory when it is None (None if neither is set); for a
    URL of object storage, its local mirror directory (see :mod:`tensorpack_lite.checkpoint.remote`)."""
    if checkpoint_dir is None:
        checkpoint_dir = logger.get_logger_dir()
    if checkpoint_dir is None:
        return None
    if is_remote_url(checkpoint_dir):
        return mirror_of_url(checkpoint_dir).local_dir
    # Absolute: TF's Saver records a relative save path as it is given (relative to the
    # working directory) in the 'checkpoint' state file, which readers resolve against the
    # checkpoint directory; an absolute one is recorded relative to that directory.
    return os.path.abspath(os.path.expanduser(os.fspath(checkpoint_dir)))


def _prepare_checkpoint_dir(callback):
    """Create ``callback.checkpoint_dir``; a clear error when there is none. Called when the
    callback is set up, so that a chief-only saver made on a non-chief process (which has no
    logger directory and never sets it up) is harmless."""
    if callback.checkpoint_dir is None:
        raise ValueError("{} has nowhere to save: pass checkpoint_dir= or set the logger "
                         "directory first (logger.set_logger_dir).".format(type(callback).__name__))
    os.makedirs(callback.checkpoint_dir, exist_ok=True)


class CheckpointWriteError(RuntimeError):
    """A checkpoint could not be written (e.g. the disk is full); training stops."""


@contextlib.contextmanager
def _holding_the_loop(callback):
    """Around what a saver does in the training loop's thread: its seconds are recorded as the
    loop's ``'checkpoint'`` wait (``TrainLoop.record_wait``, read by StepTimeMonitor)."""
    start = time.perf_counter()
    try:
        yield
    finally:
        loop = getattr(getattr(callback, 'trainer', None), 'loop', None)
        if loop is not None:
            loop.record_wait('checkpoint', time.perf_counter() - start)


_WRITING = weakref.WeakSet()
"""The ModelSavers of this process that may have a checkpoint in flight (see _wait_for_model_savers)."""


def _wait_for_model_savers(checkpoint_dir):
    """Block until the checkpoints that ModelSavers write into ``checkpoint_dir`` in the
    background are complete: what reads the newest checkpoint right after a trigger sees the
    one of that trigger."""
    for saver in list(_WRITING):
        if saver.checkpoint_dir == checkpoint_dir:
            saver.wait()


class ModelSaver(Callback):
    """Saves the variables to ``<checkpoint_dir>/model-<global_step>`` at every trigger (by
    default after every epoch) and once more when training ends, unless the last trigger
    already saved that step. Also writes the graph to ``graph-<time>.meta`` before training.
    Beside each checkpoint, ``model-<global_step>.resume`` holds the trainer's
    :meth:`~tensorpack_lite.train.base.Trainer.resume_state` of that step (none when the
    trainer has none, e.g. after a step failed).

    Writing in the background (``background=True``, the default; tensorpack writes in the
    trigger): the trigger holds the step only while the variables are copied into host
    memory (one more copy of them for the session's life), and a thread writes the files
    while training goes on. At most one checkpoint is in flight: the next trigger waits for
    it. The order is the same either way: the checkpoint's files, then its ``.resume``, then
    the ``checkpoint`` state file and the rotation, so the state file only lists complete
    checkpoints; the ``Model saved to ...`` line comes when they are. When training ends the
    save in flight and the final one complete before ``after_train`` returns (also after an
    error, Ctrl-C or SIGTERM); when the session is unusable after an error, the one in flight
    is discarded instead (its files removed, never listed). :meth:`wait` blocks until the
    checkpoint in flight is complete (:class:`MinSaver` does so before it copies).

    What survives a failure:

    * A checkpoint that cannot be written (a full or read-only disk) raises
      :class:`CheckpointWriteError` naming it, which ends training: the last complete
      checkpoint stays the resume point. Written in the background, the error comes at the
      next trigger or when training ends.
    * The ``checkpoint`` state file always names complete checkpoints: the files are written
      first, then the state file is replaced in one rename, and only then are checkpoints
      beyond ``max_to_keep`` deleted (:mod:`tensorpack_lite.checkpoint.commit`). An old
      checkpoint that cannot be deleted is one warning naming the file, tried again at the next
      save; training goes on and the new checkpoint stays.
    * Before the first step, what an interrupted write left (TensorFlow's temporaries, data
      without an index) is removed, in one line.
    * The newest checkpoint, the newest one with a resume state, and the two newest taken at
      the end of an epoch (saved at an epoch's last step, the step a resumed run started from,
      or a global step that is a multiple of ``steps_per_epoch``) are never deleted, whatever
      ``max_to_keep`` says: they are what :class:`AutoResumeTrainConfig` resumes from, and
      checkpoints saved while a step failed (no resume state) must not push them out.

    The checkpoints of an earlier run in the same directory (those the ``checkpoint`` file lists
    and the ``<name>-<step>`` ones found by their files) stay listed and count towards
    ``max_to_keep``, oldest step first. Nothing
    an earlier run wrote is deleted before this run has saved a checkpoint of its own: the
    rotation follows a save, and a save that fails leaves an earlier checkpoint of the same
    step as it was.

    Args:
        max_to_keep (int): how many recent checkpoints to keep (0 or None: all).
        keep_checkpoint_every_n_hours (float): in addition, keep one checkpoint per that many
            hours.
        checkpoint_dir (str): defaults to the logger directory (created if missing). A URL of
            object storage (``s3://bucket/run``, ``gs://...``) is written through its local
            mirror: each commit is uploaded after it, the bucket's state file last
            (:mod:`tensorpack_lite.checkpoint.remote`, docs/checkpoints.md).
        var_collections (str or list[str]): the collections of the variables to save, by
            default ``GLOBAL_VARIABLES``. The global step is always saved.
        background (bool): write the files in a thread (see above); False: in the trigger.

    Example::

        PeriodicTrigger(ModelSaver(max_to_keep=3), every_k_steps=1000)
    """

    RESUME_POINTS_KEPT = 2
    """How many of the newest end-of-epoch checkpoints are never deleted."""

    _chief_only = False
    """It runs on every process of a job: on the chief (or a single process) it writes the
    checkpoints; on the others only their own resume state (their data position), at the same
    triggers, into their logger directory (``model-<step>.resume.<owner>``, see
    :attr:`~tensorpack_lite.train.base.Trainer.state_owner`), rotated as the chief rotates."""

    _owner = None   # the trainer's state_owner: None on the chief

    def __init__(self, max_to_keep=10, keep_checkpoint_every_n_hours=0.5, checkpoint_dir=None,
                 var_collections=None, background=True):
        if var_collections is None:
            var_collections = [tfv1.GraphKeys.GLOBAL_VARIABLES]
        if isinstance(var_collections, str):
            var_collections = [var_collections]
        self.var_collections = list(var_collections)
        self.checkpoint_dir = _default_checkpoint_dir(checkpoint_dir)
        self.background = bool(background)
        self._last_saved_step = None
        self._failed_step = None   # the step at which training stopped because a write failed
        self._rotation = Rotation(max_to_keep, (keep_checkpoint_every_n_hours or 0) * 3600.,
                                  self.RESUME_POINTS_KEPT)
        self._commit = None        # the CheckpointCommit of this process, once set up
        self._mirror = None        # the RemoteMirror when the directory mirrors a URL (on the chief)
        self._writer = CheckpointWriter(None)   # nothing in flight before the graph is set up

    @property
    def path(self):
        """The prefix of the checkpoints (``<checkpoint_dir>/model``)."""
        return os.path.join(self.checkpoint_dir, 'model')

    def _setup_graph(self):
        self._owner = self.trainer.state_owner
        if self._owner is not None:
            self._writer = _ResumeStateOnly()
            if self.checkpoint_dir is None:
                logger.info("ModelSaver on {}: no logger directory, so its own resume state is not saved "
                            "(a resumed run starts its data at an epoch's start).".format(self._owner))
            else:
                os.makedirs(self.checkpoint_dir, exist_ok=True)
                self._commit = CheckpointCommit(self.checkpoint_dir, self._rotation, self._owner)
            return
        _prepare_checkpoint_dir(self)
        variables = []
        for key in self.var_collections:
            for var in tfv1.get_collection(key):
                if var not in variables:
                    variables.append(var)
        step_var = get_global_step_var()
        if step_var not in variables:
            variables.append(step_var)
        # TF's own rotation is off (max_to_keep=0): checkpoint.commit.Rotation decides.
        # This saver (over the variables themselves) is also the one of the graph-*.meta files.
        self.saver = tfv1.train.Saver(
            var_list=variables, max_to_keep=0,
            write_version=tfv1.train.SaverDef.V2, save_relative_paths=True)
        tfv1.add_to_collection(tfv1.GraphKeys.SAVERS, self.saver)
        self._commit = CheckpointCommit(self.checkpoint_dir, self._rotation)
        self._mirror = mirror_for(self.checkpoint_dir)
        self._writer = self._make_writer(variables, step_var)

    def _make_writer(self, variables, step_var):
        if not self.background:
            return CheckpointWriter(self.saver, companions=self._companions)
        # The shadows go to the CPU of this process: every trainer keeps the global step on
        # its own machine, also when the variables are on parameter servers.
        return BackgroundCheckpointWriter(variables, device=host_cpu(step_var.device),
                                          companions=self._companions, name='model_saver_background')

    def _companions(self, prefix):
        """The files of checkpoint ``prefix`` besides TensorFlow's (this process's)."""
        return [self._commit.resume_state_path(prefix)]

    def _before_train(self):
        schedule = self.trainer.loop.schedule
        if schedule.starting_epoch > 1 and not schedule.first_step:   # resumed where an epoch ended
            self._rotation.epoch_ends.add(self.global_step)
        if self._commit is None:
            return
        if self._mirror is not None:   # the URL's checkpoints come first, its leftovers go
            self._mirror.prepare()
        if self._owner is None:
            clean_interrupted_writes(self.checkpoint_dir)   # nothing of this run is being written yet
        self._commit.start()
        if self._owner is not None:
            return
        # The graph is complete now.
        time_str = datetime.now().strftime('%m%d-%H%M%S')
        self.saver.export_meta_graph(
            os.path.join(self.checkpoint_dir, 'graph-{}.meta'.format(time_str)),
            collection_list=self.graph.get_all_collection_keys())
        _WRITING.add(self)

    def _trigger(self):
        # Once every callback of this trigger has run, so that the resume state holds their
        # states after the step (whatever their order), and the variables after their ops.
        self.after_callbacks(self._save)

    def _save(self):
        step = self.global_step
        if step == self._last_saved_step or self.checkpoint_dir is None:   # None: not the chief
            return
        # Taken here, in the main thread between two steps: what this step's checkpoint resumes.
        state = self.trainer.resume_state()
        epoch_end = state is not None and state.at_epoch_end   # None: saved while a step failed
        sess = self.trainer.sess
        with self._write_errors(), _holding_the_loop(self):
            self._writer.copy(sess)    # waits for the checkpoint in flight: its error comes here
            self._writer.start_save(sess, self.path, step,
                                    functools.partial(self._complete, step, state, epoch_end),
                                    self._after_commit)
        self._last_saved_step = step

    def _complete(self, step, state, epoch_end, path):
        """The files of checkpoint ``path`` (of ``step``) are written: commit it (its resume state,
        then the state file listing it), in the writer's thread when writing in the background."""
        self._commit.commit(step, path, state, epoch_end, self.trainer.steps_per_epoch)
        if self._owner is None:
            logger.info("Model saved to {}.".format(path))

    def _after_commit(self, path):
        """Checkpoint ``path`` is listed: delete those the rotation dropped, then, when the directory
        mirrors a URL, upload (the state file last) and delete there (never raises)."""
        try:
            self._commit.delete_dropped()
        finally:
            if self._mirror is not None:
                self._mirror.push_checkpoints()

    @contextlib.contextmanager
    def _write_errors(self):
        """A checkpoint write that failed (here or in the background) raised in the block, as
        CheckpointWriteError naming it: training stops."""
        try:
            yield
        except CheckpointSaveError as failure:
            self._failed_step = self.global_step
            err = failure.error
            raise CheckpointWriteError(
                "ModelSaver could not write checkpoint {} ({}: {}). Training stops here so that "
                "no further work depends on it; the last complete checkpoint is kept. Free the "
                "space (or fix the directory) and start again: AutoResumeTrainConfig continues "
                "from that checkpoint.".format(failure.prefix, type(err).__name__, err)) from err

    def wait(self):
        """Block until the checkpoint being written in the background is complete and listed
        in the ``checkpoint`` file; :class:`CheckpointWriteError` naming it if it failed."""
        with self._write_errors():
            self._writer.wait()

    def _after_train(self):
        _WRITING.discard(self)
        if self.global_step == self._failed_step:   # training stopped because a write failed: not again
            return self._finish_writing()
        if not self.session_usable("the checkpoint at the end of training (the newest written is kept)"):
            return self._discard_writing()
        try:
            self._save()
        finally:
            self._finish_writing()

    def _finish_writing(self):
        try:
            with self._write_errors():
                self._writer.close()
        finally:
            if self._mirror is not None:   # a failed upload, tried once more
                self._mirror.retry_checkpoints()

    def _discard_writing(self):
        discarded = self._writer.close(finish=False)
        if discarded is not None:
            logger.warn("ModelSaver: checkpoint {}, still being written, is discarded (its files are "
                        "removed, it is not listed).".format(discarded))


class _ResumeStateOnly:
    """The writer of a :class:`ModelSaver` on a process other than the chief: no variables to
    write; the resume state is committed at once."""

    def copy(self, sess):
        pass

    def start_save(self, sess, path_prefix, global_step, commit, then=None):
        path = '{}-{}'.format(path_prefix, global_step)
        commit(path)
        if then is not None:
            then(path)

    def wait(self):
        pass

    def close(self, finish=True):
        return None


class MinSaver(Callback):
    """Keeps a copy of the checkpoint with the smallest value of a statistic.

    At every trigger (by default after every epoch) it reads the latest value of
    ``monitor_stat`` from ``trainer.monitors``; when that value is new and better than the
    best so far, the latest checkpoint of ``checkpoint_dir`` (written by a
    :class:`ModelSaver` earlier in the callback list) is copied to ``min-<monitor_stat>``
    (``.index`` and ``.data-*``), and the value and its global step are recorded in
    ``best-min-<monitor_stat>.json`` next to it.

    Across restarts: the record is read before training, so a run resumed in the same
    directory (e.g. by :class:`AutoResumeTrainConfig`) only replaces the best checkpoint
    with a better one; epochs that are run again after the resume point give their values
    again, which (being no better than themselves) do not replace it. The copy and the
    record are replaced together: both are written under temporary names, then a commit
    marker is written, then they are renamed into place, and a start after a crash completes
    or discards the update. A best checkpoint without a record (e.g. written by an older
    version) counts as absent: the first value replaces it. To start over in the same
    directory, delete ``min-<monitor_stat>.*`` and ``best-min-<monitor_stat>.json``.

    The name is checked before the first step against the statistics the other callbacks
    declare (:meth:`Callback.stat_names`: inferencers, scalar summaries, ...): a name no
    callback puts raises a KeyError suggesting the closest ones; when some callbacks cannot
    tell what they put, a close match only gives a warning. At a trigger, a statistic not
    put yet is waited for when a callback declares it (e.g. an InferenceRunner on a slower
    schedule), and is an error otherwise.

    Args:
        monitor_stat (str): name of the statistic, e.g. 'val-error'. MinSaver reads it and
            copies the checkpoint once every callback of its trigger has run, so it may stand
            anywhere in the callbacks (a ModelSaver saving at the same trigger saves first).
        reverse (bool): keep the largest value instead (see :class:`MaxSaver`).
        filename (str): name of the best checkpoint; defaults to ``min-<monitor_stat>``
            (``max-<monitor_stat>`` when ``reverse``).
        checkpoint_dir (str): where ModelSaver saves; defaults to the logger directory.

    Attribute ``best`` is ``(global_step, value)`` of the best so far, or None.
    """

    def __init__(self, monitor_stat, reverse=False, filename=None, checkpoint_dir=None):
        self._stat = StatReader(self, monitor_stat, after_callbacks=True)   # read in _save_if_better
        self.monitor_stat = monitor_stat
        self.reverse = bool(reverse)
        self.filename = filename or '{}-{}'.format(self._kind, monitor_stat.replace('/', '_'))
        self.checkpoint_dir = _default_checkpoint_dir(checkpoint_dir)
        self.best = None

    def __str__(self):
        return "{}('{}')".format(type(self).__name__, self.monitor_stat)

    @property
    def _kind(self):
        return 'max' if self.reverse else 'min'

    @property
    def best_path(self):
        """The prefix of the best checkpoint."""
        return os.path.join(self.checkpoint_dir, self.filename)

    @property
    def record_path(self):
        """The JSON file recording the statistic of the best checkpoint
        (``best-<filename>.json``)."""
        return os.path.join(self.checkpoint_dir, 'best-{}.json'.format(self.filename))

    def _setup_graph(self):
        _prepare_checkpoint_dir(self)

    def _before_train(self):
        recover_copy(self.best_path, self.record_path)
        self.best = self._read_record()
        if self.best is not None:
            logger.info("{}: the best {} so far is {:.5g}, at global_step={} (recorded in {}).".format(
                self, self.monitor_stat, self.best[1], self.best[0], self.record_path))

    def _read_record(self):
        """``(global_step, value)`` from the record of the best checkpoint, or None when there
        is no usable record (a problem is logged)."""
        has_checkpoint = os.path.isfile(self.best_path + '.index')
        if not os.path.isfile(self.record_path):
            if has_checkpoint:
                logger.warn("{}: {} has no record of its {} ({} is missing); the first value "
                            "will replace it.".format(self, self.best_path, self.monitor_stat,
                                                      self.record_path))
            return None
        if not has_checkpoint:
            logger.warn("{}: {} records a checkpoint {} that does not exist; ignored.".format(
                self, self.record_path, self.best_path))
            return None
        try:
            with open(self.record_path) as f:
                record = json.load(f)
            mine = (record['monitor_stat'], record['kind']) == (self.monitor_stat, self._kind)
            best = (int(record['global_step']), float(record['value']))
        except (OSError, ValueError, TypeError, KeyError) as err:
            logger.warn("{}: cannot read {} ({}: {}); the first value will replace {}.".format(
                self, self.record_path, type(err).__name__, err, self.best_path))
            return None
        if not mine:
            logger.warn("{}: {} records the {} of '{}', not the {} of '{}'; the first value will "
                        "replace {}.".format(self, self.record_path, record['kind'],
                                             record['monitor_stat'], self._kind, self.monitor_stat,
                                             self.best_path))
            return None
        return best

    def _before_epoch(self):
        self._stat.check_once()   # before the first step, once every callback is ready

    def _is_better(self, value):
        if self.best is None:
            return True
        return value > self.best[1] if self.reverse else value < self.best[1]

    def _trigger(self):
        # After ModelSaver has saved at this trigger (it also waits for the whole trigger).
        self.after_callbacks(self._save_if_better)

    def _save_if_better(self):
        point = self._stat.new_value()
        if point is None:
            return
        step, value = point
        if value != value:  # NaN
            logger.warn("{}: '{}' is NaN at global_step={}; ignored.".format(self, self.monitor_stat, step))
            return
        if self._is_better(value):
            with _holding_the_loop(self):
                self._save(step, value)
            self.best = (step, value)

    def _save(self, step, value):
        _wait_for_model_savers(self.checkpoint_dir)   # the checkpoint of this trigger, if in flight
        try:
            src = get_checkpoint_path(self.checkpoint_dir)
        except FileNotFoundError as err:
            raise RuntimeError("{}: there is no checkpoint to copy in '{}'. Put a ModelSaver "
                               "saving there before {} in the callbacks.".format(
                                   self, self.checkpoint_dir, self)) from err
        if step_of(src) not in (None, step):
            logger.warn("{}: the latest checkpoint {} is not from global_step={}, when '{}' was "
                        "put; it is copied anyway.".format(self, src, step, self.monitor_stat))
        record = {'monitor_stat': self.monitor_stat, 'kind': self._kind, 'global_step': int(step),
                  'value': float(value), 'checkpoint': os.path.basename(src)}
        copy_checkpoint(src, self.best_path, self.record_path, record)
        logger.info("Model at global_step={} with {} {}={:.5g} saved to {}.".format(
            step, 'maximum' if self.reverse else 'minimum', self.monitor_stat, value, self.best_path))


class MaxSaver(MinSaver):
    """:class:`MinSaver` keeping the largest value, in ``max-<monitor_stat>``.

    Example::

        MaxSaver('val-accuracy')
    """

    def __init__(self, monitor_stat, filename=None, checkpoint_dir=None):
        super().__init__(monitor_stat, reverse=True, filename=filename, checkpoint_dir=checkpoint_dir)
