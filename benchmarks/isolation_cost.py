#!/usr/bin/env python
"""What running a single-host job in a private network costs: LocalCluster(isolate=True), whose
tasks join a network namespace of the job with nsenter (outbound through slirp4netns, see
tensorpack_lite/cluster/private_network.py), against isolate=False, in one run.

1. Start-up: 2 workers running a trivial command (``python -c 'print("up")'``), timed from
   ``LocalCluster.start()`` being called until every task's first line reached the launcher's
   output (an output stream that records when each line arrives); also until ``wait()``
   returned (the processes ended, the network closed; ``wait()`` polls every 50 ms). One
   untimed run of each, then ``--repeat`` runs of each, alternating (the order flips every
   round). The bar of the issue: start-up within a second of the start-up without isolation.
   Then ``PrivateNetwork().start()`` and ``close()`` alone, ``--repeat`` times.
2. Step time: 2 workers of CollectiveAllReduceTrainer on this machine's CPUs, started by
   ``launch(..., isolate=True/False)``, training benchmarks/isolation_cost_job.py (a
   64 -> 256 -> 10 MLP on random data, batch 32 per worker, one CPU tower each): worker 0
   prints the median iteration time of ``--steps`` steps after ``--warmup`` steps. ``--rounds``
   rounds of both, in alternating order; each run is bounded by ``--run-timeout`` seconds.

Printed: every run, then the medians, isolated - not isolated and isolated / not isolated (for
the step time also the median of the per-round ratios), a table of the three, and the machine
(CPUs, whether the private network's outbound link is slirp4netns). At the end it checks that
no process it started (tasks, namespace holders, slirp4netns) is left, and ends any by pid.

    python benchmarks/isolation_cost.py                          # about a minute on 2 cores
    python benchmarks/isolation_cost.py --repeat 3 --rounds 1 --steps 50  # a quick look

Needs Linux with nsenter (util-linux) and network namespaces (root, or unprivileged user
namespaces); where the launcher cannot make a private network it says why and this exits.
"""

import argparse
import io
import json
import os
import platform
import re
import signal
import statistics
import sys
import threading
import time

from tabulate import tabulate

from processes import worker_env
from tensorpack_lite.cluster.launch import LocalCluster, launch
from tensorpack_lite.cluster.private_network import PrivateNetwork

JOB = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'isolation_cost_job.py')
TAG = 'isolation-cost-{}'.format(os.getpid())     # an argument of every task: finds leftovers
STARTUP_COMMAND = [sys.executable, '-c', 'print("up", flush=True)', TAG]
STEPTIME_LINE = re.compile(r'^\[worker 0\] STEPTIME (\{.*\})$', re.MULTILINE)
WORKERS = 2
STARTUP_BAR_MS = 1000.0


class LineClock:
    """A binary output stream for LocalCluster that records when each task's first line
    arrives (the launcher writes whole prefixed lines, one per write)."""

    def __init__(self, num_worker):
        self.first = {}
        self.data = io.BytesIO()
        self._expected = {'[worker {}] '.format(k).encode() for k in range(num_worker)}
        self.all_up = threading.Event()

    def write(self, data):
        now = time.perf_counter()
        self.data.write(data)
        for prefix in self._expected:
            if data.startswith(prefix) and prefix not in self.first:
                self.first[prefix] = now
        if len(self.first) == len(self._expected):
            self.all_up.set()
        return len(data)

    def flush(self):
        pass

    def text(self):
        return self.data.getvalue().decode('utf-8', 'replace')


def _check_isolation(isolate, isolated, output):
    """Exit when the launcher could not isolate a run that should be."""
    if isolate and not isolated:
        sys.exit("No private network could be made here, nothing to measure:\n" + output[-2000:])


def startup_once(isolate, timeout):
    """One start-up of WORKERS trivial tasks: (seconds until every task's first line, seconds
    until wait() returned, the cluster's PrivateNetwork or None)."""
    clock = LineClock(WORKERS)
    cluster = LocalCluster(STARTUP_COMMAND, WORKERS, output=clock, isolate=isolate, grace=timeout)
    start = time.perf_counter()
    try:
        cluster.start()
        up = clock.all_up.wait(timeout)
        code = cluster.wait(timeout=timeout)
    finally:
        cluster.terminate()     # again after wait(): a no-op; after an error: ends everything
    done = time.perf_counter()
    if not up or code != 0:
        sys.exit("The start-up run (isolate={}) failed (exit code {}):\n{}".format(
            isolate, code, clock.text()))
    _check_isolation(isolate, cluster.network is not None, clock.text())
    return max(clock.first.values()) - start, done - start, cluster.network


def network_once():
    """(seconds of PrivateNetwork().start(), seconds of close())."""
    network = PrivateNetwork()
    start = time.perf_counter()
    network.start()
    started = time.perf_counter()
    network.close()
    return started - start, time.perf_counter() - started


def steptime_once(isolate, args):
    """Worker 0's median step time (ms) of one training job, and its result line."""
    output = io.BytesIO()
    command = [sys.executable, JOB, '--steps', str(args.steps), '--warmup', str(args.warmup), '--tag', TAG]
    code = launch(command, WORKERS, timeout=args.run_timeout, env=worker_env(), output=output,
                  isolate=isolate, grace=30.0)
    text = output.getvalue().decode('utf-8', 'replace')
    found = STEPTIME_LINE.findall(text)
    if code != 0 or not found:
        sys.exit("The training job (isolate={}) failed (exit code {}{}):\n{}".format(
            isolate, code, ', the time limit' if code == 124 else '', text[-4000:]))
    _check_isolation(isolate, '[launch] private network ' in text, text)
    result = json.loads(found[-1])
    return result['median_ms'], result


# ----- no process left --------------------------------------------------------------------------

def _processes():
    """{pid: (parent pid, argv)} of every process on this machine."""
    found = {}
    for name in os.listdir('/proc'):
        if not name.isdigit():
            continue
        try:
            with open('/proc/{}/stat'.format(name), 'rb') as f:
                parent = int(f.read().rsplit(b')', 1)[1].split()[1])
            with open('/proc/{}/cmdline'.format(name), 'rb') as f:
                argv = [part.decode('utf-8', 'replace') for part in f.read().split(b'\0') if part]
        except (OSError, IndexError, ValueError):
            continue
        found[int(name)] = (parent, argv)
    return found


def left_processes():
    """{pid: argv} of the processes this run started that still exist: descendants of this
    process (the tasks, namespace holders, slirp4netns), and any task, wherever it went, that
    carries this run's TAG."""
    processes = _processes()

    def ours(pid):
        seen = set()
        while pid > 1 and pid not in seen:
            seen.add(pid)
            if pid == os.getpid():
                return True
            pid = processes.get(pid, (0, None))[0]
        return False

    return {pid: argv for pid, (parent, argv) in processes.items()
            if pid != os.getpid() and (ours(parent) or TAG in argv)}


def end_leftovers():
    """Say whether any process of this run is left; end those that are (by pid)."""
    left = left_processes()
    if not left:
        print("\nProcesses of this run left after it: none.")
        return
    print("\nProcesses of this run left after it (ending them):")
    for pid, argv in sorted(left.items()):
        print("  {} {}".format(pid, ' '.join(argv)[:160] or '(exited, not waited for)'))
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


# ----- the driver ---------------------------------------------------------------------------------

def _name(isolate):
    return 'isolated' if isolate else 'not isolated'


def _ms(seconds):
    return [s * 1e3 for s in seconds]


def _spread(values):
    return "median {:.1f} ms (min {:.1f}, max {:.1f})".format(
        statistics.median(values), min(values), max(values))


def measure_startup(args):
    """{isolate: ([ms until every first line], [ms until wait() returned])}, and a network."""
    times = {True: ([], []), False: ([], [])}
    network = None
    for isolate in (True, False):      # warm-up: the page cache, the first slirp4netns
        startup_once(isolate, args.run_timeout)
    print("Start-up of {} trivial tasks, from LocalCluster.start() until every task's first line "
          "(and until wait() returned), ms:".format(WORKERS))
    for index in range(args.repeat):
        order = (True, False) if index % 2 == 0 else (False, True)
        line = []
        for isolate in order:
            up, done, started = startup_once(isolate, args.run_timeout)
            network = started or network
            times[isolate][0].append(up * 1e3)
            times[isolate][1].append(done * 1e3)
            line.append("{} {:.1f} ({:.1f})".format(_name(isolate), up * 1e3, done * 1e3))
        print("  round {:2d}: {}".format(index + 1, ', '.join(line)))
    return times, network


def measure_network(args):
    starts, closes = [], []
    for _ in range(args.repeat):
        start, close = network_once()
        starts.append(start)
        closes.append(close)
    return _ms(starts), _ms(closes)


def measure_steps(args):
    """{isolate: [worker 0's median step ms per run]}, the last result line."""
    times = {True: [], False: []}
    result = None
    print("\nStep time of {} CollectiveAllReduceTrainer workers, worker 0's median of {} steps after {} "
          "(ms):".format(WORKERS, args.steps, args.warmup))
    for index in range(args.rounds):
        order = (True, False) if index % 2 == 0 else (False, True)
        line = []
        for isolate in order:
            start = time.perf_counter()
            median, result = steptime_once(isolate, args)
            times[isolate].append(median)
            seconds = time.perf_counter() - start
            line.append("{} {:.3f} (run {:.1f} s)".format(_name(isolate), median, seconds))
        print("  round {:2d}: {}".format(index + 1, ', '.join(line)))
    return times, result


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--repeat', type=int, default=10, help='start-up runs of each (and network starts)')
    parser.add_argument('--rounds', type=int, default=2, help='training runs of each, in alternating order')
    parser.add_argument('--steps', type=int, default=300, help='timed steps per training run')
    parser.add_argument('--warmup', type=int, default=10, help='steps before the timed ones')
    parser.add_argument('--run-timeout', type=float, default=300.0,
                        help='seconds a run may take before its processes are ended (default 300)')
    args = parser.parse_args()
    load_before = os.getloadavg()
    try:
        startup, network = measure_startup(args)
        net_start, net_close = measure_network(args)
        steps, result = measure_steps(args)
    finally:
        end_leftovers()

    up = {isolate: statistics.median(startup[isolate][0]) for isolate in (True, False)}
    done = {isolate: statistics.median(startup[isolate][1]) for isolate in (True, False)}
    step = {isolate: statistics.median(steps[isolate]) for isolate in (True, False)}
    round_ratios = [iso / plain for iso, plain in zip(steps[True], steps[False])]
    whole = [s + c for s, c in zip(net_start, net_close)]

    print("\nStart-up (until every first line), {} runs each:".format(args.repeat))
    print("  isolated      " + _spread(startup[True][0]))
    print("  not isolated  " + _spread(startup[False][0]))
    print("  isolated - not isolated: {:+.1f} ms, ratio {:.2f} (the bar: within {:.0f} ms: {})".format(
        up[True] - up[False], up[True] / up[False], STARTUP_BAR_MS,
        'met' if up[True] - up[False] < STARTUP_BAR_MS else 'NOT met'))
    print("Until wait() returned (the processes ended, the network closed): isolated {:.1f} ms, not isolated "
          "{:.1f} ms, {:+.1f} ms".format(done[True], done[False], done[True] - done[False]))
    print("PrivateNetwork().start() + close() alone, {} times: {} (start {:.1f}, close {:.1f})".format(
        args.repeat, _spread(whole), statistics.median(net_start), statistics.median(net_close)))
    print("\nStep time, worker 0's median over {} runs each:".format(args.rounds))
    per_round = ', '.join('{:.3f}'.format(r) for r in round_ratios)
    print("  isolated {:.3f} ms, not isolated {:.3f} ms, isolated / not isolated {:.3f}; the per-round "
          "ratios {} (median {:.3f})".format(step[True], step[False], step[True] / step[False], per_round,
                                             statistics.median(round_ratios)))

    ms = '{:.1f}'.format
    rows = [['start-up, until every first line (ms)', ms(up[True]), ms(up[False]),
             '{:+.1f}'.format(up[True] - up[False]), '{:.2f}'.format(up[True] / up[False])],
            ['start to end of a trivial job (ms)', ms(done[True]), ms(done[False]),
             '{:+.1f}'.format(done[True] - done[False]), '{:.2f}'.format(done[True] / done[False])],
            ['PrivateNetwork start + close (ms)', ms(statistics.median(whole)), '', '', ''],
            ['training step, 2 workers (ms)', '{:.3f}'.format(step[True]), '{:.3f}'.format(step[False]),
             '{:+.3f}'.format(step[True] - step[False]), '{:.3f}'.format(step[True] / step[False])]]
    print()
    print(tabulate(rows, headers=['', 'isolated', 'not isolated', 'difference', 'ratio'],
                   disable_numparse=True, colalign=['left'] + ['right'] * 4))
    outbound = ('slirp4netns' if network.outbound_missing is None else
                'none ({})'.format(network.outbound_missing))
    print("\nMachine: {} CPUs ({} usable by this process), {}, Python {}, TensorFlow {}; load average {:.2f} "
          "before, {:.2f} after.".format(os.cpu_count(), len(os.sched_getaffinity(0)), platform.platform(),
                                         platform.python_version(), result['tensorflow'], load_before[0],
                                         os.getloadavg()[0]))
    print("Private network: namespaces {!r}, outbound link: {}.".format(network.kind, outbound))


if __name__ == '__main__':
    main()
