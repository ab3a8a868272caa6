"""The MPI engine with its ranks on separate machines: hosts of a NetnsCluster (cluster/netns.py),
each rank inside its host (network namespace, hostname), mpiexec on a host of its own, the
ranks' bytes on the bridge. HorovodTrainer on 2 hosts trains like one process on the combined
batch; a rank killed on host 1, or host 1's link cut, is named by rank 0 on host 0 and every
process of the job ends. Skipped, saying why, where namespaces cannot be made or MPICH's
mpiexec is missing."""

import os
import re
import signal
import subprocess
import sys
import threading
import time

import pytest

from helpers.processes import kill_process_tree, run_bounded
from helpers.timing import wait_until
from helpers.mpi import (BATCH, EPOCHS, LR, MPIEXEC, RUN_TIMEOUT, SCRIPT, STEPS, SUPERVISED,
                         assert_bit_identical, assert_close, load_rank, needs_mpiexec, pid_of_rank, rank_env,
                         rank_logs, reference_weights)
from tensorpack_lite.cluster import netns

REASON = netns.unavailable()
pytestmark = pytest.mark.skipif(REASON is not None, reason=str(REASON))
pytest.importorskip('mpi4py', reason='the MPI engine needs mpi4py: pip install "tensorpack_lite[mpi]"')

PEER_TIMEOUT = 6   # $TENSORPACK_MPI_PEER_TIMEOUT of the loss tests (default 10): 12 heartbeats of 0.5 s
LOST = re.compile(r'MPI rank (\d+) \(pid (\d+) on (\S+)\) has not been heard from for [\d.]+ s '
                  r'\(it died, hangs or its link is cut\) while rank (\d+) waited for it in (\w+); '
                  r'aborting the job\.')

ALLREDUCE = """
import socket, numpy as np
from mpi4py import MPI
def sent():
    with open('/sys/class/net/eth0/statistics/tx_bytes') as f:
        return int(f.read())
data = np.ones(1 << 22, np.float32)
total = np.empty_like(data)
before = sent()
MPI.COMM_WORLD.Allreduce(data, total)
local = MPI.COMM_WORLD.Split_type(MPI.COMM_TYPE_SHARED).Get_size()
print('rank {} on {}: local size {}, sum {}, eth0 sent {}'.format(
    MPI.COMM_WORLD.Get_rank(), socket.gethostname(), local, total[0], sent() - before), flush=True)
"""


def rank_hosts(output, num):
    """{rank: hostname} from the engine's start lines."""
    pattern = r'MPI rank (\d+) of {} \(local rank \d+ of \d+\) is pid \d+ on (\S+)\.'.format(num)
    found = dict(re.findall(pattern, output))
    return {int(rank): host for rank, host in found.items()}


@needs_mpiexec
@pytest.mark.parametrize('ranks_per_host', [1, 2])
def test_ranks_run_on_their_hosts_and_talk_over_the_bridge(ranks_per_host, tmp_path):
    """16 MB summed by the ranks of 2 hosts: each rank's hostname is its host's namespace, the
    ranks of a host (only they) share memory, and every host sent at least the 16 MB on its link."""
    with netns.NetnsCluster(3) as net:
        command = net.mpiexec_command(MPIEXEC, [0, 1], [sys.executable, '-c', ALLREDUCE],
                                      ranks_per_host=ranks_per_host)
        code, output = run_bounded(command, RUN_TIMEOUT, env=rank_env(), cwd=tmp_path)
    assert code == 0, output
    lines = re.findall(r'rank (\d+) on (\S+): local size (\d+), sum ([\d.]+), eth0 sent (\d+)', output)
    assert sorted(int(line[0]) for line in lines) == list(range(2 * ranks_per_host)), output
    for rank, host, local, total, sent in lines:
        assert host == net.namespaces[int(rank) // ranks_per_host]
        assert (int(local), float(total)) == (ranks_per_host, 2.0 * ranks_per_host)
    for host in (0, 1):
        assert sum(int(line[4]) for line in lines if line[1] == net.namespaces[host]) >= 16 << 20


@needs_mpiexec
def test_two_hosts_train_like_one_process_on_the_combined_batch(tmp_path):
    """HorovodTrainer, one rank on each of 2 hosts behind 200 Mbit/s links: bit-identical
    replicas with one process's weights on the batches of both ranks."""
    args = ['--out', str(tmp_path), '--batch', str(BATCH), '--steps-per-epoch',
            str(STEPS), '--epochs', str(EPOCHS), '--lr', str(LR),
            '--no-epoch-broadcast']
    with netns.NetnsCluster(3, rate_mbit=200) as net:
        command = net.mpiexec_command(MPIEXEC, [0, 1], [sys.executable, SCRIPT] + args)
        code, output = run_bounded(command, RUN_TIMEOUT, env=rank_env(), cwd=tmp_path)
    assert code == 0, output[-6000:]
    assert rank_hosts(output, 2) == {0: net.namespaces[0], 1: net.namespaces[1]}, output[-6000:]
    for rank in range(2):   # what each rank's engine listens on, and who reaches it (docs/security.md)
        assert re.search(r'WRN HorovodTrainer rank {} \(MPI .*\) listens on port \d+ \({addr}: {addr} '
                         r'\(private\)\)\. A peer that reaches them can send this rank tensors'.format(
                             rank, addr=re.escape(net.address(rank))), output), output[-6000:]
    ranks = [load_rank(tmp_path, r) for r in range(2)]
    assert [(r['local_rank'], r['local_size']) for r in ranks] == [(0, 1), (0, 1)]
    assert len(set(ranks[0]['step_hashes'])) == STEPS * EPOCHS
    assert_bit_identical(ranks)
    reference = reference_weights(2, LR)
    assert_close(ranks[0]['weights'], reference, rtol=1e-4, atol=1e-5)


class Job:
    """mpiexec (a NetnsCluster's command) in a session of its own, its output read as it comes."""

    def __init__(self, command, cwd, **env):
        self.lines, self.cwd = [], cwd
        self.proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, env=dict(rank_env(), **env), cwd=str(cwd),
                                     start_new_session=True)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.append(line)

    @property
    def output(self):
        return ''.join(self.lines)

    def wait_for(self, pattern, count=1):
        """The matches of ``pattern`` once there are ``count`` of them (fails after RUN_TIMEOUT)."""
        def seen():
            return len(re.findall(pattern, self.output)) >= count or self.proc.poll() is not None
        assert wait_until(seen, timeout=RUN_TIMEOUT, interval=0.1), self.output[-6000:]
        found = re.findall(pattern, self.output)
        assert len(found) >= count, self.output[-6000:]
        return found

    def wait(self):
        try:
            code = self.proc.wait(timeout=RUN_TIMEOUT)
        except subprocess.TimeoutExpired:
            pytest.fail("mpiexec did not end in {} s:\n{}\nThe ranks' logs:\n{}".format(
                RUN_TIMEOUT, self.output[-6000:], rank_logs(self.cwd, 2)[-6000:]))
        self._reader.join(RUN_TIMEOUT)
        return code

    def kill(self):
        kill_process_tree(self.proc)
        self.proc.wait()


def kill_hosts(net):
    """SIGKILL every process left in the hosts of ``net``."""
    for host in range(len(net.namespaces)):
        for pid in net.pids(host):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def run_and_lose_host1(net, tmp_path, lose):
    """2 ranks (hosts 0 and 1) training under the documented ``-disable-auto-cleanup`` +
    cluster.mpi_rank; once both are in epoch 2, ``lose(pid of rank 1)``. Returns (exit code,
    output, seconds from the loss to mpiexec's end, to the end of every process on each host)."""
    options, wrapper = SUPERVISED
    argv = wrapper + [sys.executable, SCRIPT, '--out', str(tmp_path), '--batch',
                      str(BATCH), '--steps-per-epoch', str(STEPS), '--epochs', '1000000',
                      '--lr', str(LR)]
    job = Job(net.mpiexec_command(MPIEXEC, [0, 1], argv, options=options), tmp_path,
              TENSORPACK_MPI_PEER_TIMEOUT=str(PEER_TIMEOUT))   # what is named does not depend on it
    try:
        pid, = job.wait_for(r'MPI rank 1 of 2 \(local rank 0 of 1\) is pid (\d+) on ')
        job.wait_for(r'Start Epoch 2 \.\.\.', count=2)
        lost = time.monotonic()
        lose(int(pid))
        ended = {}

        def everything_ended():
            for host in range(len(net.namespaces)):
                if host not in ended and not net.pids(host):
                    ended[host] = time.monotonic() - lost
            return len(ended) == len(net.namespaces)
        code = job.wait()
        mpiexec_ended = time.monotonic() - lost
        assert wait_until(everything_ended, timeout=RUN_TIMEOUT, interval=0.1), \
            {host: net.pids(host) for host in range(len(net.namespaces))}
        return code, job.output, mpiexec_ended, ended
    finally:
        job.kill()
        kill_hosts(net)


def assert_rank0_names_rank1(output, net, out_dir):
    """Rank 0 (host 0), waiting for rank 1 in training, named it with its pid and host (in
    its log: mpiexec's output may have lost it)."""
    pid = pid_of_rank(output, 1, 2)
    reports = [report for report in LOST.findall(rank_logs(out_dir, 2)) if report[3] == '0']
    assert reports, output[-6000:]
    assert {report[:3] for report in reports} == {('1', str(pid), net.namespaces[1])}, output[-6000:]
    assert reports[0][4] == 'allreduce'
    assert rank_hosts(output, 2)[0] == net.namespaces[0]


@needs_mpiexec
def test_a_rank_killed_on_another_host_is_named_by_a_survivor_which_ends_the_job(tmp_path):
    """SIGKILL to rank 1 (host 1): rank 0 (host 0) stops hearing its heartbeat, names it and
    aborts; every process on every host ends."""
    with netns.NetnsCluster(3) as net:
        code, output, mpiexec_ended, ended = run_and_lose_host1(
            net, tmp_path, lambda pid: os.kill(pid, signal.SIGKILL))
    print("killed rank 1: mpiexec ended {:.2f} s later (exit {}); the hosts' processes after {}".format(
        mpiexec_ended, code, {host: round(seconds, 2) for host, seconds in sorted(ended.items())}))
    assert_rank0_names_rank1(output, net, tmp_path)
    pid = pid_of_rank(output, 1, 2)
    assert 'mpi_rank: MPI rank 1 (pid {}) was ended by signal 9 (SIGKILL)'.format(pid) in output
    assert code == 1, output[-6000:]   # rank 0's MPI_Abort(MPI_COMM_WORLD, 1) (its message may be lost)
    assert not [r for r in range(2) if os.path.exists(str(tmp_path / 'rank{}.json'.format(r)))]


@needs_mpiexec
def test_a_cut_link_is_named_by_the_survivor_and_every_process_ends(tmp_path):
    """Host 1's link cut while rank 1 lives: rank 0 names it and aborts, mpiexec ends; rank 1,
    whose heartbeat no longer reaches mpiexec, ends itself (its output is lost with the link)."""
    with netns.NetnsCluster(3) as net:
        code, output, mpiexec_ended, ended = run_and_lose_host1(net, tmp_path, lambda pid: net.cut(1))
    print("cut host 1: mpiexec ended {:.2f} s later (exit {}); the hosts' processes after {}".format(
        mpiexec_ended, code, {host: round(seconds, 2) for host, seconds in sorted(ended.items())}))
    assert_rank0_names_rank1(output, net, tmp_path)
    assert code == 1, output[-6000:]   # rank 0's MPI_Abort(MPI_COMM_WORLD, 1) (its message may be lost)
