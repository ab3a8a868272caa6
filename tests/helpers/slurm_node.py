"""A real one-node Slurm for the tests: munged, slurmctld and slurmd of Debian's packages
(``apt-get install slurm-wlm munge``; .ci/run installs them as root), started as root with a
generated slurm.conf, a munge key and every file in a directory of their own, on free ports;
all of it stopped and removed by :meth:`SlurmNode.close`. Commands reach it through
``SLURM_CONF`` (see :meth:`SlurmNode.env`)."""

import functools
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time

from tensorpack_lite.cluster.config import free_ports

DAEMONS = ('munged', 'slurmctld', 'slurmd')
COMMANDS = ('srun', 'sbatch', 'scancel', 'scontrol', 'sinfo', 'squeue')
START_TIMEOUT = 60.0
KILL_WAIT = 30
"""Slurm's KillWait here (its default): seconds from a cancelled job's SIGTERM to its SIGKILL."""
JOB_ENDED = ('BOOT_FAIL', 'CANCELLED', 'COMPLETED', 'DEADLINE', 'FAILED', 'NODE_FAIL', 'OUT_OF_MEMORY',
             'PREEMPTED', 'TIMEOUT')
"""The states of a job that has ended (``scontrol show job``'s JobState)."""


def unavailable():
    """Why a Slurm node cannot be started here (a str), or None."""
    if os.geteuid() != 0:
        return "starting Slurm's daemons needs root (this process runs as uid {})".format(os.geteuid())
    missing = [tool for tool in DAEMONS + COMMANDS if shutil.which(tool) is None]
    if missing:
        return "Slurm is not installed ({} missing): apt-get install slurm-wlm munge (.ci/run does, as " \
               "root)".format(', '.join(missing))
    return None


RESERVED_PORTS = (23000, 23999)
"""The ports Slurm reserves from for ``srun --resv-ports`` (``MpiParams=ports=``)."""

CONF = """ClusterName=tplite
SlurmctldHost={host}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={dir}/munge.socket
CredType=cred/munge
StateSaveLocation={dir}/state
SlurmdSpoolDir={dir}/spool
SlurmctldPidFile={dir}/slurmctld.pid
SlurmdPidFile={dir}/slurmd.pid
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmctldLogFile={dir}/slurmctld.log
SlurmdLogFile={dir}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
MpiDefault=none
MpiParams=ports={resv_low}-{resv_high}
ReturnToService=2
SchedulerType=sched/builtin
KillWait={kill_wait}
NodeName={host} CPUs={cpus} State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE
"""


class SlurmNode:
    """This machine as a one-node Slurm cluster with ``cpus`` CPUs (more than it has is fine:
    tasks then share cores). ``kill_wait``: seconds between the SIGTERM and the SIGKILL of a
    cancelled or preempted job (Slurm's ``KillWait``)."""

    def __init__(self, cpus=8, kill_wait=KILL_WAIT):
        reason = unavailable()
        if reason:
            raise RuntimeError(reason)
        self.dir = tempfile.mkdtemp(prefix='tplite-slurm-')
        self._daemons = []
        try:
            self._start(cpus, kill_wait)
        except BaseException:
            self.close()
            raise

    def _start(self, cpus, kill_wait):
        for sub in ('state', 'spool'):
            os.makedirs(os.path.join(self.dir, sub))
        key = os.path.join(self.dir, 'munge.key')
        with open(key, 'wb') as f:
            f.write(os.urandom(128))
        os.chmod(key, 0o600)
        ctld_port, slurmd_port = free_ports(2)
        with open(self.conf, 'w') as f:
            f.write(CONF.format(host=socket.gethostname().split('.')[0], dir=self.dir, ctld_port=ctld_port,
                                slurmd_port=slurmd_port, cpus=cpus, kill_wait=kill_wait,
                                resv_low=RESERVED_PORTS[0], resv_high=RESERVED_PORTS[1]))
        here = functools.partial(os.path.join, self.dir)
        self._run_daemon(['munged', '--force', '--foreground', '--key-file', key,
                          '--socket', here('munge.socket'), '--pid-file', here('munged.pid'),
                          '--log-file', here('munged.log'), '--seed-file', here('munged.seed')],
                         ready=lambda: os.path.exists(here('munge.socket')))
        self._run_daemon(['slurmctld', '-D', '-c', '-i'])
        self._run_daemon(['slurmd', '-D', '-c'])
        deadline = time.monotonic() + START_TIMEOUT
        while self.state() != 'idle':
            if time.monotonic() > deadline:
                raise RuntimeError("the Slurm node did not become idle within {:g} s (state {!r}):\n{}"
                                   .format(START_TIMEOUT, self.state(), self.logs()))
            time.sleep(0.2)

    @property
    def conf(self):
        return os.path.join(self.dir, 'slurm.conf')

    def env(self, **more):
        """The environment of a command that talks to this Slurm."""
        env = dict(os.environ, SLURM_CONF=self.conf)
        env.update(more)
        return env

    def _run_daemon(self, argv, ready=None):
        log = open(os.path.join(self.dir, argv[0] + '.out'), 'wb')
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=self.env(), start_new_session=True)
        log.close()
        self._daemons.append(proc)
        deadline = time.monotonic() + START_TIMEOUT
        while ready is not None and not ready():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("{} did not start:\n{}".format(argv[0], self.logs()))
            time.sleep(0.05)

    def state(self):
        out = subprocess.run(['sinfo', '-h', '-o', '%T'], capture_output=True, text=True, env=self.env(),
                             timeout=30)
        return out.stdout.strip().rstrip('*')

    def logs(self):
        """The daemons' logs (the end of each), for failure messages."""
        text = ''
        for name in sorted(os.listdir(self.dir)):
            if name.endswith(('.log', '.out')):
                with open(os.path.join(self.dir, name), errors='replace') as f:
                    text += '--- {} ---\n{}\n'.format(name, f.read()[-3000:])
        return text

    def run(self, argv, timeout, **env):
        """Run a Slurm command (``srun ...``) to its end: (exit code, output and errors)."""
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                env=self.env(**env), start_new_session=True)
        try:
            output, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            output, _ = proc.communicate()
            raise AssertionError("{} did not end within {} s:\n{}".format(
                ' '.join(argv), timeout, output[-6000:]))
        return proc.returncode, output

    def wait_for_job(self, job_id, timeout):
        """Wait until the batch job ``job_id`` has ended; returns its exit code (128 + the signal
        that ended it), as ``sbatch --wait`` does. Polled with ``scontrol show job`` every 0.1 s:
        ``sbatch --wait`` first looks 2 s after the submission, then 8 s later, then 32 s later."""
        deadline = time.monotonic() + timeout
        while True:
            out = subprocess.run(['scontrol', '-o', 'show', 'job', str(job_id)], capture_output=True,
                                 text=True, env=self.env(), timeout=30).stdout
            state = re.search(r'\bJobState=(\S+)', out)
            if state and state.group(1) in JOB_ENDED:
                code, sig = map(int, re.search(r'\bExitCode=(\d+):(\d+)', out).groups())
                return 128 + sig if sig else code
            if time.monotonic() > deadline:
                raise AssertionError("job {} did not end within {} s:\n{}".format(job_id, timeout, out))
            time.sleep(0.1)

    def cancel_all(self):
        subprocess.run(['scancel', '--full', '--user', 'root'], capture_output=True, env=self.env(),
                       timeout=30)

    def close(self):
        """Cancel every job, stop the daemons (and what they started), remove the files."""
        if self._daemons and self._daemons[-1].poll() is None:
            self.cancel_all()
        for proc in reversed(self._daemons):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(10)
        self._daemons = []
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
