"""The process guard (tests/helpers/process_guard.py; tests/README.md, "What a test leaves behind"):
pytest runs files whose tests leave the process changed, with the guard as its plugin. Each such
test fails at its teardown naming the change, the change is undone where it can be (the next test
finds the process as it was), and a test marked ``may_leave`` keeps what the mark names."""

import re
import textwrap

import pytest

from helpers.paths import TESTS_DIR


def said(*pieces):
    """A pattern of ``fnmatch_lines``: a line holding the ``pieces`` as written, in order."""
    return '*' + '*'.join(re.sub(r'([][*?])', r'[\1]', piece) for piece in pieces) + '*'


@pytest.fixture
def run_pytest(pytester, monkeypatch):
    """``run(source, *args)``: pytest on ``source`` (test_inner.py), in a new process, with the guard
    and the tests in their order. A test named ``*never_ending*`` leaves a thread or a process that
    never ends: the guard waits a second for it instead of a minute."""
    monkeypatch.setenv('PYTHONPATH', TESTS_DIR)
    pytester.makeconftest('''
        import pytest
        from helpers import process_guard

        @pytest.fixture(autouse=True)
        def _settle_timeout(request):
            process_guard.SETTLE_TIMEOUT = 1.0 if 'never_ending' in request.node.name else 60.0
        ''')

    def run(source, *args):
        pytester.makepyfile(test_inner=textwrap.dedent(source))
        return pytester.runpytest_subprocess('-p', 'helpers.process_guard', '-p', 'no:randomly',
                                             '-p', 'no:cacheprovider', '-p', 'no:xdist', *args)
    return run


@pytest.mark.quick
def test_a_sigterm_handler_left_behind_fails_its_test_naming_it_and_is_undone(run_pytest):
    result = run_pytest('''
        import signal

        BEFORE = signal.getsignal(signal.SIGTERM)

        def on_sigterm(signum, frame):
            pass

        def test_takes_sigterm():
            signal.signal(signal.SIGTERM, on_sigterm)

        def test_after_it():
            assert signal.getsignal(signal.SIGTERM) is BEFORE
        ''')
    result.assert_outcomes(passed=2, errors=1)
    result.stdout.fnmatch_lines([
        said('ERROR at teardown of test_takes_sigterm'),
        said("test_inner.py::test_takes_sigterm left the process changed (tests/README.md, 'What a test "
             "leaves behind'):"),
        said('signal handler of SIGTERM: test_inner.on_sigterm (was ', ')'),
        said("mark it @pytest.mark.may_leave(<aspect>=[...], reason='...') naming what it leaves."),
    ])


def test_every_aspect_left_behind_is_named_and_what_can_be_is_undone(run_pytest):
    result = run_pytest('''
        import logging
        import os
        import signal
        import socket
        import subprocess
        import sys
        import threading

        from tensorpack_lite.utils import logger

        START = []
        KEPT = []

        def state():
            handlers = list(logging.getLogger('tensorpack_lite').handlers)
            environ = {k: v for k, v in os.environ.items() if k != 'PYTEST_CURRENT_TEST'}   # the test's name
            return environ, os.getcwd(), list(sys.path), handlers

        def test_first():
            START.append(state())

        def test_environ():
            os.environ['GUARD_TEST_VARIABLE'] = 'left'

        def test_cwd(tmp_path):
            os.chdir(str(tmp_path))

        def test_sys_path():
            sys.path.insert(0, '/guard/test/path')

        def test_logger_handler():
            logging.getLogger('tensorpack_lite').addHandler(logging.NullHandler())

        def test_logger_level():
            logger.setLevel(logging.ERROR)

        def test_blocked_signal():
            signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGUSR2])

        def test_thread_never_ending():
            threading.Thread(target=threading.Event().wait, name='guard-test-thread', daemon=True).start()

        def test_child_process_never_ending():
            KEPT.append(subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']))

        def test_socket():
            server = socket.socket()
            server.bind(('127.0.0.1', 0))
            server.listen()
            KEPT.append(server)

        def test_thread_that_ends_and_a_process_that_ends_are_no_change():
            threading.Thread(target=lambda: None).start()
            subprocess.Popen([sys.executable, '-c', 'pass'])

        def test_restored():
            assert state() == START[0]
            assert logging.getLogger('tensorpack_lite').level == logging.INFO
            assert signal.SIGUSR2 not in signal.pthread_sigmask(signal.SIG_BLOCK, [])
            assert KEPT[0].wait(timeout=60) == -9         # killed
        ''')
    result.assert_outcomes(passed=12, errors=9)
    result.stdout.fnmatch_lines_random([
        said("environment variable GUARD_TEST_VARIABLE set to 'left'"),
        said('working directory: ', '/test_cwd0 (was ', ')'),
        said("sys.path: added ['/guard/test/path']"),
        said("the library logger's handlers: added <NullHandler (NOTSET)>"),
        said("the library logger's level: 40 (was 20)"),
        said("blocked signals: ['SIGUSR2'] (were [])"),
        said("thread 'guard-test-thread' still running (threading.Event.wait, daemon, at ", 'threading.py:',
             ' in wait) (not undone)'),
        said('child process ', ' still running: ', ' -c import time; time.sleep(600)'),
        said('TCP 127.0.0.1:', ' (LISTEN) still open (fd ', ', socket:[', ']) (not undone)'),
    ])
    assert 'ERROR at teardown of test_thread_that_ends' not in result.stdout.str()


def test_tensorflow_left_in_another_graph_or_mode_is_named(run_pytest):
    result = run_pytest('''
        import pytest
        import tensorflow as tf

        GRAPH = tf.compat.v1.get_default_graph()
        KEPT = []

        @pytest.mark.may_leave(tensorflow=['mode'], reason='graph mode for the run, as conftest.py sets it')
        def test_graph_entered():
            tf.compat.v1.disable_eager_execution()
            KEPT.append(tf.Graph().as_default())        # held: collected, it would exit the graph
            KEPT[0].__enter__()

        def test_v1_behaviour():
            tf.compat.v1.disable_v2_behavior()

        def test_restored():
            assert tf.compat.v1.get_default_graph() is GRAPH
        ''')
    result.assert_outcomes(passed=3, errors=2)
    result.stdout.fnmatch_lines_random([
        said('the default graph is another one (a graph entered with as_default() and not exited, or '
             'reset_default_graph()): '),
        said("TensorFlow 2's behaviour: disabled (was enabled) (not undone)"),
    ])


def test_may_leave_keeps_what_it_names_and_nothing_else(run_pytest):
    result = run_pytest('''
        import os
        import signal

        import pytest

        @pytest.mark.may_leave(environ=['GUARD_KEPT_*'], signals=['SIGUSR1'], reason='the point of this test')
        def test_keeps():
            os.environ['GUARD_KEPT_A'] = '1'
            signal.signal(signal.SIGUSR1, signal.SIG_IGN)

        @pytest.mark.may_leave(environ=['GUARD_KEPT_*'], reason='only these')
        def test_keeps_only_what_is_named():
            os.environ['GUARD_KEPT_B'] = '1'
            os.environ['GUARD_NOT_KEPT'] = '1'

        def test_kept():
            assert os.environ['GUARD_KEPT_A'] == os.environ['GUARD_KEPT_B'] == '1'
            assert 'GUARD_NOT_KEPT' not in os.environ
            assert signal.getsignal(signal.SIGUSR1) is signal.SIG_IGN

        @pytest.mark.may_leave(environ=True)
        def test_without_a_reason():
            pass
        ''')
    result.assert_outcomes(passed=3, errors=2)
    result.stdout.fnmatch_lines_random([
        said("environment variable GUARD_NOT_KEPT set to '1'"),
        said("ERROR at setup of test_without_a_reason"),
        said("@pytest.mark.may_leave(reason='...', <aspect>=[names] or True): name what it may leave and "
             "why"),
    ])
    assert 'GUARD_KEPT_B' not in result.stdout.str()


def test_a_module_fixture_whose_teardown_does_not_restore_fails_naming_the_module(run_pytest):
    result = run_pytest('''
        import os

        import pytest

        @pytest.fixture(scope='module')
        def setting():
            os.environ['GUARD_MODULE_SETTING'] = '1'          # and never removed
            yield

        def test_uses_it(setting):
            assert os.environ['GUARD_MODULE_SETTING'] == '1'

        def test_uses_it_too(setting):
            pass
        ''')
    result.assert_outcomes(passed=2, errors=1)
    result.stdout.fnmatch_lines([
        said('ERROR at teardown of test_uses_it_too'),
        said('the module fixtures of test_inner.py left the process changed'),
        said("environment variable GUARD_MODULE_SETTING set to '1'"),
    ])


@pytest.mark.quick
def test_the_suite_runs_under_the_guard(request):
    assert request.config.pluginmanager.hasplugin('helpers.process_guard')
    assert '_process_guard' in request.fixturenames
