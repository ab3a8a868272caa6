"""CI runs what the README tells a new user to run: the quick start's commands, verbatim."""

import configparser
import os
import re
import subprocess
import sys

import pytest
from helpers.paths import REPO_DIR
from helpers.processes import subprocess_env

REPO = REPO_DIR


def quick_start_commands():
    """The command lines of the README's Quick start (bash blocks, comments left out)."""
    readme = open(os.path.join(REPO, 'README.md'), encoding='utf-8').read()
    section = readme.split('## Quick start', 1)[1].split('\n## ', 1)[0]
    blocks = re.findall(r'```bash\n(.*?)```', section, re.S)
    return [line for block in blocks for line in block.splitlines() if line and not line.startswith('#')]


def readme_command(which):
    out = subprocess.run(['bash', os.path.join(REPO, '.ci', 'readme_command.sh'), which],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout.rstrip('\n')


FULL_RUN = 'python -m pytest -q -n auto --dist loadfile tests'
"""The end of the README's test command: the whole suite, in parallel where tests allow it."""


@pytest.mark.quick
def test_the_quick_start_has_its_three_commands_and_the_script_finds_each():
    """The example, the whole suite, and the quick tier beside it (the same install, ``-m quick``)."""
    commands = quick_start_commands()
    assert len(commands) == 3, commands
    assert readme_command('example') == commands[0]
    assert readme_command('test') == commands[1]
    assert commands[1].endswith(FULL_RUN), commands[1]
    assert readme_command('quick') == commands[2]
    assert commands[2] == commands[1][:-len(' tests')] + ' -m quick tests'


def test_ci_runs_the_quick_tier_first():
    script = open(os.path.join(REPO, '.ci', 'run'), encoding='utf-8').read()
    code = [line for line in script.splitlines() if not line.lstrip().startswith('#')]
    quick = code.index('(cd "$REPO" && eval "$QUICK_COMMAND")')
    assert quick < code.index('(cd "$REPO" && bash .ci/without_extras.sh bash -c "$DOCS_COMMAND")')
    assert quick < code.index('(cd "$REPO" && eval "$TEST_COMMAND")')


def test_ci_builds_the_docs_with_the_readmes_command_and_warnings_fail_it():
    command = readme_command('docs')
    assert command.startswith('python -m pip install -q -e ".[docs]"') and ' -W ' in command, command
    assert 'docs docs/_build/html' in command
    script = open(os.path.join(REPO, '.ci', 'run'), encoding='utf-8').read()
    assert 'readme_command.sh docs' in script
    assert 'TENSORPACK_LITE_DOCS_SITE="$REPO/docs/_build/html"' in script


def test_an_unknown_command_name_is_refused():
    out = subprocess.run(['bash', os.path.join(REPO, '.ci', 'readme_command.sh'), 'deploy'],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and 'usage' in out.stderr


def test_ci_runs_the_readme_test_command_in_a_fresh_venv():
    script = open(os.path.join(REPO, '.ci', 'run'), encoding='utf-8').read()
    code = [line for line in script.splitlines() if not line.lstrip().startswith('#')]
    assert any('readme_command.sh test' in line for line in code)
    assert any(re.search(r'-m venv "\$VENV_PARENT/venv"', line) for line in code)
    assert any('eval "$TEST_COMMAND"' in line for line in code)
    assert not any('--system-site-packages' in line for line in code)


SKIPPING = '''
import pytest


def test_needs_a_tool_ci_installs():
    pytest.skip("'ip' not found: install iproute2")


def test_needs_a_kernel_module():
    pytest.skip("this kernel has no sch_netem, so links get a rate but no delay or loss")
'''


def test_on_ci_a_skip_fails_unless_it_is_a_fact_of_the_machine(tmp_path):
    """With TENSORPACK_LITE_CI=1 (.ci/run exports it), tests/conftest.py turns a skip into a
    failure naming its reason, except for the machine facts it lists (elsewhere a skip stays
    one: every run outside CI shows that)."""
    (tmp_path / 'test_skipping.py').write_text(SKIPPING)
    command = [sys.executable, '-m', 'pytest', '-q', '-p', 'no:cacheprovider', '-p', 'conftest', '-rs',
               str(tmp_path / 'test_skipping.py')]
    env = subprocess_env(TENSORPACK_LITE_CI='1')
    run = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=str(tmp_path), env=env)
    assert run.returncode == 1 and '1 failed, 1 skipped' in run.stdout, run.stdout + run.stderr
    assert ("skipped on CI (TENSORPACK_LITE_CI=1), where it must run: Skipped: 'ip' not found: install "
            "iproute2") in run.stdout
    assert 'SKIPPED [1] test_skipping.py:10: this kernel has no sch_netem' in run.stdout


SKIPPING_AT_COLLECTION = {
    'test_tracker.py': ("import pytest\n\npytest.importorskip('tensorpack_lite_no_such_tracker')\n\n\n"
                        "def test_never_collected():\n    pass\n"),
    'test_netem.py': ("import pytest\n\n"
                      "pytest.skip('this kernel has no sch_netem', allow_module_level=True)\n"),
    'test_other.py': "def test_runs():\n    pass\n",
}


def run_pytest_with_conftest(tmp_path, ci):
    for name, text in SKIPPING_AT_COLLECTION.items():
        (tmp_path / name).write_text(text)
    command = [sys.executable, '-m', 'pytest', '-q', '-p', 'no:cacheprovider', '-p', 'conftest', '-rfs', '.']
    env = subprocess_env(TENSORPACK_LITE_CI='1' if ci else None)
    return subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=str(tmp_path), env=env)


def test_on_ci_a_module_that_skips_at_collection_fails_unless_it_is_a_fact_of_the_machine(tmp_path):
    """A module-level importorskip is reported while collecting, before the hook above could see
    it: on CI, conftest turns the module into one test that skips again, judged as any skip."""
    run = run_pytest_with_conftest(tmp_path, ci=True)
    out = run.stdout + run.stderr
    assert run.returncode == 1 and '1 failed, 1 passed, 1 skipped' in run.stdout, out
    assert 'FAILED test_tracker.py::skipped at collection' in run.stdout, out
    assert ("skipped on CI (TENSORPACK_LITE_CI=1), where it must run: Skipped: could not import "
            "'tensorpack_lite_no_such_tracker'") in run.stdout, out
    assert 'SKIPPED [1] test_netem.py:3: this kernel has no sch_netem' in run.stdout, out


def test_outside_ci_a_module_that_skips_at_collection_is_one_skip(tmp_path):
    run = run_pytest_with_conftest(tmp_path, ci=False)
    out = run.stdout + run.stderr
    assert run.returncode == 0 and '1 passed, 2 skipped' in run.stdout, out
    assert ("SKIPPED [1] test_tracker.py:3: could not import 'tensorpack_lite_no_such_tracker'"
            in run.stdout), out


def test_without_extras_hides_dot_and_chromium_from_the_path_and_keeps_the_rest(tmp_path):
    bin_dir = tmp_path / 'bin'
    bin_dir.mkdir()
    for name in ('dot', 'chromium', 'chromedriver', 'a-tool-of-the-same-directory'):
        (bin_dir / name).write_text('#!/bin/sh\necho "$0"\n')
        (bin_dir / name).chmod(0o755)
    env = dict(os.environ, PATH=str(bin_dir) + os.pathsep + os.environ['PATH'])
    show = ('for p in dot chromium chromedriver a-tool-of-the-same-directory; do '
            'echo "$p=$(command -v $p)"; done')
    hide = ['bash', os.path.join(REPO, '.ci', 'without_extras.sh')]
    run = subprocess.run(hide + ['bash', '-c', show], capture_output=True, text=True, timeout=120, env=env)
    assert run.returncode == 0, run.stderr
    found = dict(line.split('=', 1) for line in run.stdout.splitlines())
    assert found['dot'] == found['chromium'] == found['chromedriver'] == '', found
    tool = found['a-tool-of-the-same-directory']
    assert tool and not tool.startswith(str(bin_dir)) and not os.path.exists(tool), tool  # a link, gone
    failing = subprocess.run(hide + ['bash', '-c', 'exit 3'], capture_output=True, text=True, timeout=120,
                             env=env)
    assert failing.returncode == 3


def test_ci_runs_the_docs_command_and_the_tests_using_the_extras_with_the_extras_hidden():
    """The README's docs command before the main run; after it, the pytest part of its test command
    on the tests that use dot, chromium or chromedriver, outside CI mode, the site built by them."""
    script = open(os.path.join(REPO, '.ci', 'run'), encoding='utf-8').read()
    code = [line for line in script.splitlines() if not line.lstrip().startswith('#')]
    docs = code.index('(cd "$REPO" && bash .ci/without_extras.sh bash -c "$DOCS_COMMAND")')
    main = code.index('(cd "$REPO" && eval "$TEST_COMMAND")')
    pytest_part = code.index('EXTRAS_SLICE="${TEST_COMMAND##*&& }"')
    files = code.index('EXTRAS_SLICE="${EXTRAS_SLICE% tests} tests/docs/test_site.py '
                       'tests/docs/test_diagrams.py"')
    run_slice = code.index('(cd "$REPO" && env -u TENSORPACK_LITE_CI -u TENSORPACK_LITE_DOCS_SITE '
                           'bash .ci/without_extras.sh bash -c "$EXTRAS_SLICE")')
    assert docs < main < pytest_part < files < run_slice
    assert readme_command('test').split('&& ')[-1] == FULL_RUN


def test_a_worker_that_dies_ends_the_parallel_run_with_its_test_named(tmp_path):
    """pytest-timeout ends a hung test with its worker (os._exit), as a crash does; with
    ``--dist loadfile`` the worker pytest-xdist 3.8 starts instead can wait for work for ever.
    conftest makes the first dead worker end the run, the test it ran named."""
    (tmp_path / 'test_0_dies.py').write_text("import os\n\n\ndef test_dies():\n    os._exit(1)\n")
    for k in range(1, 7):        # work left for a worker that would replace it
        (tmp_path / 'test_{}.py'.format(k)).write_text("def test_passes():\n    pass\n")
    command = [sys.executable, '-m', 'pytest', '-p', 'no:cacheprovider', '-p', 'no:randomly',   # no -q:
               '-p', 'conftest', '-n', '2', '--dist', 'loadfile', '.']       # pytest-xdist's lines shown
    run = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=str(tmp_path),
                         env=subprocess_env())      # TimeoutExpired: the run hung (it takes 10 s)
    out = run.stdout + run.stderr
    assert run.returncode == 1, out
    assert "crashed while running 'test_0_dies.py::test_dies'" in run.stdout, out
    assert re.search(r'worker gw\d crashed and worker restarting disabled', run.stdout), out
    assert 'replacing crashed worker' not in out


def test_a_hung_tests_stacks_are_printed_before_pytest_timeout_ends_its_worker():
    """Under pytest-xdist, pytest-timeout prints to the worker's stdout, which goes nowhere;
    faulthandler prints every thread's stack to stderr before that timeout."""
    config = configparser.ConfigParser()
    config.read(os.path.join(REPO, 'tox.ini'))
    timeout, dump = config.getint('pytest', 'timeout'), config.getint('pytest', 'faulthandler_timeout')
    assert config.get('pytest', 'timeout_method') == 'thread'
    assert 0 < timeout - dump <= 30, (timeout, dump)
