"""tensorpack_lite/cluster/source.py: one function for where a task's cluster comes from
(hosts=, a Ray task, TF_CONFIG, a Slurm job step, an MPI launcher), in that order, naming the source it used;
the MPI source with real ranks under the wheel's mpiexec."""

import json
import logging
import os
import subprocess
import sys

import pytest

from helpers.logs import capture_logs
from helpers.processes import run_bounded
from tensorpack_lite.cluster.slurm import PORT_VARIABLE
from tensorpack_lite.cluster.source import find_cluster, mpi_rank_and_size
from tensorpack_lite.multiprocess.server import create_server

MPIEXEC = os.path.join(os.path.dirname(sys.executable), 'mpiexec')
SLURM = {'SLURM_PROCID': '1', 'SLURM_STEP_NUM_TASKS': '2', 'SLURM_STEP_NODELIST': '127.0.0.1',
         'SLURM_STEP_TASKS_PER_NODE': '2', 'SLURM_JOB_ID': '41', 'SLURM_STEP_ID': '3', PORT_VARIABLE: '20000'}
TF_CONFIG = json.dumps({'cluster': {'worker': ['localhost:2001', 'localhost:2002']},
                        'task': {'type': 'worker', 'index': 0}})
MPI = {'PMI_RANK': '2', 'PMI_SIZE': '3'}
HOSTS = ['127.0.0.1:3001', '127.0.0.1:3002', '127.0.0.1']


@pytest.mark.quick
def test_each_source_in_its_order_and_the_cluster_names_it():
    env = dict(SLURM, TF_CONFIG=TF_CONFIG, **MPI)
    with capture_logs() as records:
        given = find_cluster(hosts=HOSTS, environ=env)
    # hosts= wins; the rank is the launcher's (Slurm's before MPI's); a bare host gets port 2222
    assert (given.source, given.job_name, given.task_index) == ('hosts=', 'worker', 1)
    assert given.cluster == {'worker': ['127.0.0.1:3001', '127.0.0.1:3002', '127.0.0.1:2222']}
    assert records.messages(logging.INFO) == [
        '[cluster] worker 1 (127.0.0.1:3002) of 3 task(s), from hosts=.']

    assert find_cluster(environ=env).source == 'TF_CONFIG'
    del env['TF_CONFIG']
    slurm = find_cluster(environ=env)
    assert slurm.source == 'Slurm job step 41.3' and slurm.address('worker', 1) == '127.0.0.1:20001'
    assert slurm.for_task('worker', 0).source == 'Slurm job step 41.3'

    with_ps = find_cluster(hosts=HOSTS, num_ps=1, environ=MPI)      # MPI's rank 2 of 3: the ps task
    assert (with_ps.job_name, with_ps.task_index, with_ps.cluster['ps']) == ('ps', 0, ['127.0.0.1:2222'])
    assert mpi_rank_and_size({'OMPI_COMM_WORLD_RANK': '1', 'OMPI_COMM_WORLD_SIZE': '4'}) == (
        1, 4, 'OMPI_COMM_WORLD_RANK')
    assert mpi_rank_and_size({'PMI_RANK': '1'}) is None


@pytest.mark.parametrize('kwargs, env, message', [
    ({'hosts': HOSTS}, {}, 'hosts= given without rank=, and no launcher'),
    ({'hosts': HOSTS}, {'PMI_RANK': '0', 'PMI_SIZE': '2'},
     r'3 hosts given, but the MPI launcher started 2 processes \(PMI_SIZE\)'),
    ({'hosts': HOSTS, 'rank': 3}, {}, 'rank 3 is not an index of the 3 hosts'),
    ({'hosts': '127.0.0.1:3001'}, {}, "hosts= must be a non-empty list of 'host:port'"),
    ({'hosts': HOSTS, 'rank': 0, 'num_ps': 3}, {}, '3 parameter-server task.s. leave no worker among 3'),
])
def test_a_source_that_cannot_give_this_task_names_what_is_missing(kwargs, env, message):
    with pytest.raises(ValueError, match=message):
        find_cluster(environ=env, **kwargs)


def test_without_any_source_create_server_says_every_way_to_give_one(monkeypatch):
    for name in list(SLURM) + list(MPI) + ['TF_CONFIG', 'OMPI_COMM_WORLD_RANK', 'MV2_COMM_WORLD_RANK']:
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ValueError, match=r'No cluster: none of its sources applies\. Give hosts=.*TF_CONFIG.*'
                                         r'srun \(Slurm\).*mpiexec \(MPI: PMI_RANK'):
        create_server()


RANK_SCRIPT = r'''
import json, logging, os, sys
from tensorpack_lite.cluster.source import find_cluster
logged = []
handler = logging.Handler()
handler.emit = lambda record: logged.append(record.getMessage())
logging.getLogger('tensorpack_lite').addHandler(handler)
cluster = find_cluster(num_ps=int(sys.argv[1]))
found = [cluster.source, cluster.job_name, cluster.task_index, cluster.cluster, logged]
with open(os.path.join(sys.argv[2], 'rank-{}.json'.format(os.environ['PMI_RANK'])), 'w') as f:
    json.dump(found, f)     # a file per rank: mpiexec may interleave the ranks' output lines
'''


@pytest.mark.skipif(not os.path.exists(MPIEXEC), reason='no mpiexec next to {} (pip install '
                    '"tensorpack_lite[mpi]" installs MPICH with it)'.format(sys.executable))
def test_mpi_ranks_exchange_their_addresses_and_agree_on_one_cluster(tmp_path):
    pytest.importorskip('mpi4py', reason='the MPI source needs mpi4py: pip install "tensorpack_lite[mpi]"')
    script = tmp_path / 'rank.py'
    script.write_text(RANK_SCRIPT)
    env = {k: v for k, v in os.environ.items() if k != 'TF_CONFIG' and not k.startswith('SLURM_')}
    code, output = run_bounded([MPIEXEC, '-launcher', 'fork', '-n', '3', sys.executable, str(script), '1',
                                str(tmp_path)], timeout=120, env=env)
    assert code == 0, output
    results = [json.loads((tmp_path / 'rank-{}.json'.format(rank)).read_text()) for rank in range(3)]
    assert [r[0] for r in results] == ['MPI (PMI_RANK {} of 3)'.format(rank) for rank in range(3)]
    assert [(job, index) for _, job, index, _, _ in results] == [('worker', 0), ('worker', 1), ('ps', 0)]
    clusters = [cluster for _, _, _, cluster, _ in results]
    assert clusters[0] == clusters[1] == clusters[2]          # every rank holds the same cluster
    addresses = clusters[0]['worker'] + clusters[0]['ps']
    assert len(addresses) == 3 and len(set(addresses)) == 3   # three ports, held apart while they were picked
    hostname = subprocess.check_output(['hostname'], text=True).strip()
    assert all(a.rsplit(':', 1)[0] == hostname for a in addresses)
    assert results[2][4] == ['[cluster] ps 0 ({}) of 3 task(s), from MPI (PMI_RANK 2 of 3).'.format(
        addresses[2])]


def test_a_ray_task_comes_before_tf_config_slurm_and_mpi_and_is_named(tmp_path):
    """launch_on_ray gives each task its cluster in TENSORPACK_LITE_RAY_TASK, which a Ray node's other
    variables (a TF_CONFIG, a Slurm allocation) do not override; importing the module imports no Ray."""
    from tensorpack_lite.cluster.ray import RAY_TASK_VARIABLE
    spec = {'cluster': {'worker': ['127.0.0.1:4001', '127.0.0.1:4002'], 'ps': ['127.0.0.1:4003']},
            'task': {'type': 'worker', 'index': 1}, 'job': 'digits', 'attempt': 2, 'node': '127.0.0.1'}
    env = dict(SLURM, TF_CONFIG=TF_CONFIG, **MPI, **{RAY_TASK_VARIABLE: json.dumps(spec)})
    with capture_logs() as records:
        cluster = find_cluster(environ=env)
    assert (cluster.job_name, cluster.task_index, cluster.num_worker, cluster.num_ps) == ('worker', 1, 2, 1)
    assert cluster.source == 'Ray job digits, attempt 2, node 127.0.0.1'
    assert records.messages(logging.INFO) == [
        '[cluster] worker 1 (127.0.0.1:4002) of 3 task(s), from Ray job digits, attempt 2, node 127.0.0.1.']
    with pytest.raises(ValueError, match=r'TENSORPACK_LITE_RAY_TASK is not a task of launch_on_ray \(Key'):
        find_cluster(environ={RAY_TASK_VARIABLE: json.dumps({'cluster': spec['cluster']})})
    run = subprocess.run([sys.executable, '-c', 'import sys, tensorpack_lite.cluster.source, '
                          'tensorpack_lite.cluster.ray; print("ray" in sys.modules)'],
                         capture_output=True, text=True, timeout=120)
    assert run.stdout.strip() == 'False', run.stderr
