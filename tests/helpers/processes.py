"""Child processes the tests start: a child Python's environment (:func:`subprocess_env`), a
child Python with or without TensorFlow (:func:`run_python`), a launcher run bounded in time
(:func:`run_bounded`), the ending of a process and everything under it (:func:`kill_process_tree`)
and the ports a server started listens on (:func:`listening_ports`)."""

import os
import signal
import subprocess
import sys

import psutil
import pytest

from helpers.paths import REPO_DIR, TESTS_DIR

__all__ = ['subprocess_env', 'users_env', 'NO_TENSORFLOW', 'run_python', 'run_bounded', 'kill_process_tree',
           'listening_ports']


def subprocess_env(**overrides):
    """The environment of a child Python the tests start: this one's, with the repository and
    tests/ on PYTHONPATH (``import tensorpack_lite`` first, ``from helpers import ...`` last),
    TensorFlow's C++ logs at errors only (TF_CPP_MIN_LOG_LEVEL=2), no GPU and
    TF_USE_LEGACY_KERAS=1; then ``overrides`` (a value of None removes the variable).

    TF_USE_LEGACY_KERAS=1 is for speed: ``import tensorflow`` then loads tf_keras's optimizers
    (or nothing, without tf_keras) instead of all of Keras 3, about 1.3 s less CPU time in each of
    the suite's hundreds of child processes. The library uses neither Keras; a test of what a
    user's default environment does removes it (:func:`users_env`).

    Example::

        run_bounded([sys.executable, script], 120, env=subprocess_env(TF_CPP_MIN_LOG_LEVEL='0'))
    """
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2', CUDA_VISIBLE_DEVICES='', TF_USE_LEGACY_KERAS='1')
    # tests/ last: its folders (utils/, models/...) must not hide a module of the same name
    ours = (REPO_DIR, TESTS_DIR)
    env['PYTHONPATH'] = os.pathsep.join([REPO_DIR] + [p for p in env.get('PYTHONPATH', '').split(os.pathsep)
                                                      if p and p not in ours] + [TESTS_DIR])
    for name, value in overrides.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = str(value)
    return env


def users_env(**overrides):
    """:func:`subprocess_env` without TF_USE_LEGACY_KERAS: TensorFlow's ``tf.keras`` is what a user's
    default environment gives it (Keras 3), for the example programs and for Horovod, whose
    ``import horovod.tensorflow`` needs that ``tf.keras``."""
    return subprocess_env(**dict(overrides, TF_USE_LEGACY_KERAS=None))


NO_TENSORFLOW = "import sys; sys.modules['tensorflow'] = None\n"
"""A prelude after which ``import tensorflow`` fails in a child Python (:func:`run_python`)."""


def run_python(code, timeout=300, without_tensorflow=False, cwd=TESTS_DIR, env=None):
    """The stdout of ``python -c code`` in a fresh interpreter (where ``import tensorflow`` fails,
    if ``without_tensorflow``); the test fails if it exits with an error or outlives ``timeout``."""
    prelude = NO_TENSORFLOW if without_tensorflow else ''
    out = subprocess.run([sys.executable, '-c', prelude + code], capture_output=True, text=True,
                         timeout=timeout, cwd=cwd, env=subprocess_env() if env is None else env)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


def kill_process_tree(proc):
    """SIGKILL a subprocess.Popen and every process under it (a timed-out launcher's ranks).

    Before ``proc`` is reaped, its pid is still its own (a zombie at worst): the processes under
    it are its descendants and the members of its session (``start_new_session=True``). Once it
    is reaped, the session's members left behind still hold its id, so no new process can take
    it while one is left; but once none is left, the kernel may hand the pid to a new process,
    which may start a session of its own with that id (another test's server, with
    ``start_new_session=True``). So after reaping, a live process with the pid means the session
    ended: it and its members are left alone."""
    family = []
    if proc.returncode is None:   # not reaped: the pid is still its own (a zombie at worst)
        try:
            leader = psutil.Process(proc.pid)
            family = leader.children(recursive=True) + [leader]
        except psutil.NoSuchProcess:
            pass
    elif psutil.pid_exists(proc.pid):   # reaped, and the pid taken again: nothing of ours is left
        return
    for member in psutil.process_iter():
        try:
            if member.pid != os.getpid() and os.getsid(member.pid) == proc.pid:
                family.append(member)
        except (OSError, psutil.NoSuchProcess):
            pass
    for member in family:
        try:
            member.send_signal(signal.SIGKILL)
        except psutil.NoSuchProcess:
            pass


def listening_ports(proc):
    """The TCP ports on which ``proc`` (a subprocess.Popen) or a process under it listens: a
    server is ready on a port only when it is in here (another process answering on a port picked
    free a moment before is not the server just started)."""
    try:
        leader = psutil.Process(proc.pid)
        family = [leader] + leader.children(recursive=True)
    except psutil.NoSuchProcess:
        return set()
    ports = set()
    for member in family:
        try:
            connections = getattr(member, 'net_connections', None) or member.connections  # psutil < 6
            ports.update(c.laddr.port for c in connections(kind='tcp') if c.status == psutil.CONN_LISTEN)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return ports


def run_bounded(command, timeout, env=None, cwd=None):
    """Run ``command`` (a launcher such as mpiexec or horovodrun) in a session of its own, its
    output and errors together; fail the test when it takes longer than ``timeout`` seconds.
    Every process it started is SIGKILLed at the end. Returns (exit code, output)."""
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                            cwd=None if cwd is None else str(cwd), start_new_session=True)
    try:
        output, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_process_tree(proc)
        output, _ = proc.communicate()
        pytest.fail("{} did not finish in {} s (killed):\n{}".format(
            os.path.basename(command[0]), timeout, output[-6000:]))
    finally:
        kill_process_tree(proc)
    return proc.returncode, output
