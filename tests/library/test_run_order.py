"""The run's order (tests/helpers/run_order.py; tests/README.md, "Running it"): a run in a random
order says its seed, and after a failure prints, for the worker that failed, the command that runs
the files that worker ran again in the same order in one process; that command does."""

import re

import pytest

from helpers.paths import TESTS_DIR

pytest.importorskip('pytest_randomly', reason="pytest-randomly is not installed: pip install -e '.[test]'")

SEED = 20251
FILES = {'test_{}'.format(name): 'def test_one():\n    pass\n\n\ndef test_two():\n    pass\n'
         for name in ('apple', 'birch', 'cedar', 'daisy', 'elder', 'fjord')}
FILES['test_failing'] = 'def test_one():\n    pass\n\n\ndef test_fails():\n    assert False\n'


def ran(output):
    """[(worker, test id)] in the order the -v lines of a run report them."""
    return re.findall(r'^\[(gw\d+)\] \[ *\d+%\] (?:PASSED|FAILED) (\S+)', output, re.M) or \
        [(None, nodeid) for nodeid in re.findall(r'^(\S+::\S+) (?:PASSED|FAILED)', output, re.M)]


def test_a_failing_run_says_its_seed_and_how_to_run_its_workers_files_again_in_their_order(
        pytester, monkeypatch):
    monkeypatch.setenv('PYTHONPATH', TESTS_DIR)
    pytester.makepyfile(**FILES)
    options = ('-p', 'helpers.run_order', '-p', 'randomly', '-p', 'no:cacheprovider',
               '--randomly-seed={}'.format(SEED))
    result = pytester.runpytest_subprocess(*options, '-v', '-n', '2', '--dist', 'loadfile')
    result.assert_outcomes(passed=13, failed=1)
    output = result.stdout.str()
    assert '[order] random order, --randomly-seed={}'.format(SEED) in output
    order = ran(output)
    [(worker, _)] = [(w, test) for w, test in order if test.endswith('::test_fails')]
    files = []
    for w, test in order:
        path = test.split('::')[0]
        if w == worker and path not in files:
            files.append(path)
    files = files[:files.index('test_failing.py') + 1]
    command = 'python -m pytest -q -p randomly -p no:cacheprovider --randomly-seed={} {}'.format(
        SEED, ' '.join(files))
    assert '[order] worker {} ran {} file(s) up to its last failure'.format(worker, len(files)) in output
    assert '    ' + command in output.splitlines()

    again = pytester.runpytest_subprocess(*command.split()[3:], '-v', '-v')    # -q -v -v: a line per test
    assert [test for _, test in ran(again.stdout.str())] == [
        test for w, test in order if w == worker and test.split('::')[0] in files]
