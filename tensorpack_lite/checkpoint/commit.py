"""What happens once a checkpoint's files are written: its commit (its resume state, then the state
file that lists it) and, after it, the rotation that deletes older checkpoints.

The order, which docs/checkpoints.md states with what a reader sees at each point:

1. TensorFlow writes the data shards, then the ``.index`` (each through a temporary name and a
   rename; :mod:`.writer`).
2. :meth:`CheckpointCommit.commit` writes ``<prefix>.resume`` (one rename), then replaces the
   ``checkpoint`` state file with one listing the checkpoints kept, this one last (one rename).
   From here on the checkpoint is listed, and only complete checkpoints ever are.
3. :meth:`CheckpointCommit.delete` removes the checkpoints the :class:`Rotation` dropped, which
   the state file no longer lists: index first, then resume state, then data. A file that cannot
   be removed is one warning naming it; it is tried again at the next rotation, and training
   goes on. The newest checkpoint is never among them.

A process other than the chief (``owner``, e.g. ``'worker-1'``) commits and deletes only its own
resume states (``<prefix>.resume.<owner>``).

Example (what :class:`~tensorpack_lite.callbacks.ModelSaver` does)::

    commit = CheckpointCommit('train_log/run', Rotation(max_to_keep=3))
    commit.start()                            # what an earlier run left counts towards max_to_keep
    ...                                       # TensorFlow wrote train_log/run/model-45
    commit.commit(45, prefix, state, epoch_end=False, steps_per_epoch=30)
    commit.delete_dropped()
"""

import os
import time

from ..utils import logger
from .directory import find_resume_states, listed_checkpoints
from .files import remove_checkpoint, remove_path, resume_state_path
from .state_file import write_checkpoint_state

__all__ = ['CheckpointCommit', 'Rotation']


class Rotation:
    """Which checkpoints are kept: the ``max_to_keep`` newest, plus one every
    ``keep_every_secs`` (kept for good: forgotten by the rotation), and never fewer than the
    resume points: the newest checkpoint, the newest with a resume state, and the
    ``resume_points_kept`` newest taken at the end of an epoch (saved at an epoch's last step,
    or at a global step that is a multiple of the steps per epoch). Those are what
    :class:`~tensorpack_lite.train.AutoResumeTrainConfig` resumes from.

    Args:
        max_to_keep (int): 0 or None keeps all.
        keep_every_secs (float): 0 or None: none kept for good.
        resume_points_kept (int): end-of-epoch checkpoints never deleted.
    """

    def __init__(self, max_to_keep, keep_every_secs=0, resume_points_kept=2):
        self.max_to_keep = max_to_keep or 0
        self.keep_every_secs = keep_every_secs or 0
        self.resume_points_kept = resume_points_kept
        self.kept = []           # [(global_step, prefix)], oldest first
        self.epoch_ends = set()  # global steps known to end an epoch
        self._last_preserved = time.time()

    def start(self, earlier):
        """Take ``earlier`` (``[(step, prefix)]``, oldest first: what an earlier run left) as kept."""
        self.kept = list(earlier)

    def paths(self):
        """The prefixes kept, oldest first."""
        return [path for _, path in self.kept]

    def add(self, step, prefix, epoch_end, steps_per_epoch, resumable):
        """Keep the new checkpoint ``prefix`` of ``step`` (replacing one of the same step) and
        return ``[(step, prefix)]`` of those to delete now. ``resumable(prefix)``: whether a
        checkpoint has a resume state."""
        self.kept = [(s, p) for s, p in self.kept if s != step] + [(step, prefix)]
        if epoch_end:
            self.epoch_ends.add(step)
        dropped = self._beyond_limit(steps_per_epoch, resumable)
        now = time.time()
        for item in list(dropped):
            if self.keep_every_secs and now - self._last_preserved >= self.keep_every_secs:
                self._last_preserved = now
                dropped.remove(item)
                self.kept.remove(item)   # kept for good
        self.kept = [item for item in self.kept if item not in dropped]
        return dropped

    def _beyond_limit(self, steps_per_epoch, resumable):
        if not self.max_to_keep:
            return []
        epoch_ends = [s for s, _ in self.kept if s in self.epoch_ends or s % steps_per_epoch == 0]
        with_state = [s for s, p in self.kept if resumable(p)]
        recent_ends = epoch_ends[len(epoch_ends) - self.resume_points_kept:] \
            if self.resume_points_kept else []
        protected = set(recent_ends + with_state[-1:] + [self.kept[-1][0]])
        others = [(s, p) for s, p in self.kept if s not in protected]
        room = max(self.max_to_keep - len(protected), 0)
        return others[:len(others) - room] if room < len(others) else []


class CheckpointCommit:
    """The commit and the deletion of the checkpoints of ``directory``, for one process: the chief
    (``owner`` None) lists its checkpoints in the state file; another process (``owner`` its
    name) keeps only its own resume states there. See the module's docstring for the order.

    Args:
        directory (str): the checkpoint directory.
        rotation (Rotation): which checkpoints are kept.
        owner (str): None on the chief, else the process's name (``'worker-1'``).
    """

    def __init__(self, directory, rotation, owner=None):
        self.directory = directory
        self.rotation = rotation
        self.owner = owner
        self._dropped = []      # what the last commit's rotation dropped
        self._undeleted = []    # prefixes whose deletion failed, tried again at the next one
        self._warned = set()    # the files already warned about

    def start(self):
        """Before the first commit: what an earlier run left counts as kept (:meth:`earlier`)."""
        self.rotation.start(self.earlier())

    def resume_state_path(self, prefix):
        """This process's resume state file of checkpoint ``prefix``."""
        return resume_state_path(prefix, self.owner)

    def resumable(self, prefix):
        """Whether checkpoint ``prefix`` has this process's resume state."""
        return os.path.exists(self.resume_state_path(prefix))

    def earlier(self):
        """``[(step, prefix)]`` of what an earlier run left in the directory, oldest first: the
        chief's checkpoints (listed or found by their files), another process's resume states."""
        if self.owner is not None:
            found = find_resume_states(self.directory, self.owner)
            return [(step, found[step]) for step in sorted(found)]
        steps, problems = listed_checkpoints(self.directory)
        if problems:
            logger.info("Checkpoints in {}: {}; the state file is rewritten at the next save.".format(
                self.directory, '; '.join(problems)))
        return [(step, steps[step]) for step in sorted(steps)]

    def commit(self, step, prefix, state, epoch_end, steps_per_epoch):
        """Checkpoint ``prefix`` (of global ``step``) has its files complete: write its resume
        ``state`` (a :class:`~.resume_state.ResumeState`, or None: an earlier run's of that name is
        removed), then, on the chief, list the checkpoints the rotation keeps in the state file,
        ``prefix`` last. An error here means the checkpoint is not committed. ``epoch_end``:
        whether it was saved at an epoch's last step."""
        if state is not None:
            state.write(prefix, self.owner)
        else:
            remove_path(self.resume_state_path(prefix))
        self._dropped = self.rotation.add(step, prefix, epoch_end, steps_per_epoch, self.resumable)
        if self.owner is None:
            write_checkpoint_state(self.directory, self.rotation.paths())

    def delete_dropped(self):
        """After a commit: delete the checkpoints its rotation dropped (see :meth:`delete`)."""
        dropped, self._dropped = self._dropped, []
        self.delete(dropped, keep=self.rotation.paths())

    def delete(self, dropped, keep=()):
        """Delete the checkpoints ``dropped`` (``[(step, prefix)]``, no longer listed) and those
        whose deletion failed before, never one of ``keep`` (the prefixes kept). Never raises: a
        file that cannot be removed is one warning (once per file) and is tried again next time."""
        prefixes = self._undeleted + [prefix for _, prefix in dropped]
        self._undeleted = []
        for prefix in dict.fromkeys(prefixes):
            if prefix in keep:
                continue
            failed = []
            if self.owner is None:
                remove_checkpoint(prefix, [self.resume_state_path(prefix)],
                                  on_error=lambda path, err: failed.append((path, err)))
            else:
                try:
                    remove_path(self.resume_state_path(prefix))
                except OSError as err:
                    failed.append((self.resume_state_path(prefix), err))
            for path, err in failed:
                if path not in self._warned:
                    self._warned.add(path)
                    logger.warn("Cannot delete {} of the old checkpoint {} ({}: {}); it is tried again at "
                                "the next save, and training goes on.".format(
                                    path, os.path.basename(prefix), type(err).__name__, err))
            if failed:
                self._undeleted.append(prefix)
