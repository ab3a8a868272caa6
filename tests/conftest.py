"""Shared test set-up: quiet TensorFlow, graph mode, a fresh graph and logger state for every
test, the fixtures several modules use, and the run's two tiers (tests/README.md): the ``quick``
marker and the ``alone`` tests, which no other test runs beside under pytest-xdist. Shared
non-fixture helpers are in tests/helpers/; two of its modules are plugins of every run: the process
guard (helpers/process_guard.py: a test leaves the process as it found it) and the run's order
(helpers/run_order.py: the random order's seed, and how to run a failing worker's files again)."""

import fcntl
import os
import queue
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
# MLflow's usage telemetry off for the whole run (no test sends anything out; with it on, MLflow
# sets and unsets a variable of its own mid-test, which the process guard would count)
os.environ.setdefault('MLFLOW_DISABLE_TELEMETRY', 'true')

# `from helpers import ...` in the test modules (tests/helpers/), whatever pytest's import mode.
_TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
# Last on the path: its folders (utils/, models/, train/...) are packages of the suite
# (tests.utils...), which must not hide a module of the same name from anyone.
if _TESTS_DIR not in sys.path:
    sys.path.append(_TESTS_DIR)

import pytest  # noqa: E402

from helpers.logs import capture_logs  # noqa: E402

# pytester: the process guard's own tests run pytest on files that leak (library/test_process_guard.py).
pytest_plugins = ('pytester', 'helpers.process_guard', 'helpers.run_order')


CI_VARIABLE = 'TENSORPACK_LITE_CI'
"""Set by .ci/run: a test that skips there fails instead, unless its reason is a fact of the
machine that .ci/run cannot change (:data:`MACHINE_FACTS`): .ci/run installs what every other
test needs (iproute2, Slurm, MPI, slirp4netns), so a skip would mean it silently did not run."""

MACHINE_FACTS = (
    'sch_netem',                     # a kernel module (the delay/loss tests, or their opposite)
    'a machine without a GPU',       # the GPU-less path tested on a machine that has one
    'its bug is fixed',              # this TensorFlow no longer has the bug a test meets
)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.skipped and isinstance(item, SkippedAtCollection):
        report.longrepr = item.skip_report          # where the module skipped, not this file
    if not (report.skipped and os.environ.get(CI_VARIABLE)) or hasattr(report, 'wasxfail'):
        return
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    if any(fact in reason for fact in MACHINE_FACTS):
        return
    report.outcome = 'failed'
    report.longrepr = ("skipped on CI ({}=1), where it must run: {}. .ci/run installs what this test "
                       "needs; see tests/conftest.py's MACHINE_FACTS for the skips allowed there.".format(
                           CI_VARIABLE, reason))


class SkippedAtCollection(pytest.Item):
    """On CI, stands for a module (or directory) that skipped while being collected (a module-level
    ``pytest.importorskip``): it skips again when run, so the hook above judges that skip as any other."""

    def __init__(self, *, skip_report, **kwargs):
        super().__init__(**kwargs)
        self.skip_report = skip_report      # (path, line, 'Skipped: reason') as collection reported it

    def runtest(self):
        message = self.skip_report[2]
        pytest.skip(message[len('Skipped: '):] if message.startswith('Skipped: ') else message)

    def reportinfo(self):
        return self.skip_report[0], self.skip_report[1] - 1, self.nodeid


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    """A skip at collection is reported before any test runs, where the hook above never sees it:
    on CI the collector yields one :class:`SkippedAtCollection` instead, which skips when run."""
    outcome = yield
    report = outcome.get_result()
    if report.skipped and os.environ.get(CI_VARIABLE) and isinstance(report.longrepr, tuple):
        item = SkippedAtCollection.from_parent(collector, name='skipped at collection',
                                               skip_report=report.longrepr)
        report.outcome, report.longrepr, report.result = 'passed', None, [item]


def _trust_a_public_address():
    """On a machine with a public address, a task's server started on this machine's network
    is refused unless the network is declared trusted (docs/security.md). The tests start such
    servers on purpose; distributed/test_isolation.py checks the refusal with the declaration removed."""
    from tensorpack_lite.cluster import exposure
    public = [a for a in exposure.interface_addresses() if exposure.is_public(a)]
    if public:
        os.environ[exposure.TRUSTED_NETWORK_VARIABLE] = '1'
        print("conftest: this machine has the public address(es) {}: {}=1 for the tests' own "
              "servers".format(', '.join(public), exposure.TRUSTED_NETWORK_VARIABLE))


ALONE_PATHS = ('distributed' + os.sep, os.path.join('train', 'test_config_resume_midepoch.py'),
               os.path.join('cluster', 'test_ray.py'), os.path.join('cluster', 'test_netns.py'),
               os.path.join('checkpoint', 'test_commit_torture.py'))
"""Tests (relative to tests/) that run alone: real multi-process jobs (several TensorFlow servers,
MPI ranks, a Slurm, a Ray cluster, hosts in network namespaces) and the strace-driven torture
test. Each holds the whole machine's CPU for seconds with processes that watch each other's
heartbeats; beside other tests, a 2-core machine would only make them slower. Any other test
can say it with ``@pytest.mark.alone``."""


def pytest_collection_modifyitems(config, items):
    for item in items:
        if os.path.relpath(str(item.fspath), _TESTS_DIR).startswith(ALONE_PATHS):
            item.add_marker(pytest.mark.alone)


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item, nextitem):
    """Under pytest-xdist, a test marked ``alone`` runs while no other worker runs a test: every
    test holds a shared lock on the run's 'machine' file, an ``alone`` test an exclusive one. A
    'turnstile' lock taken on the way in keeps an ``alone`` test that waits from being overtaken by
    the other workers' next tests. Without xdist, nothing to do; nor in a pytest that a test starts
    (it inherits the worker's environment, not its place in the run: taking the locks there
    could wait for ever on the test that started it)."""
    run = getattr(item.config, 'workerinput', {}).get('testrunuid')
    if not run:
        yield
        return
    directory = os.path.join(tempfile.gettempdir(), 'tensorpack_lite-tests-{}'.format(run))
    os.makedirs(directory, exist_ok=True)
    alone = item.get_closest_marker('alone') is not None
    with open(os.path.join(directory, 'turnstile'), 'a') as turnstile, \
            open(os.path.join(directory, 'machine'), 'a') as machine:
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        try:
            fcntl.flock(machine, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        finally:
            fcntl.flock(turnstile, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(machine, fcntl.LOCK_UN)


def pytest_configure(config):
    """The tests build graphs as tensorpack code does, some while they are collected (e.g. in
    parametrize lists): graph mode for the whole run, as a trainer would switch it on.
    (Importing tensorpack_lite alone leaves TensorFlow's mode alone; library/test_architecture.py
    checks that in a fresh interpreter.)"""
    from tensorpack_lite.compat import enable_graph_mode
    enable_graph_mode()
    _trust_a_public_address()
    _start_fsspec_io()
    _end_the_run_when_a_worker_dies(config)


def _end_the_run_when_a_worker_dies(config):
    """Under pytest-xdist, a worker that dies (pytest-timeout's 10 minutes end it with
    ``os._exit``, as a crash does) ends the run, named in its summary: with ``--dist loadfile``,
    pytest-xdist 3.8's replacement worker can wait for work that never comes, and the run then
    hangs until CI kills it, summary and culprit lost. ``--max-worker-restart N`` still wins.
    (Runs before pytest-xdist's own ``pytest_configure``, which is ``trylast`` and reads it.)"""
    if getattr(config.option, 'maxworkerrestart', 'no xdist') is None:
        config.option.maxworkerrestart = '0'


def _start_fsspec_io():
    """fsspec runs the I/O of its asynchronous filesystems (s3fs, gcsfs) on one event loop in a
    thread of its own, started on first use and kept for the process, with the loop's self-pipe
    and a thread of its default executor (name lookups): started here, before any test, so that
    the process guard does not charge them to the first test that uses a bucket."""
    try:
        import fsspec.asyn
    except ImportError:
        return
    import asyncio

    async def use_the_executor():
        await asyncio.get_running_loop().run_in_executor(None, int)
    fsspec.asyn.sync(fsspec.asyn.get_loop(), use_the_executor)


_MACHINE_FACTS_SEEN = {}


@pytest.fixture
def say_machine_fact(request):
    """``say(fact)``: a test whose path depends on this machine (its CPU's 16-bit support, ...)
    names the path it took; the end of the run lists each fact with the tests that saw it."""
    def say(fact):
        _MACHINE_FACTS_SEEN.setdefault(fact, []).append(request.node.nodeid)
    return say


def pytest_terminal_summary(terminalreporter):
    for fact, tests in sorted(_MACHINE_FACTS_SEEN.items()):
        terminalreporter.write_line("[this machine] {} ({})".format(fact, ', '.join(tests)))


@pytest.fixture(autouse=True)
def _fresh_graph_and_logger():
    """Every test starts in an empty default graph and without a logger directory."""
    from tensorpack_lite.compat import tfv1
    from tensorpack_lite.utils import logger
    with tfv1.Graph().as_default():
        yield
    logger.unset_logger_dir()


@pytest.fixture
def logdir(tmp_path):
    """A fresh logger directory for the test, detached afterwards."""
    from tensorpack_lite.utils import logger
    path = str(tmp_path / 'train_log')
    logger.set_logger_dir(path, action='d')
    return path


@pytest.fixture
def log_records():
    """Everything the library's logger logs during the test: a ``helpers.LogRecords`` (a list
    of logging.LogRecord with ``messages(level)`` and ``messages_at(level)``)."""
    with capture_logs() as records:
        yield records


@pytest.fixture
def fixed_seed(monkeypatch):
    """``fixed_seed(n)`` seeds every ``get_rng()`` made afterwards (``fix_rng_seed``); the
    generators go back to unseeded after the test."""
    from tensorpack_lite.utils import utils
    monkeypatch.setattr(utils, '_RNG_SEED', utils._RNG_SEED)
    return utils.fix_rng_seed


@pytest.fixture(scope='module')
def digits():
    """The 8x8 digits scikit-learn ships: images (n, 64) float32 in [0, 1], labels (n,) int32."""
    from sklearn.datasets import load_digits
    data = load_digits()
    return (data.data / 16.0).astype('float32'), data.target.astype('int32')


# ----- the Horovod environment ------------------------------------------------------------------
# Building it compiles horovod (minutes on a busy 2-core machine), so it happens once, after
# collection and before the first test (outside every per-test time limit), with its progress
# shown; a fixture then hands its Python to the tests that need it.

_HOROVOD_BUILD_TIMEOUT = 3600
_HOROVOD_HEARTBEAT = 30


def _build_horovod_env(say):
    """Run .ci/horovod_env.sh (build or reuse), showing its progress through ``say``.

    Returns ``(python, None)``, or ``(None, error message)``. The build runs in its own process
    group, ended as a whole if pytest is interrupted or the build outlives its time limit.
    """
    script = os.path.join(os.path.dirname(_TESTS_DIR), '.ci', 'horovod_env.sh')
    proc = subprocess.Popen(['bash', script], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    lines = queue.Queue()   # the script's output lines, then None at its end

    def read_output():
        for text in proc.stdout:
            lines.put(text)
        lines.put(None)

    threading.Thread(target=read_output, daemon=True).start()
    output, start, last_said = [], time.monotonic(), time.monotonic()
    try:
        while True:
            try:
                line = lines.get(timeout=1)
            except queue.Empty:
                line = ''
            if line is None:
                break
            now = time.monotonic()
            if line:
                output.append(line)
                say(line.rstrip())
                last_said = now
            elif now - last_said >= _HOROVOD_HEARTBEAT:
                say('[horovod_env] still working: {:.0f} s so far'.format(now - start))
                last_said = now
            if now - start > _HOROVOD_BUILD_TIMEOUT:
                return None, 'bash {} took more than {} s'.format(script, _HOROVOD_BUILD_TIMEOUT)
        code = proc.wait()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    found = re.findall(r'^HOROVOD_PYTHON=(.+)$', ''.join(output), re.M)
    if code != 0 or not found:
        return None, 'bash {} failed (exit {}):\n{}'.format(script, code, ''.join(output))
    return found[-1], None


DOCS_SITE_VARIABLE = 'TENSORPACK_LITE_DOCS_SITE'
"""A documentation site already built (.ci/run builds it with the README's docs command)."""


def _build_docs_site(say):
    """Build the documentation site once for the tests that open it: (its path, None) or
    (None, why not). The build takes about half a minute; its progress is shown. Under xdist the
    workers take turns (a lock beside the site): the first builds, the others find it up to date."""
    repo = os.path.dirname(_TESTS_DIR)
    out = os.path.join(os.path.expanduser('~'), '.cache', 'tensorpack_lite', 'docs-site')
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out + '.lock', 'a') as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _sphinx_build(repo, out, say)


def _sphinx_build(repo, out, say):
    command = [sys.executable, '-m', 'sphinx', '-W', '--keep-going', '-n', '-b', 'html',
               os.path.join(repo, 'docs'), out]
    say('[docs_site] building the documentation site into {} (about 30 s)'.format(out))
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines, last_said = [], time.time()
    for line in proc.stdout:
        lines.append(line)
        if time.time() - last_said > 10:
            say('[docs_site] ' + line.strip()[:100])
            last_said = time.time()
    if proc.wait() != 0:
        return None, 'the documentation build failed ({}):\n{}'.format(' '.join(command),
                                                                       ''.join(lines[-60:]))
    return out, None


def _selected_tests_use(session, fixture):
    """Whether a test this run will run asks for ``fixture`` (never in --collect-only)."""
    return not session.config.option.collectonly and \
        any(fixture in getattr(item, 'fixturenames', ()) for item in session.items)


def pytest_collection_finish(session):
    """Make the documentation site and the Horovod environment ready before the first test, if a
    selected test needs them and the environment does not name them already."""
    reporter = session.config.pluginmanager.get_plugin('terminalreporter')
    say = reporter.write_line if reporter is not None else print
    session.config.docs_site = (os.environ.get(DOCS_SITE_VARIABLE), None)
    if not session.config.docs_site[0] and _selected_tests_use(session, 'docs_site'):
        session.config.docs_site = _build_docs_site(say)
    session.config.horovod_env = (os.environ.get('TENSORPACK_LITE_HOROVOD_PYTHON'), None)
    if not session.config.horovod_env[0] and _selected_tests_use(session, 'horovod_python'):
        say('[horovod_env] making the Horovod environment ready (the first build on a machine takes '
            '5-15 minutes)')
        session.config.horovod_env = _build_horovod_env(say)


@pytest.fixture(scope='session')
def horovod_python(pytestconfig):
    """The Python of the Horovod environment: $TENSORPACK_LITE_HOROVOD_PYTHON, else the one
    .ci/horovod_env.sh built (or reused) before the first test."""
    python, error = getattr(pytestconfig, 'horovod_env', (None, 'the Horovod environment was not built'))
    if error:
        pytest.fail(error)
    return python


@pytest.fixture(scope='session')
def docs_site(pytestconfig):
    """The built documentation site's directory: $TENSORPACK_LITE_DOCS_SITE, else the one built
    before the first test."""
    path, error = getattr(pytestconfig, 'docs_site', (None, 'the documentation site was not built'))
    if error:
        pytest.fail(error)
    return path
