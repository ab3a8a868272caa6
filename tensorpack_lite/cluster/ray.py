"""Multi-process training on a Ray cluster: :func:`launch_on_ray` starts one Ray actor per task
of the job (workers, and ps tasks for the parameter-server trainers), in a placement group packed
or spread as asked. Each actor picks a free port on its node and runs the task's process there:
the same command on every task (``python train.py ...``), or a Python function in a process of
its own. The process finds its cluster in ``$TENSORPACK_LITE_RAY_TASK`` (one more source of
:func:`~tensorpack_lite.cluster.source.find_cluster`, named in its log line), so the training
script is the one that runs under the launcher, Slurm or ``TF_CONFIG``: ``create_server()``,
a trainer, ``AutoResumeTrainConfig``. TensorFlow's gRPC runtime moves the bytes between the
tasks; Ray places, starts, restarts and stops them.

The driver copies every task's output to its own, each line prefixed with the task
(``[worker 1] ...``), and runs the job until it ends:

- a task that fails (its process exits with an error, its actor's process is killed, its node is
  lost) ends the attempt: the other tasks stop on their own (the distributed trainers fail within
  seconds naming the lost task) or are ended after ``grace`` seconds, and the job is started
  again, whole, on new ports, up to ``max_restarts`` times: Ray restarts the actors that died
  (their ``max_restarts``), in their bundle of the placement group; the script resumes from its
  newest checkpoint (``AutoResumeTrainConfig``);
- with ``min_workers`` the job is elastic: after a node is lost it starts again with the workers
  that fit on the nodes left (at least ``min_workers``), and when nodes join with room for more
  (up to ``num_workers``) the chief ends training after the current epoch
  (:mod:`~tensorpack_lite.cluster.resize`) and the job starts again with more;
  ``TrainConfig(elastic=...)`` says what the new size changes;
- SIGTERM (or SIGINT) to the driver is passed on to every task: the trainers stop after the same
  step, the chief writes a checkpoint, and the job ends without restart (exit code 143).

Ray is imported when a job starts, never when this module is imported. Example::

    import ray
    from tensorpack_lite.cluster.ray import launch_on_ray
    ray.init(address='auto')          # or nothing: launch_on_ray connects (or starts a local Ray)
    job = launch_on_ray(['python', 'train.py', '--logdir', '/shared/train_log/run1'],
                        num_workers=4, min_workers=2, placement='SPREAD', max_restarts=5)
    print(job.exit_code)              # 0 when the training ended
    print(job.describe())             # every attempt: its workers, nodes and end
"""

import collections
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time

from ..utils.argtools import is_int
from ..utils.death_signal import command_with_death_signal
from .config import ClusterConfig, cluster_of_addresses, held_free_port
from .resize import RESIZE_REQUEST_VARIABLE, ResizeChannel
from .supervisor import Job, RestartPolicy, RunningAttempt, shell_exit_code, supervise

__all__ = ['RAY_TASK_VARIABLE', 'PLACEMENTS', 'ray_task_cluster', 'TaskHost', 'Attempt', 'RayJob',
           'launch_on_ray']

RAY_TASK_VARIABLE = 'TENSORPACK_LITE_RAY_TASK'
"""The environment variable with a task's cluster, as JSON: ``{"cluster": {...}, "task": {"type":
"worker", "index": 1}, "job": ..., "attempt": ..., "node": ...}`` (set by :class:`TaskHost`)."""

PLACEMENTS = ('PACK', 'SPREAD', 'STRICT_PACK', 'STRICT_SPREAD')
"""Ray's placement-group strategies: ``PACK`` the tasks on as few nodes as possible, ``SPREAD``
them over as many; the ``STRICT_`` ones refuse to do otherwise (one node; a node per task)."""

_NOT_INHERITED = ('TF_CONFIG',)
"""Sources of a cluster that a task must not take from its node's environment."""


def _import_ray():
    try:
        import ray
    except ImportError as err:
        raise ImportError("launch_on_ray needs Ray: pip install \"tensorpack_lite[ray]\" (or pip install "
                          "ray) on the driver and on every node of the Ray cluster ({})".format(err)) from err
    return ray


def ray_task_cluster(environ=None):
    """The :class:`~tensorpack_lite.cluster.config.ClusterConfig` of a task that
    :func:`launch_on_ray` started (from :data:`RAY_TASK_VARIABLE`), or None outside such a task.
    Its source reads e.g. ``'Ray job digits, attempt 2, node 10.0.0.5'``."""
    environ = os.environ if environ is None else environ
    text = environ.get(RAY_TASK_VARIABLE)
    if not text:
        return None
    try:
        spec = json.loads(text)
        cluster, task = spec['cluster'], spec['task']
        job_name, task_index = task['type'], task['index']
    except (ValueError, KeyError, TypeError) as err:
        raise ValueError("{} is not a task of launch_on_ray ({}: {}): {!r}".format(
            RAY_TASK_VARIABLE, type(err).__name__, err, text)) from None
    source = 'Ray job {}, attempt {}, node {}'.format(spec.get('job'), spec.get('attempt'), spec.get('node'))
    return ClusterConfig(cluster, job_name, task_index, source=source)


class TaskHost:
    """One task of a job on a Ray node: :func:`launch_on_ray` makes it a Ray actor (one per task,
    in a bundle of the job's placement group). It picks the task's port on its node
    (:meth:`where`), runs the task's process there until it ends (:meth:`run`), keeps the process's
    output for the driver (:meth:`output`), passes signals on (:meth:`signal`) and holds the
    chief's resize request (:meth:`request_resize`).

    The process is started in a session of its own and gets SIGKILL when the actor's process ends
    (killed, or its node lost): :mod:`~tensorpack_lite.utils.death_signal`, tied to the thread of
    :meth:`run`, which lasts as long as the process."""

    OUTPUT_LINES = 20000
    """Lines of output kept for the driver (older ones are dropped, and the driver says so)."""

    def __init__(self, job):
        self._job = job
        self._directory = tempfile.mkdtemp(prefix='tensorpack-lite-ray-')
        self._lock = threading.Lock()
        self._proc = None
        self._lines = collections.deque(maxlen=self.OUTPUT_LINES)
        self._count = 0
        self._resize = ResizeChannel(os.path.join(self._directory, 'resize'))

    def where(self):
        """This actor on its node: ``{'ip', 'node_id', 'pid', 'port', 'restarted'}``, ``port`` free
        on the node now (for the task's server)."""
        ray = _import_ray()
        context = ray.get_runtime_context()
        with held_free_port() as port:
            pass
        return {'ip': ray.util.get_node_ip_address(), 'node_id': context.get_node_id(), 'pid': os.getpid(),
                'port': port, 'restarted': bool(context.was_current_actor_reconstructed)}

    def run(self, argv, env, cwd=None, payload=None, chief=False):
        """Run the task's process until it ends; returns its exit code (128 + n for signal n).

        Args:
            argv (list[str]): the command (with ``payload``: ignored).
            env (dict): variables set over this node's environment (``TF_CONFIG`` is left out).
            cwd (str): its directory, where it exists on this node (else this actor's).
            payload (bytes): a pickled ``(function, args)`` to call in the process instead.
            chief (bool): give it the resize channel (:data:`RESIZE_REQUEST_VARIABLE`).
        """
        environ = {k: v for k, v in os.environ.items() if k not in _NOT_INHERITED}
        environ.update(env)
        environ['PYTHONUNBUFFERED'] = '1'
        self._resize.clear()
        if chief:
            environ[RESIZE_REQUEST_VARIABLE] = self._resize.path
        if payload is not None:
            path = os.path.join(self._directory, 'function.pickle')
            with open(path, 'wb') as f:
                f.write(payload)
            argv = [sys.executable, '-m', __name__, path]
        if cwd is not None and not os.path.isdir(cwd):
            self._add_line("[ray] the directory {} is not on this node: the task runs in {}".format(
                cwd, os.getcwd()))
            cwd = None
        proc = subprocess.Popen(command_with_death_signal(argv), env=environ, cwd=cwd, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        with self._lock:
            self._proc = proc
        for line in iter(proc.stdout.readline, b''):
            self._add_line(line.decode('utf-8', 'replace').rstrip('\n'))
        proc.stdout.close()
        return shell_exit_code(proc.wait())

    def _add_line(self, line):
        with self._lock:
            self._lines.append(line)
            self._count += 1

    def output(self, since):
        """``(dropped, lines, next)``: the lines of output from number ``since`` on (``dropped``
        of them no longer kept), and the number to ask for next."""
        with self._lock:
            first = self._count - len(self._lines)
            start = max(since, first)
            return start - since, list(self._lines)[start - first:], self._count

    def signal(self, sig):
        """Send ``sig`` to the task's process (and the processes it started), if it runs."""
        with self._lock:
            proc = self._proc
        if proc is not None and proc.poll() is None:
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                pass

    def request_resize(self, why):
        """Ask the chief's process to stop after the current epoch (see
        :mod:`~tensorpack_lite.cluster.resize`)."""
        self._resize.request(why)

    def resize_acknowledged(self):
        """The epoch after which the chief stopped for the resize, or None."""
        return self._resize.acknowledged()


class Attempt:
    """One start of the job: ``number`` (1, 2, ...), ``num_worker``, ``num_ps``, ``tasks`` (one
    dict per task: ``name`` such as ``'worker 1'``, ``address``, ``ip``, ``node_id``, ``pid`` of
    its actor, ``restarted``: whether Ray restarted that actor), and when it ended: ``outcome``
    (``'finished'``, ``'resize'``, ``'failed'``, ``'stopped'``: a signal or the timeout),
    ``exit_codes`` (task name -> code, or the Ray error of a task whose actor died), ``cause``
    (the first failure) and ``resized_after`` (the epoch the chief stopped after to be resized)."""

    def __init__(self, number, num_worker, num_ps, tasks):
        self.number, self.num_worker, self.num_ps, self.tasks = number, num_worker, num_ps, tasks
        self.outcome, self.exit_codes, self.cause, self.resized_after = None, {}, None, None

    def as_dict(self):
        return {'number': self.number, 'num_worker': self.num_worker, 'num_ps': self.num_ps,
                'tasks': self.tasks, 'outcome': self.outcome, 'exit_codes': self.exit_codes,
                'cause': self.cause, 'resized_after': self.resized_after}

    def describe(self):
        nodes = len({t['node_id'] for t in self.tasks})
        text = "attempt {}: {} worker(s){} on {} node(s): {}".format(
            self.number, self.num_worker, ', {} ps'.format(self.num_ps) if self.num_ps else '', nodes,
            self.outcome or 'running')
        if self.cause:
            text += " ({})".format(self.cause)
        if self.resized_after is not None:
            text += " (stopped after epoch {} to be resized)".format(self.resized_after)
        return text


class _Group:
    """The job's placement group and its actors (workers first, then ps tasks)."""

    def __init__(self, placement_group, actors, num_worker):
        self.placement_group, self.actors, self.num_worker = placement_group, actors, num_worker


class RayJob(Job):
    """A job of the distributed trainers on a Ray cluster (see the module's doc);
    :func:`launch_on_ray` makes one and runs it, under the supervisor
    (:func:`~tensorpack_lite.cluster.supervisor.supervise`).

    Args:
        command (list[str] or callable): the command every task runs (``['python', 'train.py',
            ...]``), or a function called in a process of its own on every task, with ``args``
            (pickled by Ray's cloudpickle: it may be defined in the driver's script).
        num_workers (int): the workers (with ``min_workers``: at most).
        num_ps (int): parameter-server tasks.
        min_workers (int): make the job elastic, between ``min_workers`` and ``num_workers``.
        placement (str): one of :data:`PLACEMENTS`.
        resources (dict): what each task reserves, e.g. ``{'CPU': 4, 'GPU': 1}`` (default 1 CPU).
        env (dict): environment variables of the tasks, set over their node's.
        cwd (str): the tasks' directory (default: the driver's, where it exists on a node).
        args (tuple): the arguments of a function ``command``.
        max_restarts (int): how many times the job is started again after a failure (and how
            many times Ray restarts each actor).
        timeout (float): seconds after which the job is ended (exit code 124); None: no bound.
        grace (float): seconds the other tasks get to stop on their own after one failed.
        ready_timeout (float): seconds to wait for the placement group and the actors (Ray
            restarting them included) at each start.
        node_loss_timeout (float): seconds to wait, after an actor died, for Ray to say whether
            its node was lost (elastic jobs then go on with fewer workers) or the actor restarts.
        resize_check_interval (float): seconds between two looks for room for more workers.
        name (str): the job's name, in the tasks' cluster source (default ``'tensorpack-lite'``).
        output: a text stream for the tasks' prefixed output and the driver's lines (default:
            stdout).
        on_event (callable): called as ``on_event(kind, attempt)`` with kind ``'started'``,
            ``'resize-requested'`` or ``'ended'`` (e.g. to record the attempts).
    """

    POLL_INTERVAL = 0.25
    """Seconds between two looks at the tasks and their output."""

    KILL_WAIT = 30.0
    """Seconds to wait for tasks after SIGKILL before their actors are given up (a lost node)."""

    def __init__(self, command, num_workers, num_ps=0, min_workers=None, placement='PACK', resources=None,
                 env=None, cwd=None, args=(), max_restarts=3, timeout=None, grace=30.0, ready_timeout=300.0,
                 node_loss_timeout=60.0, resize_check_interval=10.0, name=None, output=None, on_event=None):
        if not callable(command) and (isinstance(command, str) or not command
                                      or not all(isinstance(a, str) for a in command)):
            raise ValueError("launch_on_ray: command must be a non-empty list of str (the command of every "
                             "task) or a function, got {!r}".format(command))
        for what, value, least in (('num_workers', num_workers, 1), ('num_ps', num_ps, 0),
                                   ('max_restarts', max_restarts, 0)):
            if not is_int(value) or value < least:
                raise ValueError("launch_on_ray: {} must be an integer >= {}, got {!r}".format(
                    what, least, value))
        if min_workers is not None and (not is_int(min_workers) or not 1 <= min_workers <= num_workers):
            raise ValueError("launch_on_ray: min_workers must be an integer between 1 and num_workers={}, "
                             "got {!r}".format(num_workers, min_workers))
        if placement not in PLACEMENTS:
            raise ValueError("launch_on_ray: placement must be one of {}, got {!r}".format(
                ', '.join(PLACEMENTS), placement))
        resources = {'CPU': 1} if resources is None else dict(resources)
        if not resources or any(not isinstance(v, (int, float)) or isinstance(v, bool) or v < 0
                                for v in resources.values()) or not any(resources.values()):
            raise ValueError("launch_on_ray: resources must map resource names to amounts >= 0, some > 0, "
                             "got {!r}".format(resources))
        self.command, self.args = command, tuple(args)
        self.num_workers, self.num_ps = int(num_workers), int(num_ps)
        self.min_workers = self.num_workers if min_workers is None else int(min_workers)
        self.placement, self.resources = placement, resources
        self.env = {str(k): str(v) for k, v in (env or {}).items()}
        self.cwd = os.getcwd() if cwd is None else str(cwd)
        self.max_restarts, self.timeout, self.grace = int(max_restarts), timeout, float(grace)
        self.ready_timeout, self.node_loss_timeout = float(ready_timeout), float(node_loss_timeout)
        self.resize_check_interval = float(resize_check_interval)
        self.name = name or 'tensorpack-lite'
        self._output = output if output is not None else sys.stdout
        self._output_lock = threading.Lock()
        self._on_event = on_event
        self.attempts = []
        """Every :class:`Attempt`, in order."""
        self.exit_code = None
        """0 when the training ended; else that of the last attempt's first failure (143 after
        SIGTERM, 124 after the timeout)."""
        self._ray = None
        self._group, self._wanted = None, self.num_workers

    @property
    def elastic(self):
        return self.min_workers < self.num_workers

    def describe(self):
        """Every attempt in one line each, and the exit code."""
        return '\n'.join([a.describe() for a in self.attempts] + ['exit code {}'.format(self.exit_code)])

    # ----- output -------------------------------------------------------------------------------

    def say(self, text):
        """Write a line of the driver's own (``[ray] text``)."""
        self._write(['[ray] ' + text])

    def _write(self, lines):
        if not lines:
            return
        with self._output_lock:
            self._output.write(''.join(line + '\n' for line in lines))
            self._output.flush()

    def _event(self, kind, attempt):
        if self._on_event is not None:
            self._on_event(kind, attempt)

    # ----- the job (driven by the supervisor) ---------------------------------------------------------

    def run(self):
        """Run the job until it ends; returns :attr:`exit_code`. SIGINT and SIGTERM are passed on to
        the tasks (from the main thread only: elsewhere no handler can be set)."""
        ray = self._ray = _import_ray()
        started_ray = not ray.is_initialized()
        if started_ray:
            ray.init(log_to_driver=False)
        try:
            self.exit_code = supervise(self, RestartPolicy(self.max_restarts), self.timeout,
                                       forward_signals=threading.current_thread() is threading.main_thread())
        finally:
            self._group = self._remove(self._group)
            if started_ray:
                ray.shutdown()
        return self.exit_code

    def start_attempt(self, number, stopping):
        """Place the job (the group of the last attempt, or a new one) and start attempt ``number``
        in it; None when there is no room."""
        self._group = self._placed(self._group, self._wanted, stopping)
        if self._group is None:
            return None
        return self._start(self._group, number)

    def before_resize(self, attempt):
        self.say("the chief stopped after epoch {}; starting again with up to {} workers".format(
            attempt.record.resized_after, self.num_workers))
        self._group, self._wanted = self._remove(self._group), self.num_workers

    def before_restart(self, attempt, restart, policy):
        if self._nodes_lost(self._group, attempt.record):
            if self.elastic:
                self.say("a node of the job was lost: starting again with the workers that fit (at least "
                         "{})".format(self.min_workers))
                self._group, self._wanted = self._remove(self._group), self.num_workers
            else:
                self.say("a node of the job was lost: Ray places its tasks again (waiting up to {:g} s "
                         "for room)".format(self.ready_timeout))
        self.say("restart {} of {}, after: {}".format(restart, policy.max_restarts, attempt.record.cause))

    def give_up(self, attempt, attempts, policy):
        self.say("giving up after {} attempt(s); the last failure: {}".format(attempts, attempt.record.cause))

    # ----- placement ----------------------------------------------------------------------------------

    def _bundle_slots(self):
        """How many tasks' bundles fit on the alive nodes (by their total resources)."""
        per_node = []
        for node in self._ray.nodes():
            if not node.get('Alive'):
                continue
            have = node.get('Resources', {})
            per_node.append(min(int(math.floor(have.get(k, 0) / v + 1e-9)) for k, v in self.resources.items()
                                if v > 0))
        if not per_node:
            return 0
        if self.placement == 'STRICT_SPREAD':
            return sum(1 for slots in per_node if slots >= 1)
        if self.placement == 'STRICT_PACK':
            return max(per_node)
        return sum(per_node)

    def _workers_that_fit(self):
        return min(self.num_workers, self._bundle_slots() - self.num_ps)

    def _placed(self, group, wanted, stopping):
        """The group to run the next attempt in: ``group`` as it is (Ray restarts its actors), or a
        new one of ``wanted`` workers (elastic: as many as fit now, at least ``min_workers``, or
        fewer once ``stopping`` is set)."""
        if group is not None:
            return group
        num_worker = wanted
        if self.elastic:
            deadline = time.monotonic() + self.ready_timeout
            while True:
                num_worker = min(wanted, self._workers_that_fit())
                if num_worker >= self.min_workers or stopping.is_set() or time.monotonic() > deadline:
                    break
                time.sleep(1.0)
            if num_worker < self.min_workers:
                self.say("ERROR: the Ray cluster has room for {} worker(s) of {} ({} ps), fewer than "
                         "min_workers={}, after {:g} s".format(
                             max(num_worker, 0), self.resources, self.num_ps, self.min_workers,
                             self.ready_timeout))
                return None
        return self._create_group(num_worker)

    def _create_group(self, num_worker):
        ray = self._ray
        from ray.util.placement_group import placement_group, remove_placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy
        bundles = [dict(self.resources) for _ in range(num_worker + self.num_ps)]
        group = placement_group(bundles, strategy=self.placement, name='{}-{}'.format(self.name, os.getpid()))
        ready, _ = ray.wait([group.ready()], timeout=self.ready_timeout)
        if not ready:
            remove_placement_group(group)
            self.say("ERROR: the placement group of {} bundle(s) {} ({}) was not placed within {:g} s: "
                     "the Ray cluster has no room for it".format(len(bundles), self.resources, self.placement,
                                                                 self.ready_timeout))
            return None
        host = ray.remote(TaskHost)
        others = {k: v for k, v in self.resources.items() if k not in ('CPU', 'GPU')}
        actors = [host.options(scheduling_strategy=PlacementGroupSchedulingStrategy(group, index),
                               num_cpus=self.resources.get('CPU', 0), num_gpus=self.resources.get('GPU', 0),
                               resources=others, max_restarts=self.max_restarts,
                               max_concurrency=8).remote(self.name)
                  for index in range(len(bundles))]
        return _Group(group, actors, num_worker)

    def _remove(self, group):
        """End the group's actors (and so their tasks) and free its placement group; returns None."""
        if group is None:
            return None
        from ray.util.placement_group import remove_placement_group
        for actor in group.actors:
            try:
                self._ray.kill(actor, no_restart=True)
            except Exception:       # already gone
                pass
        try:
            remove_placement_group(group.placement_group)
        except Exception:           # already removed
            pass
        return None

    # ----- one attempt ------------------------------------------------------------------------------

    def _task_names(self, group):
        return ['worker {}'.format(k) for k in range(group.num_worker)] + \
            ['ps {}'.format(k) for k in range(self.num_ps)]

    def _locate(self, group):
        """Every actor's ``where()`` (Ray restarting an actor first), with distinct addresses."""
        ray = self._ray
        for _ in range(5):
            refs = [actor.where.remote() for actor in group.actors]
            ready, _ = ray.wait(refs, num_returns=len(refs), timeout=self.ready_timeout)
            if len(ready) < len(refs):
                raise TimeoutError("{} of the job's {} actor(s) did not start within {:g} s (ready_timeout): "
                                   "the Ray cluster has no room for them".format(
                                       len(refs) - len(ready), len(refs), self.ready_timeout))
            places = ray.get(refs)
            if len({(p['ip'], p['port']) for p in places}) == len(places):
                return places
        raise RuntimeError("the job's actors kept picking the same ports")

    def _start(self, group, number):
        """Start attempt ``number`` in ``group``; returns its :class:`_RunningRayAttempt`."""
        names = self._task_names(group)
        try:
            places = self._locate(group)
        except Exception as err:       # a Ray error: an actor that died for good, or no room
            attempt = Attempt(number, group.num_worker, self.num_ps, [])
            attempt.cause = "the actors did not start: {}: {}".format(type(err).__name__, _first_line(err))
            self.attempts.append(attempt)
            return _RunningRayAttempt(self, group, attempt, names, {})
        addresses = ['{}:{}'.format(p['ip'], p['port']) for p in places]
        cluster = cluster_of_addresses(addresses, group.num_worker)
        tasks = [dict(name=name, address=address, ip=p['ip'], node_id=p['node_id'], pid=p['pid'],
                      restarted=p['restarted']) for name, address, p in zip(names, addresses, places)]
        attempt = Attempt(number, group.num_worker, self.num_ps, tasks)
        self.attempts.append(attempt)
        self.say("attempt {}: {} worker(s){}, {}: {}".format(
            number, group.num_worker, ', {} ps'.format(self.num_ps) if self.num_ps else '', self.placement,
            ', '.join('{} at {}{}'.format(t['name'], t['address'],
                                          ' (actor restarted by Ray)' if t['restarted'] else '')
                      for t in tasks)))
        self._event('started', attempt)
        payload = None
        argv = self.command
        if callable(self.command):
            payload, argv = self._ray.cloudpickle.dumps((self.command, self.args)), []
        refs = {}
        for index, (actor, name) in enumerate(zip(group.actors, names)):
            job, task_index = name.split()
            spec = {'cluster': cluster, 'task': {'type': job, 'index': int(task_index)}, 'job': self.name,
                    'attempt': number, 'node': places[index]['ip']}
            env = dict(self.env, **{RAY_TASK_VARIABLE: json.dumps(spec)})
            refs[actor.run.remote(argv, env, self.cwd, payload, chief=index == 0)] = index
        return _RunningRayAttempt(self, group, attempt, names, refs)

    def _signal_all(self, group, pending, sig):
        for index in set(pending.values()):
            group.actors[index].signal.remote(int(sig))

    def _maybe_request_resize(self, group, attempt):
        """Ask the chief to stop after this epoch when one more worker fits now."""
        free = self._ray.available_resources()
        short = any(free.get(k, 0) + 1e-9 < v for k, v in self.resources.items() if v > 0)
        if short or self._workers_that_fit() <= group.num_worker:
            return False
        why = "room for {} worker(s) on the Ray cluster, the job has {}".format(
            self._workers_that_fit(), group.num_worker)
        try:
            self._ray.get(group.actors[0].request_resize.remote(why), timeout=self.ready_timeout)
        except Exception as err:
            self.say("could not ask the chief to resize: {}".format(_first_line(err)))
            return False
        self.say("asked the chief to stop after the current epoch: {}".format(why))
        self._event('resize-requested', attempt)
        return True

    def _resized_after(self, group):
        try:
            return self._ray.get(group.actors[0].resize_acknowledged.remote(), timeout=self.ready_timeout)
        except Exception:
            return None

    def _copy_output(self, group, names, readers, final=False):
        """Write the tasks' new output lines, prefixed; one call per actor at a time (``final``:
        wait for the last ones, bounded)."""
        ray = self._ray
        for index, reader in readers.items():
            if reader[1] is None:
                reader[1] = group.actors[index].output.remote(reader[0])
        refs = [reader[1] for reader in readers.values()]
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=10.0 if final else 0)
        ready = set(ready)
        for index, reader in readers.items():
            if reader[1] not in ready:
                continue
            ref, reader[1] = reader[1], None
            try:
                dropped, lines, reader[0] = ray.get(ref)
            except Exception:           # the actor died: its lines since the last copy are lost
                continue
            prefix = '[{}] '.format(names[index])
            head = ['{}... {} line(s) of output dropped'.format(prefix, dropped)] if dropped else []
            self._write(head + [prefix + line for line in lines])

    def _nodes_lost(self, group, attempt):
        """After a failed attempt: whether a node that held one of its actors was lost (else Ray
        restarts the actors that died where they were). Waits up to ``node_loss_timeout`` for Ray
        to tell."""
        died = [i for i, name in enumerate(self._task_names(group))
                if isinstance(attempt.exit_codes.get(name), str)]
        if not died or not attempt.tasks:
            return False
        ray = self._ray
        nodes = {attempt.tasks[i]['node_id'] for i in died}
        probes = [group.actors[i].where.remote() for i in died]
        deadline = time.monotonic() + self.node_loss_timeout
        while time.monotonic() < deadline:
            alive = {n['NodeID'] for n in ray.nodes() if n.get('Alive')}
            if nodes - alive:
                return True
            ready, _ = ray.wait(probes, num_returns=len(probes), timeout=0.5)
            if len(ready) == len(probes):
                try:
                    ray.get(probes)
                    return False
                except Exception:       # the actor cannot be restarted: treat its place as lost
                    return True
        return True


class _RunningRayAttempt(RunningAttempt):
    """The tasks of one attempt of a :class:`RayJob` (its :class:`Attempt` is ``record``), as the
    supervisor watches them: their output copied, the others ended ``grace`` seconds after a
    failure, the chief asked to resize when more workers fit."""

    def __init__(self, job, group, record, names, refs):
        self._job, self._group, self.record, self._names = job, group, record, names
        self._pending = dict(refs)
        self._readers = {index: [0, None] for index in set(refs.values())}   # next line, call running
        self._failed_at = self._kill_at = None
        self._signalled = self._timed_out = None     # the first signal received; the job's timeout
        self._resize_requested = False
        self._next_resize_check = time.monotonic() + job.resize_check_interval

    def poll(self):
        job, record = self._job, self.record
        if self._pending:
            done, _ = job._ray.wait(list(self._pending), num_returns=1, timeout=job.POLL_INTERVAL)
            for ref in done:
                self._task_ended(self._pending.pop(ref), ref)
            job._copy_output(self._group, self._names, self._readers)
            now = time.monotonic()
            if self._failed_at is not None and self._kill_at is None and now > self._failed_at + job.grace:
                job.say("ending the tasks still running: {}".format(
                    ', '.join(self._names[i] for i in self._pending.values())))
                self._end_all()
            if self._kill_at is not None and now > self._kill_at + job.KILL_WAIT:
                for index in self._pending.values():      # their actors are ended with the group
                    record.exit_codes[self._names[index]] = 'no answer from its actor'
                self._pending.clear()
            if (job.elastic and not self._resize_requested and self._failed_at is None
                    and self._stopping is None and self._group.num_worker < job.num_workers
                    and now >= self._next_resize_check):
                self._next_resize_check = now + job.resize_check_interval
                self._resize_requested = job._maybe_request_resize(self._group, record)
        if self._pending:
            return False
        self._finish()
        return True

    def _task_ended(self, index, ref):
        job, record, name = self._job, self.record, self._names[index]
        try:
            code = job._ray.get(ref)
        except Exception as err:     # the actor died: its process was killed or its node lost
            code = "{}: {}".format(type(err).__name__, _first_line(err))
        record.exit_codes[name] = code
        if code != 0 and record.cause is None and self._stopping is None:
            record.cause = "{} failed with {}".format(
                name, 'exit code {}'.format(code) if isinstance(code, int) else code)
            self._failed_at = time.monotonic()
            if self._pending:
                job.say("{}; the other tasks get {:g} s to stop".format(record.cause, job.grace))

    def _end_all(self):
        self._job._signal_all(self._group, self._pending, signal.SIGKILL)
        self._kill_at = time.monotonic()

    def _finish(self):
        """Copy the last output and decide the attempt's outcome."""
        job, record = self._job, self.record
        if self._readers:
            job._copy_output(self._group, self._names, self._readers, final=True)
        died = [name for name in self._names if isinstance(record.exit_codes.get(name), str)]
        if died and record.cause is not None and not record.cause.startswith(died[0] + ' '):
            # the root cause: the others fail because they lost it, and may be seen first
            record.cause = "{} failed with {}".format(died[0], record.exit_codes[died[0]])
        if self._stopping is not None:
            record.outcome, record.cause = 'stopped', self._stopping
        elif record.cause is not None:
            record.outcome = 'failed'
        else:
            record.resized_after = job._resized_after(self._group) if self._resize_requested else None
            record.outcome = 'finished' if record.resized_after is None else 'resize'
        job.say(record.describe())
        job._event('ended', record)

    @property
    def _stopping(self):
        """Why the attempt is being ended (a signal, the timeout), or None."""
        if self._signalled is not None:
            return 'received signal {}'.format(signal.Signals(self._signalled).name)
        if self._timed_out is not None:
            return 'the timeout ({:g} s) passed'.format(self._timed_out)
        return None

    def pass_signal(self, received, sig):
        if self._signalled is None:
            self._signalled = received
        self._job.say("received signal {}: passing {} on to every task".format(
            signal.Signals(received).name, signal.Signals(sig).name))
        self._job._signal_all(self._group, self._pending, sig)

    def time_out(self, timeout):
        self._job.say("the job's timeout ({:g} s) passed: ending every task".format(timeout))
        self._timed_out = timeout
        self._end_all()

    @property
    def outcome(self):
        return self.record.outcome

    @property
    def exit_code(self):
        if self.record.outcome in ('finished', 'resize'):
            return 0
        codes = [c for c in self.record.exit_codes.values() if isinstance(c, int) and c != 0]
        return codes[0] if codes else 1


def launch_on_ray(command, num_workers, **kwargs):
    """Run ``command`` (a list of str, or a function) as a job of ``num_workers`` workers on the Ray
    cluster this process is connected to (else ``ray.init()``'s) until it ends; returns the
    :class:`RayJob` (``exit_code``, ``attempts``). The keyword arguments are :class:`RayJob`'s."""
    job = RayJob(command, num_workers, **kwargs)
    job.run()
    return job


def _first_line(err):
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    return lines[0] if lines else type(err).__name__


def _run_pickled(path):
    """The process of a function task: call the pickled ``(function, args)``."""
    import pickle
    with open(path, 'rb') as f:
        function, args = pickle.load(f)
    function(*args)


if __name__ == '__main__':
    _run_pickled(sys.argv[1])
