"""Where a run in a directory resumes: the newest checkpoint that reads back whole and that the
run can place (its resume state says where it is, or ``stats.json`` records the epoch it ended),
the newest end of an epoch to fall back to, and the shape of the run that trained it.

:class:`~tensorpack_lite.train.AutoResumeTrainConfig` acts on it (restores the checkpoint, starts the
loop at its step); the rule is described there.

Example::

    search = ResumeSearch('train_log/run', steps_per_epoch=30)
    search.point          # ResumePoint(path='.../model-45', epoch=2, state=ResumeState(...)) or None
"""

import os
from collections import namedtuple

from ..utils import logger, stats_json
from .directory import listed_checkpoints, step_of
from .remote import mirror_for
from .files import move_checkpoint_aside
from .state_file import STATE_FILE, CheckpointStateError, read_checkpoint_state
from .resume_state import ResumeState, ResumeStateError
from .verify import verify_checkpoint

__all__ = ['RunShape', 'ResumePoint', 'ResumeSearch']


class RunShape:
    """The size of the run that trained an epoch, as ``stats.json`` recorded it at the
    epoch's end: ``world_size`` (model replicas), ``global_batch`` (datapoints per step, all
    replicas together) and ``steps_per_epoch``; each None when not recorded."""

    KEYS = ('world_size', 'global_batch', 'steps_per_epoch')

    def __init__(self, world_size=None, global_batch=None, steps_per_epoch=None):
        self.world_size, self.global_batch, self.steps_per_epoch = world_size, global_batch, steps_per_epoch

    @classmethod
    def of_record(cls, record):
        """The shape an epoch-end record of ``stats.json`` holds (None for what it lacks)."""
        values = [record.get(key) for key in cls.KEYS]
        return cls(*[int(v) if isinstance(v, (int, float)) else None for v in values])

    def __repr__(self):
        return 'RunShape(world_size={}, global_batch={}, steps_per_epoch={})'.format(
            self.world_size, self.global_batch, self.steps_per_epoch)


class ResumePoint(namedtuple('ResumePoint', ['path', 'epoch', 'state'])):
    """A checkpoint a run can resume from: its ``path`` (prefix), its ``epoch`` (the last
    finished one, or the one in progress when its :class:`ResumeState` ``state`` is mid-epoch)
    and that state (None for a checkpoint without one)."""

    __slots__ = ()

    def describe(self):
        if self.state is not None and not self.state.at_epoch_end:
            return self.state.describe()
        return "end of epoch {}".format(self.epoch)


class ResumeSearch:
    """The resume point of the run in ``directory`` (``point``: ``(prefix, epoch)`` or None):
    the newest end-of-epoch checkpoint that ``stats.json`` describes and that reads back
    whole. The checkpoints are those the ``checkpoint`` state file lists plus those found by
    their own files; ``passed_over`` says what was skipped and why, ``broken`` lists the
    prefixes of the checkpoints that did not read back."""

    def __init__(self, directory, steps_per_epoch):
        self.directory = os.path.abspath(directory) if directory else None
        self.point, self.passed_over, self.broken, self.moved = None, [], [], {}
        self.epoch_end_point = None   # the newest resumable end of an epoch, at or before point
        self.epoch_end_shape = None
        self.shape = None      # the RunShape of the resume point's epoch
        if directory:
            mirror = mirror_for(self.directory)
            if mirror is not None:   # the directory mirrors a URL: the bucket's checkpoints first
                mirror.pull_once()
            self._search(steps_per_epoch)

    def _checkpoints(self):
        """``{step: prefix}`` of every checkpoint named ``<name>-<step>``: listed or on disk."""
        steps, problems = listed_checkpoints(self.directory)
        self.passed_over += problems
        if steps and not os.path.isfile(os.path.join(self.directory, STATE_FILE)):
            self.passed_over.append("there is no '{}' state file: checkpoints found by their files".format(
                os.path.join(self.directory, STATE_FILE)))
        return steps

    def _search(self, steps_per_epoch):
        steps = self._checkpoints()
        if not steps:
            self.passed_over = []   # nothing to resume: nothing worth a warning
            return
        records = stats_json.load_records(self.directory)
        usable = self._usable(steps, records, steps_per_epoch)
        if not usable:
            return
        for step in sorted(usable, reverse=True):
            try:
                verify_checkpoint(steps[step])
            except (OSError, ValueError) as err:
                self.broken.append(steps[step])
                self.passed_over.append("skipped {}: {}".format(
                    os.path.basename(steps[step]), str(err).rstrip('.')))
                continue
            epoch, state = usable[step]
            point = ResumePoint(steps[step], epoch, state)
            if self.point is None:
                self.point = point
                self.shape = self._shape_of(records, epoch, step, state)
                later = sorted(s for s in steps if s > step and steps[s] not in self.broken)
                if later:
                    logger.info("Checkpoints after step {} (at steps {}) are passed over: {}.".format(
                        step, later, "neither a resume state beside them nor stats.json says where "
                        "they are in the run"))
            if state is None or state.at_epoch_end:
                self.epoch_end_point = point
                self.epoch_end_shape = self._shape_of(records, epoch, step, state)
                return

    def _usable(self, steps, records, steps_per_epoch):
        """``{step: (epoch, ResumeState or None)}`` of the checkpoints the run can resume from:
        those whose resume state says where they are in the run (mid-epoch: when ``stats.json``
        has recorded the epochs before), and those at the end of an epoch ``stats.json``
        describes (or, without ``stats.json``, at a multiple of ``steps_per_epoch``)."""
        states = {}
        for step, path in steps.items():
            try:
                states[step] = ResumeState.read(path)
            except ResumeStateError as err:
                self.passed_over.append(str(err))
                states[step] = None
        if records is None:  # a run without JSONWriter: trust the newest whole-epoch checkpoint
            usable = {step: (step // steps_per_epoch, states[step]) for step in steps
                      if step > 0 and step % steps_per_epoch == 0}
            usable.update({step: (state.epoch, state) for step, state in states.items()
                           if state is not None and not state.at_epoch_end})
            if not usable:
                raise ValueError("Checkpoints in {} are at steps {}, none at the end of an epoch of {} "
                                 "steps, and there is no stats.json to tell the epoch.".format(
                                     self.directory, sorted(steps), steps_per_epoch))
            return usable
        described = stats_json.finished_epochs(records, steps_per_epoch)
        cut = self._cut_before_resume_state(states)
        usable = {step: (epoch, states[step]) for epoch, step in described.items() if step in steps}
        for step in sorted(cut & set(usable)):
            del usable[step]
            self.passed_over.append("passed over {}: its write was cut before its resume state (it has "
                                    "none and the state file does not list it)".format(
                                        os.path.basename(steps[step])))
        for step, state in states.items():
            if state is None or state.at_epoch_end or state.global_step != step:
                continue
            before = described.get(state.epoch - 1)
            if state.epoch == 1 or (before is not None and before <= step):
                usable[step] = (state.epoch, state)
        if not usable:
            self.passed_over.append(
                "{} describes no finished epoch that has a checkpoint (finished epochs: {}; "
                "checkpoints at steps {} with {} steps per epoch)".format(
                    stats_json.stats_path(self.directory), sorted(described), sorted(steps),
                    steps_per_epoch))
        return usable

    def _cut_before_resume_state(self, states):
        """The steps of the checkpoints whose write was cut between their index and their resume
        state: without a resume state and not listed by the state file, in a directory whose
        checkpoints have resume states. Resumed from, such a checkpoint would not continue as
        the uninterrupted run (the data position is lost)."""
        if all(state is None for state in states.values()):
            return set()   # a run that writes no resume states (an older run, another tool)
        try:
            listed = {step_of(prefix) for prefix in read_checkpoint_state(self.directory)}
        except CheckpointStateError:
            return set()   # nothing tells which checkpoints were committed
        return {step for step, state in states.items() if state is None and step not in listed}

    @staticmethod
    def _shape_of(records, epoch, step, state):
        """The :class:`RunShape` of epoch ``epoch``'s end record (at ``step``); in the middle of
        an epoch, the one its resume ``state`` holds; without either, an empty one."""
        if state is not None and not state.at_epoch_end:
            return RunShape(world_size=state.world_size, steps_per_epoch=state.steps_per_epoch)
        ends = [r for r in records or [] if stats_json.epoch_of(r) == epoch and r.get('global_step') == step]
        return RunShape.of_record(ends[-1]) if ends else RunShape()

    def set_broken_aside(self):
        """Rename the files of the checkpoints that did not read back to ``<prefix>.damaged``
        (``.damaged2``... if taken): kept for inspection, no longer taken for checkpoints of
        the run, and not overwritten when their epoch is trained again."""
        for prefix in self.broken:
            self.moved[prefix] = move_checkpoint_aside(prefix, '.damaged')

    def report(self):
        """One warning: what was passed over and where the run goes on from."""
        if not self.passed_over:
            return
        moved = ''.join('; moved {} aside to {}'.format(os.path.basename(p), os.path.basename(to))
                        for p, to in self.moved.items())
        outcome = ("resuming from {} ({})".format(os.path.basename(self.point.path), self.point.describe())
                   if self.point else "starting from scratch")
        logger.warn("AutoResumeTrainConfig: in {}, {}{}; {}.".format(
            self.directory, '; '.join(self.passed_over), moved, outcome))
