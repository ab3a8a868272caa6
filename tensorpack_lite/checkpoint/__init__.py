"""Checkpoints, in one package: the files of one checkpoint (:mod:`.files`), the directory's
``checkpoint`` state file (:mod:`.state_file`), finding and verifying the checkpoints of a
directory (:mod:`.directory`, :mod:`.verify`), writing one in the background (:mod:`.writer`),
the commit of a written checkpoint and the rotation of old ones (:mod:`.commit`), the resume
state a checkpoint carries (:mod:`.resume_state`), where a run resumes (:mod:`.resume_point`), a
crash-safe copy (:mod:`.copy`) and the mirror of a directory on object storage (:mod:`.remote`:
``s3://``, ``gs://``). docs/checkpoints.md states the protocol.

The callbacks that write checkpoints (:class:`~tensorpack_lite.callbacks.ModelSaver`,
:class:`~tensorpack_lite.callbacks.MinSaver`) and the ways to load one
(:mod:`tensorpack_lite.tfutils.sessinit`, :func:`~tensorpack_lite.tfutils.varmanip.get_checkpoint_path`)
stay where tensorpack has them and build on this package.

Example::

    from tensorpack_lite.checkpoint import get_checkpoint_path, ResumeState
    prefix = get_checkpoint_path('train_log/run')        # the newest checkpoint that reads back
    ResumeState.read(prefix).describe()                  # 'step 15 of 30 of epoch 2'
"""

from .commit import CheckpointCommit, Rotation
from .copy import copy_checkpoint, recover_copy
from .directory import (clean_interrupted_writes, find_resume_states, find_step_checkpoints,
                        get_checkpoint_path, latest_intact_checkpoint, listed_checkpoints, step_of)
from .files import (checkpoint_files, checkpoint_identity, data_shards, move_checkpoint_aside,
                    remove_checkpoint, resume_files, resume_state_path, temporary_files)
from .remote import RemoteMirror, RemoteMirrorError, is_remote_url, local_mirror_dir
from .resume_point import ResumePoint, ResumeSearch, RunShape
from .resume_state import ResumeState, ResumeStateError
from .state_file import STATE_FILE, CheckpointStateError, read_checkpoint_state, write_checkpoint_state
from .verify import checked_reader, verify_checkpoint
from .writer import BackgroundCheckpointWriter, CheckpointSaveError, CheckpointWriter, host_cpu

__all__ = ['CheckpointCommit', 'Rotation', 'copy_checkpoint', 'recover_copy',
           'clean_interrupted_writes', 'find_resume_states', 'find_step_checkpoints', 'get_checkpoint_path',
           'latest_intact_checkpoint', 'listed_checkpoints', 'step_of',
           'checkpoint_files', 'checkpoint_identity', 'data_shards', 'move_checkpoint_aside',
           'remove_checkpoint',
           'resume_files', 'resume_state_path', 'temporary_files',
           'RemoteMirror', 'RemoteMirrorError', 'is_remote_url', 'local_mirror_dir',
           'ResumePoint', 'ResumeSearch', 'RunShape', 'ResumeState', 'ResumeStateError',
           'STATE_FILE', 'CheckpointStateError', 'read_checkpoint_state', 'write_checkpoint_state',
           'checked_reader', 'verify_checkpoint',
           'BackgroundCheckpointWriter', 'CheckpointSaveError', 'CheckpointWriter', 'host_cpu']
