"""tensorpack_lite/cluster/slurm.py: the cluster of a Slurm job step from the environment srun
gives each task (host lists, tasks per node, distributions, ps tasks, ports), and TF_CONFIG
winning over it is in cluster/test_source.py. The runs under a real Slurm are in distributed/test_slurm.py."""

import pytest

from tensorpack_lite.graph_builder.mpi_ops import check_launched_size
from tensorpack_lite.cluster.slurm import (PORT_VARIABLE, RESERVED_PORTS_VARIABLE, expand_hostlist,
                                           expand_tasks_per_node, reserved_ports, slurm_cluster,
                                           step_base_port)


def step_env(procid, num_tasks, nodelist, tasks_per_node, **more):
    env = {'SLURM_PROCID': str(procid), 'SLURM_STEP_NUM_TASKS': str(num_tasks),
           'SLURM_STEP_NODELIST': nodelist, 'SLURM_STEP_TASKS_PER_NODE': tasks_per_node,
           'SLURM_JOB_ID': '4242', 'SLURM_STEP_ID': '0', PORT_VARIABLE: '20000'}
    env.update(more)
    return env


@pytest.mark.parametrize('text, hosts', [
    ('vm', ['vm']),
    ('node[01-03,07],gpu5', ['node01', 'node02', 'node03', 'node07', 'gpu5']),
    ('a[8-10]', ['a8', 'a9', 'a10']),
    ('rack[1-2]-n[1-2]', ['rack1-n1', 'rack1-n2', 'rack2-n1', 'rack2-n2']),
    ('x,y[3]', ['x', 'y3']),
])
def test_host_lists_expand_in_order(text, hosts):
    assert expand_hostlist(text) == hosts


@pytest.mark.parametrize('text, message', [
    ('node[01-03', "unbalanced '\\['"), ('node]', "unbalanced '\\]'"), ('node[3-1]', "bad range '3-1'"),
    ('node[a]', "bad range 'a'"), ('a,,b', 'empty host name'),
])
def test_a_bad_host_list_is_an_error_naming_it(text, message):
    with pytest.raises(ValueError, match=message):
        expand_hostlist(text)


def test_tasks_per_node_expand():
    assert expand_tasks_per_node('2(x3),1') == [2, 2, 2, 1]
    assert expand_tasks_per_node('4') == [4]
    with pytest.raises(ValueError, match="bad Slurm tasks-per-node value '2x3'"):
        expand_tasks_per_node('2x3')


def test_block_distribution_puts_consecutive_tasks_on_a_node_and_task_0_is_the_chief():
    addresses = ['127.0.0.1:20000', '127.0.0.1:20001', '127.0.0.2:20000', '127.0.0.2:20001',
                 '127.0.0.3:20000']
    for procid in range(5):
        cluster = slurm_cluster(step_env(procid, 5, '127.0.0.[1-3]', '2(x2),1'))
        assert cluster.cluster == {'worker': addresses}
        assert (cluster.job_name, cluster.task_index, cluster.is_chief) == ('worker', procid, procid == 0)


def test_cyclic_distribution_deals_the_tasks_over_the_nodes():
    cluster = slurm_cluster(step_env(3, 5, '127.0.0.[1-2]', '3,2', SLURM_DISTRIBUTION='cyclic:block',
                                     SLURM_LOCALID='1'))
    assert cluster.cluster == {'worker': ['127.0.0.1:20000', '127.0.0.2:20000', '127.0.0.1:20001',
                                          '127.0.0.2:20001', '127.0.0.1:20002']}
    assert cluster.task_index == 3


def test_the_last_tasks_are_parameter_servers_when_asked():
    env = step_env(3, 4, '127.0.0.[1-2]', '2(x2)', TENSORPACK_SLURM_NUM_PS='1')
    cluster = slurm_cluster(env)
    assert cluster.cluster == {'worker': ['127.0.0.1:20000', '127.0.0.1:20001', '127.0.0.2:20000'],
                               'ps': ['127.0.0.2:20001']}
    assert (cluster.job_name, cluster.task_index) == ('ps', 0)
    assert slurm_cluster(env, num_ps=0).cluster == {'worker': [a for job in ('worker', 'ps')
                                                               for a in cluster.cluster[job]]}
    with pytest.raises(ValueError, match='4 parameter-server tasks .* leave no worker'):
        slurm_cluster(env, num_ps=4)


@pytest.mark.parametrize('env, message', [
    (step_env(0, 2, '127.0.0.1', '2', SLURM_DISTRIBUTION='plane=2'),
     "distribution 'plane=2' .* not supported"),
    (step_env(1, 2, '127.0.0.[1-2]', '1(x2)', SLURM_LOCALID='1'), 'task 1 is local task 1 of its node'),
    (step_env(0, 3, '127.0.0.[1-2]', '1(x2)'), 'the step has 3 tasks but its tasks per node add up to 2'),
    (step_env(0, 3, '127.0.0.[1-2]', '1(x2)', SLURM_DISTRIBUTION='cyclic'), 'add up to 2'),
    (step_env(0, 2, '127.0.0.[1-3]', '2'), 'does not match the 3 nodes'),
    ({'SLURM_PROCID': '0', 'SLURM_NTASKS': '2'}, 'start it with srun'),
])
def test_a_step_that_cannot_be_mapped_is_an_error_naming_why(env, message):
    with pytest.raises(ValueError, match=message):
        slurm_cluster(env)


def test_steps_get_ports_of_their_own_below_the_ephemeral_range():
    bases = {step_base_port(job, step, {}) for job in range(1000, 1010) for step in range(3)}
    assert len(bases) == 30
    assert all(10000 <= b and b + 15 < 32768 for b in bases)
    assert step_base_port(7, 0, {PORT_VARIABLE: '31000'}) == 31000


def test_the_ports_slurm_reserved_for_the_step_are_used_and_too_few_is_an_error():
    assert reserved_ports('12000-12002,12010') == [12000, 12001, 12002, 12010]
    env = step_env(3, 5, '127.0.0.[1-3]', '2(x2),1', **{RESERVED_PORTS_VARIABLE: '12000-12003'})
    del env[PORT_VARIABLE]
    assert slurm_cluster(env).cluster == {'worker': [
        '127.0.0.1:12000', '127.0.0.1:12001', '127.0.0.2:12000', '127.0.0.2:12001', '127.0.0.3:12000']}
    env[RESERVED_PORTS_VARIABLE] = '12000'
    with pytest.raises(ValueError, match=r"Slurm reserved 1 port\(s\) for this step "
                                         r"\(SLURM_STEP_RESV_PORTS=12000\), but a node runs 2 of its "
                                         r"tasks: .*srun --resv-ports=2"):
        slurm_cluster(env)
    with pytest.raises(ValueError, match="bad Slurm port list"):
        reserved_ports('12003-12000')


def test_a_node_with_more_tasks_than_a_block_gets_a_wider_block_of_its_own():
    env = step_env(0, 20, '127.0.0.1', '20')
    del env[PORT_VARIABLE]
    ports = [int(a.rsplit(':', 1)[1]) for a in slurm_cluster(env).cluster['worker']]
    base = step_base_port('4242', '0', {}, width=20)
    assert ports == list(range(base, base + 20))
    assert (base - 10000) % 20 == 0 and base + 19 < 32768      # a block of 20, below the ephemeral range


def test_a_lone_mpi_rank_is_refused_when_the_launcher_started_more_tasks():
    check_launched_size(1, {})                                   # a plain python process
    check_launched_size(1, {'SLURM_STEP_NUM_TASKS': '1'})         # srun -n 1
    check_launched_size(4, {'SLURM_STEP_NUM_TASKS': '4'})         # srun --mpi=pmi2 -n 4
    refused = (r"MPI sees 1 rank, but SLURM_STEP_NUM_TASKS=2: Slurm started 2 tasks in this step, but its "
               r"MPI support is off .*'srun --mpi=pmi2'")
    with pytest.raises(RuntimeError, match=refused):
        check_launched_size(1, {'SLURM_STEP_NUM_TASKS': '2'})
    with pytest.raises(RuntimeError, match="OMPI_COMM_WORLD_SIZE=3: Open MPI's launcher started 3 processes"):
        check_launched_size(1, {'OMPI_COMM_WORLD_SIZE': '3'})
