"""Nobody outside a job can use its processes (docs/security.md).

A TensorFlow server runs any graph for whoever reaches its port. The attack: another program of
this machine opens a session on a task's port and runs, on that task, an op that reads a file
and one that writes one (distributed_scripts/attack_tf_server.py). Against a single-host job of
the launcher or of ``LocalCluster`` it fails (the tasks are in a private network namespace),
the job trains the same weights as without isolation, and with isolation turned off the same
attack reads and writes (so the test can fail). Outbound connections from the job still work.
Multi-host servers say what they expose and refuse a public address unless the network is
declared trusted (hosts in network namespaces, tensorpack_lite/cluster/netns.py).
"""

import ast
import functools
import http.server
import io
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading

import pytest

from helpers.paths import TESTS_DIR
from helpers.processes import kill_process_tree, subprocess_env
from helpers.timing import HANG_TIMEOUT, wait_until
from tensorpack_lite.cluster import exposure, netns
from tensorpack_lite.cluster import private_network as private_network_module
from tensorpack_lite.cluster.config import free_ports
from tensorpack_lite.cluster.launch import LocalCluster
from tensorpack_lite.cluster.private_network import HOST_LOOPBACK, PrivateNetwork, PrivateNetworkUnavailable

HERE = TESTS_DIR
REPO = os.path.dirname(HERE)
SCRIPTS = os.path.join(HERE, 'distributed_scripts')
TRAIN = os.path.join(SCRIPTS, 'train_tiny_multiworker.py')
ATTACK = os.path.join(SCRIPTS, 'attack_tf_server.py')
RUN_TIMEOUT = 180      # a hang, inside the test's own 10 minutes (helpers/distributed.py)
ATTACK_TIMEOUT = 2.0   # a session without an answer gives up after it; one with an answer is done at once
TRAIN_ARGS = ['--trainer', 'collective', '--steps-per-epoch', 4, '--epochs', 1, '--hold-after-server']


@functools.lru_cache(maxsize=None)
def private_network_reason():
    """None when a private network with outbound connectivity can be made here, else why not."""
    try:
        with PrivateNetwork() as network:
            return network.outbound_missing and 'no outbound link: ' + network.outbound_missing
    except PrivateNetworkUnavailable as err:
        return str(err)


def require_private_network():
    """Skip saying why where a private network cannot be made (on CI a failure: conftest.py)."""
    reason = private_network_reason()
    if reason is not None:
        pytest.skip(reason)


def env(trusted=False):
    """The environment of a job, with the network declared trusted only when asked (conftest.py
    declares it on a machine with a public address)."""
    result = subprocess_env()
    result.pop(exposure.TRUSTED_NETWORK_VARIABLE, None)
    if trusted:
        result[exposure.TRUSTED_NETWORK_VARIABLE] = '1'
    return result


def outside_addresses():
    """This machine's addresses that another program (here or on another host) would use."""
    return ['127.0.0.1'] + [a for a in exposure.interface_addresses()
                            if ':' not in a and not a.startswith('127.')][:1]


class Output(io.BytesIO):
    """A job's output (LocalCluster's ``output``), read as text."""

    def text(self):
        return self.getvalue().decode('utf-8', 'replace')


class Job:
    """One job of train_tiny_multiworker.py holding after its servers started: by the launcher's
    command line (``cli=True``) or by ``LocalCluster``."""

    def __init__(self, out_dir, isolate, cli):
        self.out_dir = out_dir
        command = [sys.executable, TRAIN, '--out', str(out_dir)] + [str(a) for a in TRAIN_ARGS]
        self.cluster = self.proc = None
        self.output = Output()
        if cli:
            argv = [sys.executable, '-m', 'tensorpack_lite.cluster.launch', '--workers', '2', '--grace', '30',
                    '--timeout', str(RUN_TIMEOUT)] + ([] if isolate else ['--no-isolation'])
            argv += ['--'] + command
            self.proc = subprocess.Popen(argv, env=env(trusted=not isolate), stdout=subprocess.PIPE,
                                         stderr=subprocess.STDOUT, start_new_session=True)
            self._pump = threading.Thread(target=self._copy, daemon=True)
            self._pump.start()
        else:
            self.cluster = LocalCluster(command, 2, grace=30, env=env(trusted=not isolate),
                                        output=self.output, isolate=isolate)
            self.cluster.start()

    def _copy(self):
        for line in iter(self.proc.stdout.readline, b''):
            self.output.write(line)

    def ports(self):
        """The workers' ports, from the launcher's 'cluster:' line."""
        pattern = re.compile(r'\[launch\] cluster: (\{.*\})')
        wait_until(lambda: pattern.search(self.output.text()) or self.finished())
        found = pattern.search(self.output.text())
        assert found, self.output.text()[-5000:]
        return [int(a.rsplit(':', 1)[1]) for a in ast.literal_eval(found.group(1))['worker']]

    def wait_for_servers(self):
        wait_until(lambda: self.output.text().count('holding until') == 2 or self.finished(),
                   timeout=RUN_TIMEOUT)
        assert not self.finished(), self.output.text()[-5000:]

    def finished(self):
        if self.proc is not None:
            return self.proc.poll() is not None
        return all(proc.poll() is not None for _, _, proc in self.cluster.tasks)

    def release_and_wait(self):
        (self.out_dir / 'go').write_text('go')
        if self.proc is not None:
            try:
                code = self.proc.wait(timeout=RUN_TIMEOUT + 60)
            finally:
                kill_process_tree(self.proc)
            self._pump.join(timeout=10)
            return code
        return self.cluster.wait(timeout=RUN_TIMEOUT)

    def kill(self):
        if self.proc is not None:
            kill_process_tree(self.proc)
        elif self.cluster is not None:
            self.cluster.terminate()

    def weights(self, index):
        with open(str(self.out_dir / 'worker{}.json'.format(index))) as f:
            return json.load(f)['weights']


def attack(ports, secret, planted, timeout):
    """Run the attack against every worker port on this machine's loopback, and against worker 0
    at this machine's other address (as from another host); returns the attacker's JSON lines."""
    addresses = outside_addresses()
    targets = ['{}:{}@/job:worker/task:{}'.format(address, port, index) for index, port in enumerate(ports)
               for address in (addresses if index == 0 else addresses[:1])]
    proc = subprocess.run([sys.executable, ATTACK, str(timeout), str(secret), str(planted)] + targets,
                          env=env(), capture_output=True, text=True, timeout=HANG_TIMEOUT)
    results = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith('{')]
    assert len(results) == len(targets), proc.stdout + proc.stderr[-3000:]
    return results


def refuses(port, address):
    try:
        with socket.create_connection((address, port), timeout=5):
            return False
    except ConnectionRefusedError:
        return True


def run_attacked_job(tmp_path, isolate, cli):
    """A job attacked while it holds after its servers started: ``(job, attack results, whether a
    plain connection to each port was refused at each outside address, the planted file)``."""
    secret = tmp_path / 'secret.txt'
    secret.write_text("the training user's key")
    planted = tmp_path / 'planted.txt'
    out_dir = tmp_path / 'job'
    out_dir.mkdir()
    job = Job(out_dir, isolate, cli)
    try:
        ports = job.ports()
        job.wait_for_servers()
        refused = [refuses(port, address) for port in ports for address in outside_addresses()]
        results = attack(ports, secret, planted, ATTACK_TIMEOUT if isolate else HANG_TIMEOUT)
        code = job.release_and_wait()
    finally:
        job.kill()
    assert code == 0, job.output.text()[-5000:]
    return job, results, refused, planted


@pytest.fixture(scope='module')
def unisolated(tmp_path_factory):
    """The job as tensorpack runs it (isolation off), attacked: today's weights and the attack's
    result."""
    require_private_network()
    return run_attacked_job(tmp_path_factory.mktemp('unisolated'), isolate=False, cli=True)


def assert_attack_failed(results, refused, planted):
    assert all(refused), refused
    for result in results:
        assert result['read'] is None, result
        assert result['error'], result
    assert not planted.exists()


def test_without_isolation_the_attack_succeeds(unisolated):
    job, results, refused, planted = unisolated
    assert '[launch] WARNING: isolation is turned off' in job.output.text()
    assert not any(refused)
    assert [r['read'] for r in results] == ["the training user's key"] * len(results), results
    assert planted.read_text() == 'planted by another program'
    # the server said where it was reachable, as a warning
    assert re.search(r'The server of worker 0 \(localhost:\d+\) listens on port \d+ of every interface',
                     job.output.text())


def test_a_launcher_job_answers_nothing_outside_it(tmp_path, unisolated):
    require_private_network()
    job, results, refused, planted = run_attacked_job(tmp_path, isolate=True, cli=True)
    assert_attack_failed(results, refused, planted)
    text = job.output.text()
    assert re.search(r"\[launch\] private network net:\[\d+\]: the tasks' ports answer only inside this job",
                     text)
    assert "inside the job's private network namespace: nothing outside the job reaches it" in text
    for index in (0, 1):
        assert job.weights(index) == unisolated[0].weights(index)


def test_a_local_cluster_job_answers_nothing_outside_it_and_trains_the_same(tmp_path, unisolated):
    require_private_network()
    job, results, refused, planted = run_attacked_job(tmp_path, isolate=True, cli=False)
    assert_attack_failed(results, refused, planted)
    assert job.cluster.network is not None and not job.cluster.network.started   # closed with the job
    for index in (0, 1):
        assert job.weights(index) == unisolated[0].weights(index)


# ----- what a private network keeps working ---------------------------------------------------------

class _Hello(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = b'hello from outside'
        self.send_response(200)
        self.send_header('Content-Length', str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


INSIDE = r'''
import json, socket, sys, urllib.request
from tensorpack_lite.dataflow import RemoteDataZMQ
from tensorpack_lite.cluster import exposure
http_port, zmq_port, host_address = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
result = {'in_private_network': exposure.in_private_network()}
def get(host):
    return urllib.request.urlopen('http://{}:{}/'.format(host, http_port), timeout=30).read().decode()
result['loopback'], result['host_address'] = get(sys.argv[4]), get(host_address)
feed = RemoteDataZMQ('tcp://{}:{}'.format(sys.argv[4], zmq_port), bind=False)
feed.reset_state()
result['zmq'] = [[x.tolist() for x in dp] for _, dp in zip(range(3), feed)]
print('RESULT ' + json.dumps(result), flush=True)
'''
SEND_FEED = r'''
import sys
import numpy as np
from tensorpack_lite.dataflow import DataFromList
from tensorpack_lite.dataflow.remote import send_dataflow_zmq
send_dataflow_zmq(DataFromList([[np.arange(3) + i] for i in range(1000)], shuffle=False),
                  'tcp://127.0.0.1:{}'.format(sys.argv[1]), bind=True, hwm=5)
'''


def test_outbound_connections_work_from_the_private_network(tmp_path):
    """A task reaches a server on this machine's loopback (as an MLflow server on localhost) at
    HOST_LOOPBACK, one on the machine's own address, and a ZMQ data feed that binds outside."""
    require_private_network()
    host_address = outside_addresses()[-1]
    server = http.server.ThreadingHTTPServer(('', 0), _Hello)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    zmq_port, = free_ports(1, '127.0.0.1')
    feed = subprocess.Popen([sys.executable, '-c', SEND_FEED, str(zmq_port)], env=env(),
                            start_new_session=True)
    script = tmp_path / 'inside.py'
    script.write_text(INSIDE)
    output = Output()
    cluster = LocalCluster([sys.executable, str(script), str(server.server_address[1]), str(zmq_port),
                            host_address, HOST_LOOPBACK], 1, grace=5, env=env(), output=output)
    try:
        cluster.start()
        assert cluster.wait(timeout=HANG_TIMEOUT) == 0, output.text()
    finally:
        cluster.terminate()
        server.shutdown()
        kill_process_tree(feed)
        feed.wait()
    result = json.loads(output.text().split('RESULT ', 1)[1].splitlines()[0])
    assert result['in_private_network'] is True
    assert result['loopback'] == result['host_address'] == 'hello from outside'
    assert result['zmq'] == [[[0, 1, 2]], [[1, 2, 3]], [[2, 3, 4]]]


def test_where_no_namespace_can_be_made_the_job_runs_and_says_what_it_exposes(tmp_path, monkeypatch):
    """The fallback: a holder that cannot make a namespace (as in a container that forbids it)."""
    failing = tmp_path / 'holder.py'
    failing.write_text("print('error cannot make a network namespace: Operation not permitted')\n")
    monkeypatch.setattr(private_network_module, 'HOLDER', str(failing))
    output = Output()
    show_namespace = 'import os; print("ran", os.readlink("/proc/self/ns/net"))'
    cluster = LocalCluster([sys.executable, '-c', show_namespace], 2, grace=5, output=output)
    cluster.start()
    assert cluster.wait(timeout=HANG_TIMEOUT) == 0
    text = output.text()
    ports = [a.rsplit(':', 1)[1] for a in cluster.config.cluster['worker']]
    assert ("[launch] WARNING: no private network (cannot make a network namespace: Operation not "
            "permitted): the tasks' ports ({}) listen on every interface".format(', '.join(ports))) in text
    assert text.count('ran ' + exposure.network_namespace()) == 2      # on this machine's network


def test_isolation_required_without_a_namespace_starts_no_task(tmp_path, monkeypatch):
    """LocalCluster(isolation='required') where no namespace can be made: start() raises naming
    why, and no task ran."""
    failing = tmp_path / 'holder.py'
    failing.write_text("print('error cannot make a network namespace: Operation not permitted')\n")
    monkeypatch.setattr(private_network_module, 'HOLDER', str(failing))
    marker = tmp_path / 'ran'
    output = Output()
    cluster = LocalCluster([sys.executable, '-c', 'open({!r}, "w")'.format(str(marker))], 2, grace=5,
                           output=output, isolation='required')
    with pytest.raises(PrivateNetworkUnavailable) as info:
        cluster.start()
    assert str(info.value) == (
        "isolation is required (--isolation required, isolation='required') and no private network can be "
        "made for the job: cannot make a network namespace: Operation not permitted. No task was started. "
        "docs/security.md says what a private network needs.")
    assert cluster.tasks == [] and cluster.network is None and not marker.exists()
    assert '[worker' not in output.text() and 'WARNING' not in output.text()


@pytest.mark.parametrize('kwargs, error', [
    (dict(isolation='always'), "isolation must be one of auto, required, off, got 'always'"),
    (dict(isolation='required', isolate=False), "isolation='required' contradicts isolate=False"),
    (dict(isolation='required', hosts=object()), "isolation='required' is for tasks on this machine"),
])
def test_isolation_arguments_are_checked(kwargs, error):
    with pytest.raises(ValueError, match=re.escape(error)):
        LocalCluster(['true'], 1, **kwargs)


NO_NAMESPACES = ('echo 0 > /proc/sys/user/max_user_namespaces && '
                 'echo 0 > /proc/sys/user/max_net_namespaces && exec "$@"')
"""Run inside ``unshare --user --map-root-user``: the new user namespace (and its descendants)
may make no more user or network namespaces, a limit the kernel enforces (ENOSPC), as on a
machine where they are disabled."""


def without_namespaces(argv):
    """``(command, why)``: ``argv`` run where the kernel refuses every new network namespace, and
    the reason the launcher will give; or skip saying why that cannot be arranged."""
    if shutil.which('unshare') is None:
        pytest.skip("needs unshare (util-linux) to take namespaces away from a process")
    wrapper = ['unshare', '--user', '--map-root-user', 'sh', '-c', NO_NAMESPACES, 'sh']
    probe = subprocess.run(wrapper + ['true'], capture_output=True, text=True, timeout=HANG_TIMEOUT)
    if probe.returncode == 0:
        holder = subprocess.run(wrapper + [sys.executable, '-I', '-S', private_network_module.HOLDER],
                                input='', capture_output=True, text=True, timeout=HANG_TIMEOUT)
        line = holder.stdout.strip()
        assert line.startswith('error ') and 'No space left on device' in line, holder   # the kernel's ENOSPC
        return wrapper + list(argv), line[len('error '):]
    reason = private_network_reason()
    if reason is not None and reason.startswith('cannot make'):
        return list(argv), reason      # this machine makes none already
    pytest.skip("cannot take namespaces away from a process here: {}".format(
        probe.stderr.strip() or 'unshare failed'))


@pytest.mark.parametrize('isolation', ['required', 'auto'])
def test_the_launcher_without_namespaces_refuses_to_start_with_isolation_required(tmp_path, isolation):
    """The kernel refuses the launcher's namespaces: with --isolation required it starts no task,
    exits 1 and names the kernel's reason; by default (auto) the job runs on this machine's
    network after the warning, as before."""
    task = 'import os; open(os.path.join({!r}, str(os.getpid())), "w")'.format(str(tmp_path))
    argv = [sys.executable, '-m', 'tensorpack_lite.cluster.launch', '--workers', '2', '--grace', '5',
            '--timeout', str(HANG_TIMEOUT), '--isolation', isolation, '--', sys.executable, '-c', task]
    command, why = without_namespaces(argv)
    run = subprocess.run(command, env=env(), capture_output=True, text=True, timeout=2 * HANG_TIMEOUT)
    if isolation == 'required':
        assert run.returncode == 1, run.stdout + run.stderr
        assert run.stderr == ("[launch] ERROR: isolation is required (--isolation required, "
                              "isolation='required') and no private network can be made for the job: {}. "
                              "No task was started. docs/security.md says what a private network "
                              "needs.\n".format(why))
        assert list(tmp_path.iterdir()) == [] and '[worker' not in run.stdout
    else:
        assert run.returncode == 0, run.stdout + run.stderr
        assert '[launch] WARNING: no private network ({}): '.format(why) in run.stdout
        assert len(list(tmp_path.iterdir())) == 2


def test_no_isolation_and_isolation_required_contradict():
    run = subprocess.run([sys.executable, '-m', 'tensorpack_lite.cluster.launch', '--workers', '1',
                          '--no-isolation', '--isolation', 'required', '--', 'true'],
                         env=env(), capture_output=True, text=True, timeout=HANG_TIMEOUT)
    assert run.returncode == 2 and '--no-isolation contradicts --isolation required' in run.stderr


def test_without_slirp4netns_the_network_is_private_and_says_it_has_no_way_out(monkeypatch):
    require_private_network()
    real_which = private_network_module.shutil.which
    monkeypatch.setattr(private_network_module.shutil, 'which',
                        lambda name: None if name == 'slirp4netns' else real_which(name))
    with PrivateNetwork() as network:
        assert network.outbound_missing == "slirp4netns is not installed (apt-get install slirp4netns)"
        assert 'NO outbound connections: slirp4netns is not installed' in network.describe()
        inside = subprocess.run(network.command(['cat', '/proc/net/dev']), capture_output=True, text=True,
                                timeout=HANG_TIMEOUT)
    assert 'tap0' not in inside.stdout and 'lo:' in inside.stdout


UNPRIVILEGED_INSIDE = r'''
import os, socket, sys
server = socket.create_server(('0.0.0.0', 0))
print(os.getuid(), os.readlink('/proc/self/ns/net'), server.getsockname()[1], flush=True)
sys.stdin.read()
'''


def test_an_unprivileged_user_gets_a_user_and_network_namespace():
    """As a user without privileges (nobody), the holder makes a user namespace mapping only that
    user and a network namespace in it; a process joining it keeps its uid and its port answers
    nothing outside."""
    if os.geteuid() != 0 or subprocess.run(['which', 'setpriv'], capture_output=True).returncode:
        pytest.skip("needs root and setpriv (util-linux) to become another user")
    drop = ['setpriv', '--reuid=65534', '--regid=65534', '--clear-groups']
    python = '/usr/bin/python3' if os.path.exists('/usr/bin/python3') else sys.executable
    with open(private_network_module.HOLDER) as f:     # as source: nobody may not read this checkout
        holder_source = f.read()
    holder = subprocess.Popen(drop + [python, '-I', '-S', '-c', holder_source], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, start_new_session=True)
    inside = None
    try:
        line = holder.stdout.readline().strip()
        if line.startswith('error'):
            pytest.skip("unprivileged user namespaces are not allowed here: " + line)
        assert line == 'ok user+net'
        inside = subprocess.Popen(drop + ['nsenter', '--target', str(holder.pid), '--user',
                                          '--preserve-credentials', '--net', '--', python, '-I', '-S', '-c',
                                          UNPRIVILEGED_INSIDE],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True, start_new_session=True)
        fields = inside.stdout.readline().split()
        assert fields, inside.stderr.read()
        uid, namespace, port = fields
        assert uid == '65534'
        assert namespace == os.readlink('/proc/{}/ns/net'.format(holder.pid)) != exposure.network_namespace()
        assert all(refuses(int(port), address) for address in outside_addresses())
    finally:
        for proc in (inside, holder):
            if proc is not None:
                proc.stdin.close()
                kill_process_tree(proc)
                proc.wait()


# ----- hosts of a multi-host job ---------------------------------------------------------------------

START_SERVER = r'''
import json, os, sys
from tensorpack_lite.multiprocess.server import create_server
from tensorpack_lite.cluster import exposure
try:
    create_server()
    print('RESULT ' + json.dumps({'started': True, 'listening': exposure.listening_sockets()}), flush=True)
except exposure.PublicAddressError as err:
    print('RESULT ' + json.dumps({'started': False, 'error': str(err)}), flush=True)
    os.environ[exposure.TRUSTED_NETWORK_VARIABLE] = '1'
    create_server()
    print('RESULT ' + json.dumps({'started': True, 'listening': exposure.listening_sockets()}), flush=True)
'''
PUBLIC_ADDRESS = '8.8.4.4'


def test_multi_host_servers_say_what_they_expose_and_refuse_public_addresses(tmp_path):
    """Two hosts: host 0 has private addresses only and warns, naming them; host 1 also has a
    public one and refuses until the network is declared trusted, then warns naming it."""
    reason = netns.unavailable()
    if reason is not None:
        pytest.skip(reason)
    script = tmp_path / 'start_server.py'
    script.write_text(START_SERVER)
    with netns.NetnsCluster(2) as net:
        subprocess.run(['ip', 'netns', 'exec', net.namespaces[1], 'ip', 'addr', 'add', PUBLIC_ADDRESS + '/32',
                        'dev', 'lo'], check=True)
        cluster = {'worker': ['{}:2222'.format(net.address(k)) for k in range(2)]}
        procs = []
        for k in range(2):
            tf_config = json.dumps({'cluster': cluster, 'task': {'type': 'worker', 'index': k}})
            procs.append(subprocess.Popen(net.command(k, [sys.executable, str(script)]),
                                          env=dict(env(), TF_CONFIG=tf_config), stdout=subprocess.PIPE,
                                          stderr=subprocess.STDOUT, text=True, start_new_session=True))
        outputs = []
        try:
            for proc in procs:
                outputs.append(proc.communicate(timeout=HANG_TIMEOUT)[0])
        finally:
            for proc in procs:
                kill_process_tree(proc)
    results = [[json.loads(line.split('RESULT ', 1)[1]) for line in out.splitlines() if 'RESULT ' in line]
               for out in outputs]
    private, public = net.address(0), net.address(1)
    # host 0: started, warned with its addresses and the cluster's hosts
    assert [r['started'] for r in results[0]] == [True], outputs[0]
    assert ['::', 2222] in results[0][0]['listening'] or ['0.0.0.0', 2222] in results[0][0]['listening']
    warning = re.search(r'WRN (The server of worker 0 .*)', outputs[0]).group(1)
    assert warning.startswith('The server of worker 0 ({0}:2222) listens on port 2222 of every interface '
                              '(its cluster spans the hosts {0}, {1}): reachable at '.format(private, public))
    assert '{} (private)'.format(private) in warning and '127.0.0.1 (loopback)' in warning
    assert 'public: none' in warning and PUBLIC_ADDRESS not in warning
    assert warning.endswith("A public address on no interface is not seen here: a cloud instance's public "
                            "IP (EC2, GCE: NAT), a forwarded port or a load balancer reach the port all the "
                            "same, as far as the firewall lets them.")     # what "none" cannot promise
    # host 1: refused with the public address named and how to declare trust, then started
    assert [r['started'] for r in results[1]] == [False, True], outputs[1]
    error = results[1][0]['error']
    assert 'Refusing to start the server of worker 1 ({}:2222)'.format(public) in error
    assert 'public address(es) {}'.format(PUBLIC_ADDRESS) in error
    assert 'TENSORPACK_LITE_TRUSTED_NETWORK=1' in error and 'trusted_network=True' in error
    assert re.search(r'reachable at .*{} \(PUBLIC\).*public: {} \(declared trusted\)'.format(
        re.escape(PUBLIC_ADDRESS), re.escape(PUBLIC_ADDRESS)), outputs[1])
