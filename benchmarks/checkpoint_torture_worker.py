#!/usr/bin/env python
"""The training side of ``benchmarks/checkpoint_torture.py``: a zygote process that imports
TensorFlow and tensorpack_lite once and then forks one process per task, so that a case costs
a graph and a session rather than an interpreter's start.

A task is a training run of :class:`TortureMLP` in a directory (``AutoResumeTrainConfig``, so a
rerun resumes from what an earlier task left), optionally with one fault planted in one of its
checkpoint writes (see :class:`SaveHook`), with the directory inspected first (:func:`inspect`)
and what the start left checked at the first step (:class:`FirstStepProbe`). The zygote reads
one JSON task per line on stdin and answers one JSON line on stdout when the task's process
has ended (or was killed at its deadline); the task's own findings are in ``<result>`` (JSON).
It is started by ``checkpoint_torture.Zygote``, never by hand.
"""

import ctypes
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

import numpy as np  # noqa: E402

from tensorpack_lite.callbacks import Callback, JSONWriter, ModelSaver, PeriodicTrigger  # noqa: E402
from tensorpack_lite.checkpoint import (  # noqa: E402
    BackgroundCheckpointWriter, CheckpointStateError, ResumeState, read_checkpoint_state, verify_checkpoint)
from tensorpack_lite.compat import enable_graph_mode, tfv1  # noqa: E402
from tensorpack_lite.dataflow import BatchData, DataFromList  # noqa: E402
from tensorpack_lite.train import (AutoResumeTrainConfig, ModelDesc, SimpleTrainer,  # noqa: E402
                                   launch_train_with_config)
from tensorpack_lite.utils import logger, stats_json  # noqa: E402
from tensorpack_lite.utils.utils import fix_rng_seed  # noqa: E402

__all__ = ['STEPS_PER_EPOCH', 'SAVE_EVERY', 'MAX_TO_KEEP', 'TRACED_SYSCALLS', 'TortureMLP',
           'SaveHook', 'FirstStepProbe', 'inspect', 'run_task', 'serve']

STEPS_PER_EPOCH, SAVE_EVERY, MAX_TO_KEEP, BATCH = 6, 2, 2, 4
"""The run: epochs of 6 steps, ``PeriodicTrigger(ModelSaver(max_to_keep=2), every_k_steps=2)``."""

TRACED_SYSCALLS = ('open', 'openat', 'creat', 'write', 'pwrite64', 'writev', 'fsync', 'fdatasync', 'close',
                   'ftruncate', 'fallocate', 'rename', 'renameat', 'renameat2', 'unlink', 'unlinkat',
                   'mkdir', 'mkdirat', 'rmdir')
"""The file operations a checkpoint write is made of (what the recording lists)."""

ATTACH_TIMEOUT = 60
"""Seconds strace may take to attach (it takes milliseconds; only a broken strace reaches it)."""

_SEED = 7
_PR_SET_PDEATHSIG, _PR_SET_PTRACER, _PR_SET_PTRACER_ANY = 1, 0x59616d61, 2 ** 64 - 1


class TortureMLP(ModelDesc):
    """16 -> 8 -> 4 with a ReLU, plain SGD; its weights drawn from a fixed numpy seed. With
    ``ballast_mb``, a non-trainable float32 variable of that many MB is saved with it."""

    def __init__(self, ballast_mb=0):
        self.ballast_mb = ballast_mb

    def inputs(self):
        return [tfv1.TensorSpec([None, 16], tfv1.float32, 'x'), tfv1.TensorSpec([None], tfv1.int32, 'y')]

    def build_graph(self, x, y):
        rng = np.random.RandomState(0)
        w0 = tfv1.get_variable('fc0/W', initializer=(rng.randn(16, 8) * 0.3).astype('float32'))
        b0 = tfv1.get_variable('fc0/b', initializer=np.zeros(8, 'float32'))
        w1 = tfv1.get_variable('fc1/W', initializer=(rng.randn(8, 4) * 0.3).astype('float32'))
        if self.ballast_mb:
            tfv1.get_variable('ballast', shape=[self.ballast_mb * 2 ** 18], dtype=tfv1.float32,
                              initializer=tfv1.constant_initializer(0.5), trainable=False)
        logits = tfv1.matmul(tfv1.nn.relu(tfv1.matmul(x, w0) + b0), w1)
        return tfv1.reduce_mean(tfv1.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits),
                                name='cost')

    def optimizer(self):
        return tfv1.train.GradientDescentOptimizer(0.1)


def _dataflow():
    rng = np.random.RandomState(1)
    points = [[rng.randn(16).astype('float32'), int(rng.randint(4))] for _ in range(STEPS_PER_EPOCH * BATCH)]
    return BatchData(DataFromList(points, shuffle=True), BATCH)


def _session_config():
    """One inter-op thread: TensorFlow's save kernel then runs in the one ``tf_Compute`` thread,
    which the fault of a ``tf`` phase is attached to (training ops make no file operations)."""
    config = tfv1.ConfigProto()
    config.inter_op_parallelism_threads = 1
    config.intra_op_parallelism_threads = 1
    return config


# ----- strace, attached to one thread of this process -------------------------------------------

def _tracer_of(status_fd):
    """The TracerPid of a thread, read with pread (no traced system call) from its open status file."""
    for line in os.pread(status_fd, 8192, 0).decode().splitlines():
        if line.startswith('TracerPid:'):
            return int(line.split()[1])
    return 0


def attach_strace(tid, syscalls, output, inject=None):
    """Start ``strace -p tid`` (that thread only) tracing ``syscalls`` into ``output``, with the
    ``inject`` expression if given; return once it traces the thread. Its counts of calls start
    here, for that thread only (strace counts injections per syscall and per tracee)."""
    status_fd = os.open('/proc/self/task/{}/status'.format(tid), os.O_RDONLY)
    command = ['strace', '-qq', '-yy', '-s', '0', '-p', str(tid), '-o', output,
               '-e', 'trace=' + ','.join(syscalls)]
    if inject:
        command += ['-e', 'inject=' + inject]
    with open(output + '.err', 'w') as err:
        proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err)
    deadline = time.monotonic() + ATTACH_TIMEOUT
    while _tracer_of(status_fd) != proc.pid:
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError("strace did not attach to thread {} (see {}.err)".format(tid, output))
        time.sleep(0.002)
    os.close(status_fd)
    return proc


def detach_strace(proc):
    """Stop an strace started by :func:`attach_strace`: it detaches and the thread goes on untraced."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(ATTACH_TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _compute_thread():
    """The native id of TensorFlow's one inter-op thread (``tf_Compute``, see :func:`_session_config`)."""
    found = []
    for tid in os.listdir('/proc/self/task'):
        try:
            with open('/proc/self/task/{}/comm'.format(tid)) as f:
                name = f.read().strip()
        except (FileNotFoundError, ProcessLookupError):   # a thread that has just ended
            continue
        if name == 'tf_Compute':
            found.append(int(tid))
    if len(found) != 1:
        raise RuntimeError("expected one tf_Compute thread, found {}".format(found))
    return found[0]


# ----- the fault, planted in the checkpoint write of one step -----------------------------------

class SaveHook:
    """Where a fault enters a checkpoint's write. A save of step S runs in phases:

    * ``copy``: the trainer copies the variables (main thread, no file operation): a kill there
      is a SIGKILL sent by the copy itself, after the checkpoint before it completed;
    * ``tf``: ``Saver.save`` in the writer thread runs TensorFlow's save kernel in the
      ``tf_Compute`` thread: data file (tempstate, rename), then index (tempstate, rename);
    * ``python``: after ``Saver.save`` returned, the writer thread writes the ``.resume``, the
      ``checkpoint`` state file and deletes the old checkpoints (and whatever else it does).

    The fault is ``{'step', 'phase', 'syscall', 'n', 'action', 'path'}``: at the ``n``-th
    ``syscall`` of the phase's thread (counted from the phase's start), ``action`` is ``kill``
    (SIGKILL before the call takes effect) or an errno (the call fails with it); ``dir`` puts an
    empty directory at ``path`` (a file there is removed first) when the phase starts.
    With ``record``, each save's phases are traced (no fault) into ``trace-<step>-<phase>.txt``.
    """

    def __init__(self, trace_dir, fault=None, record=False):
        self.trace_dir, self.fault, self.record = trace_dir, fault or {}, record

    def install(self):
        hook = self
        original_save = tfv1.train.Saver.save
        original_copy = BackgroundCheckpointWriter.copy

        def save(saver, sess, save_path, global_step=None, *args, **kwargs):
            step = None if global_step is None else int(global_step)
            tracer = hook._start('tf', step)
            try:
                path = original_save(saver, sess, save_path, global_step, *args, **kwargs)
            finally:
                if tracer is not None:
                    detach_strace(tracer)
            hook._start('python', step)
            return path

        def copy(writer, sess):
            writer.wait()
            if hook.fault.get('phase') == 'copy' and hook.fault['step'] == hook.trainer_step():
                os.kill(os.getpid(), signal.SIGKILL)
            return original_copy(writer, sess)

        tfv1.train.Saver.save = save
        BackgroundCheckpointWriter.copy = copy

    callback = None   # a callback of the run, set up: its global_step is the trainer's

    def trainer_step(self):
        return None if self.callback is None else self.callback.global_step

    def _start(self, phase, step):
        """Begin ``phase`` of the save of ``step``; the strace of a ``tf`` phase, to detach after it."""
        fault = self.fault
        if not self.record and (fault.get('phase') != phase or fault.get('step') != step):
            return None
        tid = _compute_thread() if phase == 'tf' else threading.get_native_id()
        if self.record:
            return attach_strace(tid, TRACED_SYSCALLS,
                                 os.path.join(self.trace_dir, 'trace-{}-{}.txt'.format(step, phase)))
        if fault['action'] == 'dir':
            if os.path.isfile(fault['path']):
                os.remove(fault['path'])
            os.mkdir(fault['path'])
            return None
        effect = 'error=EIO:signal=KILL' if fault['action'] == 'kill' else 'error=' + fault['action']
        return attach_strace(tid, [fault['syscall']], os.path.join(self.trace_dir, 'fault-trace.txt'),
                             inject='{}:{}:when={}'.format(fault['syscall'], effect, fault['n']))


class FirstStepProbe(Callback):
    """Notes in ``result`` where the run started and, before its first step (or, without steps,
    when training ends, before the checkpoint of the end), the names in the directory."""

    def __init__(self, directory, result, hook=None):
        self.directory, self.result, self.hook = directory, result, hook
        self._listed = False

    def _setup_graph(self):
        if self.hook is not None:
            self.hook.callback = self

    def _before_train(self):
        self.result.update(start_step=int(self.global_step), steps=0)

    def _before_run(self, ctx):
        if not self._listed:
            self._list()
        return None

    def _trigger_step(self):
        self.result.update(steps=self.result['steps'] + 1)

    def _after_train(self):
        if not self._listed:
            self._list()

    def _list(self):
        self._listed = True
        self.result.update(listing=sorted(os.listdir(self.directory)))


class _Result(dict):
    """The findings of a task, written to ``path`` (JSON) at each update: a task killed midway
    still tells what it saw before."""

    def __init__(self, path):
        super().__init__()
        self.path = path

    def update(self, **kwargs):
        super().update(**kwargs)
        with open(self.path + '.part', 'w') as f:
            json.dump(self, f)
        os.replace(self.path + '.part', self.path)


class FinalWeights(Callback):
    """Writes every variable's value to ``path`` (npz) when training ends."""

    def __init__(self, path):
        self.path = path

    def _after_train(self):
        variables = tfv1.global_variables()
        values = self.trainer.sess.run(variables)
        np.savez(self.path, **{v.op.name.replace('/', '__'): value for v, value in zip(variables, values)})


class _Collect(logging.Handler):
    def __init__(self):
        super().__init__()
        self.records = []

    def emit(self, record):
        self.records.append([record.levelname, record.getMessage()])


def inspect(directory):
    """What the ``checkpoint`` state file lists, whether its newest checkpoint restores (read
    back whole) and what its ``.resume`` says (its step, whether at an epoch's end), and the
    epochs ``stats.json`` saw finish (``{epoch: global step}``)."""
    out = {'listed': [], 'newest': None, 'restores': None, 'resume_step': None, 'at_epoch_end': None,
           'finished_epochs': {}, 'problems': []}
    records = stats_json.load_records(directory)
    out['finished_epochs'] = stats_json.finished_epochs(records or [], STEPS_PER_EPOCH)
    try:
        listed = read_checkpoint_state(directory)
    except CheckpointStateError as err:
        out['problems'].append('state file: {}'.format(err))
        listed = []
    out['listed'] = [os.path.basename(p) for p in listed]
    if not listed:
        return out
    newest = listed[-1]
    out['newest'] = os.path.basename(newest)
    try:
        verify_checkpoint(newest)
        out['restores'] = True
    except Exception as err:
        out['restores'] = False
        out['problems'].append('{} does not restore: {}: {}'.format(out['newest'], type(err).__name__, err))
    try:
        state = ResumeState.read(newest)
        if state is not None:
            out.update(resume_step=int(state.global_step), at_epoch_end=bool(state.at_epoch_end))
    except Exception as err:
        out['problems'].append('{}.resume: {}: {}'.format(out['newest'], type(err).__name__, err))
    return out


def run_task(task):
    """One training run as ``task`` says; its findings go to ``task['result']``."""
    directory = task['dir']
    result = _Result(task['result'])
    result.update(inspection=inspect(directory) if task.get('inspect') else None)
    collect = _Collect()
    logging.getLogger('tensorpack_lite').addHandler(collect)
    hook = SaveHook(task['trace_dir'], task.get('fault'), task.get('record', False))
    hook.install()
    logger.set_logger_dir(directory, action='k')
    callbacks = [FirstStepProbe(directory, result, hook),
                 PeriodicTrigger(ModelSaver(max_to_keep=MAX_TO_KEEP), every_k_steps=SAVE_EVERY)]
    if task.get('weights'):
        callbacks.append(FinalWeights(task['weights']))
    fix_rng_seed(_SEED)
    try:
        with tfv1.Graph().as_default():
            tfv1.set_random_seed(_SEED)
            config = AutoResumeTrainConfig(
                model=TortureMLP(task.get('ballast_mb', 0)), dataflow=_dataflow(), callbacks=callbacks,
                extra_callbacks=[], monitors=[JSONWriter()], session_config=_session_config(),
                steps_per_epoch=STEPS_PER_EPOCH, max_epoch=task['epochs'])
            launch_train_with_config(config, SimpleTrainer())
        outcome = {'outcome': 'ok'}
    except Exception as err:
        outcome = {'outcome': 'error', 'error_type': type(err).__name__, 'error': str(err)}
    result.update(log=[r for r in collect.records if r[0] != 'INFO' or _notable(r[1])], **outcome)


def _notable(message):
    """Whether an INFO line says something about checkpoints found, cleaned or resumed from."""
    words = ('resum', 'Resum', 'Remov', 'remov', 'clean', 'interrupted', 'temporar', 'skipped', 'scratch')
    return any(word in message for word in words)


# ----- the zygote ----------------------------------------------------------------------------

def _child(task):
    """The forked process of ``task``: its own process group, its output to ``task['log']``."""
    os.setpgid(0, 0)
    libc = ctypes.CDLL(None)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)   # ends with the zygote
    libc.prctl(_PR_SET_PTRACER, ctypes.c_ulong(_PR_SET_PTRACER_ANY))   # Yama: its strace may attach
    log = os.open(task['log'], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    code = 0
    try:
        run_task(task)
    except BaseException:
        import traceback
        traceback.print_exc()
        code = 3
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _kill_due(task, state):
    """Whether ``task['kill']`` (``{'suffix', 'after', 'fraction', 'bytes'}``) asks for the
    SIGKILL now: when the ``after``-th new file whose name contains ``suffix`` (one that was not
    there when the task began) holds ``fraction`` of ``bytes``, or is gone (renamed)."""
    spec = task['kill']
    try:
        names = set(os.listdir(task['dir']))
    except FileNotFoundError:
        names = set()
    if 'before' not in state:
        state.update(before=names, seen=[])
        return False
    for name in sorted(names - state['before']):
        if spec['suffix'] in name and name not in state['seen']:
            state['seen'].append(name)
    if len(state['seen']) < spec['after']:
        return False
    try:
        size = os.path.getsize(os.path.join(task['dir'], state['seen'][spec['after'] - 1]))
    except FileNotFoundError:
        return True
    return size >= spec['fraction'] * spec['bytes']


def _fork(task):
    """Run ``task`` in a forked process until it ends, is killed at its deadline or, with
    ``task['kill']``, at the moment it names; the zygote's answer about it."""
    began, kill_state = time.monotonic(), {}
    reply = {'timed_out': False, 'killed_by_harness': False}
    if task.get('kill'):
        _kill_due(task, kill_state)   # what the directory holds before
    pid = os.fork()
    if pid == 0:
        _child(task)
    try:
        os.setpgid(pid, pid)
    except OSError:   # the child did it already, or has ended
        pass
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() - began > task['timeout']:
            reply['timed_out'] = True
            os.killpg(pid, signal.SIGKILL)
        elif task.get('kill') and not reply['killed_by_harness'] and _kill_due(task, kill_state):
            os.killpg(pid, signal.SIGKILL)
            reply.update(killed_by_harness=True, listing_at_kill=sorted(os.listdir(task['dir'])),
                         new_at_kill=sorted(set(os.listdir(task['dir'])) - kill_state['before']))
        time.sleep(0.001 if task.get('kill') else 0.01)
    try:
        os.killpg(pid, signal.SIGKILL)   # what the task started (an strace) ends with it
    except ProcessLookupError:
        pass
    reply.update(signal=os.WTERMSIG(status) if os.WIFSIGNALED(status) else None,
                 code=os.WEXITSTATUS(status) if os.WIFEXITED(status) else None,
                 seconds=time.monotonic() - began)
    return reply


def serve():
    """Answer tasks from stdin until it closes (see the module's docstring)."""
    enable_graph_mode()
    print(json.dumps({'ready': os.getpid()}), flush=True)
    for line in sys.stdin:
        print(json.dumps(_fork(json.loads(line))), flush=True)


if __name__ == '__main__':
    serve()
