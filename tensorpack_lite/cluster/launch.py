"""A launcher for trying multi-process training on one machine: it starts one process per
task of a local cluster (N workers, M parameter servers), each running the same command with
the ``TF_CONFIG`` of its task, on free ports.

    python -m tensorpack_lite.cluster.launch --workers 2 --ps 1 -- python train.py --epochs 5
    python -m tensorpack_lite.cluster.launch --chief --workers 2 -- python train.py   # chief + 2 workers

The tasks run in a private network namespace of the job (see
:mod:`tensorpack_lite.cluster.private_network`): their TensorFlow servers, which run any graph for
whoever connects, answer nothing outside the job. ``--no-isolation`` runs them on this
machine's network, as tensorpack did (docs/security.md says what that exposes). Where no
namespace can be made, the job runs on this machine's network after a warning, unless
``--isolation required``: then it does not start, and the error says why.

In the script, ``create_server()`` (:mod:`tensorpack_lite.multiprocess.server`) reads
``TF_CONFIG``. Every output line is prefixed with its task (``[worker 1] ...``). When a
process fails, the others get ``grace`` seconds to stop on their own (the distributed
trainers stop with an error naming the lost task), then they are ended; SIGINT and SIGTERM
are passed on to every process (a second one ends them at once). The tasks end with the
launcher however it ends: on Linux each asks the kernel for SIGKILL when the launcher dies
(SIGKILL and the OOM killer included; :mod:`tensorpack_lite.utils.death_signal`). With ``--max-restarts N``
a failed cluster is started again, whole, up to N times. With ``--workers MIN:MAX`` it starts
MAX workers, and a worker that fails ``--drop-after`` times in a row with the same exit code
is dropped: the cluster restarts with one worker fewer, down to MIN (elastic training: the
script resumes from its last checkpoint and the world size changes). The exit code is 0 when
every worker succeeded, else the code of the first failure (128 + n for signal n). The restarts,
signals, timeout and exit codes are the job supervisor's (:mod:`~tensorpack_lite.cluster.supervisor`,
shared with Ray's launcher): :func:`launch` drives it, each attempt a :class:`LocalCluster`.

    python -m tensorpack_lite.cluster.launch --workers 2:4 -- python train.py   # 4, down to 2

No TensorFlow is imported here.
"""

import argparse
import collections
import os
import queue
import signal
import subprocess
import sys
import threading
import time

from ..utils.death_signal import command_with_death_signal
from .config import CHIEF_JOBS, ClusterConfig, cluster_of_addresses, local_cluster
from .private_network import PrivateNetwork, PrivateNetworkUnavailable
from .supervisor import Job, RestartPolicy, RunningAttempt, shell_exit_code, supervise

__all__ = ['Failure', 'LocalCluster', 'launch', 'main', 'ISOLATIONS']

ISOLATIONS = ('auto', 'required', 'off')
"""The values of ``isolation`` (``--isolation``): a private network where it can be made, a
private network or no job, none."""


Failure = collections.namedtuple('Failure', ['name', 'job', 'index', 'exit_code'])
"""A failed task: its ``name`` as its TF_CONFIG says (``'chief 0'``), ``job`` and ``index`` as
the trainers count (the chief is worker 0; on a host of its own, worker ``k`` runs on host
``k``), and its shell exit code."""


class _Spawner:
    """Starts processes from a thread that lasts as long as this process: the main thread, or,
    for a caller in another thread, one thread started for that on first use.

    Each task asks for SIGKILL when its parent ends (:mod:`tensorpack_lite.utils.death_signal`),
    and for the kernel the parent is the *thread* that forked it: a task started from a thread
    that then ends would be killed with that thread."""

    def __init__(self):
        self._lock = threading.Lock()
        self._requests = None
        self._pid = None

    def popen(self, *args, **kwargs):
        """``subprocess.Popen(*args, **kwargs)``, from a lasting thread."""
        if threading.current_thread() is threading.main_thread():
            return subprocess.Popen(*args, **kwargs)
        with self._lock:
            if self._pid != os.getpid():      # first use, or in a forked child (without the thread)
                self._requests, self._pid = queue.SimpleQueue(), os.getpid()
                threading.Thread(target=self._serve, args=(self._requests,), name='launch-spawner',
                                 daemon=True).start()
            requests = self._requests
        outcome, done = {}, threading.Event()
        requests.put((args, kwargs, outcome, done))
        done.wait()
        if 'error' in outcome:
            raise outcome['error']
        return outcome['proc']

    @staticmethod
    def _serve(requests):
        while True:
            args, kwargs, outcome, done = requests.get()
            try:
                outcome['proc'] = subprocess.Popen(*args, **kwargs)
            except BaseException as err:  # handed to the caller
                outcome['error'] = err
            done.set()


_SPAWNER = _Spawner()


class _Task:
    """One child process and the thread copying its output: ``job`` and ``index`` as the
    trainers count (the chief is worker 0), ``name`` as its TF_CONFIG says (``'chief 0'``)."""

    def __init__(self, job, index, name, proc, pump):
        self.job, self.index, self.name, self.proc, self.pump = job, index, name, proc, pump

    def signal(self, sig):
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                pass


class LocalCluster(RunningAttempt):
    """The processes of a cluster on this machine, all running ``command``: an attempt of
    :func:`launch`'s job (:class:`~tensorpack_lite.cluster.supervisor.RunningAttempt`).

    Args:
        command (list[str]): the command of every task, e.g. ``['python', 'train.py']``.
        num_worker (int): worker processes (worker 0 is the chief).
        num_ps (int): parameter-server processes.
        host (str): the host name in the addresses.
        grace (float): seconds the other processes get to stop on their own after one
            fails (and ps tasks after every worker finished), before they are ended.
        env (dict): the environment of the processes (default: this one), plus TF_CONFIG.
        output: a binary stream for the processes' prefixed output (default: stdout).
        chief (str): None, or ``'chief'`` / ``'master'``: start a separate chief task of that
            name besides the ``num_worker`` workers, as cluster managers do (it is worker 0
            of the trainers; see :mod:`tensorpack_lite.cluster.config`).
        hosts: None (every task on this machine, on free ports), or machines to put the tasks
            on, one each: an object with ``address(k)`` and ``command(k, argv)``, such as a
            :class:`~tensorpack_lite.cluster.netns.NetnsCluster`. The workers go on hosts
            0..N-1 (the separate chief first), the ps tasks after them; every task listens on
            port :attr:`HOST_PORT` of its host.
        isolate (bool): with every task on this machine (no ``hosts``), run them in a private
            network namespace of the job (:class:`~tensorpack_lite.cluster.private_network.PrivateNetwork`):
            their servers then answer nothing outside the job. TensorFlow's servers listen on
            every interface and run any graph for whoever connects, so turning this off
            (``False``) lets any user of this machine, and any host that can reach it, run code
            as you while the job runs; do so only on a machine and network that no one else
            uses. Where a namespace cannot be made, the tasks run on this machine's network
            and the output says so and why (docs/security.md), unless ``isolation`` is
            ``'required'``.
        isolation (str): ``'auto'`` (the default: ``isolate``), ``'required'`` (a private
            network or no job: :meth:`start` raises
            :class:`~tensorpack_lite.cluster.private_network.PrivateNetworkUnavailable` saying
            why, before any task starts; only without ``hosts``) or ``'off'`` (as
            ``isolate=False``).

    Example::

        cluster = LocalCluster(['python', 'train.py'], num_worker=2)
        cluster.start()
        exit_code = cluster.wait(timeout=600)
    """

    KILL_AFTER = 5.0
    """Seconds between SIGTERM and SIGKILL when ending processes."""

    HOST_PORT = 2222
    """The port every task listens on when each has a host of its own (``hosts``)."""

    def __init__(self, command, num_worker, num_ps=0, host='localhost', grace=30.0, env=None, output=None,
                 chief=None, hosts=None, isolate=True, isolation='auto'):
        if isinstance(command, str) or not command:
            raise ValueError("LocalCluster: command must be a non-empty list of arguments, got {!r}".format(
                command))
        self._isolation = _isolation(isolation, isolate, hosts)
        self.command = list(command)
        self._hosts = hosts
        self.config = self._cluster(num_worker, num_ps, host, chief)
        self.grace = float(grace)
        self._env = dict(os.environ if env is None else env)
        self._output = output if output is not None else sys.stdout.buffer
        self._output_lock = threading.RLock()   # also taken in signal handlers
        self._tasks = []
        self._failure = None          # (task, exit code) of the first failure
        self._end_by = None           # when the remaining processes are ended
        self._isolate = self._isolation != 'off' and hosts is None
        self.network = None
        """The job's :class:`~tensorpack_lite.cluster.private_network.PrivateNetwork` once started
        (None: the tasks run on this machine's network)."""

    def _addresses(self, num_worker, num_ps, host):
        """``{'worker': [...], 'ps': [...]}``: on free ports of ``host``, or one task per host
        of :attr:`_hosts`."""
        if self._hosts is None:
            return local_cluster(num_worker, num_ps, host)
        return cluster_of_addresses(['{}:{}'.format(self._hosts.address(k), self.HOST_PORT)
                                     for k in range(num_worker + num_ps)], num_worker)

    def _cluster(self, num_worker, num_ps, host, chief):
        """The cluster, seen from its chief."""
        if chief is None:
            return ClusterConfig(self._addresses(num_worker, num_ps, host), 'worker', 0)
        if chief not in CHIEF_JOBS:
            raise ValueError("LocalCluster: chief must be None or one of {}, got {!r}".format(
                CHIEF_JOBS, chief))
        cluster = self._addresses(num_worker + 1, num_ps, host)
        cluster[chief], cluster['worker'] = cluster['worker'][:1], cluster['worker'][1:]
        if not cluster['worker']:
            del cluster['worker']
        return ClusterConfig(cluster, chief, 0)

    @property
    def tasks(self):
        """``(job, index, subprocess.Popen)`` of every started process, as the trainers count
        (a separate chief is ``('worker', 0)``)."""
        return [(t.job, t.index, t.proc) for t in self._tasks]

    def say(self, text):
        """Write a line of the launcher's own (``[launch] text``) to the output."""
        self._write(b'[launch] ' + text.encode('utf-8') + b'\n')

    @property
    def failed_task(self):
        """The :class:`Failure` of the first task that failed; None without one."""
        if self._failure is None:
            return None
        task, code = self._failure
        return Failure(task.name, task.job, task.index, shell_exit_code(code))

    @property
    def failure_cause(self):
        """The first failure, e.g. ``'worker 1 failed with exit code 137'``; None without one."""
        if self._failure is None:
            return None
        task, code = self._failure
        return "{} failed with exit code {}".format(task.name, shell_exit_code(code))

    def _write(self, data):
        with self._output_lock:
            self._output.write(data)
            self._output.flush()

    def _pump(self, prefix, stream):
        for line in iter(stream.readline, b''):
            self._write(prefix + (line if line.endswith(b'\n') else line + b'\n'))
        stream.close()

    def start(self):
        """Start every process (ps tasks first)."""
        if self._tasks:
            raise RuntimeError("LocalCluster.start() was called already")
        self.say("cluster: {}".format(self.config.cluster))
        if self._hosts is None:
            self._start_network()
        for job, index in self.config.tasks('ps') + self.config.tasks('worker'):
            env = dict(self._env, TF_CONFIG=self.config.for_task(job, index).to_tf_config())
            command = self.command
            if sys.platform.startswith('linux'):      # the task itself gets SIGKILL when this process ends
                command = command_with_death_signal(command)
            if self._hosts is not None:
                host = index + (self.config.num_worker if job == 'ps' else 0)
                command = self._hosts.command(host, command)
            elif self.network is not None:
                command, env = self.network.command(command), self.network.environ(env)
            proc = _SPAWNER.popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  stdin=subprocess.DEVNULL, start_new_session=True)
            name = '{} {}'.format(*self.config.given_task(job, index))
            prefix = '[{}] '.format(name).encode('utf-8')
            pump = threading.Thread(target=self._pump, args=(prefix, proc.stdout), daemon=True)
            pump.start()
            self._tasks.append(_Task(job, index, name, proc, pump))

    def _start_network(self):
        """Start the job's private network, or say why the tasks run without one."""
        ports = ', '.join(self.config.address(*task).rsplit(':', 1)[1] for task in self.config.tasks())
        exposed = ("the tasks' ports ({}) listen on every interface of this machine: any user of it, and any "
                   "host that can reach it, can run code as you through them while the job runs "
                   "(docs/security.md)".format(ports))
        if not self._isolate:
            self.say("WARNING: isolation is turned off: " + exposed)
            return
        network = PrivateNetwork()
        try:
            network.start()
        except PrivateNetworkUnavailable as err:
            if self._isolation == 'required':
                raise PrivateNetworkUnavailable(
                    "isolation is required (--isolation required, isolation='required') and no private "
                    "network can be made for the job: {}. No task was started. docs/security.md says what "
                    "a private network needs.".format(err)) from err
            self.say("WARNING: no private network ({}): {}".format(err, exposed))
            return
        self.network = network
        self.say(network.describe())

    def send_signal(self, sig):
        """Pass a signal on to every running process (and the processes it started)."""
        for task in self._tasks:
            task.signal(sig)

    def terminate(self):
        """End every running process: SIGTERM, then SIGKILL after :attr:`KILL_AFTER` s."""
        self.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + self.KILL_AFTER
        while time.monotonic() < deadline and any(t.proc.poll() is None for t in self._tasks):
            time.sleep(0.05)
        self.send_signal(signal.SIGKILL)
        for task in self._tasks:
            task.proc.wait()
            task.pump.join(timeout=5)
        if self.network is not None:
            self.network.close()

    def stop_soon(self, reason):
        """Give the processes :attr:`grace` seconds to end, then end them."""
        if self._end_by is None:
            self.say("{}; ending the other processes within {:g} s".format(reason, self.grace))
            self._end_by = time.monotonic() + self.grace

    def _check_exits(self):
        """Record the first failure; returns whether every worker has exited."""
        for task in self._tasks:
            code = task.proc.poll()
            if code is None or code == 0 or self._failure is not None:
                continue
            self._failure = (task, code)
            self.stop_soon(self.failure_cause)
        workers = [t for t in self._tasks if t.job == 'worker']
        return all(t.proc.poll() is not None for t in workers)

    def poll(self):
        """Whether the cluster is done: every process exited, or the others' :attr:`grace` after a
        failure (or after every worker finished) passed; else waits a moment first."""
        workers_done = self._check_exits()
        if workers_done and self._failure is None:
            self.stop_soon("every worker finished")
        if all(t.proc.poll() is not None for t in self._tasks):
            return True
        if self._end_by is not None and time.monotonic() >= self._end_by:
            return True
        time.sleep(0.05)
        return False

    def pass_signal(self, received, sig):
        """Pass ``sig`` on to every process; they get :attr:`grace` seconds to end."""
        self.send_signal(sig)
        self.stop_soon("received signal {}".format(signal.Signals(received).name))

    def time_out(self, timeout):
        """End the cluster now: it did not finish within ``timeout`` seconds."""
        self.say("the cluster did not finish within {:g} s".format(timeout))
        self._end_by = time.monotonic()

    def close(self):
        """End every process still running (:meth:`terminate`)."""
        self.terminate()

    @property
    def exit_code(self):
        """0, or the exit code of the first failure (see the module doc)."""
        return shell_exit_code(self._failure[1]) if self._failure else 0


class _HostSubset:
    """The hosts of a cluster that are still used: host ``k`` is ``hosts``'s ``kept[k]``."""

    def __init__(self, hosts, kept):
        self._hosts, self.kept = hosts, list(kept)

    def address(self, k):
        return self._hosts.address(self.kept[k])

    def command(self, k, argv):
        return self._hosts.command(self.kept[k], argv)

    def without(self, k):
        return _HostSubset(self._hosts, self.kept[:k] + self.kept[k + 1:])


class _FailureStreak:
    """Counts how many times in a row the same task failed with the same exit code."""

    def __init__(self):
        self.failure, self.count = None, 0

    def add(self, failure):
        key = (failure.name, failure.exit_code)
        self.count = self.count + 1 if key == self.failure else 1
        self.failure = key
        return self.count

    def reset(self):
        self.failure, self.count = None, 0


def _worker_to_drop(cluster, streak, num_worker, min_workers, drop_after):
    """The index of the worker to drop after ``cluster``'s failure (None: keep the size), said
    in the cluster's output either way once the worker failed ``drop_after`` times in a row."""
    failure = cluster.failed_task
    if failure is None or min_workers is None:
        return None
    count = streak.add(failure)
    if count < drop_after or failure.job != 'worker':
        return None
    if num_worker - 1 < min_workers:
        cluster.say("{} failed {} times in a row with exit code {}; the cluster is at its minimum of {} "
                    "workers, so it is not dropped".format(failure.name, count, failure.exit_code,
                                                           min_workers))
        return None
    streak.reset()
    cluster.say("{} failed {} times in a row with exit code {}: dropping it; the cluster goes on with {} "
                "workers (at least {})".format(failure.name, count, failure.exit_code, num_worker - 1,
                                               min_workers))
    return failure.index


def launch(command, num_worker, num_ps=0, host='localhost', grace=30.0, timeout=None, chief=None,
           max_restarts=None, restart_delay=1.0, env=None, output=None, hosts=None, min_workers=None,
           drop_after=3, isolate=True, isolation='auto'):
    """Run ``command`` as a local cluster (see :class:`LocalCluster`) until it is done,
    passing SIGINT and SIGTERM on to the processes (call it from the main thread). Returns
    the exit code. ``env``, ``output``, ``hosts``, ``isolate`` and ``isolation`` are :class:`LocalCluster`'s
    (each start gets a private network of its own).

    After a failure, every process is ended and the whole cluster is started again (on new
    ports), up to ``max_restarts`` times (None: 0), ``restart_delay`` seconds later, as torchrun and
    Kubernetes restart a job: a script with :class:`AutoResumeTrainConfig` then goes on from
    its last epoch. Each restart is logged with its cause; the exit code is that of the last
    attempt. A signal or ``timeout`` ends the run without restart (``timeout`` counts from the
    first start).

    With ``min_workers`` (< ``num_worker``), the cluster is elastic: a worker that fails
    ``drop_after`` times in a row with the same exit code is dropped (with ``hosts``, its
    host too) and the next start has one worker fewer, down to ``min_workers``; ``max_restarts``
    None then allows ``drop_after`` restarts per worker that may be dropped, and one more."""
    if min_workers is not None and not 1 <= min_workers <= num_worker:
        raise ValueError("launch: min_workers must be between 1 and num_worker={}, got {}".format(
            num_worker, min_workers))
    if drop_after < 1:
        raise ValueError("launch: drop_after must be at least 1, got {}".format(drop_after))
    if max_restarts is None:
        max_restarts = 0 if min_workers is None else drop_after * (num_worker - min_workers + 1)
    policy = RestartPolicy(max_restarts, restart_delay)
    if hosts is not None:
        hosts = _HostSubset(hosts, range(num_worker + 1 + num_ps if chief else num_worker + num_ps))
    cluster = dict(command=command, num_ps=num_ps, host=host, grace=grace, env=env, output=output,
                   chief=chief, isolate=isolate, isolation=isolation)
    return supervise(_LocalJob(cluster, num_worker, hosts, min_workers, drop_after), policy, timeout)


class _LocalJob(Job):
    """:func:`launch`'s job: each attempt a new :class:`LocalCluster` of ``num_worker`` workers
    (fewer once the elastic job dropped some), with the other arguments ``cluster``."""

    def __init__(self, cluster, num_worker, hosts, min_workers, drop_after):
        self._cluster, self._num_worker, self._hosts = cluster, num_worker, hosts
        self._min_workers, self._drop_after = min_workers, drop_after
        self._streak = _FailureStreak()

    def start_attempt(self, number, stopping):
        cluster = LocalCluster(num_worker=self._num_worker, hosts=self._hosts, **self._cluster)
        cluster.start()
        return cluster

    def before_restart(self, attempt, restart, policy):
        dropped = _worker_to_drop(attempt, self._streak, self._num_worker, self._min_workers,
                                  self._drop_after)
        if dropped is not None:
            self._num_worker -= 1
            if self._hosts is not None:
                self._hosts = self._hosts.without(dropped)
        attempt.say("restart {} of {} in {:g} s, after: {}".format(
            restart, policy.max_restarts, policy.delay, attempt.failure_cause))

    def give_up(self, attempt, attempts, policy):
        if policy.max_restarts:
            attempt.say("giving up after {} attempts; the last failure: {}".format(
                attempts, attempt.failure_cause))


def _isolation(isolation, isolate, hosts):
    """The isolation of a job, ``'auto'``, ``'required'`` or ``'off'``, from LocalCluster's
    ``isolation`` and ``isolate``."""
    if isolation not in ISOLATIONS:
        raise ValueError("isolation must be one of {}, got {!r}".format(', '.join(ISOLATIONS), isolation))
    if not isolate:
        if isolation == 'required':
            raise ValueError("isolation='required' contradicts isolate=False")
        return 'off'
    if isolation == 'required' and hosts is not None:
        raise ValueError("isolation='required' is for tasks on this machine: with hosts, the hosts' "
                         "network decides who reaches them (docs/security.md)")
    return isolation


def _worker_range(text):
    """``'4'`` -> (4, 4); ``'2:4'`` -> (2, 4) (``--workers``)."""
    low, colon, high = text.partition(':')
    try:
        low, high = int(low), int(high if colon else low)
    except ValueError:
        raise argparse.ArgumentTypeError("expected N or MIN:MAX, got {!r}".format(text)) from None
    if not 1 <= low <= high:
        raise argparse.ArgumentTypeError("expected N >= 1, or MIN:MAX with 1 <= MIN <= MAX, got {!r}".format(
            text))
    return low, high


def main(argv=None):
    """``python -m tensorpack_lite.cluster.launch [options] -- command ...``: the command line
    of :func:`launch` (``--help`` lists the options); returns the exit code."""
    parser = argparse.ArgumentParser(
        prog='python -m tensorpack_lite.cluster.launch',
        description="Run a command as N worker (and M ps) processes of a cluster on this machine, each "
                    "with the TF_CONFIG of its task.")
    parser.add_argument('-n', '--workers', type=_worker_range, required=True, metavar='N or MIN:MAX',
                        help='number of worker processes; MIN:MAX starts MAX and drops a worker that '
                             'fails --drop-after times in a row, down to MIN')
    parser.add_argument('--ps', type=int, default=0, help='number of parameter-server processes')
    parser.add_argument('--chief', nargs='?', const='chief', choices=CHIEF_JOBS,
                        help="also start a separate chief task (named 'chief', or 'master' if given), as "
                             "cluster managers do; it is worker 0 of the trainers")
    parser.add_argument('--host', default='localhost', help='host name in the addresses')
    parser.add_argument('--grace', type=float, default=30.0,
                        help='seconds the others get to stop after one fails (default 30)')
    parser.add_argument('--timeout', type=float, help='end everything after this many seconds')
    parser.add_argument('--max-restarts', type=int,
                        help='after a failure, end every task and start them all again, up to N times '
                             '(default 0; with MIN:MAX, --drop-after x (MAX - MIN + 1))')
    parser.add_argument('--drop-after', type=int, default=3,
                        help='with --workers MIN:MAX: failures in a row (same task, same exit code) '
                             'after which a worker is dropped (default 3)')
    parser.add_argument('--restart-delay', type=float, default=1.0,
                        help='seconds before a restart (default 1)')
    parser.add_argument('--isolation', choices=ISOLATIONS, default='auto',
                        help="auto (default): the tasks in a private network of the job where one can be "
                             "made, else on this machine's network with a warning; required: a private "
                             "network or the job does not start (exit code 1, saying why); off: as "
                             "--no-isolation")
    parser.add_argument('--no-isolation', action='store_true',
                        help="run the tasks on this machine's network instead of a private one of the job: "
                             "their TensorFlow servers then run code for any user or host that reaches their "
                             "ports (see docs/security.md)")
    parser.add_argument('command', nargs=argparse.REMAINDER, help='the command, after --')
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ['--'] else args.command
    if not command:
        parser.error("give the command to run after --, e.g. -- python train.py")
    try:
        if (args.max_restarts or 0) < 0 or args.restart_delay < 0 or args.drop_after < 1:
            parser.error("--max-restarts and --restart-delay must be >= 0, --drop-after >= 1")
        min_workers, num_worker = args.workers
        if args.no_isolation and args.isolation == 'required':
            parser.error("--no-isolation contradicts --isolation required")
        return launch(command, num_worker, args.ps, host=args.host, grace=args.grace, timeout=args.timeout,
                      chief=args.chief, max_restarts=args.max_restarts, restart_delay=args.restart_delay,
                      min_workers=min_workers if min_workers < num_worker else None,
                      drop_after=args.drop_after, isolate=not args.no_isolation, isolation=args.isolation)
    except PrivateNetworkUnavailable as err:
        sys.stderr.write("[launch] ERROR: {}\n".format(err))
        return 1
    except ValueError as err:
        parser.error(str(err))


if __name__ == '__main__':
    sys.exit(main())
