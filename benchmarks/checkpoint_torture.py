#!/usr/bin/env python
"""Crash-consistency torture test of checkpoint writing (issue 58, item 5), in the manner of
SQLite's crash tests: a training run is killed (SIGKILL) or meets an error at one point of one
checkpoint's life, then run again; the harness checks what a reader and the rerun find.

The run (``checkpoint_torture_worker.py``): a small MLP, 2 epochs of 6 steps,
``PeriodicTrigger(ModelSaver(max_to_keep=2), every_k_steps=2)`` writing in the background,
``AutoResumeTrainConfig``; saves at steps 2, 4, ..., 12. Its rerun trains one epoch more (so
that a run the fault did not stop has a rerun too), and so does the reference run.

**Points.** A point is (step of the save, phase, system call, its n-th call in the phase,
action). The phases of a save: ``copy`` (the variables copied to host shadows, main thread),
``tf`` (TensorFlow's save kernel in its ``tf_Compute`` thread: data tempstate -> rename, index
tempstate -> rename) and ``python`` (the writer thread after ``Saver.save``: ``.resume``, the
``checkpoint`` state file, the rotation, and whatever else it does). The points are not
written down here: a recording run traces every file operation of each save's phases
(:func:`record`), and every operation on the checkpoint directory becomes points:
``kill`` (SIGKILL before the call takes effect), each errno the call can really return
(ENOSPC, EACCES, EPERM, EIO, EBUSY: :data:`ERRORS`), and ``dir`` (an empty directory put where
the file the call renames to or deletes is, when the phase starts). So a change of the
protocol (another file, another order) changes the points by itself.

**How the points are hit: strace, one thread at a time.** strace's fault injection
(``-e inject=SYSCALL:error=E:when=N``, ``signal=KILL``) acts at the system call, so it reaches
TensorFlow's C++ writes as well as the Python ones. But strace counts calls per thread, and
the calls of one save are made by two threads (TensorFlow's kernel thread, then the writer
thread, a new one for each save) while the main thread trains on; ``-P`` selects exact paths,
and the temporaries' names are random. So the harness attaches strace to the one thread of
the phase, when the phase starts (``strace -p TID``, from inside the process: a patched
``Saver.save`` attaches it to ``tf_Compute`` before the kernel runs and to itself after), and
the n-th call counted from there is exactly the n-th of the phase; the session has one
inter-op thread so that the kernel's thread is known. Python-level patching would miss
TensorFlow's writes, and kills timed on the directory's contents are not reproducible.

**A case.** A fresh directory; the run with the point's fault; what the directory holds
then; a rerun (the same program, no fault: the user starting it again, after removing an empty
directory the point put in place) that first reads the directory, then trains to the end.
Verdict ``ok`` when:

(a) the newest checkpoint the ``checkpoint`` state file lists reads back whole
    (``verify_checkpoint``) and (b) its ``.resume`` holds its step;
(c) the rerun resumes from it or from a newer intact one (or from an older one when it is the
    end of an epoch that ``stats.json`` does not record: killed between its commit and the
    epoch's record, it is passed over by the documented rule), and ends with every variable
    bit-identical to an uninterrupted run's;
(d) before the rerun's first step the directory holds no temporary (``*.tempstate*``,
    ``*_temp``, ``*.tmp``) and no data shard or ``.resume`` without its ``.index``;
(e) a kill killed; an error ends the run with an error naming the checkpoint being written,
    except after the state file named the new checkpoint (the rotation): then the run goes
    on to rc 0, and a failed delete of an old checkpoint's file is one warning naming it (a
    directory in its place may be deleted instead). No run hangs (each has a deadline).

``missed``: the fault did not fire (the operation did not happen in that run); ``ok
(ignored)``: an error on the directory's own sync was ignored and nothing was lost.

**The 100 MB variant** (:func:`kill_storm`): a run with a 100 MB variable, 4 epochs, killed 6
times at seeded random moments of its background writes (when the data tempstate of its 1st or
2nd write holds a seeded 5-60% of its bytes) and resumed each time; after each kill the newest
listed checkpoint must restore with its step and, by the rerun's first step, nothing of the
killed write be left; the last rerun ends as an uninterrupted run.

    python benchmarks/checkpoint_torture.py                # every point: ~15 min on 2 cores
    python benchmarks/checkpoint_torture.py --points 100 --seed 3
    python benchmarks/checkpoint_torture.py --quick        # 30 points and 3 kills of the 100 MB run

Needs strace (Debian's ``strace``) and the right to ptrace the process's own threads: root, or
``kernel.yama.ptrace_scope`` 0 or 1 (the traced process names any tracer as allowed).
Prints a row per point (kill point or fault, what the directory held, what the resume did,
verdict) and the counts; exits 1 when a point failed or missed.
"""

import argparse
import collections
import json
import os
import queue
import random
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np
from tabulate import tabulate

__all__ = ['Zygote', 'Op', 'Point', 'Case', 'ERRORS', 'RENAMES', 'DELETES', 'VERDICTS', 'record',
           'points_of', 'is_older', 'sample', 'reference_run', 'run_point', 'kill_storm', 'leftovers', 'held',
           'summary_rows']

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'checkpoint_torture_worker.py')

FAULT_EPOCHS, RERUN_EPOCHS, STORM_EPOCHS = 2, 3, 4
"""The faulty run trains 2 epochs of 6 steps; its rerun one more (so that a faulty run that
ended still has a rerun, whose start is checked); the 100 MB run 4 epochs."""

RUN_TIMEOUT = 120
"""Seconds a training task may take before it counts as hung (it takes about one)."""

ERRORS = {
    'open': ('ENOSPC', 'EACCES', 'EIO'), 'openat': ('ENOSPC', 'EACCES', 'EIO'),
    'creat': ('ENOSPC', 'EACCES', 'EIO'),
    'write': ('ENOSPC', 'EIO'), 'pwrite64': ('ENOSPC', 'EIO'), 'writev': ('ENOSPC', 'EIO'),
    'fsync': ('EIO', 'ENOSPC'), 'fdatasync': ('EIO', 'ENOSPC'), 'close': ('EIO',),
    'ftruncate': ('ENOSPC', 'EIO'), 'fallocate': ('ENOSPC', 'EIO'),
    'rename': ('ENOSPC', 'EACCES', 'EPERM', 'EIO'), 'renameat': ('ENOSPC', 'EACCES', 'EPERM', 'EIO'),
    'renameat2': ('ENOSPC', 'EACCES', 'EPERM', 'EIO'),
    'unlink': ('EACCES', 'EPERM', 'EIO', 'EBUSY'), 'unlinkat': ('EACCES', 'EPERM', 'EIO', 'EBUSY'),
    'rmdir': ('EACCES', 'EPERM', 'EIO', 'EBUSY'),
    'mkdir': ('ENOSPC', 'EACCES', 'EIO'), 'mkdirat': ('ENOSPC', 'EACCES', 'EIO'),
}
"""The errors injected into each system call: those the kernel can return for it on a local
or network file system."""

_FD_CALLS = {'write', 'pwrite64', 'writev', 'fsync', 'fdatasync', 'close', 'ftruncate', 'fallocate'}
_AT_CALLS = {'openat', 'unlinkat', 'mkdirat'}
DELETES = {'unlink', 'unlinkat', 'rmdir'}
"""The system calls that delete a file or directory."""
RENAMES = {'rename', 'renameat', 'renameat2'}
"""The system calls that rename."""
_STATE_FILE = 'checkpoint'
_LINE = re.compile(r'^(\w+)\((.*)\)\s+=\s+(.*)$')
_FD_PATH = re.compile(r'(?:\d+|AT_FDCWD)<([^>]*)>')
_QUOTED = re.compile(r'"((?:[^"\\]|\\.)*)"')
_STEP_NAME = re.compile(r'^model-(\d+)[._]')
_DATA_SHARD = re.compile(r'^(.+)\.data-\d{5}-of-\d{5}$')


# ----- the zygote ----------------------------------------------------------------------------

class Zygote:
    """The training side (``checkpoint_torture_worker.py``) in a process of its own, which
    imported TensorFlow once and forks a process per task. Every task has a deadline (the
    zygote kills its process group there) and so does every answer; :meth:`close` ends it."""

    STARTUP_TIMEOUT = 300

    def __init__(self, workdir, python=sys.executable):
        self.workdir = workdir
        self._log = open(os.path.join(workdir, 'zygote.log'), 'a')
        self.proc = subprocess.Popen([python, WORKER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self._log, text=True, start_new_session=True)
        self._answers = queue.Queue()
        threading.Thread(target=self._read, daemon=True, name='zygote-reader').start()
        self._answer(self.STARTUP_TIMEOUT, 'start')

    def _read(self):
        for line in self.proc.stdout:
            self._answers.put(json.loads(line))
        self._answers.put(None)

    def _answer(self, timeout, what):
        try:
            answer = self._answers.get(timeout=timeout)
        except queue.Empty:
            answer = None
        if answer is None:
            self.close()
            raise RuntimeError("the torture zygote did not answer ({}) within {} s; see {}".format(
                what, timeout, self._log.name))
        return answer

    def run(self, task, timeout=RUN_TIMEOUT):
        """Run ``task`` (a dict, see the worker) in a forked process; the zygote's answer
        (``signal``, ``code``, ``timed_out``, ``seconds``...) with the task's findings as
        ``result`` (None when it left none)."""
        task = dict(task, timeout=timeout)
        for stale in (task['result'],):
            if os.path.exists(stale):
                os.remove(stale)
        self.proc.stdin.write(json.dumps(task) + '\n')
        self.proc.stdin.flush()
        answer = self._answer(timeout + 60, task['result'])
        answer['result'] = None
        if os.path.exists(task['result']):
            with open(task['result']) as f:
                answer['result'] = json.load(f)
        return answer

    def close(self):
        if self.proc.poll() is None:
            try:
                self.proc.stdin.close()
                self.proc.wait(30)
            except (OSError, subprocess.TimeoutExpired):
                pass
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, 9)
            self.proc.wait()
        self._log.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _task(case_dir, name, run_dir, **kwargs):
    os.makedirs(case_dir, exist_ok=True)
    return dict(dir=run_dir, trace_dir=case_dir, result=os.path.join(case_dir, name + '.json'),
                log=os.path.join(case_dir, name + '.log'), **kwargs)


# ----- the points ----------------------------------------------------------------------------

class Op(collections.namedtuple('Op', ['step', 'phase', 'syscall', 'n', 'paths', 'line'])):
    """One recorded file operation: the ``n``-th ``syscall`` of ``phase`` of the save of ``step``,
    on ``paths`` (absolute; for a rename, source then destination)."""

    def describe(self, directory):
        names = [_generic(os.path.relpath(p, directory)) if p != directory else '<dir>' for p in self.paths]
        return '{}({})'.format(self.syscall, ' -> '.join(names))


def _generic(name):
    """A file name without the random part of a temporary's name."""
    name = re.sub(r'tempstate\d+', 'tempstate*', name)
    return re.sub(r'\.[0-9a-f]{12}\.tmp$', '.*.tmp', name)


def _paths_of(syscall, args):
    fds = _FD_PATH.findall(args)
    quoted = [bytes(q, 'utf-8').decode('unicode_escape') for q in _QUOTED.findall(args)]
    if syscall in _FD_CALLS:
        return fds[:1]
    if syscall in _AT_CALLS:
        return [os.path.join(fds[0], quoted[0])] if fds and quoted else []
    if syscall in ('renameat', 'renameat2'):
        return [os.path.join(fds[0], quoted[0]), os.path.join(fds[1], quoted[1])]
    if syscall == 'rename':
        return quoted[:2]
    return quoted[:1]


def parse_trace(path, step, phase):
    """The :class:`Op` s of one strace output of :func:`record`."""
    ops, counts = [], collections.Counter()
    with open(path) as f:
        for line in f:
            match = _LINE.match(line.strip())
            if match is None:
                continue
            syscall, args = match.group(1), match.group(2)
            counts[syscall] += 1
            paths = [os.path.normpath(p) for p in _paths_of(syscall, args)]
            ops.append(Op(step, phase, syscall, counts[syscall], paths, line.strip()))
    return ops


def record(zygote, workdir):
    """Run once with every save's phases traced; ``{(step, phase): [Op]}`` of the operations on
    the checkpoint directory (their ``n`` counts every call of the phase's thread)."""
    case_dir = os.path.join(workdir, 'recording')
    run_dir = os.path.join(case_dir, 'run')
    answer = zygote.run(_task(case_dir, 'record', run_dir, record=True, epochs=FAULT_EPOCHS))
    if answer['result'] is None or answer['result'].get('outcome') != 'ok':
        raise RuntimeError("the recording run failed: {} (see {})".format(answer, case_dir))
    recorded = {}
    for fname in sorted(os.listdir(case_dir)):
        match = re.match(r'^trace-(\d+)-(tf|python)\.txt$', fname)
        if match:
            step, phase = int(match.group(1)), match.group(2)
            ops = parse_trace(os.path.join(case_dir, fname), step, phase)
            recorded[(step, phase)] = [op for op in ops if any(_inside(p, run_dir) for p in op.paths)]
    return run_dir, recorded


def _inside(path, directory):
    return path == directory or path.startswith(directory + os.sep)


class Point(collections.namedtuple('Point', ['step', 'phase', 'syscall', 'n', 'action', 'target', 'what',
                                             'expect'])):
    """A kill or a fault at one operation (``target``: the path a ``dir`` action occupies).
    ``expect``: ``kill``, ``error`` (the run ends with an error naming the checkpoint),
    ``go on`` (rc 0), or ``warn`` (rc 0 and a warning naming ``target``'s file)."""

    @property
    def slug(self):
        return '{}-{}-{}{}-{}'.format(self.step, self.phase, self.syscall, self.n, self.action)

    def fault(self, run_dir):
        target = None if self.target is None else os.path.join(run_dir, self.target)
        return dict(step=self.step, phase=self.phase, syscall=self.syscall, n=self.n, action=self.action,
                    path=target)

    def label(self):
        if self.phase == 'copy':
            return 'save {} copy: {}'.format(self.step, self.action)
        return 'save {} {} #{} {}: {}'.format(self.step, self.phase, self.n, self.what, self.action)


def points_of(run_dir, recorded):
    """Every point of the recorded operations (see the module's docstring), in order."""
    points = []
    for step in sorted({step for step, _ in recorded}):
        points.append(Point(step, 'copy', None, None, 'kill', None, 'copy', 'kill'))
        python_ops = recorded.get((step, 'python'), [])
        committed = [i for i, op in enumerate(python_ops)
                     if op.syscall in RENAMES and os.path.basename(op.paths[-1]) == _STATE_FILE]
        commit_at = committed[0] if committed else len(python_ops)
        for phase in ('tf', 'python'):
            for index, op in enumerate(recorded.get((step, phase), [])):
                after_commit = phase == 'python' and index > commit_at
                what = op.describe(run_dir)
                points.append(Point(step, phase, op.syscall, op.n, 'kill', None, what, 'kill'))
                target = _dir_target(op, run_dir)
                old = target is not None and is_older(target, step) and op.syscall in DELETES
                for action in ERRORS.get(op.syscall, ()):
                    expect = ('warn' if old else 'go on') if after_commit else 'error'
                    points.append(Point(step, phase, op.syscall, op.n, action,
                                        os.path.basename(op.paths[-1]) if old else None, what, expect))
                if target is not None:
                    expect = ('warn' if old else 'go on') if after_commit else 'error'
                    points.append(Point(step, phase, op.syscall, op.n, 'dir', target, what, expect))
    return points


def _dir_target(op, run_dir):
    """The name a ``dir`` action occupies for ``op`` (the file it renames to or deletes), or None."""
    if op.syscall in RENAMES or op.syscall in DELETES - {'rmdir'}:
        path = op.paths[-1]
        if os.path.dirname(path) == run_dir and not _temporary(os.path.basename(path)):
            return os.path.basename(path)
    return None


def is_older(name, step):
    """Whether file ``name`` belongs to a checkpoint of a step before ``step``."""
    match = _STEP_NAME.match(name)
    return match is not None and int(match.group(1)) < step


def sample(points, count, seed):
    """``count`` points drawn with ``seed``, spread over the (phase, action, expectation)
    kinds: one of each kind in turn, in a seeded order."""
    rng = random.Random(seed)
    groups = collections.defaultdict(list)
    for point in points:
        groups[(point.phase, point.action, point.expect)].append(point)
    for members in groups.values():
        rng.shuffle(members)
    kinds = sorted(groups)
    rng.shuffle(kinds)
    chosen = []
    while len(chosen) < min(count, len(points)):
        for kind in kinds:
            if groups[kind] and len(chosen) < count:
                chosen.append(groups[kind].pop())
    return chosen


# ----- a case --------------------------------------------------------------------------------

def _temporary(name):
    """Whether ``name`` is a temporary of an interrupted write: TensorFlow's ``*.tempstate<n>``
    and ``<prefix>_temp[_<hex>]`` (a sharded save's directory), an atomic write's ``*.tmp``."""
    return ('.tempstate' in name or name.endswith('.tmp')
            or re.search(r'_temp(_[0-9a-f]+)?$', name) is not None)


def leftovers(names):
    """The names in ``names`` (a directory's) that a start should have removed: temporaries of
    interrupted writes, and data shards or ``.resume`` files of a checkpoint without ``.index``."""
    indexes = {n[:-len('.index')] for n in names if n.endswith('.index')}
    found = []
    for name in names:
        shard = _DATA_SHARD.match(name)
        if _temporary(name) or (shard and shard.group(1) not in indexes) or (
                name.endswith('.resume') and name[:-len('.resume')] not in indexes):
            found.append(name)
    return found


def _listed(run_dir):
    """The checkpoint names the state file lists, oldest first (the latest last); None when
    it is missing, ``'unreadable'`` when it cannot be read."""
    path = os.path.join(run_dir, _STATE_FILE)
    if not os.path.exists(path):
        return None
    if os.path.isdir(path):
        return 'a directory'
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except (OSError, UnicodeDecodeError):
        return 'unreadable'
    latest, listed = None, []
    for line in lines:
        match = re.match(r'^(model_checkpoint_path|all_model_checkpoint_paths): "(.*)"$', line.strip())
        if match is None:
            continue
        if match.group(1) == 'model_checkpoint_path':
            latest = os.path.basename(match.group(2))
        elif os.path.basename(match.group(2)) not in listed:
            listed.append(os.path.basename(match.group(2)))
    return [n for n in listed if n != latest] + ([latest] if latest else [])


def held(run_dir, names=None):
    """What a directory holds, in one line: listed checkpoints, complete ones, partial ones, temporaries."""
    names = sorted(os.listdir(run_dir)) if names is None else names
    listed = _listed(run_dir)
    by_step = collections.defaultdict(set)
    for name in names:
        match = _STEP_NAME.match(name)
        if match and not _temporary(name):
            kind = 'index' if name.endswith('.index') else 'resume' if name.endswith('.resume') else 'data'
            is_dir = os.path.isdir(os.path.join(run_dir, name))
            by_step[int(match.group(1))].add(kind + ('/' if is_dir else ''))
    parts = ['listed ' + (','.join(n.replace('model-', '') for n in listed) if isinstance(listed, list)
                          else 'none' if listed is None else listed)]
    complete = ['{}{}'.format(s, '+r' if 'resume' in k else '') for s, k in sorted(by_step.items())
                if k >= {'index', 'data'}]
    partial = ['{}({})'.format(s, '+'.join(sorted(k))) for s, k in sorted(by_step.items())
               if not k >= {'index', 'data'}]
    parts.append('ckpt ' + (','.join(complete) or '-'))
    if partial:
        parts.append('partial ' + ','.join(partial))
    temps = sorted({_generic(n) for n in names if _temporary(n)})
    if temps:
        parts.append('tmp ' + ','.join(temps))
    return '; '.join(parts)


class Case(collections.namedtuple('Case', ['point', 'held', 'resume', 'verdict', 'problems', 'seconds'])):
    """The outcome of one point: what the directory held after the faulty run, what the rerun
    did, the verdict and, when it is not ok, why."""

    def row(self):
        return [self.point.label(), self.held, self.resume,
                self.verdict + ('' if not self.problems else ': ' + '; '.join(self.problems))]


def _load_weights(path):
    with np.load(path) as data:
        return {name: data[name] for name in data.files}


def _weights_differ(got, expected):
    """None when ``got`` has every variable of ``expected`` bit-identical, else what differs."""
    if got is None:
        return 'no final weights'
    for name, value in expected.items():
        if name not in got:
            return 'no variable ' + name
        if not np.array_equal(got[name], value):
            return '{} differs (max |d| {:.3g})'.format(name, float(np.max(np.abs(got[name] - value))))
    return None


def reference_run(zygote, workdir, epochs=RERUN_EPOCHS):
    """The variables at the end of an uninterrupted run of ``epochs``."""
    case_dir = os.path.join(workdir, 'reference-{}'.format(epochs))
    weights = os.path.join(case_dir, 'weights.npz')
    answer = zygote.run(_task(case_dir, 'train', os.path.join(case_dir, 'run'), weights=weights,
                              epochs=epochs))
    if answer['result'] is None or answer['result'].get('outcome') != 'ok':
        raise RuntimeError("the reference run failed: {} (see {})".format(answer, case_dir))
    return _load_weights(weights)


def _fault_problems(point, answer, injected, run_dir):
    """What is wrong with how the faulty run ended (e), whether the fault fired, and whether an
    error was ignored where that is harmless."""
    result = answer['result'] or {}
    if answer['timed_out']:
        return ['the run hung (killed after {} s)'.format(RUN_TIMEOUT)], True, False
    if point.action == 'kill':
        killed = answer['signal'] == 9
        return ([] if killed else ['not killed: {}'.format(result.get('outcome'))]), killed, False
    fired = injected or point.action == 'dir'
    outcome = result.get('outcome')
    name = 'model-{}'.format(point.step)
    warnings = [m for level, m in result.get('log', []) if level == 'WARNING']
    if outcome is None:
        ended = 'code {}, signal {}'.format(answer['code'], answer['signal'])
        return ['the run ended without a result ({})'.format(ended)], fired, False
    if point.expect == 'error':
        if outcome == 'error':
            return ([] if name in result['error'] else ['error does not name {}: {}: {}'.format(
                name, result['error_type'], result['error'][:160])]), fired, False
        if _on_directory_itself(point):
            return [], fired, True
        return ['error ignored, rc 0'], fired, False
    if outcome == 'error':
        return ['stopped: {}: {}'.format(result['error_type'], result['error'][:160])], fired, False
    if point.expect == 'warn':
        naming = [m for m in warnings if point.target in m]
        gone = point.action == 'dir' and not os.path.lexists(os.path.join(run_dir, point.target))
        if not naming and not gone:   # a directory in a file's place may be deleted as well
            return ['no warning names {}'.format(point.target)], fired, False
        if point.action != 'dir' and len(naming) > 1:
            return ['{} warnings name {}'.format(len(naming), point.target)], fired, False
    return [], fired, False


def _on_directory_itself(point):
    """Whether ``point`` is at an operation on the checkpoint directory itself (its sync)."""
    return '(<dir>)' in point.what


def run_point(zygote, point, workdir, reference):
    """Run one point's case (see the module's docstring); its :class:`Case`."""
    began = time.monotonic()
    case_dir = os.path.join(workdir, point.slug)
    if os.path.exists(case_dir):
        shutil.rmtree(case_dir)
    run_dir = os.path.join(case_dir, 'run')
    faulty = zygote.run(_task(case_dir, 'fault', run_dir, fault=point.fault(run_dir), epochs=FAULT_EPOCHS))
    injected = False
    if os.path.exists(os.path.join(case_dir, 'fault-trace.txt')):
        with open(os.path.join(case_dir, 'fault-trace.txt')) as f:
            injected = '(INJECTED)' in f.read()
    problems, fired, ignored = _fault_problems(point, faulty, injected, run_dir)
    after = held(run_dir) if os.path.isdir(run_dir) else 'no directory'
    if point.action == 'dir':   # the user fixes what the error (or warning) named
        target = os.path.join(run_dir, point.target)
        if os.path.isdir(target) and not os.listdir(target):
            os.rmdir(target)
    weights = os.path.join(case_dir, 'weights.npz')
    rerun = zygote.run(_task(case_dir, 'rerun', run_dir, inspect=True, weights=weights, epochs=RERUN_EPOCHS))
    result = rerun['result'] or {}
    problems += _start_problems(result)
    if rerun['timed_out']:
        problems.append('the rerun hung')
    elif result.get('outcome') != 'ok':
        problems.append('rerun: {}: {}'.format(result.get('error_type'), (result.get('error') or '')[:160]))
    problems += _resumed_before(result)
    differ = _weights_differ(_load_weights(weights) if os.path.exists(weights) else None, reference)
    if differ and result.get('outcome') == 'ok':
        problems.append('weights: ' + differ)
    resume = _resume_text(result, differ)
    verdict = ('missed' if not fired else 'FAIL' if problems else 'ok (ignored)' if ignored else 'ok')
    if verdict == 'missed':   # what the run did instead
        ended = faulty['result'] or {}
        problems = ['the run: {} {}'.format(ended.get('outcome'), (ended.get('error') or '')[:160]).strip()]
    return Case(point, after, resume, verdict, problems, time.monotonic() - began)


def _resumed_before(result):
    """(c): the rerun starts at the newest listed checkpoint or later, except when that one is
    the end of an epoch that ``stats.json`` does not record (killed between the checkpoint's
    commit and the epoch's record: the documented rule passes it over)."""
    inspection, start = result.get('inspection') or {}, result.get('start_step')
    newest = inspection.get('newest')
    if newest is None or start is None or start >= int(newest.split('-')[-1]):
        return []
    step = int(newest.split('-')[-1])
    if inspection.get('at_epoch_end') and step not in inspection.get('finished_epochs', {}).values():
        return []
    return ['resumed at step {}, before the listed {}'.format(start, newest)]


def _resume_text(result, differ):
    """What the rerun did, in a few words: where it started, what its start removed or set aside."""
    start = result.get('start_step')
    text = 'scratch' if not start else 'from {}'.format(start)
    newest = (result.get('inspection') or {}).get('newest')
    if newest is not None and start is not None and start < int(newest.split('-')[-1]):
        text += ' ({} passed over: its epoch not in stats.json)'.format(newest)
    for _, message in result.get('log', []):
        removed = re.search(r'an interrupted checkpoint write left.*\((\d+) file', message)
        if removed:
            text += ', removed {}'.format(removed.group(1))
    aside = [m for _, m in result.get('log', []) if 'damaged' in m]
    if aside:
        text += ', set aside'
    if result.get('outcome') == 'ok':
        text += ', weights =' if differ is None else ', weights differ'
    return text


# ----- the 100 MB variant ----------------------------------------------------------------------

def kill_storm(zygote, workdir, seed, kills=6, ballast_mb=100, epochs=STORM_EPOCHS, reference=None):
    """Kill a run with a ``ballast_mb`` MB variable ``kills`` times, each at a seeded random
    moment of one of its background writes (when the data tempstate of the 1st or 2nd write
    after the start holds 5-60% of its bytes, or at once if it is renamed before the harness
    sees that), resuming it each time; then let it end. Returns ``(rows, problems)``: a row per
    kill (when, the temporaries of the killed write at that moment, what the next start found)
    and every violation of: the newest listed checkpoint restores with its step in its
    ``.resume``; no temporary is left by the rerun's first step; the end equals ``reference``."""
    rng = random.Random(seed)
    case_dir = os.path.join(workdir, 'storm')
    if os.path.exists(case_dir):
        shutil.rmtree(case_dir)
    run_dir = os.path.join(case_dir, 'run')
    rows, problems = [], []
    for attempt in range(kills + 1):
        last = attempt == kills
        kill = None if last else {'suffix': '.data-00000-of-00001.tempstate', 'after': rng.choice([1, 2]),
                                  'fraction': round(rng.uniform(0.05, 0.6), 2), 'bytes': ballast_mb << 20}
        weights = os.path.join(case_dir, 'weights.npz') if last else None
        answer = zygote.run(_task(case_dir, 'run{}'.format(attempt), run_dir, inspect=True, kill=kill,
                                  ballast_mb=ballast_mb, epochs=epochs, weights=weights))
        result = answer['result'] or {}
        if rows:   # this start after the previous kill
            found = _start_problems(result)
            inspection = result.get('inspection') or {}
            rows[-1].append('{} restores: {}; start at {}; {}'.format(
                inspection.get('newest'), inspection.get('restores'), result.get('start_step'),
                '; '.join(found) if found else 'nothing left'))
            problems += ['kill {}: {}'.format(attempt, f) for f in found]
        if answer['timed_out']:
            problems.append('run {} hung'.format(attempt))
        if last:
            if result.get('outcome') != 'ok':
                error = (result.get('error_type'), result.get('error'))
                problems.append('the last start: {}: {}'.format(*error))
            elif reference is not None:
                differ = _weights_differ(_load_weights(weights), reference)
                if differ:
                    problems.append('the end: ' + differ)
            break
        if not answer.get('killed_by_harness'):
            problems.append('run {} was not killed (it ended: {})'.format(attempt, result.get('outcome')))
        temps = sorted({_generic(n) for n in answer.get('new_at_kill') or [] if _temporary(n)})
        rows.append(['{}: write {} at {:.0%}'.format(attempt + 1, kill['after'], kill['fraction']),
                     'from step {}'.format(result.get('start_step')), ', '.join(temps) or '-'])
    return rows, problems


def _start_problems(result):
    """What is wrong with what a start found and left: (a), (b) and (d) of the module's docstring."""
    inspection = result.get('inspection') or {}
    found = list(inspection.get('problems', []))
    newest = inspection.get('newest')
    if newest is not None and inspection.get('resume_step') != int(newest.split('-')[-1]):
        found.append('{}.resume holds step {}'.format(newest, inspection.get('resume_step')))
    left = leftovers(result.get('listing') or [])
    if left:
        found.append('left at the first step: ' + ','.join(sorted({_generic(n) for n in left})))
    return found


# ----- the report ----------------------------------------------------------------------------

VERDICTS = ('ok', 'ok (ignored)', 'FAIL', 'missed')


def summary_rows(cases, key=lambda point: point.action):
    """Counts of the verdicts by ``key(point)``: ``[[key, points, ok, ok (ignored), FAIL, missed]]``,
    then a row ``all``."""
    counts = collections.defaultdict(collections.Counter)
    for case in cases:
        counts[key(case.point)][case.verdict] += 1
    total = sum(counts.values(), collections.Counter())
    return [[name, sum(c.values())] + [c[v] for v in VERDICTS]
            for name, c in sorted(counts.items()) + [('all', total)]]


def _run_points(zygote, workdir, count, seed):
    """Record, make the points, run them (or a sample of ``count``), print the tables; the cases."""
    reference = reference_run(zygote, workdir)
    run_dir, recorded = record(zygote, workdir)
    points = points_of(run_dir, recorded)
    chosen = sample(points, count, seed) if count else points
    print("{} points from {} recorded operations of {} saves; running {}".format(
        len(points), sum(len(ops) for ops in recorded.values()), len({s for s, _ in recorded}), len(chosen)),
        flush=True)
    cases = []
    for number, point in enumerate(chosen, 1):
        cases.append(run_point(zygote, point, workdir, reference))
        if cases[-1].verdict not in VERDICTS[:2] or number % 50 == 0:
            print("[{}/{}] {}".format(number, len(chosen), ' | '.join(cases[-1].row())), flush=True)
    headers = ['kill point or fault', 'the directory held', 'the resume did', 'verdict']
    print(tabulate([c.row() for c in cases], headers=headers, tablefmt='github'))
    for name, key in (('action', lambda p: p.action), ('phase', lambda p: p.phase),
                      ('expected', lambda p: p.expect)):
        print()
        headers = [name, 'points'] + list(VERDICTS)
        print(tabulate(summary_rows(cases, key), headers=headers, tablefmt='github'))
    return cases


def _run_storm(zygote, workdir, kills, seed):
    """The 100 MB variant, printed; its problems."""
    rows, problems = kill_storm(zygote, workdir, seed, kills=kills,
                                reference=reference_run(zygote, workdir, STORM_EPOCHS))
    print("\n{} SIGKILLs of a run writing a 100 MB checkpoint every 2 steps in the background:".format(kills))
    print(tabulate(rows, headers=['kill', 'the run', 'temporaries at the kill', 'the next start'],
                   tablefmt='github'))
    print('problems: ' + ('; '.join(problems) if problems else 'none'))
    return problems


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--seed', type=int, default=0, help="of the sample and of the 100 MB run's kills")
    parser.add_argument('--points', type=int, default=0, help='a seeded sample of that many points (0: all)')
    parser.add_argument('--quick', action='store_true', help='30 points and 3 kills of the 100 MB run')
    parser.add_argument('--kills', type=int, default=6, help='kills of the 100 MB run (0: none)')
    parser.add_argument('--workdir', help='keep the cases here (default: a temporary directory, removed)')
    args = parser.parse_args()
    if shutil.which('strace') is None:
        sys.exit("checkpoint_torture.py needs strace (apt-get install strace)")
    count, kills = (args.points or (30 if args.quick else 0)), (3 if args.quick else args.kills)
    workdir = args.workdir or tempfile.mkdtemp(prefix='checkpoint_torture.')
    os.makedirs(workdir, exist_ok=True)
    began = time.monotonic()
    try:
        with Zygote(workdir) as zygote:
            cases = _run_points(zygote, workdir, count, args.seed)
            problems = _run_storm(zygote, workdir, kills, args.seed) if kills else []
    finally:
        if not args.workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    print("\n{:.0f} s".format(time.monotonic() - began))
    sys.exit(1 if problems or any(c.verdict in VERDICTS[2:] for c in cases) else 0)


if __name__ == '__main__':
    main()
