#!/usr/bin/env python
"""Scaling of distributed training where the network is the limit: N = 2, 3, 4 workers, each
a host of its own (a network namespace of :class:`~tensorpack_lite.cluster.netns.NetnsCluster`)
behind a link of ``--rate-mbit`` Mbit/s each way, train a model with large gradients and
almost no compute. Measured for each variant and N: the step time, and the bytes each process
sends per step, from the counters of its own interface (``/proc/self/net/dev`` inside the
host).

Variants (``--variants``; S is the float32 gradient bytes):
  ``collective``       CollectiveAllReduceTrainer, the exact float32 ring: each worker sends
                       2 (N - 1) / N x S per step;
  ``collective-fp16``  the same with ``compression='fp16'``, the 16-bit ring: half of it;
  ``replicated``       DistributedTrainerReplicated, 1 ps task on a host of its own: each
                       worker sends S (its gradients), the ps N x S (the new variables, to
                       every worker); the ps's link is the limit, the step grows as N;
  ``parameter-server`` DistributedTrainerParameterServer, 1 ps (the same bytes; not run by
                       default);
  ``mpi``              HorovodTrainer's MPI engine (``mpiexec -launcher fork`` of the ``mpich``
                       wheel; each rank enters its host's namespace itself, MPICH talks TCP on
                       eth0): MPICH's Allreduce of the fused gradients, 2 (N - 1) / N x S per
                       rank when N is a power of 2, S / 2S / S by rank at N = 3 (see
                       :func:`mpich_allreduce_bytes`). MPICH polls while it waits, so a
                       rank's CPU seconds per step are about its step time and the machine
                       shows busy whatever the work. Skipped, saying why, without mpiexec or
                       mpi4py.

The model: 6 -> ``--hidden`` (tanh) -> 1 on a constant batch of ``--batch`` per worker, plain
SGD: S = 32 x hidden bytes (8.4 MB by default), a few ms of compute. After each step every
worker records the time, its CPU time (all threads), the machine's busy and total CPU time
(/proc/stat) and its interface counters; the ps task samples its counters every 0.1 s. Each
run's first epoch is warm-up; in the others, the steps after the first are timed, so the
epoch-end broadcasts (and the start-up) lie outside every window.

Printed per variant and N: the median step time (the median over rounds of the workers' median
step), its ratio to the smallest N, and the ratio the busiest link's bytes predict (rings:
2 (N - 1) / N; ps trainers: N, the ps's link), the bytes a worker sends per step (the median
worker; the ps task on a row of its own) against the expected bytes, measured / expected on
the wire (whole Ethernet frames) and for the payload (the wire minus 66 bytes of Ethernet, IP
and TCP headers per packet), the share of the bytes sent again (TCP segments retransmitted x
1514 bytes / bytes sent), how busy the sender's link was (its bytes / rate / step time), the
CPU seconds a worker (or the ps) spends per step, and the share of the machine's cores busy in
the timed steps. A link near 100 % busy with cores to spare says network-bound; the machine
near 100 % busy says the CPU may be the limit too. Then one line per variant on the goals of
issue 38: the step-time ratio within 1.15x of the bytes' ratio, the bytes within 5 %.

Gradient accumulation (``--accumulate K [K ...]``, default 1; issue 60): each variant and N
runs once per K with ``TrainConfig(accumulate=K)``, K micro-batches of ``--batch`` per update and
one all-reduce per update; an epoch is ``--steps`` updates (``--steps`` x K micro-batches), and
the timed window of each epoch starts after its first update and ends after its last, so it
holds whole updates only. The table above is K=1's; when a K > 1 is asked for, a second table
gives per variant, N and K: the micro-batch step time (the median over rounds of the workers'
median update time / K), the update time, updates/s, samples/s (batch x N / step time) and its
ratio to K=1's, the bytes a worker sends per update (its tx bytes over the window / the updates
in it) next to K=1's bytes per step, and the link's limit: the samples of one update over the
time the busiest link (the most bytes any host sends or receives per update) needs at
``--rate-mbit``, what the run would reach with free compute, with the measured samples/s as a
fraction of it.

    python benchmarks/network_scaling.py              # N = 2 3 4, 4 variants: about 9 minutes
    python benchmarks/network_scaling.py --quick      # N = 2 and 4, fewer steps: about 4 minutes
    python benchmarks/network_scaling.py --variants collective collective-fp16 --rounds 3
    python benchmarks/network_scaling.py --rate-mbit 200 --workers 2 --variants collective mpi \
        --accumulate 1 4 8 --rounds 3

Needs root and iproute2 (network namespaces, ``tc`` token buckets); without them it says why
and exits. The runs are interleaved over ``--rounds`` rounds; each is bounded by
``--run-timeout`` seconds, its processes are ended and its namespaces removed at its end.
"""

import argparse
import atexit
import io
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

from multiworker import load_average, mpiexec_path
from processes import worker_env

FEATURES = 6
MB = 1e6
HEADER_BYTES = 14 + 20 + 32
"""Ethernet, IPv4 and TCP headers (with the timestamp option) of one packet."""
FULL_FRAME = 1514
"""The bytes of a full-sized frame (MTU 1500 + Ethernet header): the estimate of a resent segment."""
COUNTERS = ('tx_bytes', 'tx_packets', 'rx_bytes', 'rx_packets', 'retransmitted')
"""What :func:`read_counters` reads: eth0's counters and the TCP segments sent again."""
PS_SAMPLE_SECONDS = 0.1

RING_VARIANTS = {'collective': None, 'collective-fp16': 'fp16'}
"""The collective variants and their compression."""
PS_VARIANTS = ('replicated', 'parameter-server')
VARIANTS = tuple(RING_VARIANTS) + PS_VARIANTS + ('mpi',)
DEFAULT_VARIANTS = ['collective', 'collective-fp16', 'replicated', 'mpi']

NETNS_VARIABLE = 'NETWORK_SCALING_NETNS'
"""The namespace of each MPI rank (paths, comma-separated, in rank order)."""
MPI_ENV = {'MPIR_CVAR_NOLOCAL': '1', 'UCX_TLS': 'tcp', 'UCX_NET_DEVICES': 'eth0'}
"""MPICH (ch4:ucx) between ranks of one machine: TCP on eth0, no shared memory."""


# ----- inside a task ------------------------------------------------------------------------------

def read_counters():
    """This host's :data:`COUNTERS`: its eth0's from /proc/self/net/dev and the TCP segments
    it sent again (RetransSegs) from /proc/self/net/snmp; both show the network namespace of
    this process."""
    with open('/proc/self/net/dev') as f:
        for line in f:
            name, _, values = line.partition(':')
            if name.strip() == 'eth0':
                values = [int(v) for v in values.split()]
                break
        else:
            raise RuntimeError("no eth0 in /proc/self/net/dev: not inside a host of a NetnsCluster")
    with open('/proc/self/net/snmp') as f:
        tcp = [line.split()[1:] for line in f if line.startswith('Tcp:')]
    return [values[8], values[9], values[0], values[1], int(dict(zip(*tcp))['RetransSegs'])]


def cpu_jiffies():
    """(busy, total) CPU time of the whole machine (/proc/stat, the same in every namespace)."""
    with open('/proc/stat') as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return sum(fields) - idle, sum(fields)


def enter_namespace():
    """Move this MPI rank (started by ``mpiexec -launcher fork``; call it before any thread
    starts) into the network namespace of its rank, by setns(2)."""
    import ctypes
    path = os.environ[NETNS_VARIABLE].split(',')[int(os.environ['PMI_RANK'])]
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(path, os.O_RDONLY)
    try:
        if libc.setns(fd, 0x40000000) != 0:     # CLONE_NEWNET
            raise OSError(ctypes.get_errno(), "setns({}) failed".format(path))
    finally:
        os.close(fd)


def _sample_forever(samples):
    while True:
        samples.append([time.time(), time.process_time()] + read_counters())
        time.sleep(PS_SAMPLE_SECONDS)


def write_result(out, name, result):
    """Write ``result`` (JSON) as ``out/name.json``, whole or not at all."""
    path = os.path.join(out, name + '.json')
    with open(path + '.part', 'w') as f:
        json.dump(result, f)
    os.replace(path + '.part', path)


def sample_ps_task(out, task_index):
    """On the ps task: [time, CPU seconds] + counters every :data:`PS_SAMPLE_SECONDS`, written
    when the process exits (the trainer exits it once every worker has finished; a SIGTERM from
    the launcher exits it too)."""
    samples = []
    threading.Thread(target=_sample_forever, args=(samples,), daemon=True).start()
    atexit.register(lambda: write_result(out, 'ps{}'.format(task_index), {'samples': list(samples)}))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))


MLP_LAYERS = (784, 2000, 2000, 10)
"""``--model mlp``: the layers of a multi-layer perceptron with 22.4 MB of float32 gradients and
real compute (about 34 GFLOP a step at a batch of 1024)."""


CNN_CONVS = (64, 64, 'pool', 128, 128, 'pool')
"""``--model cnn``: 3x3 convolutions (channels) and 2x2 max-poolings on 32x32x3 images, then
fully connected 8192 -> 512 -> 10: 18 MB of float32 gradients, 94 % of them in the first fully
connected layer, whose gradient backprop makes first, before the convolutions' costly part."""


def build_model(batch, hidden, model='wide'):
    """The model of ``--model``: ``'wide'`` (:func:`wide_model`), ``'mlp'`` (:data:`MLP_LAYERS`)
    or ``'cnn'`` (:data:`CNN_CONVS`), both :func:`classifier_model`."""
    if model == 'cnn':
        return classifier_model(batch, [32, 32, 3], CNN_CONVS, (512, 10))
    if model == 'mlp':
        return classifier_model(batch, MLP_LAYERS[:1], (), MLP_LAYERS[1:])
    return wide_model(batch, hidden)


def classifier_model(batch, input_shape, convs, widths):
    """3x3 convolutions of ``convs`` channels (``'pool'``: a 2x2 max-pooling), then fully
    connected layers of ``widths`` units, relu between them; softmax cross-entropy against
    random soft targets; SGD."""
    from tensorpack_lite.compat import tf, tfv1
    from tensorpack_lite.train import ModelDesc

    def weight(name, shape, fan_in):
        initializer = tfv1.random_normal_initializer(stddev=fan_in ** -0.5)
        return tfv1.get_variable(name, shape, initializer=initializer)

    class Classifier(ModelDesc):
        def inputs(self):
            return [tf.TensorSpec([batch] + list(input_shape), tf.float32, 'x'),
                    tf.TensorSpec([batch, widths[-1]], tf.float32, 'y')]

        def build_graph(self, x, y):
            out = x
            for index, channels in enumerate(convs):
                if channels == 'pool':
                    out = tf.nn.max_pool2d(out, 2, 2, 'VALID')
                    continue
                fan_in = 9 * out.shape[-1]
                kernel = weight('conv{}/W'.format(index), [3, 3, out.shape[-1], channels], fan_in)
                out = tf.nn.relu(tf.nn.conv2d(out, kernel, 1, 'SAME'))
            out = tf.reshape(out, [batch, -1])
            for index, width in enumerate(widths):
                fan_in = out.shape[1]
                out = tf.matmul(out, weight('fc{}/W'.format(index), [fan_in, width], fan_in)) + \
                    tfv1.get_variable('fc{}/b'.format(index), [width], initializer=tfv1.zeros_initializer())
                if index < len(widths) - 1:
                    out = tf.nn.relu(out)
            loss = tf.nn.softmax_cross_entropy_with_logits(labels=tf.nn.softmax(y), logits=out)
            return tf.reduce_mean(loss, name='cost')

        def optimizer(self):
            return tfv1.train.GradientDescentOptimizer(1e-3)

    return Classifier()


def wide_model(batch, hidden):
    from tensorpack_lite.compat import tf, tfv1
    from tensorpack_lite.train import ModelDesc

    class WideModel(ModelDesc):
        """6 -> hidden (tanh) -> 1, mean squared error, SGD: large gradients, tiny compute."""

        def inputs(self):
            return [tf.TensorSpec([batch, FEATURES], tf.float32, 'x'),
                    tf.TensorSpec([batch], tf.float32, 'y')]

        def build_graph(self, x, y):
            w0 = tfv1.get_variable('fc0/W', [FEATURES, hidden],
                                   initializer=tfv1.random_normal_initializer(stddev=0.5))
            b0 = tfv1.get_variable('fc0/b', [hidden], initializer=tfv1.zeros_initializer())
            w1 = tfv1.get_variable('fc1/W', [hidden, 1],
                                   initializer=tfv1.random_normal_initializer(stddev=hidden ** -0.5))
            pred = tf.squeeze(tf.matmul(tf.tanh(tf.matmul(x, w0) + b0), w1), 1)
            return tf.reduce_mean(tf.square(pred - y), name='cost')

        def optimizer(self):
            return tfv1.train.GradientDescentOptimizer(0.1 / hidden)   # wider: smaller steps

    return WideModel()


def step_meter():
    from tensorpack_lite.callbacks import Callback

    class StepMeter(Callback):
        """On every worker, after each step: [time, CPU seconds of this process, machine busy
        and total CPU time] + this host's counters; one list per epoch."""

        _chief_only = False

        def __init__(self):
            self.epochs = []

        def _before_epoch(self):
            self.epochs.append([])

        def _after_run(self, run_context, run_values):
            record = [time.time(), time.process_time()] + list(cpu_jiffies()) + read_counters()
            self.epochs[-1].append(record)

    return StepMeter()


def gradient_bytes():
    """S: the bytes of the trainable variables (tower replicas left out)."""
    from tensorpack_lite.compat import tfv1
    return sum(v.shape.num_elements() * v.dtype.size for v in tfv1.trainable_variables()
               if not v.op.name.startswith('tower'))


def make_trainer(variant, no_spin, settings=()):
    """The trainer of ``variant`` on a server from TF_CONFIG (on a ps task: serves, then exits);
    ``settings``: ``NAME=VALUE`` attributes of a collective trainer's builder to set (``--set``)."""
    from tensorpack_lite.multiprocess.server import create_server
    from tensorpack_lite.train.distributed import (CollectiveAllReduceTrainer,
                                                   DistributedTrainerParameterServer,
                                                   DistributedTrainerReplicated)
    config = None
    if no_spin:
        from tensorpack_lite.tfutils.common import get_default_sess_config
        config = get_default_sess_config()
        config.experimental.disable_thread_spinning = True
    server = create_server(config=config)
    if variant in RING_VARIANTS:
        from tensorpack_lite.graph_builder.distributed import CollectiveAllReduceBuilder
        for setting in settings:
            name, _, value = setting.partition('=')
            if not hasattr(CollectiveAllReduceBuilder, name):
                raise SystemExit("--set {}: CollectiveAllReduceBuilder has no attribute {}".format(
                    setting, name))
            setattr(CollectiveAllReduceBuilder, name, type(getattr(CollectiveAllReduceBuilder, name))(value))
        return CollectiveAllReduceTrainer(['/cpu:0'], server, compression=RING_VARIANTS[variant])
    if variant == 'replicated':
        return DistributedTrainerReplicated(['/cpu:0'], server)
    return DistributedTrainerParameterServer(['/cpu:0'], server)


def timeline_callback(directory, steps):
    """The chief's :class:`~tensorpack_lite.callbacks.CommunicationTimeline` of the steps run at
    the global steps ``steps`` (of the warm-up epoch), written into ``directory``."""
    from tensorpack_lite.callbacks import CommunicationTimeline, EnableCallbackIf
    from tensorpack_lite.utils import logger
    logger.set_logger_dir(directory, action='k')
    return EnableCallbackIf(CommunicationTimeline(), lambda self: self.trainer.global_step in steps)


def task_main(args):
    """One task of the cluster (TF_CONFIG from the launcher) or one MPI rank (``--mpi-task``):
    a worker writes its records into ``--out``, the ps task its samples."""
    if args.mpi_task:
        enter_namespace()
        from tensorpack_lite.train import HorovodTrainer
        trainer = HorovodTrainer()
        index = trainer.rank
    else:
        task = json.loads(os.environ['TF_CONFIG'])['task']
        if task['type'] == 'ps':
            sample_ps_task(args.out, task['index'])
        trainer = make_trainer(args.variant, args.no_spin, args.set)
        index = trainer.task_index
    from tensorpack_lite.input_source import DummyConstantInput
    from tensorpack_lite.train import TrainConfig, launch_train_with_config
    meter = step_meter()
    callbacks = [meter]
    if args.timeline and index == 0:
        callbacks.append(timeline_callback(args.timeline, range(max(args.steps - 4, 1), args.steps - 1)))
    model = build_model(args.batch, args.hidden, args.model)
    shapes = [spec.shape.as_list() for spec in model.inputs()]
    accumulate = args.accumulate[0]
    config = TrainConfig(model=model, data=DummyConstantInput(shapes),
                         callbacks=callbacks, extra_callbacks=[], monitors=[],
                         steps_per_epoch=args.steps * accumulate, max_epoch=args.epochs,
                         accumulate=accumulate)
    launch_train_with_config(config, trainer)
    write_result(args.out, 'worker{}'.format(index),
                 {'epochs': meter.epochs, 'gradient_bytes': gradient_bytes()})


# ----- the driver: one run ------------------------------------------------------------------------

def mpich_allreduce_bytes(num_worker, size):
    """Bytes each rank sends per Allreduce of ``size`` bytes in MPICH's algorithm for large
    buffers (Rabenseifner's: reduce-scatter by recursive halving, then all-gather by recursive
    doubling, among the largest power of two P <= N ranks): 2 (P - 1) / P x S each; of the
    first 2 (N - P) ranks, the even ones first send their whole buffer to the next one (S) and
    take no further part, and the odd ones send the result back to them at the end (S more)."""
    pof2 = 1 << (num_worker.bit_length() - 1)
    core = 2 * (pof2 - 1) / pof2 * size
    rem = num_worker - pof2
    return [size if rank < 2 * rem and rank % 2 == 0 else core + (size if rank < 2 * rem else 0)
            for rank in range(num_worker)]


def expected_sent(variant, num_worker, size, sender):
    """Bytes ``sender`` is expected to send per step, S = ``size``: ``'worker'`` the median
    worker, ``'ps'`` the ps task, ``'busiest'`` the busiest worker."""
    if variant in RING_VARIANTS:
        return 2 * (num_worker - 1) / num_worker * size / (2 if RING_VARIANTS[variant] else 1)
    if variant == 'mpi':
        ranks = mpich_allreduce_bytes(num_worker, size)
        return max(ranks) if sender == 'busiest' else statistics.median(ranks)
    return num_worker * size if sender == 'ps' else size


def bottleneck_bytes(variant, num_worker, size):
    """The bytes the busiest link carries per step (each way): what the step time follows."""
    return expected_sent(variant, num_worker, size, 'ps' if variant in PS_VARIANTS else 'busiest')


def _interpolate(samples, when, column):
    """``column`` of the ps samples [time, cpu, counters...] at time ``when`` (linear)."""
    for before, after in zip(samples, samples[1:]):
        if before[0] <= when <= after[0]:
            share = (when - before[0]) / max(after[0] - before[0], 1e-9)
            return before[column] + share * (after[column] - before[column])
    raise ValueError("no ps sample around {}".format(when))


def update_records(epoch, accumulate):
    """The records of ``epoch`` (one per micro-batch) taken after the last micro-batch of each
    update: the window from the first to the last holds whole updates, the epoch's first update
    left out (it holds the epoch's first step, after the epoch-end broadcasts)."""
    if len(epoch) % accumulate:
        raise ValueError("an epoch of {} micro-batches is not whole updates of {}".format(
            len(epoch), accumulate))
    return epoch[accumulate - 1::accumulate]


class RunResult:
    """What one run of ``accumulate`` micro-batches per update measured: ``steps`` (each
    worker's median update time / ``accumulate``: its micro-batch step time, s), ``updates``
    (each worker's median update time, s); per worker and update ``sent``, ``received``,
    ``packets`` (sent), ``retransmitted`` (TCP segments sent again) and ``cpu`` (seconds);
    ``machine_busy`` (the share of the machine's CPU time busy in the chief's timed updates);
    ``ps`` (the ps task's ``sent``, ``received``, ``packets``, ``retransmitted``, ``cpu`` per
    update over the chief's timed updates; None without a ps); ``size`` (S); ``totals`` (every
    host's counters at the end of the run). With ``accumulate`` 1 an update is a step."""

    def __init__(self, workers, ps_samples, totals, accumulate=1):
        self.size, self.totals, self.accumulate = workers[0]['gradient_bytes'], totals, accumulate
        self.steps, self.updates, self.cpu = [], [], []
        self.sent, self.received, self.packets, self.retransmitted = [], [], [], []
        for worker in sorted(workers, key=lambda w: w['index']):
            epochs = worker['epochs'][1:] if len(worker['epochs']) > 1 else worker['epochs']
            epochs = [update_records(epoch, accumulate) for epoch in epochs]
            periods = [b[0] - a[0] for epoch in epochs for a, b in zip(epoch, epoch[1:])]
            self.updates.append(statistics.median(periods))
            self.steps.append(self.updates[-1] / accumulate)
            per_step = [sum(epoch[-1][k] - epoch[0][k] for epoch in epochs) / len(periods)
                        for k in range(len(epochs[0][0]))]
            counters = dict(zip(COUNTERS, per_step[4:]))
            self.cpu.append(per_step[1])
            self.sent.append(counters['tx_bytes'])
            self.received.append(counters['rx_bytes'])
            self.packets.append(counters['tx_packets'])
            self.retransmitted.append(counters['retransmitted'])
            if worker['index'] == 0:
                chief_epochs, self.machine_busy = epochs, per_step[2] / per_step[3]
        self.ps = None
        if ps_samples:
            count = sum(len(epoch) - 1 for epoch in chief_epochs)
            per_step = [sum(_interpolate(ps_samples, epoch[-1][0], column) -
                            _interpolate(ps_samples, epoch[0][0], column) for epoch in chief_epochs) / count
                        for column in range(1, 2 + len(COUNTERS))]
            counters = dict(zip(COUNTERS, per_step[1:]))
            self.ps = {'sent': counters['tx_bytes'], 'received': counters['rx_bytes'],
                       'packets': counters['tx_packets'], 'retransmitted': counters['retransmitted'],
                       'cpu': per_step[0]}

    @property
    def step(self):
        return statistics.median(self.steps)

    @property
    def update(self):
        return statistics.median(self.updates)

    @property
    def busiest(self):
        """The most bytes one host's link carries per update, either way (workers and ps)."""
        hosts = [max(pair) for pair in zip(self.sent, self.received)]
        if self.ps:
            hosts.append(max(self.ps['sent'], self.ps['received']))
        return max(hosts)


def _launch_tasks(args, command, net, num_worker, num_ps):
    """``command`` as the tasks of a cluster, one on each host of ``net``; (exit code, output)."""
    from tensorpack_lite.cluster.launch import LocalCluster
    output = io.BytesIO()
    cluster = LocalCluster(command, num_worker, num_ps, hosts=net, grace=15, output=output, env=worker_env())
    cluster.start()
    code = cluster.wait(timeout=args.run_timeout)
    return code, output.getvalue().decode('utf-8', 'replace')


def _launch_ranks(args, command, net, num_worker):
    """``command`` as ``num_worker`` MPI ranks, rank k entering the namespace of host k itself
    (:func:`enter_namespace`); (exit code, output)."""
    paths = [os.path.join('/var/run/netns', name) for name in net.namespaces]
    env = worker_env(**dict(MPI_ENV, **{NETNS_VARIABLE: ','.join(paths)}))
    argv = [mpiexec_path(), '-launcher', 'fork', '-n', str(num_worker)] + command + ['--mpi-task']
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            env=env, start_new_session=True)
    try:
        output, _ = proc.communicate(timeout=args.run_timeout)
        code = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        output, code = proc.communicate()[0], 124
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return code, output.decode('utf-8', 'replace')


def run_once(args, variant, num_worker, log_dir, accumulate=1):
    """Run ``variant`` on ``num_worker`` hosts (and a ps host), ``accumulate`` micro-batches per
    update; a :class:`RunResult`, or None when the run failed (the end of its output is printed)."""
    from tensorpack_lite.cluster.netns import NetnsCluster
    num_ps = 1 if variant in PS_VARIANTS else 0
    out = tempfile.mkdtemp(prefix='{}-{}-K{}.'.format(variant, num_worker, accumulate), dir=log_dir)
    command = [sys.executable, os.path.abspath(__file__), '--task', '--variant', variant, '--out', out,
               '--hidden', str(args.hidden), '--batch', str(args.batch), '--steps', str(args.steps),
               '--epochs', str(args.epochs), '--model', args.model, '--accumulate', str(accumulate)] \
        + (['--no-spin'] if args.no_spin else []) \
        + ['--set'] + list(getattr(args, 'set', [])) \
        + (['--timeline', os.path.join(args.timeline, '{}-N{}'.format(variant, num_worker)
                                       + ('-K{}'.format(accumulate) if accumulate > 1 else ''))]
           if getattr(args, 'timeline', None) else [])
    with NetnsCluster(num_worker + num_ps, rate_mbit=args.rate_mbit or None) as net:
        if variant == 'mpi':
            code, text = _launch_ranks(args, command, net, num_worker)
        else:
            code, text = _launch_tasks(args, command, net, num_worker, num_ps)
        totals = [net.counters(k) for k in range(num_worker + num_ps)]
    with open(os.path.join(out, 'output.log'), 'w') as f:
        f.write(text)
    found = {}
    for name in ['worker{}'.format(k) for k in range(num_worker)] + ['ps0']:
        if os.path.exists(os.path.join(out, name + '.json')):
            with open(os.path.join(out, name + '.json')) as f:
                found[name] = json.load(f)
    workers = [dict(found['worker{}'.format(k)], index=k) for k in range(num_worker)
               if 'worker{}'.format(k) in found]
    if code != 0 or len(workers) < num_worker:
        print("  {} on {} workers, K={}, failed (exit code {}, {} of {} workers reported); the end of its "
              "output:\n{}".format(variant, num_worker, accumulate, code, len(workers), num_worker,
                                   text[-3000:]), flush=True)
        return None
    ps = found.get('ps0', {}).get('samples')
    if num_ps and not ps:
        print("  the ps task reported no samples: its bytes are not shown", flush=True)
    return RunResult(workers, ps, totals, accumulate)


# ----- the driver: rounds, table, goals -----------------------------------------------------------

def machine_line():
    """The CPU's model name (mixed_precision.py's cpu_description when it imports), the cores,
    TensorFlow's and Python's versions."""
    os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')     # TensorFlow quiet when it imports
    try:
        from mixed_precision import cpu_description
        name = cpu_description()[0]
    except Exception:    # e.g. no TensorFlow in the driver's Python
        name = platform.processor() or platform.machine()
    from importlib import metadata
    versions = []
    for package in ('tensorflow', 'tensorflow-cpu'):
        try:
            versions.append(metadata.version(package))
        except metadata.PackageNotFoundError:
            pass
    return "CPU: {}; {} cores; TensorFlow {}; Python {}".format(
        name, os.cpu_count(), versions[0] if versions else 'not installed', platform.python_version())


def progress(index, total, variant, num_worker, result, seconds):
    if result is None:
        return
    steps = ' '.join('{:.3f}'.format(s) for s in result.steps)
    unit = 'step' if result.accumulate == 1 else 'update'
    line = ("[{}/{}] {} N={}{}: step {:.3f} s (workers {}), a worker sends {:.2f} MB/{} ({:.2f}-{:.2f}; "
            "expected {:.2f}), CPU {:.3f} s/{}, machine busy {:.0%}").format(
                index, total, variant, num_worker,
                '' if result.accumulate == 1 else ' K={}'.format(result.accumulate), result.step, steps,
                statistics.median(result.sent) / MB, unit,
                min(result.sent) / MB, max(result.sent) / MB,
                expected_sent(variant, num_worker, result.size, 'worker') / MB, statistics.median(result.cpu),
                unit, result.machine_busy)
    if result.ps:
        line += "; ps sends {:.2f} MB/{} (expected {:.2f}), CPU {:.3f} s/{}".format(
            result.ps['sent'] / MB, unit, expected_sent(variant, num_worker, result.size, 'ps') / MB,
            result.ps['cpu'], unit)
    line += "; run {:.0f} s, hosts sent {} MB in all".format(
        seconds, ' '.join('{:.0f}'.format(t['tx_bytes'] / MB) for t in result.totals))
    print(line, flush=True)


def _median(values):
    return statistics.median(list(values))


def table(args, results):
    """(headers, rows) of the table of ``results`` {(variant, N): [RunResult of each round]}."""
    low = min(args.workers)
    rows = []
    for variant in args.variants:
        for num_worker in args.workers:
            runs = results.get((variant, num_worker))
            if not runs:
                continue
            size = runs[0].size
            step = _median(r.step for r in runs)
            ratio = predicted = None
            if results.get((variant, low)):
                ratio = step / _median(r.step for r in results[(variant, low)])
                predicted = bottleneck_bytes(variant, num_worker, size) / bottleneck_bytes(variant, low, size)
            senders = [('worker', [(_median(r.sent), _median(r.packets), _median(r.retransmitted),
                                    _median(r.cpu)) for r in runs])]
            if all(r.ps for r in runs):
                senders.append(('ps', [(r.ps['sent'], r.ps['packets'], r.ps['retransmitted'], r.ps['cpu'])
                                       for r in runs]))
            for sender, values in senders:
                sent, packets, retransmitted, cpu = (_median(v[k] for v in values) for k in range(4))
                want = expected_sent(variant, num_worker, size, sender)
                first = sender == 'worker'
                rows.append([
                    variant if first else '  its ps task', num_worker if first else '',
                    '{:.3f}'.format(step) if first else '',
                    '{:.2f}'.format(ratio) if first and ratio is not None else '',
                    '{:.2f}'.format(predicted) if first and predicted is not None else '',
                    '{:.2f}'.format(ratio / predicted) if first and ratio is not None else '',
                    '{:.2f}'.format(sent / MB), '{:.2f}'.format(want / MB), '{:.3f}'.format(sent / want),
                    '{:.3f}'.format((sent - HEADER_BYTES * packets) / want),
                    '{:.1%}'.format(retransmitted * FULL_FRAME / sent),
                    '{:.0%}'.format(sent * 8 / (args.rate_mbit * 1e6) / step) if args.rate_mbit else '',
                    '{:.3f}'.format(cpu),
                    '{:.0%}'.format(_median(r.machine_busy for r in runs)) if first else ''])
    headers = ['variant', 'N', 'median step (s)', 'ratio to N={}'.format(low), 'bytes ratio',
               'step / bytes ratio', 'sent/step (MB)', 'expected (MB)', 'measured / expected',
               'payload / expected', 'resent', 'link busy', 'CPU s/step', 'machine busy']
    return headers, rows


def accumulation_table(args, results):
    """(headers, rows) of the accumulation table of ``results`` {(variant, N, K): [RunResult of
    each round]}: per update, against K=1's per step, and against the link's limit."""
    rows = []
    for variant in args.variants:
        for num_worker in args.workers:
            base = results.get((variant, num_worker, 1))
            base_sent = _median(_median(r.sent) for r in base) if base else None
            base_rate = args.batch * num_worker / _median(r.step for r in base) if base else None
            for accumulate in args.accumulate:
                runs = results.get((variant, num_worker, accumulate))
                if not runs:
                    continue
                step, update = _median(r.step for r in runs), _median(r.update for r in runs)
                samples = args.batch * num_worker / step
                sent = _median(_median(r.sent) for r in runs)
                busiest = _median(r.busiest for r in runs)
                limit = (args.batch * num_worker * accumulate / (busiest * 8 / (args.rate_mbit * 1e6))
                         if args.rate_mbit else None)
                rows.append([
                    variant, num_worker, accumulate, '{:.4f}'.format(step), '{:.3f}'.format(update),
                    '{:.2f}'.format(1 / update), '{:.1f}'.format(samples),
                    '{:.2f}'.format(samples / base_rate) if base_rate else '',
                    '{:.2f}'.format(sent / MB), '{:.2f}'.format(base_sent / MB) if base_sent else '',
                    '{:.3f}'.format(sent / base_sent) if base_sent else '',
                    '{:.2f}'.format(busiest / MB), '{:.1f}'.format(limit) if limit else '',
                    '{:.0%}'.format(samples / limit) if limit else '',
                    '{:.0%}'.format(_median(r.machine_busy for r in runs))])
    headers = ['variant', 'N', 'K', 'micro-batch step (s)', 'update (s)', 'updates/s', 'samples/s',
               'x K=1', 'sent/update (MB)', 'K=1 sent/step (MB)', 'ratio', 'busiest link (MB/update)',
               "link's limit (samples/s)", 'measured / limit', 'machine busy']
    return headers, rows


def goals(args, results):
    """Lines saying whether each variant met the goals of issue 38: the step time from the
    fewest to the most workers within 1.15x of the ratio of the busiest link's bytes, and the
    bytes a worker sends within 5 % of the expected (on the wire, and the payload)."""
    lines = []
    low, high = min(args.workers), max(args.workers)
    for variant in args.variants:
        if not results.get((variant, low)):
            continue
        size = results[(variant, low)][0].size
        if high != low and results.get((variant, high)):
            step = {n: _median(r.step for r in results[(variant, n)]) for n in (low, high)}
            ratio = step[high] / step[low]
            want = bottleneck_bytes(variant, high, size) / bottleneck_bytes(variant, low, size)
            lines.append("{}: step time N={} / N={} = {:.2f}, the busiest link's bytes {:.2f}: {:.2f}x, goal "
                         "<= 1.15x: {}".format(variant, high, low, ratio, want, ratio / want,
                                               'met' if ratio / want <= 1.15 else 'missed'))
        for num_worker in args.workers:
            runs = results.get((variant, num_worker))
            if not runs:
                continue
            sent = _median(_median(r.sent) for r in runs)
            packets = _median(_median(r.packets) for r in runs)
            want = expected_sent(variant, num_worker, size, 'worker')
            wire, payload = sent / want - 1, (sent - HEADER_BYTES * packets) / want - 1
            lines.append("  N={}: a worker sends {:+.1%} (wire), {:+.1%} (payload) of the expected {:.2f} "
                         "MB; goal within 5%: {} on the wire, {} for the payload".format(
                             num_worker, wire, payload, want / MB, 'met' if abs(wire) <= 0.05 else 'missed',
                             'met' if abs(payload) <= 0.05 else 'missed'))
    return lines


def mpi_unavailable():
    """Why the ``mpi`` variant cannot run here (a str), or None."""
    if mpiexec_path() is None:
        return "no mpiexec beside {} (pip install \"tensorpack_lite[mpi]\")".format(sys.executable)
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        return "mpi4py is not installed (pip install \"tensorpack_lite[mpi]\")"
    return None


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--workers', type=int, nargs='+', default=[2, 3, 4], help='numbers of workers N')
    parser.add_argument('--variants', nargs='+', default=DEFAULT_VARIANTS, choices=VARIANTS)
    parser.add_argument('--rate-mbit', type=float, default=100,
                        help="every host's link, Mbit/s each way (0: no limit)")
    parser.add_argument('--model', choices=('wide', 'mlp', 'cnn'), default='wide',
                        help="'wide': 6 -> hidden -> 1 (S = 32 x hidden bytes, almost no compute); 'mlp': "
                             "784-2000-2000-10 (S = 22.4 MB); 'cnn': 4 convolutions and 2 fully connected "
                             "layers (S = 18 MB)")
    parser.add_argument('--hidden', type=int, default=1 << 18, help='hidden units: S = 32 x hidden bytes')
    parser.add_argument('--batch', type=int, default=8, help='batch per worker')
    parser.add_argument('--steps', type=int, default=5,
                        help="updates per epoch (each epoch's first is not timed); an epoch is steps x K "
                             "micro-batches")
    parser.add_argument('--accumulate', type=int, nargs='+', default=[1], metavar='K',
                        help="micro-batches per update (TrainConfig(accumulate=K)): every variant and N runs "
                             "with each K")
    parser.add_argument('--epochs', type=int, default=3, help='epochs per run (the first is warm-up)')
    parser.add_argument('--rounds', type=int, default=1, help='interleaved rounds of every run')
    parser.add_argument('--run-timeout', type=float, default=300, help='seconds one run may take')
    parser.add_argument('--quick', action='store_true', help='N = 2 and 4, 2 epochs')
    parser.add_argument('--no-spin', action='store_true',
                        help="TensorFlow servers with experimental.disable_thread_spinning")
    parser.add_argument('--set', nargs='*', default=[], metavar='NAME=VALUE',
                        help="set attributes of the collective trainers' builder, e.g. NUM_PACKS=8")
    parser.add_argument('--timeline', help="the chief writes the timelines of three steps of the warm-up "
                                           "epoch of each run here (CommunicationTimeline)")
    parser.add_argument('--log-dir', help="keep each run's output and results there (default: a temporary "
                                          "directory)")
    parser.add_argument('--task', action='store_true', help=argparse.SUPPRESS)
    parser.add_argument('--mpi-task', action='store_true', help=argparse.SUPPRESS)
    parser.add_argument('--variant', help=argparse.SUPPRESS)
    parser.add_argument('--out', help=argparse.SUPPRESS)
    args = parser.parse_args()
    if any(k < 1 for k in args.accumulate) or args.steps < 2:
        parser.error("--accumulate takes K >= 1 and --steps at least 2 (the first update is not timed)")
    if args.quick:
        args.workers, args.epochs = [2, 4], 2
    return args


def main():
    args = parse_args()
    if args.task:
        task_main(args)
        return
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from tensorpack_lite.cluster.netns import unavailable
    reason = unavailable()
    if reason:
        sys.exit("network namespaces cannot be made here: {}".format(reason))
    reason = mpi_unavailable() if 'mpi' in args.variants else None
    if reason:
        print("mpi (HorovodTrainer's MPI engine) skipped: {}".format(reason), flush=True)
        args.variants = [v for v in args.variants if v != 'mpi']
    print(machine_line(), flush=True)
    size = 4 * (FEATURES + 2) * args.hidden
    print("links of {:g} Mbit/s ({:.2f} MB/s) each way; S = {:.2f} MB of float32 gradients; {} epochs of {} "
          "steps (the first epoch and each epoch's first step not timed), {} round(s); load average "
          "{}".format(args.rate_mbit, args.rate_mbit / 8, size / MB, args.epochs, args.steps, args.rounds,
                      load_average()), flush=True)
    runs = [(v, n, k) for n in args.workers for v in args.variants for k in args.accumulate]
    results, failed, began = {}, [], time.monotonic()
    with tempfile.TemporaryDirectory(prefix='network_scaling.') as temporary:
        log_dir = args.log_dir or temporary
        os.makedirs(log_dir, exist_ok=True)
        for round_index in range(args.rounds):
            start = round_index % len(runs)
            for number, (variant, num_worker, accumulate) in enumerate(runs[start:] + runs[:start]):
                run_began = time.monotonic()
                result = run_once(args, variant, num_worker, log_dir, accumulate)
                progress(round_index * len(runs) + number + 1, len(runs) * args.rounds, variant, num_worker,
                         result, time.monotonic() - run_began)
                if result is None:
                    failed.append((variant, num_worker, accumulate))
                else:
                    results.setdefault((variant, num_worker, accumulate), []).append(result)
    from tabulate import tabulate
    print("\n{:g} Mbit/s links, S = {:.2f} MB; {:.0f} s in all; load average at the end {}".format(
        args.rate_mbit, size / MB, time.monotonic() - began, load_average()))
    unaccumulated = {(v, n): runs for (v, n, k), runs in results.items() if k == 1}
    if unaccumulated:
        headers, rows = table(args, unaccumulated)
        print(tabulate(rows, headers=headers, disable_numparse=True, stralign='right'))
        for line in goals(args, unaccumulated):
            print(line)
    if any(k > 1 for k in args.accumulate):
        headers, rows = accumulation_table(args, results)
        print("\nGradient accumulation: K micro-batches of {} per worker make one update; per update "
              "against K=1's per step".format(args.batch))
        print(tabulate(rows, headers=headers, disable_numparse=True, stralign='right'))
    if failed:
        print("failed runs: {}".format(', '.join('{} N={} K={}'.format(*f) for f in failed)))
        sys.exit(1)


if __name__ == '__main__':
    main()
