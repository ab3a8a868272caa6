"""Helpers shared by the test modules (fixtures live in tests/conftest.py): each defined once here.

Import them as ``from helpers import ...``: conftest.py puts tests/ on sys.path. In modules of
their own: the shared models (:mod:`helpers.models`; the most used, DigitsMLPBase, LineRegression,
WhileLoopRNN and cross_entropy_cost, are importable from here too), small trainers for callback
tests (:mod:`helpers.trainers`), DataFlow helpers (:mod:`helpers.dataflows`), graphs on virtual CPUs
(:mod:`helpers.graphs`), running the examples (:mod:`helpers.examples`), the one-node Slurm
(:mod:`helpers.slurm_node`), the guides' code runner (:mod:`helpers.guide_blocks`), and what a
few test files of a kind share (:mod:`helpers.distributed`, :mod:`helpers.mpi`,
:mod:`helpers.multigpu`, :mod:`helpers.scripted_stats`, :mod:`helpers.checkpoint_runs`,
:mod:`helpers.contract`, :mod:`helpers.dataflow_cases`; tests/README.md). Free ports
come from the library (``tensorpack_lite.cluster.config.held_free_port`` / ``free_ports``).
"""

import contextlib
import logging
import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import psutil
import pytest

from tensorpack_lite.callbacks.base import Callback
from tensorpack_lite.compat import tf, tfv1
from tensorpack_lite.dataflow import BatchData, DataFromList
from tensorpack_lite.tfutils.sessinit import SessionInit

from helpers.models import (LINE_INITIAL_LR, DigitsMLPBase, LineRegression, WhileLoopRNN, cross_entropy_cost,
                            sequence_samples)

__all__ = ['TESTS_DIR', 'REPO_DIR', 'subprocess_env', 'NO_TENSORFLOW', 'run_python', 'run_bounded',
           'kill_process_tree', 'LogRecords',
           'DigitsMLPBase', 'LineRegression', 'LINE_INITIAL_LR', 'cross_entropy_cost', 'labelled_batches',
           'WhileLoopRNN', 'sequence_samples', 'add_model_arguments',
           'TIMING_PREFIX', 'assert_records_close', 'varint',
           'HANG_TIMEOUT', 'run_or_hang', 'wait_until', 'VirtualClock', 'BreakingSession', 'BreakSessionAt']


TESTS_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
"""The tests/ directory (its *_scripts/ folders hold the programs the tests start)."""
REPO_DIR = os.path.dirname(TESTS_DIR)
"""The repository's root."""


# ----- child processes -----------------------------------------------------------------------

def subprocess_env(**overrides):
    """The environment of a child Python the tests start: this one's, with the repository and
    tests/ on PYTHONPATH (``import tensorpack_lite`` first, ``from helpers import ...`` last),
    TensorFlow's C++ logs at errors only (TF_CPP_MIN_LOG_LEVEL=2) and no GPU; then ``overrides``
    (a value of None removes the variable).

    Example::

        run_bounded([sys.executable, script], 120, env=subprocess_env(TF_CPP_MIN_LOG_LEVEL='0'))
    """
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2', CUDA_VISIBLE_DEVICES='')
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


# ----- mixed precision -----------------------------------------------------------------------

def expected_precision_path(mode):
    """The path a mixed-precision mode should take here, from the CPU's flags (written out here,
    not taken from the library): the tests compare it with the path measured at the first step."""
    try:
        with open('/proc/cpuinfo') as f:
            flags = {flag for line in f if line.startswith('flags') for flag in line.split(':', 1)[1].split()}
    except OSError:
        flags = set()
    if mode == 'fp16':
        return 'emulated'      # no GPU can run TensorFlow here
    if not flags & {'avx512f', 'avx_ne_convert'}:
        return 'float32'       # TensorFlow's oneDNN bfloat16 rewrite leaves the graph alone
    return 'native' if flags & {'avx512_bf16', 'amx_bf16'} else 'emulated'


# ----- logging -------------------------------------------------------------------------------

class LogRecords(list):
    """The ``logging.LogRecord`` s of a logger, in the order they were logged."""

    def messages(self, level=logging.NOTSET):
        """The messages of the records at ``level`` or above."""
        return [r.getMessage() for r in self if r.levelno >= level]

    def messages_at(self, level):
        """The messages of the records at exactly ``level``."""
        return [r.getMessage() for r in self if r.levelno == level]


class _Collect(logging.Handler):
    def __init__(self, records):
        super().__init__()
        self.records = records

    def emit(self, record):
        self.records.append(record)


@contextlib.contextmanager
def capture_logs(name='tensorpack_lite'):
    """Collects what the logger ``name`` logs inside the block, as a :class:`LogRecords`.

    The library's logger does not propagate to the root, so pytest's caplog does not see it.

    Example::

        with capture_logs() as records:
            do_something()
        assert 'done' in records.messages(logging.INFO)
    """
    records = LogRecords()
    handler = _Collect(records)
    lg = logging.getLogger(name)
    lg.addHandler(handler)
    try:
        yield records
    finally:
        lg.removeHandler(handler)


# ----- callbacks and session inits -----------------------------------------------------------

class ReadBack(Callback):
    """Reads variables in after_train, while the session is still open: ``values``."""

    def __init__(self, *variables):
        self._variables = variables
        self.values = None

    def _after_train(self):
        self.values = self.trainer.sess.run(list(self._variables))


class RecordCost(Callback):
    """Records the cost of every step, fetched along with it."""

    def __init__(self):
        self.costs = []

    def _setup_graph(self):
        self.cost = self.get_tensors_maybe_in_tower(['cost'])[0]

    def _before_run(self, ctx):
        return [self.cost]

    def _after_run(self, ctx, values):
        self.costs.append(float(values.results[0]))


class RaiseAt(Callback):
    """Raises ``error`` after global step ``step``."""

    def __init__(self, step, error):
        self.step, self.error = step, error

    def _trigger_step(self):
        if self.global_step == self.step:
            raise self.error


class AssignValues(SessionInit):
    """Sets variables from a dict op name -> value (a checkpoint-free restore); every name
    must be a variable of the graph. Plain data, so it pickles into worker processes."""

    def __init__(self, values):
        self.values = values
        self.setup_graph_calls = 0

    def _setup_graph(self):
        self.setup_graph_calls += 1
        variables = {v.op.name: v for v in tfv1.global_variables()}
        missing = set(self.values) - set(variables)
        assert not missing, missing
        self.assign = tf.group(*[variables[name].assign(value) for name, value in self.values.items()])

    def _run_init(self, sess):
        sess.run(self.assign)


# ----- the model of the multi-process scripts; labelled data ----------------------------------

def add_model_arguments(parser, process='process'):
    """The options of the multi-process training scripts that choose their model: ``--model
    tiny|rnn`` (:class:`WhileLoopRNN` on :func:`sequence_samples`) and ``--tf1``."""
    parser.add_argument('--model', choices=['tiny', 'rnn'], default='tiny',
                        help="'rnn': helpers.WhileLoopRNN on helpers.sequence_samples (a tf.while_loop); "
                             "every {} writes the costs of its steps too".format(process))
    parser.add_argument('--tf1', action='store_true',
                        help='tf.compat.v1.disable_v2_behavior() first, as TF1-era scripts start (v1 control '
                             'flow: a tf.while_loop builds Merge/NextIteration cycles)')


def labelled_batches(images, labels, batch, shuffle=False, remainder=False):
    """A DataFlow of [images, labels] batches."""
    return BatchData(DataFromList([[x, y] for x, y in zip(images, labels)], shuffle=shuffle), batch,
                     remainder=remainder)


TIMING_PREFIX = 'StepTime/'
"""The statistics of :class:`StepTimeMonitor` (a default callback): measured times, which two runs
never share."""


def assert_records_close(got, expected, abs=1e-6):
    """Two lists of stats records (dicts of scalars) hold the same keys and values within ``abs``,
    the timing statistics (:data:`TIMING_PREFIX`) left out: their values differ between runs, and
    a run resumed inside an epoch measures fewer steps of it (the monitor reports after a few).

    pytest.approx compares one flat dict, not a list of them (pytest 9.2 refuses nested data).
    """
    assert len(got) == len(expected), (len(got), len(expected))
    for index, (mine, theirs) in enumerate(zip(got, expected)):
        mine, theirs = ({k: v for k, v in record.items() if not k.startswith(TIMING_PREFIX)}
                        for record in (mine, theirs))
        assert sorted(mine) == sorted(theirs), 'record {}'.format(index)
        assert mine == pytest.approx(theirs, abs=abs), 'record {}'.format(index)


UNIT_ROUNDOFF = {'fp16': 2.0 ** -11, 'bf16': 2.0 ** -8}
"""The largest relative error of one rounding to nearest in each 16-bit format (within its
normal range)."""


def rounded(values, compression):
    """``values`` rounded to nearest even in 16 bits (``'fp16'`` or ``'bf16'``), back in float32."""
    import ml_dtypes
    wire = np.float16 if compression == 'fp16' else ml_dtypes.bfloat16
    return np.asarray(values, np.float32).astype(wire).astype(np.float32)


def assert_16_bit_sum(value, parts, compression, scale=1):
    """``value`` is a 16-bit number (held in float32 or float64) within the error bound of
    summing the N ``parts``, each times ``scale`` first, in 16 bits in any order: N - 1
    roundings of partial sums and one of each part, each off by at most u times what it
    rounds (u: :data:`UNIT_ROUNDOFF`), plus half the smallest fp16 subnormal (2^-25) below
    fp16's normal range; and not the exact sum (rounding happened)."""
    value = np.asarray(value)
    np.testing.assert_array_equal(rounded(value, compression), value.astype(np.float32))
    scaled = [np.asarray(p, np.float64) * scale for p in parts]
    exact = np.sum(scaled, axis=0)
    count = len(parts)
    magnitude = np.sum(np.abs(scaled), axis=0)
    tolerance = count * UNIT_ROUNDOFF[compression] * magnitude * 1.01 + 2 * count * 2.0 ** -25
    excess = np.abs(value - exact) - tolerance
    assert np.all(excess <= 0), "16-bit sum off by {} more than its bound".format(excess.max())
    assert not np.array_equal(value, exact.astype(value.dtype))


def kill_process_tree(proc):
    """SIGKILL a subprocess.Popen and every process under it (a timed-out launcher's ranks).

    Safe once ``proc`` was reaped (its pid may then belong to another process): the processes
    under it are then found as the members of its session, when it was started in a session of
    its own (``start_new_session=True``), whose id no other process can take while one is left."""
    family = []
    if proc.returncode is None:   # not reaped: the pid is still its own (a zombie at worst)
        try:
            leader = psutil.Process(proc.pid)
            family = leader.children(recursive=True) + [leader]
        except psutil.NoSuchProcess:
            pass
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


# ----- protobuf wire format ------------------------------------------------------------------

def varint(n):
    """``n`` encoded as a protobuf varint, written independently of the library's reader
    (negative numbers are sign-extended to 64 bits, as protobuf does for int32)."""
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


# ----- time without timing thresholds -------------------------------------------------------
# A test never asserts how long something took: CPU load can slow anything down. "It does not
# hang" is a generous watchdog whose expiry can only mean a hang; durations come from a
# VirtualClock.

HANG_TIMEOUT = 120
"""Seconds after which something that should end is taken to hang (load only slows it down)."""


def run_or_hang(func, *args, **kwargs):
    """``func(*args, **kwargs)`` in a daemon thread (inside the caller's default graph): its
    result, or its exception re-raised here; the test fails if it has not ended after
    :data:`HANG_TIMEOUT` seconds.

    Example::

        with pytest.raises(DataFlowWorkerError):
            run_or_hang(list, df)     # raises, rather than waiting forever
    """
    graph = tfv1.get_default_graph()
    outcome = {}

    def target():
        try:
            with graph.as_default():
                outcome['result'] = func(*args, **kwargs)
        except BaseException as err:  # handed to the caller
            outcome['error'] = err

    thread = threading.Thread(target=target, name='run_or_hang', daemon=True)
    thread.start()
    thread.join(HANG_TIMEOUT)
    if thread.is_alive():
        raise AssertionError('{} did not end within {} s: it hangs'.format(
            getattr(func, '__name__', func), HANG_TIMEOUT))
    if 'error' in outcome:
        raise outcome['error']
    return outcome['result']


def wait_until(condition, timeout=HANG_TIMEOUT, interval=0.02):
    """Poll ``condition()`` until it is true (returns True) or ``timeout`` seconds passed
    (returns False): a deadline that only matters when the condition never comes."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)
    return True


class VirtualClock:
    """A clock that moves only when told to, so that timings measured with it are exact whatever
    the load. Stands in for the ``time`` module of the code under test (``perf_counter``,
    ``time``, ``monotonic`` and ``sleep``), or is called itself.

    Example::

        clock = VirtualClock()
        monkeypatch.setattr(prof, 'time', clock)
        clock.advance(0.5)
    """

    def __init__(self, start=1000.0):
        self.now = float(start)

    def __call__(self):
        return self.now

    perf_counter = time = monotonic = __call__

    def advance(self, seconds):
        self.now += seconds

    sleep = advance


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


# ----- a session that breaks as TensorFlow's do -------------------------------------------------

def _op_names(fetches):
    """The names of the ops in a fetch structure (tensors, ops, names; nested lists and dicts)."""
    if isinstance(fetches, dict):
        return set().union(*map(_op_names, fetches.values())) if fetches else set()
    if isinstance(fetches, (list, tuple)):
        return set().union(*map(_op_names, fetches)) if fetches else set()
    if isinstance(fetches, (tf.Tensor, tf.Operation)):
        return {fetches.op.name if isinstance(fetches, tf.Tensor) else fetches.name}
    return set()


class BreakingSession(tfv1.Session):
    """A session that fails the way TensorFlow's does when a C++ exception gets out of a run
    (seen from a grappler pass): the ``fail_at``-th run of ``op`` raises an IndexError from
    inside the session, and from then on every run (of anything, through ``run`` or a
    callable) waits until :attr:`release` is set; closing still works. Made from a live session
    by :meth:`convert` (its class is swapped; nothing else changes)."""

    @classmethod
    def convert(cls, sess, op, fail_at, when_built=False):
        """With ``when_built``, the ``fail_at``-th build of a callable of ``op`` fails instead
        (where TensorFlow runs grappler)."""
        sess.__class__ = cls
        sess.op_name, sess.fail_at, sess.runs_of_op, sess.when_built = op.name, fail_at, 0, when_built
        sess.broken, sess.release = threading.Event(), threading.Event()
        sess.blocked_runs = 0
        return sess

    def _wait_if_broken(self):
        if self.broken.is_set():
            self.blocked_runs += 1
            self.release.wait()
            raise RuntimeError("BreakingSession: released")

    def _count(self, names):
        if self.op_name in names:
            self.runs_of_op += 1
            if self.runs_of_op == self.fail_at:
                self.broken.set()
                raise IndexError("absl::container_internal::raw_hash_map<>::at (BreakingSession)")

    def run(self, fetches, *args, **kwargs):
        self._wait_if_broken()
        self._count(_op_names(fetches))
        return super().run(fetches, *args, **kwargs)

    def _make_callable_from_options(self, callable_options):
        self._wait_if_broken()
        names = set(callable_options.target) | {t.split(':')[0] for t in callable_options.fetch}
        if self.when_built:
            self._count(names)
        inner = super()._make_callable_from_options(callable_options)

        def call(*args, **kwargs):
            self._wait_if_broken()
            if not self.when_built:
                self._count(names)
            return inner(*args, **kwargs)
        return call


class BreakSessionAt(Callback):
    """Before training, turns the trainer's session into a :class:`BreakingSession` whose
    ``fail_at``-th training step fails (``session`` then holds it)."""

    _chief_only = False

    def __init__(self, fail_at):
        self.fail_at = fail_at
        self.session = None

    def _before_train(self):
        self.session = BreakingSession.convert(self.trainer.sess, self.trainer.train_op, self.fail_at)
