"""The process guard: a test leaves the process as it found it (tests/README.md, "What a test
leaves behind").

A pytest plugin (tests/conftest.py loads it; elsewhere ``-p helpers.process_guard`` with tests/ on
the path). Around every test, after the fixtures of wider scope are set up and before the test's
own, it takes a snapshot of what is global to the process, and takes another once the test's own
fixtures are torn down; around each module and the session it does the same for their fixtures.
A difference is an error at teardown that names each change, and is undone where it can be (a
signal handler, a variable, the directory, ``sys.path``, the logger; a child process is killed),
so that the tests after it run in the process they expect. What it looks at (:data:`ASPECTS`):

- ``signals``: the handler of every catchable signal, and the signals the main thread blocks;
- ``environ``: the environment variables;
- ``cwd``: the working directory;
- ``sys_path``: ``sys.path``;
- ``logger``: the library logger's directory, file handler, handlers, level and propagation;
- ``tensorflow``: the default graph, eager or graph mode, TensorFlow 2's behaviour;
- ``threads``: threads started and still running;
- ``children``: child processes started and still running (a zombie has ended);
- ``sockets``: sockets opened and still open (this process's file descriptors).

Threads and child processes get :data:`SETTLE_TIMEOUT` seconds together to end (what ends, ends
within it whatever the load: only a leak waits that long); garbage is collected first (an
unreachable socket or thread pool is closed by it).

A test whose change is its point says what it leaves, with a reason::

    @pytest.mark.may_leave(signals=['SIGTERM'], reason='installs the handler for the process')

(a list of names or ``fnmatch`` patterns per aspect, or ``True`` for anything of that aspect;
on a module, through ``pytestmark``, it covers its tests and its fixtures). What libraries start
once per process and keep for its life is not a change, nor what the test runner holds for the
running test: :data:`NOT_A_LEAK` names each, with why.
"""

import fnmatch
import gc
import os
import signal
import sys
import threading
import time

import pytest

__all__ = ['ASPECTS', 'NOT_A_LEAK', 'starts_tensorflow_server_here', 'SETTLE_TIMEOUT', 'snapshot',
           'changes_between']

SETTLE_TIMEOUT = 60.0
"""Seconds that the threads and child processes a test started get, together, to end after it:
generous, so that only one that would never end waits them out."""

MARKER = 'may_leave'

NOT_A_LEAK = (
    ('threads', 'pytest_timeout *',
     "pytest-timeout's timer of the running test (timeout_method = thread), ended after its teardown"),
    ('threads', 'tqdm._monitor.TMonitor*',
     "tqdm's monitor of slow progress bars: started with the first bar, kept for the process"),
    ('threads', 'tensorpack_lite.cluster.launch._Spawner._serve',
     "the launcher's spawner (cluster/launch.py): started by the first launch from a thread other than "
     "the main one, kept for the process so that the tasks it forks outlive their caller's thread"),
    ('children', '*from multiprocessing.resource_tracker import main*',
     "multiprocessing's resource tracker: started once per process, ends with it"),
    ('children', '*from multiprocessing.forkserver import main*',
     "multiprocessing's fork server: started once per process, ends with it"),
)
"""(aspect, pattern, why): what the test runner holds for the running test, and what libraries
start once per process and keep for its life: no test's change."""


starts_tensorflow_server_here = pytest.mark.may_leave(
    sockets=True, reason='a TensorFlow server (tf.distribute.Server, create_server) started in this process '
                         'listens until the process exits: TensorFlow has no way to stop one')
"""The mark of a test module that starts TensorFlow servers in the pytest process."""


# ----- the aspects ---------------------------------------------------------------------------

class Aspect:
    """What one kind of process-global state is: how to take it (``snapshot``: a dict), to let
    what is ending end (``settle``), to say a change (``describe``) and to undo it (``restore``:
    True if undone). ``only_new``: only keys that appear count (a thread that ended is no change)."""

    keyword = ''
    title = ''
    only_new = False

    def snapshot(self):
        raise NotImplementedError

    def needs_settling(self, new_keys, after):
        return False

    def remaining(self, keys):
        """Those of the changed ``keys`` that are a change still (a process that ended is not)."""
        return keys

    def settle(self, new_keys, deadline):
        pass

    def names(self, key, value):
        """The names a ``may_leave`` or :data:`NOT_A_LEAK` pattern is matched against."""
        return [str(key)]

    def describe(self, key, old, new):
        return '{} {}: {!r} (was {!r})'.format(self.title, key, new, old)

    def restore(self, key, old, new):
        return False


_MISSING = object()


def _text(value, limit=120):
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + '...'


class SignalHandlers(Aspect):
    keyword, title = 'signals', 'signal handler'
    BLOCKED = '(blocked signals)'

    def __init__(self):
        self.signals = {}
        for number in sorted(signal.valid_signals()):
            if number in (signal.SIGKILL, signal.SIGSTOP):
                continue
            try:
                name = signal.Signals(number).name
            except ValueError:
                name = 'SIGRTMIN+{}'.format(number - signal.SIGRTMIN)
            self.signals[name] = number

    def snapshot(self):
        state = {}
        for name, number in self.signals.items():
            try:
                state[name] = signal.getsignal(number)
            except (OSError, ValueError):
                pass
        if threading.current_thread() is threading.main_thread():
            state[self.BLOCKED] = frozenset(signal.pthread_sigmask(signal.SIG_BLOCK, ()))
        return state

    @staticmethod
    def handler_name(handler):
        if handler is None:
            return 'a handler not set from Python'
        if handler is signal.SIG_DFL:
            return 'SIG_DFL'
        if handler is signal.SIG_IGN:
            return 'SIG_IGN'
        name = getattr(handler, '__qualname__', None)
        return '{}.{}'.format(getattr(handler, '__module__', '?'), name) if name else _text(handler)

    def describe(self, key, old, new):
        if key == self.BLOCKED:
            return 'blocked signals: {} (were {})'.format(
                sorted(signal.Signals(s).name for s in new), sorted(signal.Signals(s).name for s in old))
        return 'signal handler of {}: {} (was {})'.format(key, self.handler_name(new), self.handler_name(old))

    def restore(self, key, old, new):
        if threading.current_thread() is not threading.main_thread() or old is _MISSING:
            return False
        if key == self.BLOCKED:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)
            return True
        if old is None:
            return False
        signal.signal(self.signals[key], old)
        return True


class Environment(Aspect):
    """The environment; but PYTEST_CURRENT_TEST, which pytest sets at each phase of a test."""

    keyword, title = 'environ', 'environment variable'

    def snapshot(self):
        state = dict(os.environ)
        state.pop('PYTEST_CURRENT_TEST', None)
        return state

    def describe(self, key, old, new):
        if old is _MISSING:
            return 'environment variable {} set to {}'.format(key, _text(new))
        if new is _MISSING:
            return 'environment variable {} removed (was {})'.format(key, _text(old))
        return 'environment variable {} changed to {} (was {})'.format(key, _text(new), _text(old))

    def restore(self, key, old, new):
        if old is _MISSING:
            os.environ.pop(key, None)
        else:
            os.environ[key] = old
        return True


class WorkingDirectory(Aspect):
    keyword, title = 'cwd', 'working directory'

    def snapshot(self):
        try:
            return {'cwd': os.getcwd()}
        except OSError:          # removed while it was the working directory
            return {'cwd': None}

    def describe(self, key, old, new):
        return 'working directory: {} (was {})'.format(new or 'a removed directory', old)

    def restore(self, key, old, new):
        if old:
            os.chdir(old)
            return True
        return False


class SysPath(Aspect):
    keyword, title = 'sys_path', 'sys.path'

    def snapshot(self):
        return {'sys.path': tuple(sys.path)}

    def describe(self, key, old, new):
        added = [p for p in new if p not in old]
        removed = [p for p in old if p not in new]
        twice = sorted({p for p in new if new.count(p) > max(1, old.count(p))})
        said = ((['added {}'.format(added)] if added else [])
                + (['removed {}'.format(removed)] if removed else [])
                + (['now more than once {}'.format(twice)] if twice else []))
        return 'sys.path: {}'.format('; '.join(said or ['reordered']))

    def restore(self, key, old, new):
        sys.path[:] = list(old)
        return True


class LibraryLogger(Aspect):
    """tensorpack_lite's logger (tensorpack_lite/utils/logger.py), once imported."""

    keyword, title = 'logger', 'the library logger'
    MODULE = 'tensorpack_lite.utils.logger'
    GLOBALS = {'directory': '_LOGGER_DIR', 'url': '_LOGGER_URL', 'file handler': '_FILE_HANDLER'}
    ATTRIBUTES = ('level', 'propagate', 'disabled')

    def snapshot(self):
        module = sys.modules.get(self.MODULE)
        if module is None:
            return {}
        logger = module._logger
        state = {key: getattr(module, name, None) for key, name in self.GLOBALS.items()}
        state.update({key: getattr(logger, key) for key in self.ATTRIBUTES})
        state['handlers'] = tuple(h for h in logger.handlers if not self.runners(h))
        state['filters'] = tuple(logger.filters)
        return state

    @staticmethod
    def runners(handler):
        """Whether ``handler`` is pytest's, which it adds to the logger at each phase of a test
        (caplog, the report's sections) and removes after it."""
        return type(handler).__module__ == '_pytest.logging'

    def describe(self, key, old, new):
        if key in ('handlers', 'filters'):
            added = [_text(h) for h in new if h not in old]
            removed = [_text(h) for h in old if h not in new]
            return "the library logger's {}: {}".format(key, '; '.join(
                (['added {}'.format(', '.join(added))] if added else [])
                + (['removed {}'.format(', '.join(removed))] if removed else []) or ['reordered']))
        return "the library logger's {}: {} (was {})".format(key, _text(new), _text(old))

    def restore(self, key, old, new):
        module = sys.modules[self.MODULE]
        logger = module._logger
        if key in self.GLOBALS:
            setattr(module, self.GLOBALS[key], old)
        elif key == 'level':
            logger.setLevel(old)
        elif key == 'handlers':
            logger.handlers[:] = list(old) + [h for h in logger.handlers if self.runners(h)]
        elif key == 'filters':
            logger.filters[:] = list(old)
        else:
            setattr(logger, key, old)
        return True


class TensorFlowState(Aspect):
    """The default graph (the main thread's), eager or graph mode, TensorFlow 2's behaviour; once
    TensorFlow is imported."""

    keyword, title = 'tensorflow', 'TensorFlow'

    def snapshot(self):
        tf = sys.modules.get('tensorflow')
        if tf is None or not hasattr(tf, 'compat'):
            return {}
        state = {}
        if threading.current_thread() is threading.main_thread():
            state['default graph'] = tf.compat.v1.get_default_graph()
        context = sys.modules.get('tensorflow.python.eager.context')
        if context is not None:
            state['mode'] = 'eager' if context.default_execution_mode == context.EAGER_MODE else 'graph'
        tf2 = sys.modules.get('tensorflow.python.tf2')
        if tf2 is not None:
            state["TensorFlow 2's behaviour"] = 'enabled' if tf2.enabled() else 'disabled'
        return state

    def describe(self, key, old, new):
        if key == 'default graph':
            return ('the default graph is another one (a graph entered with as_default() and not exited, or '
                    'reset_default_graph()): {} (was {})'.format(_text(new), _text(old)))
        return '{}: {} (was {})'.format(key, new, old)

    def restore(self, key, old, new):
        tfv1 = sys.modules['tensorflow'].compat.v1
        if key == 'default graph':
            stack = getattr(sys.modules.get('tensorflow.python.framework.ops'), '_default_graph_stack', None)
            entered = getattr(stack, 'stack', None)      # the main thread's; the global default is under it
            while entered and tfv1.get_default_graph() is not old:
                entered.pop()
            return tfv1.get_default_graph() is old
        if key == 'mode' and old == 'graph':
            tfv1.disable_eager_execution()
            return True
        return False          # eager execution, or TensorFlow 2's behaviour, is set once a process has graphs


def _target_name(thread):
    target = getattr(thread, '_target', None)
    if target is not None:
        return '{}.{}'.format(getattr(target, '__module__', '?'),
                              getattr(target, '__qualname__', _text(target)))
    cls = type(thread)
    return '{}.{}.run'.format(cls.__module__, cls.__qualname__)


class Threads(Aspect):
    """Python threads; the stand-ins ``threading`` makes for threads it did not start (a C++
    thread that once called Python: TensorFlow's py_func, a gRPC callback) are not counted."""

    keyword, title, only_new = 'threads', 'thread', True

    def snapshot(self):
        return {t: None for t in threading.enumerate() if not isinstance(t, threading._DummyThread)}

    def needs_settling(self, new_keys, after):
        return bool(new_keys)

    def settle(self, new_keys, deadline):
        gc.collect()     # a thread pool nobody holds ends its threads when collected
        for thread in new_keys:
            thread.join(max(0.0, deadline - time.monotonic()))

    def names(self, key, value):
        return [key.name, _target_name(key)]

    def describe(self, key, old, new):
        frame = sys._current_frames().get(key.ident)
        where = ''
        if frame is not None:
            where = ', at {}:{} in {}'.format(frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name)
        return 'thread {!r} still running ({}{}{})'.format(
            key.name, _target_name(key), ', daemon' if key.daemon else '', where)


def _child_pids():
    """The pids of this process's children (zombies included), from /proc/self/task/*/children
    (each thread's), else psutil."""
    pids = set()
    try:
        for task in os.listdir('/proc/self/task'):
            try:
                with open('/proc/self/task/{}/children'.format(task)) as f:
                    pids.update(int(pid) for pid in f.read().split())
            except FileNotFoundError:
                if not os.path.exists('/proc/self/task/{}'.format(task)):
                    continue             # the thread ended meanwhile
                raise
    except OSError:
        import psutil
        return {p.pid for p in psutil.Process().children()}
    return pids


def _running_child(pid):
    """The psutil.Process of ``pid`` if it is still a running child of this process, else None."""
    import psutil
    try:
        proc = psutil.Process(pid)
        if proc.ppid() != os.getpid() or proc.status() in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD):
            return None
        return proc
    except psutil.Error:
        return None


def _command_line(pid):
    import psutil
    try:
        return ' '.join(psutil.Process(pid).cmdline()) or psutil.Process(pid).name()
    except psutil.Error:
        return '?'


class ChildProcesses(Aspect):
    keyword, title, only_new = 'children', 'child process', True

    def snapshot(self):
        return {pid: None for pid in _child_pids()}

    def remaining(self, keys):
        """The new children still running (a zombie has ended)."""
        return [pid for pid in keys if _running_child(pid) is not None]

    def needs_settling(self, new_keys, after):
        return bool(self.remaining(new_keys))

    def settle(self, new_keys, deadline):
        running = self.remaining(new_keys)
        while running and time.monotonic() < deadline:
            time.sleep(0.05)
            running = self.remaining(running)

    def names(self, key, value):
        return [_command_line(key)]

    def describe(self, key, old, new):
        return 'child process {} still running: {}'.format(key, _text(_command_line(key), 300))

    def restore(self, key, old, new):
        import psutil
        proc = _running_child(key)
        if proc is None:
            return True
        try:
            family = proc.children(recursive=True) + [proc]
        except psutil.Error:
            family = [proc]
        for member in family:
            try:
                member.kill()
            except psutil.Error:
                pass
        return True


def _socket_descriptions():
    """fd -> what the socket is (its protocol and addresses), from psutil."""
    import psutil
    found = {}
    try:
        connections = psutil.Process().net_connections(kind='all')
    except AttributeError:                         # psutil < 6
        connections = psutil.Process().connections(kind='all')
    except psutil.Error:
        return found
    for c in connections:
        kind = {1: 'TCP', 2: 'UDP'}.get(int(c.type), 'socket') if c.family != getattr(
            __import__('socket'), 'AF_UNIX') else 'Unix socket'
        local = ':'.join(map(str, c.laddr)) if isinstance(c.laddr, tuple) else c.laddr
        remote = ':'.join(map(str, c.raddr)) if isinstance(c.raddr, tuple) and c.raddr else c.raddr
        found[c.fd] = '{} {}{}{}'.format(kind, local or '(unnamed)', ' to ' + str(remote) if remote else '',
                                         ' ({})'.format(c.status) if c.status and c.status != 'NONE' else '')
    return found


class Sockets(Aspect):
    """Sockets among this process's file descriptors (any family: TCP, UDP, Unix)."""

    keyword, title, only_new = 'sockets', 'socket', True

    def snapshot(self):
        state = {}
        try:
            fds = os.listdir('/proc/self/fd')
        except OSError:
            return state
        for fd in fds:
            try:
                target = os.readlink('/proc/self/fd/' + fd)
            except OSError:
                continue
            if target.startswith('socket:'):
                state[(int(fd), target)] = None
        return state

    def needs_settling(self, new_keys, after):
        return bool(new_keys)

    def settle(self, new_keys, deadline):
        gc.collect()     # an unreachable socket object closes its descriptor when collected

    def names(self, key, value):
        return [self.describe(key, None, None)]

    def describe(self, key, old, new):
        fd, inode = key
        what = _socket_descriptions().get(fd, 'socket')
        return '{} still open (fd {}, {})'.format(what, fd, inode)


ASPECTS = (SignalHandlers(), Environment(), WorkingDirectory(), SysPath(), LibraryLogger(), TensorFlowState(),
           Threads(), ChildProcesses(), Sockets())
"""What the guard compares, each named by its ``may_leave`` keyword."""
KEYWORDS = {aspect.keyword: aspect for aspect in ASPECTS}


def snapshot():
    """{aspect keyword: {key: value}} of the process now."""
    return {aspect.keyword: aspect.snapshot() for aspect in ASPECTS}


def _differences(aspect, old, new):
    """[(key, old value, new value)] between two snapshots of ``aspect``."""
    if not old and not new:
        return []
    if not old and aspect.keyword in ('logger', 'tensorflow'):
        return []            # imported meanwhile: the first import is no change
    if aspect.only_new:
        return [(key, _MISSING, value) for key, value in new.items() if key not in old]
    found = []
    for key in list(old) + [k for k in new if k not in old]:
        before, after = old.get(key, _MISSING), new.get(key, _MISSING)
        if before is not after and before != after:
            found.append((key, before, after))
    return found


def changes_between(before, allowed=None, settle_timeout=None):
    """[(aspect, key, old, new, allowed)]: what differs from the snapshot ``before`` once what is
    ending had ``settle_timeout`` seconds (:data:`SETTLE_TIMEOUT`) to end; ``allowed`` says whether
    the change is one that ``allowed`` (of :func:`allowances`) permits (it is not waited for)."""
    allowed = allowed or {}

    def compare(after):
        changes = []
        for aspect in ASPECTS:
            differences = _differences(aspect, before[aspect.keyword], after[aspect.keyword])
            changes += [(aspect, key, old, new, is_allowed(aspect, key, new, allowed))
                        for key, old, new in differences]
        return changes

    after = snapshot()
    changes = compare(after)
    unsettled = []
    for aspect in ASPECTS:
        keys = [key for a, key, _, _, ok in changes if a is aspect and not ok]
        if keys and aspect.needs_settling(keys, after[aspect.keyword]):
            unsettled.append((aspect, keys))
    if unsettled:
        deadline = time.monotonic() + (SETTLE_TIMEOUT if settle_timeout is None else settle_timeout)
        for aspect, keys in unsettled:
            aspect.settle(keys, deadline)
        changes = compare(snapshot())
    remaining = {aspect: aspect.remaining([key for a, key, _, _, _ in changes if a is aspect])
                 for aspect in ASPECTS}
    return [change for change in changes if change[1] in remaining[change[0]]]


# ----- what may change -----------------------------------------------------------------------

def allowances(node):
    """{aspect keyword: [True or a pattern...]}: what the ``may_leave`` marks on ``node`` (and its
    parents) allow."""
    allowed = {}
    for mark in node.iter_markers(MARKER):
        if mark.args or not mark.kwargs.get('reason'):
            raise ValueError(
                "{}: @pytest.mark.{}(reason='...', <aspect>=[names] or True): name what it may leave and why "
                "(tests/helpers/process_guard.py)".format(node.nodeid, MARKER))
        for keyword, value in mark.kwargs.items():
            if keyword == 'reason':
                continue
            if keyword not in KEYWORDS:
                raise ValueError("{}: @pytest.mark.{}({}=...): no such aspect; the aspects are {}".format(
                    node.nodeid, MARKER, keyword, ', '.join(KEYWORDS)))
            if value is True:
                allowed.setdefault(keyword, []).append(True)
            else:
                allowed.setdefault(keyword, []).extend([value] if isinstance(value, str) else list(value))
    for keyword, pattern, _ in NOT_A_LEAK:
        allowed.setdefault(keyword, []).append(pattern)
    return allowed


def is_allowed(aspect, key, value, allowed):
    patterns = allowed.get(aspect.keyword, ())
    if not patterns:
        return False
    if True in patterns:
        return True
    names = aspect.names(key, value)
    return any(fnmatch.fnmatchcase(name, pattern) for name in names for pattern in patterns)


# ----- the checks around tests, modules and the session ---------------------------------------

_OPEN = []
"""The baselines of the scopes the running test is in, outermost first (each a snapshot dict)."""


def _guard(request, what):
    try:
        allowed, refused = allowances(request.node), None
    except ValueError as err:
        refused = str(err)
    if refused:
        pytest.fail(refused, pytrace=False)
    before = snapshot()
    _OPEN.append(before)
    try:
        yield
    finally:
        del _OPEN[next(i for i, baseline in enumerate(_OPEN) if baseline is before)]
    leaks, kept = [], []
    for aspect, key, old, new, ok in changes_between(before, allowed):
        if ok:
            kept.append((aspect, key, new))
            continue
        said = aspect.describe(key, old, new)       # before it is undone (a killed process has no command)
        try:
            undone = aspect.restore(key, old, new)
        except Exception as err:     # the report says so; the leak is what fails
            leaks.append('{} (could not undo it: {!r})'.format(said, err))
            kept.append((aspect, key, new))
            continue
        leaks.append(said + ('' if undone else ' (not undone)'))
        if not undone:
            kept.append((aspect, key, new))
    for baseline in _OPEN:        # the scopes around know it already: it is reported or allowed here
        for aspect, key, new in kept:
            if new is _MISSING:
                baseline[aspect.keyword].pop(key, None)
            else:
                baseline[aspect.keyword][key] = new
    if leaks:
        pytest.fail("{} left the process changed (tests/README.md, 'What a test leaves behind'):\n  {}\n"
                    "Undo it in the test or its fixture (monkeypatch, a finally, a fixture's teardown), or, "
                    "if the change is the point, mark it @pytest.mark.{}(<aspect>=[...], reason='...') "
                    "naming what it leaves.".format(what, '\n  '.join(leaks), MARKER), pytrace=False)


@pytest.fixture(scope='session', autouse=True)
def _process_guard_session(request):
    """The session's fixtures restore at their teardown what their set-up changed."""
    yield from _guard(request, "the session's fixtures")


@pytest.fixture(scope='module', autouse=True)
def _process_guard_module(request):
    """A module's fixtures restore at their teardown what their set-up changed."""
    yield from _guard(request, 'the module fixtures of {}'.format(request.node.nodeid))


@pytest.fixture(autouse=True)
def _process_guard(request):
    """The test (with its own fixtures) leaves the process as it found it."""
    yield from _guard(request, request.node.nodeid)


def pytest_configure(config):
    config.addinivalue_line(
        'markers', "{}(reason=..., <aspect>=[names] or True): what a test may leave changed in the process "
                   "(aspects: {}; tests/helpers/process_guard.py)".format(MARKER, ', '.join(KEYWORDS)))
