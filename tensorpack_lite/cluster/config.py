"""The description of a multi-process training cluster, without TensorFlow.

A cluster has ``worker`` tasks (worker 0 is the chief) and optionally ``ps`` (parameter
server) tasks, each at a ``host:port`` address. :class:`ClusterConfig` checks such a cluster
and says which task this process is; it reads and writes the ``TF_CONFIG`` environment
variable TensorFlow uses, and probes which tasks accept connections. The launcher
(:mod:`tensorpack_lite.cluster.launch`) and the distributed trainers share it.

Cluster managers (Kubeflow's TFJob, Vertex AI, SageMaker) often name a separate ``chief``
task (``master`` in older ones): it is worker 0 here, the listed workers come after it
(``worker`` i of ``TF_CONFIG`` is worker i + 1 of the trainers), and messages keep the names
of ``TF_CONFIG``. An ``evaluator`` task is refused (see :data:`EVALUATOR_REFUSAL`).

Example::

    cluster = ClusterConfig({'worker': ['host1:2222', 'host2:2222'], 'ps': ['host1:2223']},
                            'worker', 1)
    os.environ['TF_CONFIG'] = cluster.to_tf_config()
    ClusterConfig.from_tf_config().task_name       # '/job:worker/task:1'
"""

import contextlib
import json
import os
import socket
import threading
import time

from ..utils import logger
from ..utils.argtools import is_int

__all__ = ['JOBS', 'CHIEF_JOBS', 'ClusterConfig', 'LostTaskError', 'TaskWatchdog', 'local_cluster',
           'cluster_of_addresses', 'cluster_of_rank', 'held_free_port', 'free_ports']

JOBS = ('worker', 'ps')
"""The jobs of the trainers' cluster: 'worker' (required; task 0 is the chief) and 'ps'."""

CHIEF_JOBS = ('chief', 'master')
"""Names of a separate chief task in ``TF_CONFIG`` (one task at most), taken as worker 0."""

EVALUATOR_REFUSAL = (
    "task type 'evaluator' is not supported: tensorpack_lite trains with every task of the cluster "
    "and has no evaluator task. Evaluate on the chief during training (InferenceRunner, "
    "DataParallelInferenceRunner), or run a separate program that loads the chief's checkpoints "
    "(get_model_loader + OfflinePredictor). Give the evaluator replica count 0 in the cluster manager.")
"""The error for an ``evaluator`` task (raised before any server starts)."""


class LostTaskError(RuntimeError):
    """A task of the cluster stopped answering (its process died or never started)."""


def _split_address(address, where):
    if not isinstance(address, str) or ':' not in address:
        raise ValueError("{}: {!r} is not an address of the form 'host:port'".format(where, address))
    host, port = address.rsplit(':', 1)
    host = host[1:-1] if host.startswith('[') and host.endswith(']') else host
    if not host:
        raise ValueError("{}: address {!r} has no host".format(where, address))
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError("{}: address {!r} has no valid port (1..65535)".format(where, address))
    return host, int(port)


def _resolve(host, where):
    """The set of IP addresses of ``host``; an unknown host is a ValueError naming the task."""
    try:
        return {info[4][0] for info in socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)}
    except socket.gaierror as err:
        raise ValueError("{}: the host {!r} cannot be resolved ({}); the address is unreachable".format(
            where, host, err)) from None


class ClusterConfig:
    """A checked cluster and the task of this process in it.

    Args:
        cluster (dict): job name -> list of ``'host:port'``: ``'worker'`` and ``'ps'``
            (optional), and optionally one ``'chief'`` (or ``'master'``) task, which becomes
            worker 0 with the workers after it. An ``'evaluator'`` job is left out.
        job_name (str): this process's job as the cluster names it: ``'worker'``, ``'ps'``,
            ``'chief'`` or ``'master'``.
        task_index (int): this process's index in that job.
        source (str): where the cluster came from, for messages (:attr:`source`);
            :func:`~tensorpack_lite.cluster.source.find_cluster` sets it.

    :attr:`job_name`, :attr:`task_index` and every ``(job, index)`` of the methods are the
    trainers' (``'worker'`` or ``'ps'``, the chief as worker 0); :meth:`to_tf_config` and
    :meth:`describe` use the names given.

    A cluster that cannot work is a ValueError naming the culprit: an unknown job, two chief
    tasks, an address without a valid port, a host that does not resolve, two tasks on the
    same port of the same host, a task index out of range, an ``'evaluator'`` task.
    """

    def __init__(self, cluster, job_name, task_index, source='given'):
        if job_name == 'evaluator':
            raise ValueError("ClusterConfig: " + EVALUATOR_REFUSAL)
        self._given = dict(cluster) if isinstance(cluster, dict) else cluster
        self._chief_job, cluster, job_name, task_index = _fold_chief(cluster, job_name, task_index)
        self._jobs = self._check_jobs(cluster)
        self._addresses = {job: [_split_address(a, '{} {}'.format(job, i)) for i, a in enumerate(tasks)]
                           for job, tasks in self._jobs.items()}
        self._check_duplicates()
        if job_name not in self._jobs:
            raise ValueError("ClusterConfig: job_name must be one of the cluster's jobs {}, got {!r}".format(
                sorted(self._jobs), job_name))
        num = len(self._jobs[job_name])
        if not is_int(task_index) or not 0 <= task_index < num:
            raise ValueError("ClusterConfig: task_index {!r} is out of range: job '{}' has {} task(s), "
                             "indices 0..{}".format(task_index, job_name, num, num - 1))
        self.job_name = job_name
        self.task_index = int(task_index)
        self.source = source
        """Where the cluster came from: ``'given'``, ``'TF_CONFIG'``, ``'Slurm job step 41.0'``,
        ``'MPI (PMI_RANK 1 of PMI_SIZE 2)'``, ``'hosts='``."""

    @staticmethod
    def _check_jobs(cluster):
        if not isinstance(cluster, dict):
            raise TypeError("ClusterConfig: the cluster must be a dict job -> list of 'host:port', got "
                            "{!r}".format(cluster))
        unknown = sorted(set(cluster) - set(JOBS))
        if unknown:
            raise ValueError("ClusterConfig: unknown job(s) {} in the cluster; the jobs are 'worker', 'ps' "
                             "and one 'chief' (or 'master') task".format(unknown))
        if 'worker' not in cluster:
            raise ValueError("ClusterConfig: the cluster has no 'worker' (or 'chief') job: {!r}".format(
                cluster))
        jobs = {}
        for job in JOBS:
            if job not in cluster:
                continue
            tasks = cluster[job]
            if isinstance(tasks, str) or not isinstance(tasks, (list, tuple)) or not tasks:
                raise ValueError("ClusterConfig: job '{}' must be a non-empty list of 'host:port', got "
                                 "{!r}".format(job, tasks))
            jobs[job] = list(tasks)
        return jobs

    def _check_duplicates(self):
        seen = {}
        resolved = {}
        for job, index in self.tasks():
            host, port = self._addresses[job][index]
            where = self.describe(job, index)
            if host not in resolved:
                resolved[host] = _resolve(host, where)
            for ip in resolved[host]:
                other = seen.setdefault((ip, port), (job, index))
                if other != (job, index):
                    raise ValueError("ClusterConfig: {} and {} use the same port {} of the same host; "
                                     "every task needs its own port".format(
                                         self.describe(*other), where, port))

    # ----- construction from and to TF_CONFIG ----------------------------------------------------

    @classmethod
    def from_tf_config(cls, text=None):
        """The cluster and task of a ``TF_CONFIG`` JSON text (default: the environment
        variable), e.g. ``{"cluster": {"worker": ["localhost:2222"]}, "task": {"type":
        "worker", "index": 0}}``."""
        if text is None:
            text = os.environ.get('TF_CONFIG')
            if not text:
                raise ValueError("TF_CONFIG is not set: give the cluster explicitly, or set TF_CONFIG "
                                 "(e.g. start the processes with `python -m tensorpack_lite.cluster.launch`)")
        try:
            spec = json.loads(text)
        except ValueError as err:
            raise ValueError("TF_CONFIG is not valid JSON ({}): {!r}".format(err, text)) from None
        if not isinstance(spec, dict) or 'cluster' not in spec or 'task' not in spec:
            raise ValueError("TF_CONFIG must hold 'cluster' and 'task', got {!r}".format(text))
        task = spec['task']
        if not isinstance(task, dict) or 'type' not in task:
            raise ValueError("TF_CONFIG: 'task' must be {{'type': ..., 'index': ...}}, got {!r}".format(task))
        return cls(spec['cluster'], task['type'], task.get('index', 0), source='TF_CONFIG')

    def to_tf_config(self):
        """The ``TF_CONFIG`` JSON text of this cluster and task, with the job names given
        (a chief task stays one)."""
        job, index = self.given_task(self.job_name, self.task_index)
        return json.dumps({'cluster': self._given, 'task': {'type': job, 'index': index}})

    def for_task(self, job_name, task_index):
        """The same cluster seen from another task (``job_name``: ``'worker'`` or ``'ps'``)."""
        return ClusterConfig(self._given, *self.given_task(job_name, task_index), source=self.source)

    def given_task(self, job_name, task_index):
        """The name of a task in the cluster as given: ``('chief', 0)`` for worker 0 when
        there is a chief task, ``('worker', i - 1)`` for the other workers then."""
        if self._chief_job is None or job_name != 'worker':
            return job_name, task_index
        return (self._chief_job, 0) if task_index == 0 else ('worker', task_index - 1)

    # ----- what the cluster holds ------------------------------------------------------------------

    @property
    def cluster(self):
        """job name -> list of addresses (a copy)."""
        return {job: list(tasks) for job, tasks in self._jobs.items()}

    @property
    def num_worker(self):
        return len(self._jobs['worker'])

    @property
    def num_ps(self):
        return len(self._jobs.get('ps', ()))

    @property
    def is_chief(self):
        """Whether this task is worker 0."""
        return self.job_name == 'worker' and self.task_index == 0

    @property
    def task_name(self):
        """This task as a TensorFlow device prefix, e.g. ``'/job:worker/task:1'``."""
        return '/job:{}/task:{}'.format(self.job_name, self.task_index)

    def tasks(self, job_name=None):
        """``(job, index)`` of every task (of one job), workers first."""
        jobs = [job_name] if job_name is not None else [j for j in JOBS if j in self._jobs]
        return [(job, index) for job in jobs for index in range(len(self._jobs.get(job, ())))]

    def other_tasks(self):
        """Every task but this one."""
        return [t for t in self.tasks() if t != (self.job_name, self.task_index)]

    def address(self, job_name, task_index):
        return self._jobs[job_name][task_index]

    def host(self, job_name, task_index):
        """The host of a task's address (an IPv6 address without its brackets)."""
        return self._addresses[job_name][task_index][0]

    def describe(self, job_name, task_index):
        """A task for messages, named as in the cluster given, e.g. ``'worker 1
        (localhost:2223)'`` or ``'chief 0 (localhost:2222)'``."""
        given_job, given_index = self.given_task(job_name, task_index)
        return '{} {} ({})'.format(given_job, given_index, self._jobs[job_name][task_index])

    # ----- who answers ------------------------------------------------------------------------------

    ANSWERS, REFUSES, SILENT = 'answers', 'refuses', 'silent'
    """What a probe of a task (:meth:`probe`) found."""

    def probe(self, job_name, task_index, timeout=1.0):
        """Try one TCP connection to the task: :attr:`ANSWERS` (accepted within ``timeout``
        seconds), :attr:`REFUSES` (its machine answered that nothing listens there: the process
        is gone) or :attr:`SILENT` (no answer in time, or no route: its machine or link may be
        down, or only slow: a full link or a loaded machine can hold one connection that long)."""
        host, port = self._addresses[job_name][task_index]
        try:
            with socket.create_connection((host, port), timeout=timeout):
                return self.ANSWERS
        except ConnectionRefusedError:
            return self.REFUSES
        except OSError:
            return self.SILENT

    def is_reachable(self, job_name, task_index, timeout=1.0):
        """Whether the task accepts a TCP connection within ``timeout`` seconds."""
        return self.probe(job_name, task_index, timeout) == self.ANSWERS

    def unreachable(self, tasks=None, timeout=1.0):
        """The tasks among ``tasks`` (default: all others) that accept no connection."""
        tasks = self.other_tasks() if tasks is None else tasks
        return [t for t in tasks if not self.is_reachable(*t, timeout=timeout)]

    def wait_until_reachable(self, tasks=None, timeout=300.0, interval=0.25):
        """Wait until every task of ``tasks`` (default: all others) accepts connections.

        Raises:
            LostTaskError: after ``timeout`` seconds, naming the tasks that are not up.
        """
        deadline = time.monotonic() + timeout
        missing = self.other_tasks() if tasks is None else list(tasks)
        while True:
            missing = self.unreachable(missing)
            if not missing:
                return
            if time.monotonic() >= deadline:
                raise LostTaskError("{}: {} did not start within {:g} s (no server accepts connections at "
                                    "the address). Start every task of the cluster, or check the "
                                    "addresses.".format(self.describe(self.job_name, self.task_index),
                                                        ', '.join(self.describe(*t) for t in missing),
                                                        timeout))
            time.sleep(interval)

    def lost_task_error(self, tasks, cause=None):
        """The :class:`LostTaskError` saying that ``tasks`` were lost, with the error seen."""
        message = "{}: lost {}: no longer accepts connections (the process died or its machine is " \
                  "unreachable)".format(self.describe(self.job_name, self.task_index),
                                        ', '.join(self.describe(*t) for t in tasks))
        if cause is not None:
            message += ". The error seen: {}: {}".format(type(cause).__name__, _first_line(cause))
        return LostTaskError(message)

    def __repr__(self):
        return 'ClusterConfig({!r}, {!r}, {})'.format(self.cluster, self.job_name, self.task_index)


def _fold_chief(cluster, job_name, task_index):
    """``(chief job or None, cluster, job_name, task_index)`` with a chief task made worker 0
    (see the module doc) and an 'evaluator' job left out (it takes no part in training)."""
    if not isinstance(cluster, dict):
        return None, cluster, job_name, task_index
    chiefs = [job for job in CHIEF_JOBS if job in cluster]
    folded = {job: tasks for job, tasks in cluster.items() if job not in CHIEF_JOBS and job != 'evaluator'}
    if not chiefs:
        return None, folded, job_name, task_index
    if len(chiefs) > 1:
        raise ValueError("ClusterConfig: the cluster has both 'chief' and 'master' jobs; they are two names "
                         "of the one chief task: give one")
    chief = chiefs[0]
    tasks = cluster[chief]
    if isinstance(tasks, str) or not isinstance(tasks, (list, tuple)) or len(tasks) != 1:
        raise ValueError("ClusterConfig: job '{}' must list exactly one 'host:port' (the chief), got "
                         "{!r}".format(chief, tasks))
    workers = folded.get('worker', [])
    if isinstance(workers, str) or not isinstance(workers, (list, tuple)):
        raise ValueError("ClusterConfig: job 'worker' must be a list of 'host:port', got {!r}".format(
            workers))
    folded['worker'] = list(tasks) + list(workers)
    if job_name == chief:
        if task_index != 0:
            raise ValueError("ClusterConfig: task_index {!r} is out of range: job '{}' has 1 task, index "
                             "0".format(task_index, chief))
        return chief, folded, 'worker', 0
    if job_name == 'worker' and is_int(task_index):
        if not 0 <= task_index < len(workers):
            raise ValueError("ClusterConfig: task_index {!r} is out of range: job 'worker' has {} task(s) "
                             "besides the {}".format(task_index, len(workers), chief))
        return chief, folded, 'worker', task_index + 1
    return chief, folded, job_name, task_index


def _first_line(err):
    text = getattr(err, 'message', None) or str(err)
    lines = [line.strip() for line in str(text).splitlines() if line.strip()]
    return lines[0] if lines else type(err).__name__


@contextlib.contextmanager
def held_free_port(host='', listen=False):
    """A TCP port free on ``host`` (default: every interface of this machine, as a TensorFlow
    server binds), kept bound inside the block so that nothing else on the machine is given it
    meanwhile; with ``listen``, a socket listens on it (connections to it succeed). The one way
    the library and its tests pick ports."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        if listen:
            sock.listen()
        yield sock.getsockname()[1]


def free_ports(count, host=''):
    """``count`` distinct TCP ports free now on ``host`` (see :func:`held_free_port`), each held
    until all are picked; another process may take one once they are returned."""
    with contextlib.ExitStack() as stack:
        return [stack.enter_context(held_free_port(host)) for _ in range(count)]


def local_cluster(num_worker, num_ps=0, host='localhost'):
    """A cluster of ``num_worker`` workers and ``num_ps`` ps tasks on this machine, on free
    ports picked now: a dict for :class:`ClusterConfig`."""
    for name, value, least in (('num_worker', num_worker, 1), ('num_ps', num_ps, 0)):
        if not is_int(value) or value < least:
            raise ValueError("local_cluster: {} must be an integer >= {}, got {!r}".format(
                name, least, value))
    ports = sorted(free_ports(num_worker + num_ps))
    return cluster_of_addresses(['{}:{}'.format(host, p) for p in ports], num_worker)


def cluster_of_addresses(addresses, num_worker):
    """A dict for :class:`ClusterConfig`: the first ``num_worker`` of ``addresses`` are the
    workers, the others (if any) the ps tasks."""
    cluster = {'worker': list(addresses[:num_worker])}
    if len(addresses) > num_worker:
        cluster['ps'] = list(addresses[num_worker:])
    return cluster


def cluster_of_rank(addresses, num_ps, rank, source='given'):
    """The :class:`ClusterConfig` of ``addresses`` (one per task: the workers, then the last
    ``num_ps`` the ps tasks) as task ``rank`` of that list sees it: how launchers that number
    their tasks (Slurm, MPI) map onto the cluster."""
    num_worker = len(addresses) - num_ps
    job, index = ('worker', rank) if rank < num_worker else ('ps', rank - num_worker)
    return ClusterConfig(cluster_of_addresses(addresses, num_worker), job, index, source=source)


class TaskWatchdog:
    """A daemon thread that probes the given tasks every ``interval`` seconds (a connection,
    waited for ``interval`` seconds) and calls ``on_lost(tasks)`` once, then stops, when some are
    lost: a task whose machine refuses the connection (nothing listens: its process ended) at
    once, one that does not answer after ``misses`` probes in a row (its machine or link is
    down; a single probe left unanswered is no loss: a full link or a loaded machine can hold
    a connection for a second).

    Example::

        watchdog = TaskWatchdog(cluster, cluster.other_tasks(), on_lost=abort_training)
        watchdog.start()
        ...
        watchdog.stop()
    """

    def __init__(self, cluster, tasks, on_lost, interval=1.0, misses=5):
        if int(misses) < 1:
            raise ValueError("TaskWatchdog: misses must be 1 or more, not {!r}".format(misses))
        self._cluster = cluster
        self._tasks = list(tasks)
        self._on_lost = on_lost
        self._interval = float(interval)
        self._misses = int(misses)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name='TaskWatchdog', daemon=True)
        self.lost = []
        """The tasks found lost (empty while all answer)."""

    def start(self):
        if self._tasks:
            self._thread.start()

    def stop(self):
        """Probe no more (the thread ends after the probe running, if any)."""
        self._stop.set()

    def join(self, timeout=None):
        """Wait up to ``timeout`` seconds for the thread to end; whether it has (or never started)."""
        if self._thread.is_alive():
            self._thread.join(timeout)
        return not self._thread.is_alive()

    def _run(self):
        unanswered = {task: 0 for task in self._tasks}    # probes in a row without an answer
        while not self._stop.wait(self._interval):
            lost = []
            for task in self._tasks:
                found = self._cluster.probe(*task, timeout=self._interval)
                unanswered[task] = 0 if found == ClusterConfig.ANSWERS else unanswered[task] + 1
                if found == ClusterConfig.SILENT and unanswered[task] < self._misses:
                    logger.warn("{} did not answer a probe within {:g} s ({} of {} in a row before it is "
                                "lost).".format(self._cluster.describe(*task), self._interval,
                                                unanswered[task], self._misses))
                if found == ClusterConfig.REFUSES or unanswered[task] >= self._misses:
                    lost.append(task)
            if lost and not self._stop.is_set():
                self.lost = lost
                self._on_lost(lost)
                return
