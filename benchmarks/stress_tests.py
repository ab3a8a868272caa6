r"""Run the tests several times while other processes keep every CPU core busy, to find flaky tests.

A test that passes on an idle machine but fails when the cores are shared (a time bound, a sleep
racing with a thread, a process checked without waiting for it) is a bug in the test. This
script shows them: it starts ``--burners`` CPU-burning processes (default: one per core) at
normal priority, then runs pytest ``--runs`` times on the given paths and options (default the
whole ``tests/``). For each run it prints pytest's summary line, the node ids that failed or
errored, and the wall time; it exits with 1 when any run failed or timed out.

Every pytest run is bounded by ``--timeout`` seconds (then its whole process group is killed and
the run counts as failed). The burners and a running pytest live in their own process groups,
killed when the script ends, also on Ctrl-C or SIGTERM; a burner also stops by itself when this
script is gone. Each run's full output is kept in ``--log-dir`` (a new temporary directory by
default), named in the report.

Run (from the repository root; pytest options go after ``--``)::

    python benchmarks/stress_tests.py --runs 3 tests/utils/test_utils.py \
        tests/input_source/test_input_source.py
    python benchmarks/stress_tests.py --burners 4 -- tests/utils/test_logger.py -k timer
"""

import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

__all__ = ['BurnerGroup', 'PytestRun', 'run_pytest', 'main']

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Spins while its parent (this script, pid in argv[1]) lives, so a burner never outlives the stress run.
_BURN_CODE = """
import os, sys
while os.getppid() == int(sys.argv[1]):
    for _ in range(1000000):
        pass
"""

# pytest's final line, e.g. "2 failed, 30 passed in 12.34s" (with -q) or "==== 30 passed in 9.1s ====".
_SUMMARY_RE = re.compile(r'^=*\s*((?:\d+ \w+|no tests ran)\b.* in [\d.]+s\b.*?)\s*=*$')
_FAILURE_RE = re.compile(r'^(?:FAILED|ERROR) (\S+)')


def _kill_group(pgid):
    """SIGKILL a whole process group; no error if it is already gone."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


class BurnerGroup:
    """``count`` processes that each keep one core busy, all in one process group.

    Use as a context manager: the group is killed on exit, whatever ends the block.
    """

    def __init__(self, count):
        if count < 0:
            raise ValueError('BurnerGroup: the number of burners must be >= 0, got {}'.format(count))
        self.count = count
        self.procs = []

    def __enter__(self):
        try:
            self._start()
        except BaseException:
            self.__exit__()
            raise
        return self

    def _start(self):
        for _ in range(self.count):
            group = self.procs[0].pid if self.procs else 0   # the first one leads a new group
            self.procs.append(subprocess.Popen([sys.executable, '-c', _BURN_CODE, str(os.getpid())],
                                               stdin=subprocess.DEVNULL, process_group=group))

    def __exit__(self, *exc):
        if self.procs:
            _kill_group(self.procs[0].pid)
            for proc in self.procs:
                proc.wait()
        return False


class PytestRun:
    """The outcome of one pytest run: exit code (None when it timed out), summary line, the
    failed/errored node ids, wall time in seconds and the path of its full output."""

    def __init__(self, returncode, summary, failures, seconds, log_path):
        self.returncode, self.summary, self.failures = returncode, summary, failures
        self.seconds, self.log_path = seconds, log_path

    @property
    def ok(self):
        return self.returncode == 0

    @classmethod
    def from_output(cls, returncode, output, seconds, log_path):
        """Parse pytest's output (run with ``-rfE``) for its summary line and failures."""
        lines = [line.strip() for line in output.splitlines()]
        summaries = [m.group(1) for m in map(_SUMMARY_RE.match, lines) if m]
        failures = [m.group(1) for m in map(_FAILURE_RE.match, lines) if m]
        if returncode is None:
            summary = 'TIMED OUT (killed)'
        else:
            summary = summaries[-1] if summaries else 'no summary line (exit code {})'.format(returncode)
        return cls(returncode, summary, failures, seconds, log_path)


def run_pytest(pytest_args, timeout, log_path):
    """Run ``python -m pytest -rfE <pytest_args>`` in the repository root, its output going to
    ``log_path``; killed (with all its children) after ``timeout`` seconds. Returns a PytestRun."""
    command = [sys.executable, '-m', 'pytest', '-rfE', '-p', 'no:cacheprovider'] + list(pytest_args)
    start = time.monotonic()
    with open(log_path, 'w+') as log:
        proc = subprocess.Popen(command, cwd=REPO_ROOT, stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
        try:
            returncode = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            returncode = None
        finally:
            _kill_group(proc.pid)   # a timed-out run, or children a finished run left behind
            proc.wait()
        log.seek(0)
        output = log.read()
    return PytestRun.from_output(returncode, output, time.monotonic() - start, log_path)


def _parse_args(argv):
    parser = argparse.ArgumentParser(
        description='Run pytest several times beside CPU-burning processes, to find flaky tests.')
    parser.add_argument('--runs', type=int, default=3, help='how many pytest runs (default 3)')
    parser.add_argument('--burners', type=int, default=os.cpu_count() or 1,
                        help='CPU-burning processes beside the tests (default: the number of cores, {})'
                        .format(os.cpu_count()))
    parser.add_argument('--timeout', type=float, default=3600,
                        help='seconds one pytest run may take before it is killed (default 3600)')
    parser.add_argument('--log-dir', help='where the full output of each run goes (default: a new temp dir)')
    parser.add_argument('pytest_args', nargs='*',
                        help="test paths, and pytest options after '--' (default: tests/)")
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error('--runs must be >= 1, got {}'.format(args.runs))
    if args.burners < 0:
        parser.error('--burners must be >= 0, got {}'.format(args.burners))
    if args.timeout <= 0:
        parser.error('--timeout must be > 0, got {}'.format(args.timeout))
    args.pytest_args = args.pytest_args or ['tests/']
    return args


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt('signal {}'.format(signum))


def main(argv=None):
    """Returns the exit code: 0 when every run passed, 1 otherwise (130 on interruption)."""
    args = _parse_args(argv)
    log_dir = args.log_dir or tempfile.mkdtemp(prefix='stress_tests_')
    os.makedirs(log_dir, exist_ok=True)
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _raise_interrupt)
    print('pytest {} | {} run(s) beside {} burner(s) | logs in {}'.format(
        ' '.join(args.pytest_args), args.runs, args.burners, log_dir), flush=True)
    results = []
    try:
        with BurnerGroup(args.burners):
            for index in range(1, args.runs + 1):
                log_path = os.path.join(log_dir, 'run{}.log'.format(index))
                result = run_pytest(args.pytest_args, args.timeout, log_path)
                results.append(result)
                where = '' if result.ok else ', see ' + log_path
                print('run {}/{}: {} (wall {:.1f} s){}'.format(index, args.runs, result.summary,
                                                               result.seconds, where), flush=True)
                for node_id in result.failures:
                    print('    failed: ' + node_id, flush=True)
    except KeyboardInterrupt:
        print('interrupted after {} run(s); burners and pytest killed'.format(len(results)), flush=True)
        return 130
    failed = [i for i, r in enumerate(results, 1) if not r.ok]
    print('{} of {} run(s) failed{}'.format(
        len(failed), len(results), ': runs ' + ', '.join(map(str, failed)) if failed else ''), flush=True)
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
