"""Crash-consistency torture test of checkpoint writing (issue 58): a seeded sample of the points
of ``benchmarks/checkpoint_torture.py`` (a SIGKILL or an injected error at one system call of one
checkpoint's write, hit by strace attached to the writing thread, then a rerun that must resume
and end bit-identical to an uninterrupted run), the order of the recorded writes, and six
SIGKILLs of a run writing a 100 MB checkpoint in the background. The method and the checks are
in the benchmark's docstring; docs/checkpoints.md has the table of every point."""

import json
import os
import shutil

import numpy as np
import pytest

from tensorpack_lite.checkpoint import ResumeSearch, ResumeState, write_checkpoint_state
from tensorpack_lite.tfutils.varmanip import save_checkpoint_vars
from helpers.paths import REPO_DIR, import_file

_HARNESS = os.path.join(REPO_DIR, 'benchmarks',
                        'checkpoint_torture.py')


def _load_harness():
    return import_file(_HARNESS, 'checkpoint_torture')


torture = _load_harness()

SEED = 58
SAMPLE = 30
"""Points run by the sampled test (about 1 s each on 2 cores)."""


@pytest.mark.parametrize('listed', [False, True], ids=['unlisted', 'listed'])
def test_a_checkpoint_cut_before_its_resume_state_is_no_resume_point(tmp_path, listed):
    """What the harness found (case "save 6 python #1 openat(model-6.resume.*.tmp): kill"): a kill
    between TensorFlow's index of model-6, the end of epoch 1 that stats.json recorded, and its
    ``.resume`` left it complete but unlisted and without a resume state; the resume took it (as
    an older run's end of epoch) without the data position, and the rerun ended with other
    weights. Unlisted it is passed over; listed (committed: e.g. saved while a step failed) it
    is the resume point as before."""
    directory = str(tmp_path)
    prefixes = {step: os.path.join(directory, 'model-{}'.format(step)) for step in (4, 6)}
    for step, prefix in prefixes.items():
        save_checkpoint_vars({'w': np.full(3, step, 'float32')}, prefix)
    ResumeState(epoch=1, steps_done=4, global_step=4, steps_per_epoch=6).write(prefixes[4])
    write_checkpoint_state(directory, [prefixes[4]] + ([prefixes[6]] if listed else []))
    with open(os.path.join(directory, 'stats.json'), 'w') as f:
        json.dump([{'epoch_num': 1, 'global_step': 6}], f)
    search = ResumeSearch(directory, steps_per_epoch=6)
    assert search.point.path == prefixes[6 if listed else 4]
    assert any('passed over model-6' in line for line in search.passed_over) != listed


@pytest.fixture(scope='module')
def harness(tmp_path_factory):
    """The zygote, the recorded operations of every save, and the points made of them."""
    if shutil.which('strace') is None:
        pytest.skip("needs strace (Debian's strace: apt-get install strace)")
    workdir = str(tmp_path_factory.mktemp('torture'))
    with torture.Zygote(workdir) as zygote:
        run_dir, recorded = torture.record(zygote, workdir)
        yield zygote, workdir, torture.points_of(run_dir, recorded), recorded


@pytest.fixture(scope='module')
def reference(harness):
    zygote, workdir = harness[:2]
    return torture.reference_run(zygote, workdir)


def _names(ops, syscalls):
    return [(i, os.path.basename(op.paths[-1])) for i, op in enumerate(ops) if op.syscall in syscalls]


def test_the_recorded_writes_follow_the_commit_order(harness):
    """Each save (steps 2..12): TensorFlow renames the data into place, then the index; then the
    writer renames the ``.resume`` into place, replaces the state file, and only then deletes
    (older checkpoints only; the rotation of max_to_keep=2 deletes from the third save on)."""
    recorded = harness[3]
    steps = sorted({step for step, _ in recorded})
    assert steps == [2, 4, 6, 8, 10, 12]
    deleting_saves = []
    for step in steps:
        name = 'model-{}'.format(step)
        renamed = [n for _, n in _names(recorded[(step, 'tf')], torture.RENAMES)]
        assert renamed == [name + '.data-00000-of-00001', name + '.index']
        python = recorded[(step, 'python')]
        renames = _names(python, torture.RENAMES)
        assert [n for _, n in renames] == [name + '.resume', 'checkpoint']
        deletes = _names(python, torture.DELETES)
        assert all(i > renames[-1][0] for i, _ in deletes)
        assert all(torture.is_older(n, step) for _, n in deletes), deletes
        if deletes:
            deleting_saves.append(step)
    assert deleting_saves and deleting_saves[0] >= 6


def test_a_seeded_sample_of_kills_and_faults(harness, reference):
    """Every sampled point fires, and ends as the module docstring of the harness says: the
    newest listed checkpoint restores with its step in its ``.resume``, the rerun resumes from it
    (or a newer intact one) and ends bit-identical, nothing is left at its first step; an error
    stops the run naming the checkpoint, or (after the commit) training goes on, with one warning
    naming an old checkpoint's file that could not be deleted."""
    zygote, workdir, points = harness[:3]
    chosen = torture.sample(points, SAMPLE, SEED)
    assert {p.phase for p in chosen} == {'copy', 'tf', 'python'}
    assert {p.expect for p in chosen} == {'kill', 'error', 'go on', 'warn'}
    assert {'kill', 'dir', 'ENOSPC', 'EIO'} <= {p.action for p in chosen}
    assert {'EACCES', 'EPERM'} & {p.action for p in chosen}
    cases = [torture.run_point(zygote, point, workdir, reference) for point in chosen]
    bad = [case.row() for case in cases if case.verdict not in ('ok', 'ok (ignored)')]
    assert not bad, '\n'.join(' | '.join(row) for row in bad)


def test_an_fsync_error_of_a_checkpoint_file_stops_the_run(harness, reference):
    """A ``.resume`` whose data cannot be synced is no commit: the run stops naming the checkpoint
    (utils/fs.py ignored the error of the file's own fsync before the harness found it)."""
    zygote, workdir, points = harness[:3]
    point = next(p for p in points if p.step == 4 and p.phase == 'python' and p.syscall == 'fsync'
                 and p.n == 1 and p.action == 'EIO')
    assert point.what == 'fsync(model-4.resume.*.tmp)'
    case = torture.run_point(zygote, point, workdir, reference)
    assert case.verdict == 'ok', case.row()


def test_six_sigkills_during_100mb_background_writes(harness):
    """A run saving a 100 MB variable every 2 steps in the background, killed 6 times while a
    write's data tempstate is being written (seeded: which write, at which fraction): after each
    kill the newest listed checkpoint restores with its step, by the next start's first step
    nothing of the killed write is left, and the last start ends as an uninterrupted run."""
    zygote, workdir = harness[:2]
    end = torture.reference_run(zygote, workdir, torture.STORM_EPOCHS)
    rows, problems = torture.kill_storm(zygote, workdir, SEED, kills=6, reference=end)
    assert not problems, '\n'.join(problems + [' | '.join(row) for row in rows])
    assert len(rows) == 6
    assert any(row[2] != '-' for row in rows), rows   # some kill cut a write: it had temporaries
