"""What a checkpoint adds so that a run can resume at its very step: the loop's position and
the callbacks' own state (the data position among them), in ``<prefix>.resume`` beside the
checkpoint ``<prefix>``.

The trainer makes it (``trainer.resume_state()``) between two steps; :class:`ModelSaver` writes
it, atomically, once the checkpoint's own files are complete; :class:`AutoResumeTrainConfig`
reads it to pick the resume point and hands it back to the trainer. A checkpoint without it
(saved by another tool, or while a step was failing) can only be resumed at an epoch's end.

Example::

    state = ResumeState.read('train_log/run/model-45')
    state.epoch, state.steps_done, state.global_step       # (2, 15, 45)
"""

import os

from ..utils.fs import write_atomically
from ..utils.serialize import dumps, loads
from .files import resume_state_path

__all__ = ['ResumeState', 'ResumeStateError']


class ResumeStateError(ValueError):
    """A resume state file that cannot be read (named in the message)."""


class ResumeState:
    """The position of a run between two steps and its callbacks' state.

    Args:
        epoch (int): the epoch in progress (or just finished, when ``steps_done`` equals
            ``steps_per_epoch``).
        steps_done (int): the steps of that epoch already run (0 to ``steps_per_epoch``).
        global_step (int): the global step at that point.
        steps_per_epoch (int): the run's steps per epoch.
        callbacks (dict): ``{key: state}`` of the callbacks that have a state (see
            :meth:`~tensorpack_lite.loop.dispatch.Callbacks.get_states`); the input source's data
            position is one of them.
        world_size (int): the trainer's model replicas.
    """

    VERSION = 1

    def __init__(self, epoch, steps_done, global_step, steps_per_epoch, callbacks=None, world_size=1):
        self.epoch = int(epoch)
        self.steps_done = int(steps_done)
        self.global_step = int(global_step)
        self.steps_per_epoch = int(steps_per_epoch)
        self.callbacks = dict(callbacks or {})
        self.world_size = int(world_size)

    @property
    def at_epoch_end(self):
        """Whether the state was taken after the last step of its epoch."""
        return self.steps_done >= self.steps_per_epoch

    def describe(self):
        """Where the run is, in words: ``step 15 of 30 of epoch 2`` or ``the end of epoch 2``."""
        if self.at_epoch_end:
            return "the end of epoch {}".format(self.epoch)
        return "step {} of {} of epoch {}".format(self.steps_done, self.steps_per_epoch, self.epoch)

    def as_dict(self):
        return {'version': self.VERSION, 'epoch': self.epoch, 'steps_done': self.steps_done,
                'global_step': self.global_step, 'steps_per_epoch': self.steps_per_epoch,
                'world_size': self.world_size, 'callbacks': self.callbacks}

    def write(self, prefix, owner=None):
        """Write ``<prefix>.resume`` (see :func:`resume_state_path`) in one rename (data synced
        first); returns its path."""
        path = resume_state_path(prefix, owner)
        data = dumps(self.as_dict())
        write_atomically(path, lambda f: f.write(data), mode='wb')
        return path

    @classmethod
    def read(cls, prefix, owner=None):
        """The state of checkpoint ``prefix`` (``owner``'s: see :func:`resume_state_path`); None
        when there is no such file; :class:`ResumeStateError` naming the file when it cannot be
        read."""
        path = resume_state_path(prefix, owner)
        if not os.path.isfile(path):
            return None
        try:
            with open(path, 'rb') as f:
                content = loads(f.read())
            if content.get('version') != cls.VERSION:
                raise ValueError("version {!r}, expected {}".format(content.get('version'), cls.VERSION))
            return cls(content['epoch'], content['steps_done'], content['global_step'],
                       content['steps_per_epoch'], content['callbacks'], content['world_size'])
        except Exception as err:
            raise ResumeStateError("The resume state '{}' cannot be read ({}: {})".format(
                path, type(err).__name__, err)) from err

    def __repr__(self):
        return "ResumeState({}, global step {}, {} callback state(s))".format(
            self.describe(), self.global_step, len(self.callbacks))
