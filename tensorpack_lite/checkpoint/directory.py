"""A directory of checkpoints: the checkpoints named ``<name>-<step>`` it holds, the newest one that
reads back whole, and the leftovers of an interrupted write, each found one way.

Checkpoints are found through the ``checkpoint`` state file (:mod:`.state_file`) and by their own
``.index`` files, so a state file that is missing, unreadable or names files that are gone costs
nothing. A prefix with data shards but no ``.index`` is not a checkpoint: it is what a write
killed before its index leaves (:func:`clean_interrupted_writes` removes it).

Example::

    find_step_checkpoints('train_log/run')    # {30: '/abs/train_log/run/model-30', 45: ...}
    get_checkpoint_path('train_log/run')      # '/abs/train_log/run/model-45'
"""

import os
import re

from ..utils import logger
from .files import (DATA_SHARD, RESUME_SUFFIX, data_shards, is_temporary, prefix_of_file, remove_path,
                    temporary_files)
from .remote import fetch, is_remote_url
from .state_file import STATE_FILE, CheckpointStateError, read_checkpoint_state
from .verify import verify_checkpoint

__all__ = ['step_of', 'find_step_checkpoints', 'find_resume_states', 'listed_checkpoints',
           'latest_intact_checkpoint', 'get_checkpoint_path', 'clean_interrupted_writes']

_STEP = re.compile(r'^(.+)-(\d+)$')


def step_of(prefix):
    """The global step in the name of checkpoint ``prefix`` (``model-45`` -> 45), or None."""
    match = _STEP.match(os.path.basename(prefix))
    return int(match.group(2)) if match else None


def _step_prefixes(dirname, suffix_of):
    """``{prefix basename: file name}`` of the files of ``dirname`` whose ``suffix_of(name)`` (the
    length of the suffix after a ``<name>-<step>`` prefix, or None) matches."""
    found = {}
    try:
        names = sorted(os.listdir(dirname))
    except FileNotFoundError:
        return found
    for fname in names:
        cut = suffix_of(fname)
        if cut is not None and _STEP.match(fname[:cut]):
            found.setdefault(fname[:cut], fname)
    return found


def find_step_checkpoints(dirname, name=None):
    """``{global_step: prefix}`` of the checkpoints named ``<name>-<step>`` in ``dirname`` (any
    name when ``name`` is None), found by their ``.index`` files whatever the state file says.
    When several names share a step, the one with the newest index wins."""
    dirname = os.path.abspath(dirname)
    found = {}
    for base, fname in _step_prefixes(
            dirname, lambda f: len(f) - len('.index') if f.endswith('.index') else None).items():
        if name is not None and _STEP.match(base).group(1) != name:
            continue
        path, step = os.path.join(dirname, base), step_of(base)
        mtime = os.path.getmtime(os.path.join(dirname, fname))
        if step not in found or mtime > found[step][1]:
            found[step] = (path, mtime)
    return {step: path for step, (path, _) in found.items()}


def find_resume_states(dirname, owner):
    """``{global_step: prefix}`` of the checkpoints of ``dirname`` that have a resume state of
    ``owner`` (``<prefix>.resume.<owner>``, see :func:`.files.resume_state_path`; the chief's,
    ``<prefix>.resume``, when None), with or without the checkpoint itself: what another process
    of a job keeps in its own directory."""
    suffix = RESUME_SUFFIX + ('.' + owner if owner else '')
    found = _step_prefixes(dirname, lambda f: len(f) - len(suffix) if f.endswith(suffix) else None)
    return {step_of(base): os.path.join(os.path.abspath(dirname), base) for base in found}


def _listed_by_state_file(dirname):
    """``(prefixes, problems)``: what the state file lists, and why it lists nothing when it
    cannot be read."""
    try:
        return read_checkpoint_state(dirname), []
    except CheckpointStateError as err:
        return [], [str(err)]


def listed_checkpoints(dirname):
    """``({step: prefix}, problems)``: the checkpoints of ``dirname`` named ``<name>-<step>`` with an
    index, those the state file lists winning for their step over those found by their files, and
    those the state file lists that lost their index but not their data (damaged: a listed
    checkpoint was complete); ``problems`` says what about the state file could not be used (a
    line each)."""
    dirname = os.path.abspath(dirname)
    listed, problems = _listed_by_state_file(dirname)
    steps = {step_of(p): p for p in listed
             if step_of(p) is not None and (os.path.isfile(p + '.index') or data_shards(p))}
    for step, path in find_step_checkpoints(dirname).items():
        steps.setdefault(step, path)
    gone = [os.path.basename(p) for p in listed if not os.path.isfile(p + '.index')]
    if gone:
        problems.append("the state file '{}' lists {} whose index is gone".format(
            os.path.join(dirname, STATE_FILE), ', '.join(gone)))
    return steps, problems


def _candidates_in(dirname):
    """The checkpoints of ``dirname`` to try, newest first, and the problems of its state file:
    the state file's latest first and then its other entries (any name), then every
    ``<name>-<step>`` checkpoint found by its files, the highest step first."""
    listed, problems = _listed_by_state_file(dirname)
    if listed and not os.path.isfile(listed[-1] + '.index'):
        problems.append("state file '{}' points to checkpoint '{}', but '{}' does not exist".format(
            os.path.join(dirname, STATE_FILE), os.path.basename(listed[-1]), listed[-1] + '.index'))
    ordered = [p for p in reversed(listed) if os.path.isfile(p + '.index')]
    on_disk = find_step_checkpoints(dirname)
    ordered += [on_disk[step] for step in sorted(on_disk, reverse=True) if on_disk[step] not in ordered]
    return list(dict.fromkeys(ordered)), problems


def latest_intact_checkpoint(dirname, given=None):
    """The prefix of the newest checkpoint of ``dirname`` that reads back whole (see
    :func:`~.verify.verify_checkpoint`), and the list of what was passed over on the way (a
    line each: a state file that does not read or names files that are gone, checkpoints
    that do not read back). The state file's latest checkpoint comes first; when it is missing,
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
    if not ordered and not os.path.isfile(os.path.join(dirname, STATE_FILE)):
        raise FileNotFoundError(
            "No checkpoint found for '{}': directory '{}' has no '{}' state file (ModelSaver "
            "writes one next to its checkpoints) and no checkpoint files.".format(given, dirname, STATE_FILE))
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
    of checkpoints or its ``checkpoint`` state file; any of these as a URL of object storage
    (``s3://bucket/run``), fetched first into its local mirror (:func:`.remote.fetch`). A
    directory gives its newest checkpoint
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
    path = fetch(given) if is_remote_url(given) else os.path.expanduser(given)
    if not path:
        raise FileNotFoundError("An empty string is not a checkpoint path.")
    if os.path.isdir(path):
        path = _checkpoint_from_state(path, given)
    elif os.path.basename(path) == STATE_FILE and os.path.isfile(path):
        path = _checkpoint_from_state(os.path.dirname(path) or '.', given)
    else:
        prefix = prefix_of_file(path)
        if prefix != path:
            logger.info("Checkpoint path '{}' is taken as the checkpoint prefix '{}'.".format(path, prefix))
            path = prefix
        if not os.path.isfile(path + '.index'):
            raise FileNotFoundError(
                "Checkpoint '{}' not found: '{}' does not exist (expected a checkpoint prefix such "
                "as 'train_log/model-100', one of its files, or a directory with a 'checkpoint' "
                "state file).".format(given, path + '.index'))
    return os.path.abspath(path)


def _interrupted_prefixes(dirname, names):
    """The ``<name>-<step>`` prefixes of ``dirname`` that have temporaries, or data shards or a
    ``.resume`` but no ``.index``."""
    prefixes = set()
    for fname in names:
        match = DATA_SHARD.search(fname)
        if match:
            base = fname[:match.start()]
        elif fname.endswith(RESUME_SUFFIX):
            base = fname[:-len(RESUME_SUFFIX)]
        else:
            base = re.split(r'(?:_temp|\.data-|\.resume|\.index)', fname, maxsplit=1)[0]
            if not is_temporary(base, fname):
                continue
        if _STEP.match(base):
            prefixes.add(base)
    return sorted(prefixes)


def _committed(dirname):
    """The prefixes the state file of ``dirname`` lists; None when it cannot be read."""
    try:
        return set(read_checkpoint_state(dirname))
    except CheckpointStateError:
        return None


def _leftovers(dirname, names):
    """The paths :func:`clean_interrupted_writes` removes (see there)."""
    paths = []
    committed = _committed(dirname)
    for base in _interrupted_prefixes(dirname, names):
        prefix = os.path.join(dirname, base)
        paths += temporary_files(prefix)
        if committed is not None and prefix not in committed and not os.path.isfile(prefix + '.index'):
            paths += data_shards(prefix) + [p for p in [prefix + RESUME_SUFFIX] if os.path.isfile(p)]
    return paths + [os.path.join(dirname, f) for f in names if is_temporary(STATE_FILE, f)]


def _size_of(path):
    if os.path.isdir(path):
        return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files)
    return os.path.getsize(path)


def clean_interrupted_writes(dirname):
    """Remove from ``dirname`` what interrupted checkpoint writes left: TensorFlow's and atomic
    writes' temporaries of ``<name>-<step>`` checkpoints and of the state file, and the data
    shards and ``.resume`` of a ``<name>-<step>`` prefix that has no ``.index`` (a write killed
    before its index, or a deletion cut short) and that the state file does not list (a listed
    one was complete: it is damaged, and set aside by the resume, never deleted; nor is
    anything when the state file cannot be read). Complete checkpoints are never touched, nor the
    ``.resume.<owner>`` files of other processes. One line names what was removed; a file that
    cannot be removed is one warning each. Call it where no checkpoint of the directory is being
    written. Returns the paths removed."""
    dirname = os.path.abspath(dirname)
    try:
        names = os.listdir(dirname)
    except FileNotFoundError:
        return []
    removed, size = [], 0
    for path in _leftovers(dirname, names):
        try:
            path_size = _size_of(path)
            remove_path(path)
        except OSError as err:
            logger.warn("Cannot remove {}, left by an interrupted checkpoint write ({}: {}).".format(
                path, type(err).__name__, err))
            continue
        removed.append(path)
        size += path_size
    if removed:
        names = ', '.join(sorted(os.path.basename(p) for p in removed))
        logger.info("Removed what an interrupted checkpoint write left in {}: {} ({} file(s), "
                    "{:.1f} MB).".format(dirname, names, len(removed), size / 1e6))
    return removed
