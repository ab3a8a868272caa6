"""tensorpack_lite.utils: stats, argtools, utils, timer, gpu and concurrency helpers."""

import io
import logging
import multiprocessing as mp
import os
import queue
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections import defaultdict

import numpy as np
import pytest

import tensorpack_lite.utils.utils as utils_mod
from helpers.paths import REPO_DIR
from helpers.processes import subprocess_env
from helpers.timing import HANG_TIMEOUT, VirtualClock, run_or_hang, wait_until
from tensorpack_lite.utils import argtools, concurrency, gpu, timer
from tensorpack_lite.utils.argtools import (call_only_once, graph_memoized, log_once, map_arg,
                                            memoized, memoized_ignoreargs, memoized_method,
                                            shape2d, shape4d)
from tensorpack_lite.utils.concurrency import (LoopThread, ShareSessionThread, StoppableThread,
                                               ensure_proc_terminate, mask_sigint,
                                               start_proc_mask_signal, subproc_call)
from tensorpack_lite.utils.stats import Accuracy, BinaryStatistics, RatioCounter, StatCounter
from tensorpack_lite.utils.utils import (fix_rng_seed, get_rng, get_tqdm_kwargs,
                                         humanize_time_delta)

REPO_ROOT = REPO_DIR
FORK = mp.get_context('fork')


# ------------------------------------------------------------------ stats

@pytest.mark.quick
def test_stat_counter_numbers():
    s = StatCounter()
    for v in [1, 2, 3, 6]:
        s.feed(v)
    assert s.count == 4
    assert s.average == pytest.approx(3.0)
    assert s.sum == 12
    assert s.max == 6
    assert s.min == 1
    assert s.samples() == [1, 2, 3, 6]
    s.samples().append(100)  # a copy: the counter is unaffected
    assert s.count == 4
    s.reset()
    assert s.count == 0 and s.samples() == []
    s.feed(-2.5)
    assert s.average == pytest.approx(-2.5) and s.min == s.max == -2.5


@pytest.mark.parametrize('prop', ['average', 'sum', 'max', 'min'])
def test_stat_counter_empty_raises_clear_error(prop):
    with pytest.raises(ValueError, match='no value was fed'):
        getattr(StatCounter(), prop)


def test_ratio_counter_and_accuracy():
    r = RatioCounter()
    assert r.ratio == 0 and r.total == 0 and r.count == 0
    r.feed(3, 4)
    r.feed(1)
    assert r.count == 4 and r.total == 5
    assert r.ratio == pytest.approx(0.8)
    r.reset()
    assert (r.count, r.total, r.ratio) == (0, 0, 0)

    acc = Accuracy()
    acc.feed(9, 10)
    acc.feed(0, 10)
    assert acc.accuracy == pytest.approx(0.45) == acc.ratio
    assert isinstance(acc, RatioCounter)


def test_binary_statistics():
    b = BinaryStatistics()
    b.feed(np.array([1, 1, 0, 0, 1]), np.array([1, 0, 1, 0, 1]))
    # TP=2, predicted positive=3, actual positive=3
    assert b.precision == pytest.approx(2 / 3)
    assert b.recall == pytest.approx(2 / 3)
    assert b.false_positive == pytest.approx(1 / 3)
    assert b.false_negative == pytest.approx(1 / 3)
    b.feed([[1, 1]], [[1, 1]])  # accumulates, any shape, lists accepted
    assert b.precision == pytest.approx(4 / 5)
    assert b.recall == pytest.approx(4 / 5)
    assert (b.nr_pos, b.nr_neg, b.nr_pred_pos, b.nr_pred_neg, b.corr_pos, b.corr_neg) == \
        (5, 2, 5, 2, 4, 1)


def test_binary_statistics_zero_denominators():
    b = BinaryStatistics()
    assert (b.precision, b.recall, b.false_positive, b.false_negative) == (0, 0, 0, 0)
    b.feed(np.zeros(4, dtype=int), np.array([0, 1, 0, 1]))  # nothing predicted positive
    assert b.precision == 0 and b.false_positive == 0
    assert b.recall == 0 and b.false_negative == pytest.approx(1.0)
    b.reset()
    b.feed(np.array([True, False]), np.array([False, False]))  # no positive label, bools
    assert b.recall == 0 and b.false_negative == 0
    assert b.precision == 0 and b.false_positive == pytest.approx(1.0)


def test_binary_statistics_shape_mismatch():
    with pytest.raises(ValueError, match='shape'):
        BinaryStatistics().feed(np.zeros(3), np.zeros(4))


# ------------------------------------------------------------------ argtools

def test_memoized_counts_calls():
    calls = []

    @memoized
    def square(x):
        calls.append(x)
        return x * x

    assert square(3) == 9 and square(3) == 9 and square(4) == 16
    assert calls == [3, 4]


def test_memoized_method_is_per_instance():
    class A(object):
        def __init__(self, k):
            self.k = k
            self.calls = 0

        @memoized_method
        def value(self, x):
            self.calls += 1
            return self.k * x

    a, b = A(2), A(10)
    assert a.value(3) == 6 and a.value(3) == 6
    assert a.calls == 1
    assert b.value(3) == 30  # not a's cached result
    assert b.calls == 1
    assert a.value(4) == 8 and a.calls == 2


def test_memoized_ignoreargs():
    calls = []

    @memoized_ignoreargs
    def f(x):
        calls.append(x)
        return x

    assert f(1) == 1
    assert f(2) == 1  # arguments ignored: first result forever
    assert calls == [1]


def test_map_arg_transforms():
    @map_arg(a=int, c=str.upper)
    def f(a, b, c='x'):
        return a, b, c

    assert f('5', '6', 'y') == (5, '6', 'Y')
    assert f('7', b=1, c='abc') == (7, 1, 'ABC')
    assert f(a='8', b=2) == (8, 2, 'x')  # a default is not mapped


def test_call_only_once():
    class A(object):
        @call_only_once
        def setup(self):
            return 'done'

        @call_only_once
        def other(self):
            return 'other'

    a, b = A(), A()
    assert a.setup() == 'done'
    with pytest.raises(RuntimeError, match='once'):
        a.setup()
    assert b.setup() == 'done'  # another instance is independent
    assert a.other() == 'other'  # and so is another method


def test_log_once(log_records, monkeypatch):
    monkeypatch.setattr(argtools, '_LOGGED_ONCE', set())
    log_once('a message for test_log_once')
    log_once('a message for test_log_once')
    log_once('another message for test_log_once', 'warn')
    msgs = log_records.messages()
    assert msgs.count('a message for test_log_once') == 1
    warns = [r for r in log_records if r.getMessage() == 'another message for test_log_once']
    assert len(warns) == 1 and warns[0].levelno == logging.WARNING


def test_shape2d_shape4d():
    assert shape2d(3) == [3, 3]
    assert shape2d((2, 5)) == [2, 5]
    assert shape2d([2, 5]) == [2, 5]
    with pytest.raises(ValueError):
        shape2d((1, 2, 3))
    assert shape4d(3) == [1, 3, 3, 1]
    assert shape4d((2, 5), data_format='NCHW') == [1, 1, 2, 5]
    assert shape4d(2, data_format='channels_first') == [1, 1, 2, 2]
    assert shape4d(2, data_format='channels_last') == [1, 2, 2, 1]
    with pytest.raises(ValueError):
        shape4d(2, data_format='NWHC')


def test_graph_memoized_recomputes_for_new_graph():
    from tensorpack_lite.compat import tfv1
    calls = []

    @graph_memoized
    def make(name):
        calls.append(name)
        return tfv1.constant(1.0, name=name)

    with tfv1.Graph().as_default() as g1:
        t1 = make('c')
        assert make('c') is t1
        assert t1.graph is g1
    with tfv1.Graph().as_default() as g2:
        t2 = make('c')
        assert t2 is not t1 and t2.graph is g2
    assert calls == ['c', 'c']


# ------------------------------------------------------------------ utils

@pytest.mark.parametrize('sec, text', [
    (1, '1 second'),
    (0.01, '0.01 seconds'),
    (87.6, '1 minute 27 seconds'),
    (3601, '1 hour 1 second'),
    (86400 + 9 * 3600 + 123, '1 day 9 hours 2 minutes 3 seconds'),
    (0, '0 seconds'),
    (1500 * 86400, '1500 days'),
])
def test_humanize_time_delta(sec, text):
    assert humanize_time_delta(sec) == text


def test_get_rng_and_fix_rng_seed(monkeypatch):
    monkeypatch.setattr(utils_mod, '_RNG_SEED', None)
    a, b = object(), object()
    draws_a = get_rng(a).randint(0, 2 ** 31, size=8)
    draws_b = get_rng(b).randint(0, 2 ** 31, size=8)
    assert not np.array_equal(draws_a, draws_b)

    fix_rng_seed(123)
    draws_a = get_rng(a).randint(0, 2 ** 31, size=8)
    draws_b = get_rng(b).randint(0, 2 ** 31, size=8)
    np.testing.assert_array_equal(draws_a, draws_b)
    np.testing.assert_array_equal(draws_a, np.random.RandomState(123).randint(0, 2 ** 31, size=8))


def test_get_tqdm_kwargs(monkeypatch):
    monkeypatch.setenv('TENSORPACK_PROGRESS_REFRESH', '3.5')
    kw = get_tqdm_kwargs(leave=True)
    assert kw['mininterval'] == 3.5 and kw['leave'] is True
    assert get_tqdm_kwargs(mininterval=7)['mininterval'] == 7  # explicit kwargs win

    monkeypatch.delenv('TENSORPACK_PROGRESS_REFRESH')
    for var in ('SLURM_JOB_ID', 'OMPI_COMM_WORLD_SIZE'):
        monkeypatch.delenv(var, raising=False)
    assert get_tqdm_kwargs(file=io.StringIO())['mininterval'] == 180  # not a terminal


# ------------------------------------------------------------------ timer

def test_timed_operation_logs(log_records):
    with timer.timed_operation('doing a thing', log_start=True):
        pass
    msgs = log_records.messages()
    assert 'Start doing a thing ...' in msgs
    assert any(m.startswith('Doing a thing finished, time:') for m in msgs)


def test_total_timer(log_records, monkeypatch):
    monkeypatch.setattr(timer, '_TOTAL_TIMER_DATA', defaultdict(StatCounter))
    clock = VirtualClock()
    monkeypatch.setattr(timer, '_now', clock)
    for seconds in (0.25, 0.5, 0.75):
        with timer.total_timer('step'):
            clock.advance(seconds)
    stat = timer._TOTAL_TIMER_DATA['step']
    assert stat.count == 3 and stat.sum == 1.5 and stat.average == 0.5
    timer.print_total_timer()
    assert any(m.startswith('Total Time: step ->') and '3 times' in m
               for m in log_records.messages())


def test_timer_pause_excludes_paused_time(monkeypatch):
    clock = VirtualClock()
    monkeypatch.setattr(timer, '_now', clock)
    t = timer.Timer()
    clock.advance(2.0)
    t.pause()
    assert t.is_paused()
    assert t.seconds() == 2.0
    clock.advance(5.0)
    assert t.seconds() == 2.0  # frozen while paused
    t.resume()
    clock.advance(1.0)
    assert t.seconds() == 3.0 and not t.is_paused()
    with pytest.raises(RuntimeError):
        t.resume()


# ------------------------------------------------------------------ gpu

@pytest.mark.parametrize('value, expected', [('', 0), ('-1', 0), ('0', 1), ('0,1', 2),
                                             ('3, 1', 2), ('0,-1,1', 1),
                                             ('GPU-8932f937-d72c-4106', 1)])
def test_get_num_gpu_respects_cuda_visible_devices(monkeypatch, value, expected):
    monkeypatch.setenv('CUDA_VISIBLE_DEVICES', value)
    monkeypatch.setattr(gpu, '_count_with_nvidia_smi', lambda: pytest.fail('nvidia-smi asked'))
    assert gpu.get_num_gpu() == expected


@pytest.mark.parametrize('value, expected', [
    ('', []), ('-1', []), ('0', ['0']), (' 3 , 1 ', ['3', '1']),
    ('0,-1,1', ['0']),                     # a negative entry ends the list
    ('0,1,x,2', ['0', '1']),               # so does an invalid one
    ('GPU-8932f937-d72c-4106,1', ['GPU-8932f937-d72c-4106', '1']),
    ('MIG-4b1c7d2a-11e0-5c5b-9f0f-0e7b4d2a1c3e', ['MIG-4b1c7d2a-11e0-5c5b-9f0f-0e7b4d2a1c3e']),
])
def test_cuda_visible_devices_are_read_by_cudas_rule(value, expected):
    assert gpu.parse_cuda_visible_devices(value) == expected
    assert gpu.cuda_visible_devices({'CUDA_VISIBLE_DEVICES': value}) == expected


def test_an_unset_cuda_visible_devices_is_none_not_empty(monkeypatch):
    monkeypatch.delenv('CUDA_VISIBLE_DEVICES', raising=False)
    assert gpu.cuda_visible_devices() is None and gpu.cuda_visible_devices({}) is None
    monkeypatch.setenv('CUDA_VISIBLE_DEVICES', '2,-1')
    assert gpu.cuda_visible_devices() == ['2']


def test_get_num_gpu_is_int(monkeypatch):
    monkeypatch.delenv('CUDA_VISIBLE_DEVICES', raising=False)
    n = gpu.get_num_gpu()
    assert isinstance(n, int) and n >= 0


def test_get_num_gpu_with_fake_nvidia_smi(monkeypatch, tmp_path):
    fake = tmp_path / 'nvidia-smi'
    fake.write_text('#!/bin/sh\n'
                    'echo "GPU 0: Tesla V100 (UUID: GPU-aaa)"\n'
                    'echo "  MIG 1g.5gb Device 0: (UUID: MIG-bbb)"\n'
                    'echo "GPU 1: Tesla V100 (UUID: GPU-ccc)"\n')
    fake.chmod(0o755)
    monkeypatch.delenv('CUDA_VISIBLE_DEVICES', raising=False)
    monkeypatch.setenv('PATH', str(tmp_path) + os.pathsep + os.environ.get('PATH', ''))
    monkeypatch.setattr(gpu, '_count_with_tensorflow', lambda: pytest.fail('TF asked'))
    assert gpu.get_num_gpu() == 2

    fake.write_text('#!/bin/sh\necho "NVIDIA-SMI has failed" >&2\nexit 9\n')
    monkeypatch.setattr(gpu, '_count_with_tensorflow', lambda: 0)  # inconclusive -> TF
    assert gpu.get_num_gpu() == 0


def test_get_num_gpu_without_nvidia_smi_never_asks_tf(monkeypatch, tmp_path):
    monkeypatch.delenv('CUDA_VISIBLE_DEVICES', raising=False)
    monkeypatch.setenv('PATH', str(tmp_path))  # an empty directory
    monkeypatch.setattr(gpu, '_count_with_tensorflow', lambda: pytest.fail('TF asked'))
    assert gpu.get_num_gpu() == 0


# ------------------------------------------------------------------ threads

class _RecordingQueue(queue.Queue):
    """A queue that records the timeout of every blocking get/put."""

    def __init__(self, maxsize=0):
        super().__init__(maxsize)
        self.timeouts = []

    def get(self, block=True, timeout=None):
        self.timeouts.append(timeout)
        return super().get(block, timeout)

    def put(self, item, block=True, timeout=None):
        self.timeouts.append(timeout)
        return super().put(item, block, timeout)


def test_stoppable_thread_get_returns_promptly_after_stop():
    q = _RecordingQueue()
    got = []

    class Consumer(StoppableThread):
        def run(self):
            got.append(self.queue_get_stoppable(q))

    th = Consumer()
    th.daemon = True
    th.start()
    assert wait_until(lambda: q.timeouts)  # blocked on the empty queue
    assert th.is_alive() and not th.stopped()
    th.stop()
    th.join(HANG_TIMEOUT)
    assert not th.is_alive()
    assert th.stopped() and got == [None]
    # promptly: it waited in slices of at most poll_interval, checking the stop event in between
    assert all(t is not None and 0 < t <= StoppableThread.poll_interval for t in q.timeouts), q.timeouts


def test_stoppable_thread_queue_put_and_get():
    q = _RecordingQueue(maxsize=1)
    th = StoppableThread()
    assert th.queue_put_stoppable(q, 'x') is True
    assert th.queue_get_stoppable(q) == 'x'
    q.put('full')
    results = []
    worker = threading.Thread(target=lambda: results.append(th.queue_put_stoppable(q, 'y')),
                              daemon=True)
    worker.start()
    assert wait_until(lambda: len(q.timeouts) > 3)  # the put of 'y' is waiting for room
    assert worker.is_alive()
    th.stop()
    worker.join(HANG_TIMEOUT)
    assert not worker.is_alive() and results == [False]
    puts_of_y = q.timeouts[3:]  # after: put 'x', get, put 'full'
    assert all(t is not None and 0 < t <= StoppableThread.poll_interval for t in puts_of_y), q.timeouts
    assert q.get_nowait() == 'full'


def test_stoppable_threads_share_an_event():
    evt = threading.Event()
    a, b = StoppableThread(evt), StoppableThread(evt)
    a.stop()
    assert b.stopped()


def test_loop_thread_pause_resume_stop():
    counter = []
    paused, resumed = threading.Event(), threading.Event()

    def func():
        counter.append(1)
        if len(counter) == 3:
            th.pause()  # during a call: this call finishes, the next waits for resume()
            paused.set()
        elif len(counter) == 4:
            resumed.set()
        time.sleep(0.001)

    th = LoopThread(func)
    assert th.daemon
    th.start()
    assert paused.wait(HANG_TIMEOUT)  # it called func over and over
    time.sleep(0.1)  # time for a wrong call while paused (a correct thread makes none, however slow)
    assert len(counter) == 3
    th.resume()
    assert resumed.wait(HANG_TIMEOUT)
    th.pause()
    th.stop()  # stopping a paused thread must not hang
    th.join(HANG_TIMEOUT)
    assert not th.is_alive()


def test_loop_thread_not_pausable():
    th = LoopThread(lambda: None, pausable=False)
    with pytest.raises(RuntimeError):
        th.pause()


def test_share_session_thread():
    from tensorpack_lite.compat import tfv1
    seen = {}

    def target(key):
        seen[key] = tfv1.get_default_session()

    with tfv1.Graph().as_default():
        sess = tfv1.Session()
        try:
            th = ShareSessionThread(target=target, args=('target',))
            with sess.as_default():
                th.start()  # the session at start() time
                th.join(5)
                wrapped = ShareSessionThread(threading.Thread(target=target, args=('wrapped',),
                                                              name='inner'))
            assert wrapped.name == 'inner'
            wrapped.start()  # no default session now: the one at construction is used
            wrapped.join(5)
            plain = threading.Thread(target=target, args=('plain',))
            with sess.as_default():
                plain.start()
                plain.join(5)
        finally:
            sess.close()
    assert seen['target'] is sess
    assert seen['wrapped'] is sess
    assert seen['plain'] is None  # an ordinary thread does not inherit the default session


# ------------------------------------------------------------------ processes

def _sleep_after_ready(ready):
    ready.set()
    time.sleep(30)


def _wait_ready(ready, proc):
    assert ready.wait(HANG_TIMEOUT), "child process did not start"


def test_mask_sigint_restores_handler():
    before = signal.getsignal(signal.SIGINT)
    with mask_sigint() as masked:
        assert masked is True
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    assert signal.getsignal(signal.SIGINT) is before


def test_start_proc_mask_signal_child_ignores_sigint():
    # Python's own SIGINT handler, even if the test runner was started with SIGINT ignored
    # (e.g. as a background job), so that the unmasked control child really dies of SIGINT
    saved = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        _check_start_proc_mask_signal()
    finally:
        signal.signal(signal.SIGINT, saved)


def _check_start_proc_mask_signal():
    before = signal.getsignal(signal.SIGINT)
    ready_masked, ready_plain = FORK.Event(), FORK.Event()
    masked = FORK.Process(target=_sleep_after_ready, args=(ready_masked,), daemon=True)
    plain = FORK.Process(target=_sleep_after_ready, args=(ready_plain,), daemon=True)
    try:
        start_proc_mask_signal([masked])
        assert signal.getsignal(signal.SIGINT) is before  # the parent is unaffected
        plain.start()
        _wait_ready(ready_masked, masked)
        _wait_ready(ready_plain, plain)
        os.kill(masked.pid, signal.SIGINT)
        os.kill(plain.pid, signal.SIGINT)
        plain.join(HANG_TIMEOUT)
        assert plain.exitcode is not None  # control: SIGINT does end an unmasked child
        masked.join(0.3)
        assert masked.is_alive()
    finally:
        for p in (masked, plain):
            if p.is_alive():
                p.terminate()
            p.join(5)


# The top-level package imports TensorFlow; scripts load tensorpack_lite.utils under a bare
# stand-in parent package instead, which keeps them fast and shows utils needs no TensorFlow.
_SCRIPT_PRELUDE = """
import sys, types
_pkg = types.ModuleType('tensorpack_lite')
_pkg.__path__ = [{!r}]
sys.modules['tensorpack_lite'] = _pkg
""".format(os.path.join(REPO_ROOT, 'tensorpack_lite'))


def _run_script(tmp_path, body, timeout=HANG_TIMEOUT):
    """Runs ``body`` in a new Python (in its own process group, killed whole if it outlives
    ``timeout``: that means a hang)."""
    script = tmp_path / 'script.py'
    script.write_text(_SCRIPT_PRELUDE + textwrap.dedent(body))
    env = subprocess_env()
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env, cwd=str(tmp_path), start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise AssertionError('the script did not end within {} s: it hangs'.format(timeout))
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def _pid_is_gone(pid):
    try:
        with open('/proc/{}/stat'.format(pid)) as f:
            state = f.read().rsplit(')', 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in ('Z', 'X')  # a zombie nobody reaped yet is dead too


def _kill(pid):
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


@pytest.mark.skipif(not sys.platform.startswith('linux'), reason='uses /proc')
def test_ensure_proc_terminate_at_exit(tmp_path):
    res = _run_script(tmp_path, """
        import multiprocessing as mp, time
        from tensorpack_lite.utils.concurrency import ensure_proc_terminate

        def forever():
            time.sleep(3600)

        if __name__ == '__main__':
            p = mp.get_context('fork').Process(target=forever)   # not a daemon
            p.start()
            ensure_proc_terminate([p])
            print(p.pid, flush=True)
            # without ensure_proc_terminate, exiting would wait for the child: a hang
    """)
    assert res.returncode == 0, res.stderr
    assert 'tensorflow' not in res.stderr.lower()
    assert wait_until(lambda: _pid_is_gone(int(res.stdout.split()[0])))


def test_ensure_proc_terminate_registers_atexit(monkeypatch):
    registered = []
    monkeypatch.setattr(concurrency.atexit, 'register',
                        lambda fn, *args: registered.append((fn, args)))
    ready = FORK.Event()
    p = FORK.Process(target=_sleep_after_ready, args=(ready,), daemon=True)
    p.start()
    try:
        ensure_proc_terminate(p)
        assert len(registered) == 1
        _wait_ready(ready, p)
        fn, args = registered[0]
        fn(*args)  # what happens at exit
        assert not p.is_alive() and p.exitcode == -signal.SIGTERM
    finally:
        if p.is_alive():
            p.kill()
        p.join(5)
    with pytest.raises(TypeError):
        ensure_proc_terminate(threading.Thread())


@pytest.mark.skipif(not sys.platform.startswith('linux'), reason='prctl is Linux-only')
def test_enable_death_signal_child_dies_with_parent(tmp_path):
    body = """
        import multiprocessing as mp, os, time
        from tensorpack_lite.utils.concurrency import enable_death_signal

        def child(q, enable):
            devnull = os.open(os.devnull, os.O_WRONLY)  # release the pipes the test reads
            os.dup2(devnull, 1)
            os.dup2(devnull, 2)
            if enable:
                enable_death_signal()
            q.put(os.getpid())
            time.sleep(3600)   # killed by the test unless the death signal ended it

        if __name__ == '__main__':
            ctx = mp.get_context('fork')
            q = ctx.Queue()
            p = ctx.Process(target=child, args=(q, {enable}))
            p.start()
            print(q.get(timeout=100), flush=True)
            os._exit(0)   # die abruptly: no atexit, no join
    """
    res = _run_script(tmp_path, body.format(enable=True))
    assert res.returncode == 0, res.stderr
    pid = int(res.stdout.split()[0])
    try:
        assert wait_until(lambda: _pid_is_gone(pid))
    finally:
        _kill(pid)

    res = _run_script(tmp_path, body.format(enable=False))  # control: the orphan survives
    pid = int(res.stdout.split()[0])
    try:
        time.sleep(0.3)
        assert not _pid_is_gone(pid)
    finally:
        _kill(pid)


def _popen_timing_out_after(ready_file):
    """A subprocess.Popen whose communicate() with a timeout starts counting once
    ``ready_file`` exists."""
    class Popen(subprocess.Popen):
        def communicate(self, input=None, timeout=None):
            if timeout is not None:
                assert wait_until(ready_file.exists), 'the command did not start'
            return super().communicate(input, timeout)
    return Popen


def test_subproc_call(log_records, tmp_path, monkeypatch):
    out, code = subproc_call('echo hello')
    assert (out, code) == (b'hello\n', 0)
    out, code = subproc_call(['sh', '-c', 'echo oops >&2; exit 3'])
    assert code == 3 and out == b'oops\n'
    assert any("failed, return code=3" in m for m in log_records.messages())

    # Never ends by itself: the timeout must end the shell and the sleep it started (a process
    # left with the output pipe open would make the call hang). The timeout is counted only once
    # the command has written its output, which CPU load may delay.
    sleep_pid = tmp_path / 'sleep_pid'
    monkeypatch.setattr(concurrency.subprocess, 'Popen', _popen_timing_out_after(sleep_pid))
    command = 'echo partial; sleep 3600 & echo $! > {}.tmp; mv {}.tmp {}; wait'.format(
        sleep_pid, sleep_pid, sleep_pid)
    try:
        out, code = run_or_hang(subproc_call, command, timeout=0.3)
        assert code == -1 and out == b'partial\n'
        assert any('timed out' in m for m in log_records.messages())
        assert wait_until(lambda: _pid_is_gone(int(sleep_pid.read_text())))
    finally:
        if sleep_pid.exists():
            _kill(int(sleep_pid.read_text()))

    out, code = subproc_call(['/definitely/not/a/command'])
    assert (out, code) == (b'', -2)


def test_utils_package_is_tf_free_and_exports(tmp_path, monkeypatch):
    monkeypatch.delenv('CUDA_VISIBLE_DEVICES', raising=False)
    res = _run_script(tmp_path, """
        import sys
        import tensorpack_lite.utils as u
        from tensorpack_lite.utils import *
        missing = [n for n in u.__all__ if not hasattr(u, n)]
        assert not missing, missing
        for n in ['StatCounter', 'timed_operation', 'get_num_gpu', 'StoppableThread',
                  'ensure_proc_terminate', 'memoized', 'logger', 'get_rng']:
            assert n in u.__all__, n
        assert 'tensorflow' not in sys.modules, 'TensorFlow imported'
        assert u.get_num_gpu() >= 0 and 'tensorflow' not in sys.modules
        print('ok')
    """)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == 'ok'
