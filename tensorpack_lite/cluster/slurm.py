"""The cluster of a Slurm job step, read from the environment ``srun`` gives every task, so
that ``srun -N 2 -n 8 python train.py`` needs no ``TF_CONFIG``::

    # every task of the step: the same command
    server = create_server()          # TF_CONFIG if set, else this module (see source.find_cluster)
    trainer = CollectiveAllReduceTrainer(['/cpu:0'], server)

One task of the cluster per Slurm task: Slurm task 0 is worker 0 (the chief), and with
``num_ps`` parameter servers (``$TENSORPACK_SLURM_NUM_PS``, default 0) the last ``num_ps``
Slurm tasks are ``ps`` 0, 1, ... Each task's host is the node Slurm put it on, from the step's
node list (``SLURM_STEP_NODELIST``, e.g. ``node[01-04]``), its tasks per node
(``SLURM_STEP_TASKS_PER_NODE``, e.g. ``2(x3),1``) and the distribution of tasks over nodes
(``SLURM_DISTRIBUTION``: ``block``, the default, or ``cyclic``). Its port is the one of its
index among the tasks of its node in the ports Slurm reserved for the step
(``SLURM_STEP_RESV_PORTS``: ``srun --resv-ports`` with ``MpiParams=ports=...`` in slurm.conf;
Slurm gives concurrent steps disjoint ports), else :func:`step_base_port` + that index: a block
derived from the job and step ids, as wide as the step's largest node needs, which two steps on
a node share with a probability of about 1 in 1400 (``$TENSORPACK_SLURM_PORT`` sets the base).

Only a job step counts: the batch script of ``sbatch`` is one process even when the job has
several tasks, and ``srun`` inside it starts the step. TensorFlow's ``SlurmClusterResolver``
is not used: it asks ``nvidia-smi`` for GPUs and fails on CPU-only nodes.
"""

import itertools
import os
import re
import zlib

from .config import cluster_of_rank

__all__ = ['expand_hostlist', 'expand_tasks_per_node', 'step_base_port', 'reserved_ports', 'slurm_cluster',
           'in_slurm_step', 'NUM_PS_VARIABLE', 'PORT_VARIABLE',
           'RESERVED_PORTS_VARIABLE']

NUM_PS_VARIABLE = 'TENSORPACK_SLURM_NUM_PS'
"""The environment variable with the number of parameter-server tasks of a Slurm step."""

PORT_VARIABLE = 'TENSORPACK_SLURM_PORT'
"""The environment variable with the first port of a Slurm step's tasks on each node."""

RESERVED_PORTS_VARIABLE = 'SLURM_STEP_RESV_PORTS'
"""Slurm's list of the ports it reserved for the step on every node (``12000-12003,12010``)."""

_PORT_LOW, _PORT_SLOTS, _SLOT_WIDTH = 10000, 1400, 16
# ports 10000..32415: below Linux's ephemeral range (32768..), where outgoing connections take theirs


def _split_top_level(text):
    """``text`` split at the commas outside brackets."""
    parts, depth, current = [], 0, ''
    for char in text:
        if char == ',' and depth == 0:
            parts.append(current)
            current = ''
            continue
        depth += {'[': 1, ']': -1}.get(char, 0)
        if depth < 0:
            raise ValueError("unbalanced ']' in the Slurm host list {!r}".format(text))
        current += char
    if depth:
        raise ValueError("unbalanced '[' in the Slurm host list {!r}".format(text))
    return parts + [current]


def _expand_range(body, text):
    """``'01-03,7'`` -> ['01', '02', '03', '7'] (zero padding kept)."""
    values = []
    for part in body.split(','):
        match = re.fullmatch(r'(\d+)(?:-(\d+))?', part)
        if not match:
            raise ValueError("bad range {!r} in the Slurm host list {!r}".format(part, text))
        first, last = match.group(1), match.group(2) or match.group(1)
        if int(last) < int(first):
            raise ValueError("bad range {!r} in the Slurm host list {!r}".format(part, text))
        values += [str(n).zfill(len(first)) for n in range(int(first), int(last) + 1)]
    return values


def expand_hostlist(text):
    """The host names of a Slurm host list, in order.

    Example::

        expand_hostlist('node[01-03,07],gpu5')   # ['node01', 'node02', 'node03', 'node07', 'gpu5']
        expand_hostlist('rack[1-2]-n[1-2]')      # ['rack1-n1', 'rack1-n2', 'rack2-n1', 'rack2-n2']
    """
    hosts = []
    for item in _split_top_level(text.strip()):
        if not item:
            raise ValueError("empty host name in the Slurm host list {!r}".format(text))
        pieces = re.split(r'\[([^\]]*)\]', item)     # text, range, text, range, ..., text
        choices = [[piece] if k % 2 == 0 else _expand_range(piece, text) for k, piece in enumerate(pieces)]
        hosts += [''.join(combination) for combination in itertools.product(*choices)]
    return hosts


def expand_tasks_per_node(text):
    """The tasks of each node of a Slurm ``*_TASKS_PER_NODE`` value, e.g. ``'2(x3),1'`` ->
    [2, 2, 2, 1]."""
    counts = []
    for item in text.strip().split(','):
        match = re.fullmatch(r'(\d+)(?:\(x(\d+)\))?', item)
        if not match:
            raise ValueError("bad Slurm tasks-per-node value {!r}".format(text))
        counts += [int(match.group(1))] * int(match.group(2) or 1)
    return counts


def step_base_port(job_id, step_id, environ=None, width=_SLOT_WIDTH):
    """The first port of a step's tasks on each node: ``$TENSORPACK_SLURM_PORT`` if set, else
    one of the blocks of ``width`` ports (16: 1400 blocks) in 10000..32415, chosen from the job
    and step ids."""
    environ = os.environ if environ is None else environ
    if environ.get(PORT_VARIABLE):
        return int(environ[PORT_VARIABLE])
    width = max(int(width), _SLOT_WIDTH)
    slots = _PORT_SLOTS * _SLOT_WIDTH // width
    slot = zlib.crc32('{}.{}'.format(job_id, step_id).encode()) % slots
    return _PORT_LOW + slot * width


def reserved_ports(text):
    """The ports of ``SLURM_STEP_RESV_PORTS`` (``'12000-12003,12010'``), in order."""
    ports = []
    for item in text.strip().split(','):
        match = re.fullmatch(r'(\d+)(?:-(\d+))?', item.strip())
        if not match or int(match.group(2) or match.group(1)) < int(match.group(1)):
            raise ValueError("bad Slurm port list {}={!r}".format(RESERVED_PORTS_VARIABLE, text))
        ports += range(int(match.group(1)), int(match.group(2) or match.group(1)) + 1)
    return ports


def _node_ports(environ, largest_node):
    """The ports of the first ``largest_node`` tasks of a node: Slurm's reservation, or a block."""
    if environ.get(RESERVED_PORTS_VARIABLE) and not environ.get(PORT_VARIABLE):
        ports = reserved_ports(environ[RESERVED_PORTS_VARIABLE])
        if len(ports) < largest_node:
            raise ValueError(
                "Slurm reserved {} port(s) for this step ({}={}), but a node runs {} of its tasks: give "
                "every task a port with srun --resv-ports={} (MpiParams=ports= in slurm.conf must hold "
                "that many)".format(len(ports), RESERVED_PORTS_VARIABLE, environ[RESERVED_PORTS_VARIABLE],
                                    largest_node, largest_node))
        return ports[:largest_node]
    base = step_base_port(environ.get('SLURM_JOB_ID', '0'), environ.get('SLURM_STEP_ID', '0'), environ,
                          width=largest_node)
    return list(range(base, base + largest_node))


def _task_nodes(num_tasks, tasks_per_node, distribution):
    """The node index of every task (by Slurm task id)."""
    if sum(tasks_per_node) != num_tasks:
        raise ValueError("Slurm: the step has {} tasks but its tasks per node add up to {}".format(
            num_tasks, sum(tasks_per_node)))
    if distribution == 'block':
        nodes = [node for node, count in enumerate(tasks_per_node) for _ in range(count)]
    else:   # cyclic: one task per node in turn, skipping the nodes that have all theirs
        left, nodes = list(tasks_per_node), []
        while len(nodes) < num_tasks:
            for node, count in enumerate(left):
                if count:
                    nodes.append(node)
                    left[node] -= 1
    return nodes


_STEP_VARIABLES = ('SLURM_PROCID', 'SLURM_STEP_NUM_TASKS', 'SLURM_STEP_NODELIST', 'SLURM_STEP_TASKS_PER_NODE')


def in_slurm_step(environ=None):
    """Whether this process is a task of a Slurm job step (started by ``srun``)."""
    environ = os.environ if environ is None else environ
    return all(environ.get(name) for name in _STEP_VARIABLES)


def slurm_cluster(environ=None, num_ps=None):
    """The :class:`ClusterConfig` of this Slurm task's job step (see the module's doc).

    Args:
        environ (dict): default ``os.environ``.
        num_ps (int): parameter-server tasks; default ``$TENSORPACK_SLURM_NUM_PS`` or 0.

    Raises:
        ValueError: not in a Slurm step, or a step this cannot map (naming the variable).
    """
    environ = os.environ if environ is None else environ
    if not in_slurm_step(environ):
        raise ValueError("Not a task of a Slurm job step (no {}): start it with srun".format(
            ', '.join(_STEP_VARIABLES)))
    num_tasks, procid = int(environ['SLURM_STEP_NUM_TASKS']), int(environ['SLURM_PROCID'])
    if num_ps is None:
        num_ps = int(environ.get(NUM_PS_VARIABLE) or 0)
    if not 0 <= num_ps < num_tasks:
        raise ValueError("Slurm: {} parameter-server tasks ({}) leave no worker among the step's {} "
                         "tasks".format(num_ps, NUM_PS_VARIABLE, num_tasks))
    hosts = expand_hostlist(environ['SLURM_STEP_NODELIST'])
    tasks_per_node = expand_tasks_per_node(environ['SLURM_STEP_TASKS_PER_NODE'])
    if len(tasks_per_node) != len(hosts):
        raise ValueError("Slurm: SLURM_STEP_TASKS_PER_NODE={!r} does not match the {} nodes of "
                         "SLURM_STEP_NODELIST={!r}".format(environ['SLURM_STEP_TASKS_PER_NODE'], len(hosts),
                                                           environ['SLURM_STEP_NODELIST']))
    distribution = (environ.get('SLURM_DISTRIBUTION') or 'block').split(':')[0]
    if distribution not in ('block', 'cyclic'):
        raise ValueError("Slurm: task distribution {!r} (SLURM_DISTRIBUTION) is not supported: use block "
                         "(the default) or cyclic, or set TF_CONFIG for every task".format(distribution))
    nodes = _task_nodes(num_tasks, tasks_per_node, distribution)
    ports = _node_ports(environ, max(tasks_per_node))
    seen_on_node, addresses, locals_ = {}, [], []
    for node in nodes:
        local = seen_on_node[node] = seen_on_node.get(node, -1) + 1
        addresses.append('{}:{}'.format(hosts[node], ports[local]))
        locals_.append(local)
    if environ.get('SLURM_LOCALID') not in (None, str(locals_[procid])):
        raise ValueError("Slurm: task {} is local task {} of its node (SLURM_LOCALID), but the {} "
                         "distribution over {} puts it at {}: set TF_CONFIG for every task".format(
                             procid, environ['SLURM_LOCALID'], distribution, environ['SLURM_STEP_NODELIST'],
                             locals_[procid]))
    return cluster_of_rank(addresses, num_ps, procid, source='Slurm job step {}.{}'.format(
        environ.get('SLURM_JOB_ID', '?'), environ.get('SLURM_STEP_ID', '?')))
