#!/usr/bin/env python
"""Multi-worker training on one machine: all-reduce throughput and training speed.

1. All-reduce (sum) of 1, 4, 16 and 64 MB of float32 between N = ``--workers`` (2 3 4) local
   processes, in ``--rounds`` rounds that interleave every column (the table VARIANTS: a
   name, a function giving {size: seconds} for N workers, and the bytes a worker sends per
   step of S bytes, where countable):
   (a) CollectiveAllReduceBuilder, the all-reduce of CollectiveAllReduceTrainer, for each of
       ``--variants``: ``collective`` (CollectiveReduceV2 ring over gRPC, 2 (N-1)/N S a
       worker), with ``-fp16``/``-bf16`` (the same ring in 16 bits: (N-1)/N S a
       worker) and the levers ``-chunk<MB>`` (CHUNK_BYTES), ``-subdiv<K>``
       (MAX_SUBDIVS_PER_DEVICE), ``-auto`` (communication hint 'auto' instead of 'ring'), the
       server's ConfigProto (SERVER_LEVERS: ``-nospin``, ``-inter<K>``, ``-intra<K>``,
       ``-chan<K>``, ``-cache``, ``-onebuf``) and the workers' environment (ENV_LEVERS:
       ``-cq<K>``, ``-ct<K>``, ``-poll``), in any combination (see :class:`CollectiveLevers`);
       processes started by the launcher;
   (b) ``mwms``: tf.distribute's MultiWorkerMirroredStrategy (ring), a replica-context
       all-reduce in a tf.function, same launcher and TF_CONFIG;
   (c) ``horovod``: Horovod's allreduce with Gloo (``horovodrun --gloo``), in the Horovod
       environment (``bash .ci/horovod_env.sh`` builds it; or $TENSORPACK_LITE_HOROVOD_PYTHON);
       skipped, with a message, when it does not exist.
   (d) ``mpi-shm``, ``mpi-tcp``: the MPI engine of HorovodTrainer (graph_builder/mpi_ops.py:
       one fused ``tf.numpy_function`` calling MPI, as training runs it) under the ``mpiexec``
       beside this Python (``pip install "tensorpack_lite[mpi]"``), over shared memory or over
       loopback TCP (``MPIR_CVAR_NOLOCAL=1 UCX_TLS=tcp,self``); ``mpi-raw-shm``/``mpi-raw-tcp`` time mpi4py's
       ``comm.Allreduce`` on numpy buffers alone, what the engine costs on top of MPI.
   Another engine becomes a column by adding a :class:`Variant` to VARIANTS
   (see :func:`register_variant`).
   (a), (c) and (d) are timed in graph mode, one all-reduce per ``session.run``; each column gives
   the median over the rounds of the medians of ``--repeat`` runs after warm-up, and the
   median (smallest, largest) of the per-round speed ratios to the first variant; throughput =
   float32 size / time.
2. Steps/s of CollectiveAllReduceTrainer on an MLP 784-1024-1024-10 (about 1.9 M parameters,
   7.6 MB of gradients) with constant inputs: 2 workers of batch B against 1 worker of batch B
   and of batch 2B.

    python benchmarks/multiworker.py --workers 2 3 4 --skip-training
    python benchmarks/multiworker.py --skip-horovod --sizes 1 4 --variants collective collective-chunk8

On a 2-core machine, N processes share the cores one process would use: expect no speed-up
there; the numbers show what the all-reduce and the other processes cost.
"""

import argparse
import os
import platform
import re
import statistics
import subprocess
import sys

from processes import read_result, report, run_local_cluster, time_runs, worker_env

RUN_TIMEOUT = 1200
MB = 1 << 20


def _measure(sizes, run_of, repeat):
    """The result a worker reports: {size: median seconds of ``run_of(size)()``} and, under
    ``'cores'``, {size: cores this process kept busy} (see :func:`processes.time_runs`)."""
    result = {'cores': {}}
    for size in sizes:
        result[str(size)], result['cores'][str(size)] = time_runs(run_of(size), repeat)
    return result


def _tensors(tf, tfv1, sizes):
    """One float32 variable per size (in MB), read as a tensor."""
    return [tfv1.get_variable('data{}'.format(i), initializer=tf.ones([size * MB // 4]), use_resource=True)
            .read_value() for i, size in enumerate(sizes)]


SERVER_LEVERS = {
    'nospin': lambda config, _: setattr(config.experimental, 'disable_thread_spinning', True),
    'inter': lambda config, k: setattr(config, 'inter_op_parallelism_threads', k),
    'intra': lambda config, k: setattr(config, 'intra_op_parallelism_threads', k),
    'chan': lambda config, k: setattr(config.rpc_options, 'num_channels_per_target', k),
    'cache': lambda config, _: setattr(config.rpc_options, 'cache_rpc_response', True),
    'onebuf': lambda config, _: setattr(config.experimental, 'recv_buf_max_chunk', -1),
}
"""Parts of a collective variant's name that change the server's ConfigProto (``<part><K>``
with a number K for those taking one): ``nospin`` experimental.disable_thread_spinning,
``inter<K>``/``intra<K>`` the inter-/intra-op threads, ``chan<K>``
rpc_options.num_channels_per_target, ``cache`` rpc_options.cache_rpc_response, ``onebuf``
experimental.recv_buf_max_chunk = -1 (one string per RecvBuf response)."""

ENV_LEVERS = {
    'cq': lambda k: {'TF_GRPC_WORKER_CACHE_QUEUES': str(k)},
    'ct': lambda k: {'TF_GRPC_WORKER_CACHE_THREADS': str(k)},
    'poll': lambda _: {'GRPC_POLL_STRATEGY': 'poll'},
}
"""Parts of a collective variant's name that set environment variables of the workers before
their server starts: ``cq<K>``/``ct<K>`` the completion queues/threads of TensorFlow's gRPC
worker cache (default 64 and one per CPU), ``poll`` gRPC's poll() engine instead of epoll."""


class CollectiveLevers:
    """What a collective variant's name ``collective[-<part>]...`` changes: ``compression``
    ('fp16'/'bf16' or None), ``chunk_bytes`` (``chunk<MB>``: CHUNK_BYTES), ``subdivs``
    (``subdiv<K>``: MAX_SUBDIVS_PER_DEVICE), ``hint`` (``auto``: the communication hint),
    ``server`` [(SERVER_LEVERS function, K)] and ``env`` {name: value} (ENV_LEVERS)."""

    def __init__(self, variant):
        self.compression, self.chunk_bytes, self.subdivs, self.hint = None, None, None, None
        self.server, self.env = [], {}
        for part in variant.split('-')[1:]:
            match = re.fullmatch(r'([a-z]+)([0-9.]*)', part)
            name, number = match.groups() if match else (part, '')
            if part in ('fp16', 'bf16'):
                self.compression = part
            elif name == 'chunk' and number:
                self.chunk_bytes = int(float(number) * MB)
            elif name == 'subdiv' and number:
                self.subdivs = int(number)
            elif part == 'auto':
                self.hint = 'auto'
            elif name in SERVER_LEVERS:
                self.server.append((SERVER_LEVERS[name], int(number) if number else None))
            elif name in ENV_LEVERS:
                self.env.update(ENV_LEVERS[name](int(number) if number else None))
            else:
                raise ValueError("unknown part {!r} of the variant {!r}".format(part, variant))

    def server_config(self):
        """The ConfigProto for create_server (None: its default)."""
        if not self.server:
            return None
        from tensorpack_lite.tfutils.common import get_default_sess_config
        config = get_default_sess_config()
        for apply, number in self.server:
            apply(config, number)
        return config


def collective_worker(args):
    """A worker of the all-reduce benchmark of CollectiveAllReduceBuilder (TF_CONFIG from the
    launcher), for one variant (see :class:`CollectiveLevers`)."""
    levers = CollectiveLevers(args.variant)
    os.environ.update(levers.env)
    from tensorpack_lite.compat import enable_graph_mode, tf, tfv1
    from tensorpack_lite.graph_builder import distributed
    from tensorpack_lite.multiprocess.server import DistributedSessionCreator, create_server
    enable_graph_mode()
    if levers.hint:
        distributed.communication_hint = lambda device: levers.hint
    server = create_server(config=levers.server_config())
    with tf.device('/job:worker/task:{}/device:CPU:0'.format(server.server_def.task_index)):
        builder = distributed.CollectiveAllReduceBuilder(['/cpu:0'], server, average=False,
                                                         compression=levers.compression)
        if levers.chunk_bytes:
            builder.CHUNK_BYTES = levers.chunk_bytes
        if levers.subdivs:
            builder.MAX_SUBDIVS_PER_DEVICE = levers.subdivs
        reduced = [builder.all_reduce([[tensor]])[0][0] for tensor in _tensors(tf, tfv1, args.sizes)]
    sess = DistributedSessionCreator(server, device_filters=builder.session_device_filters()).create_session()

    def run_of(size):
        index = args.sizes.index(size)
        options = tfv1.RunOptions(timeout_in_ms=600000)
        options.experimental.collective_graph_key = index + 1
        return lambda: sess.run(reduced[index].op, options=options)

    result = _measure(args.sizes, run_of, args.repeat)
    if builder.is_chief:
        report(result)


def _time_in_a_session(tfv1, args, reduced):
    """The :func:`_measure` result of running each of ``reduced`` (one all-reduce per size) in a
    plain session, after initializing the variables."""
    with tfv1.Session() as sess:
        sess.run(tfv1.global_variables_initializer())
        by_size = dict(zip(args.sizes, reduced))
        return _measure(args.sizes, lambda size: lambda: sess.run(by_size[size].op), args.repeat)


def horovod_worker(args):
    """A rank of the Horovod all-reduce benchmark (under horovodrun)."""
    import horovod.tensorflow as hvd
    import tensorflow as tf
    tfv1 = tf.compat.v1
    tfv1.disable_eager_execution()
    hvd.init()
    reduced = [hvd.allreduce(t, op=hvd.Sum) for t in _tensors(tf, tfv1, args.sizes)]
    times = _time_in_a_session(tfv1, args, reduced)
    if hvd.rank() == 0:
        report(times)


def mpi_worker(args):
    """A rank of the MPI engine's all-reduce benchmark (under mpiexec): through TensorFlow as
    HorovodTrainer runs it, or (``--variant raw``) mpi4py's ``comm.Allreduce`` alone."""
    from tensorpack_lite.compat import enable_graph_mode, tf, tfv1
    from tensorpack_lite.graph_builder import mpi_ops
    enable_graph_mode()
    mpi_ops.init()
    if args.variant == 'raw':
        import numpy as np
        from mpi4py import MPI
        comm = MPI.COMM_WORLD

        def run_of(size):
            send = np.ones(size * MB // 4, np.float32)
            received = np.empty_like(send)
            return lambda: comm.Allreduce(send, received)

        times = _measure(args.sizes, run_of, args.repeat)
    else:
        reduced = [mpi_ops.allreduce(t, op=mpi_ops.Sum) for t in _tensors(tf, tfv1, args.sizes)]
        times = _time_in_a_session(tfv1, args, reduced)
    if mpi_ops.rank() == 0:
        report(times)
    mpi_ops.shutdown()


def mwms_worker(args):
    """A worker of tf.distribute's MultiWorkerMirroredStrategy (TF_CONFIG from the launcher,
    ring all-reduce over gRPC): one replica-context all-reduce (sum) per tf.function call."""
    import tensorflow as tf
    options = tf.distribute.experimental.CommunicationOptions(
        implementation=tf.distribute.experimental.CommunicationImplementation.RING)
    strategy = tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
    with strategy.scope():
        variables = [tf.Variable(tf.ones([size * MB // 4])) for size in args.sizes]

    def all_reduce_of(variable):
        def replica_fn():
            context = tf.distribute.get_replica_context()
            return context.all_reduce(tf.distribute.ReduceOp.SUM, variable.read_value())
        return tf.function(lambda: strategy.run(replica_fn))

    by_size = dict(zip(args.sizes, variables))
    times = _measure(args.sizes, lambda size: all_reduce_of(by_size[size]), args.repeat)
    if strategy.cluster_resolver.task_id == 0:
        report(times)


def train_worker(args):
    """A worker of the training benchmark: CollectiveAllReduceTrainer, epoch times."""
    from tensorpack_lite.input_source import DummyConstantInput
    from tensorpack_lite.multiprocess.server import create_server
    from tensorpack_lite.train import TrainConfig, launch_train_with_config
    from tensorpack_lite.train.distributed import CollectiveAllReduceTrainer
    from timing import DenseMLP, EpochTimer

    trainer = CollectiveAllReduceTrainer(['/cpu:0'], create_server())
    timer = EpochTimer()
    config = TrainConfig(model=DenseMLP(args.batch, [1024, 1024]),
                         data=DummyConstantInput([[args.batch, 784], [args.batch]]),
                         callbacks=[timer], extra_callbacks=[], monitors=[],
                         steps_per_epoch=args.steps, max_epoch=args.epochs)
    launch_train_with_config(config, trainer)
    if trainer.is_chief:
        report({'steps_per_second': args.steps / statistics.median(timer.times[1:])})


# ----- the driver ---------------------------------------------------------------------------------

def _worker_args(args, role, **extra):
    values = ['--role', role, '--repeat', str(args.repeat), '--sizes'] + [str(s) for s in args.sizes]
    for name, value in extra.items():
        values += ['--' + name, str(value)]
    return values


def run_role(args, num_worker, role, **extra):
    """The chief's result of ``role`` run by ``num_worker`` workers of a local cluster."""
    return run_local_cluster([sys.executable, os.path.abspath(__file__)] + _worker_args(args, role, **extra),
                             num_worker, '{} on {} workers'.format(role, num_worker), timeout=RUN_TIMEOUT)


HOROVOD_ENV = os.environ.get('TENSORPACK_LITE_HOROVOD_ENV') or os.path.expanduser(
    '~/.cache/tensorpack_lite/horovod-tf2.18.1')
"""Where .ci/horovod_env.sh builds the Horovod environment (this benchmark never builds it)."""


def horovod_python():
    """The Python of a built Horovod environment, or None."""
    python = os.environ.get('TENSORPACK_LITE_HOROVOD_PYTHON') or os.path.join(HOROVOD_ENV, 'bin', 'python')
    ready = os.path.exists(os.path.join(HOROVOD_ENV, '.tensorpack_lite_horovod_env')) or \
        'TENSORPACK_LITE_HOROVOD_PYTHON' in os.environ
    if ready and os.path.exists(os.path.join(os.path.dirname(python), 'horovodrun')):
        return python
    return None


def run_horovod(args, num_worker):
    python = horovod_python()
    horovodrun = os.path.join(os.path.dirname(python), 'horovodrun')
    command = [horovodrun, '-np', str(num_worker), '-H', 'localhost:{}'.format(num_worker), '--gloo', python,
               os.path.abspath(__file__)] + _worker_args(args, 'horovod')
    proc = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          env=worker_env(), timeout=RUN_TIMEOUT)
    return read_result(proc.stdout, 'horovod allreduce')


MPI_TRANSPORTS = {'shm': {}, 'tcp': {'MPIR_CVAR_NOLOCAL': '1', 'UCX_TLS': 'tcp,self'}}
"""Environment of each MPI transport: MPICH's shared memory between local ranks, or every
rank treated as remote (MPIR_CVAR_NOLOCAL) and UCX held to TCP (UCX_TLS; without it UCX still
takes shared memory), over loopback."""


def mpiexec_path():
    """The mpiexec installed beside this Python (the ``mpich`` wheel's), or None."""
    path = os.path.join(os.path.dirname(sys.executable), 'mpiexec')
    return path if os.path.exists(path) else None


def run_mpi(args, num_worker, transport, way):
    command = [mpiexec_path(), '-launcher', 'fork', '-n', str(num_worker), sys.executable,
               os.path.abspath(__file__)] + _worker_args(args, 'mpi', variant=way)
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=worker_env(**MPI_TRANSPORTS[transport]), start_new_session=True)
    try:
        output, _ = proc.communicate(timeout=RUN_TIMEOUT)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
            proc.wait()
    return read_result(output, 'mpiexec -n {} ({}, {})'.format(num_worker, transport, way), proc.returncode)


def mpi_variant(way, transport):
    name = 'mpi-{}{}'.format('raw-' if way == 'raw' else '', transport)
    return Variant(name, lambda args, n: run_mpi(args, n, transport, way), ring_bytes)


def ring_bytes(num_worker, size):
    """Bytes a worker sends per all-reduce of ``size`` bytes in a ring: reduce-scatter, then
    all-gather, (N - 1) pieces of S / N each."""
    return 2 * (num_worker - 1) * size / num_worker


def ring16_bytes(num_worker, size):
    """Bytes a worker sends per ring all-reduce of ``size`` bytes of float32 sent in 16 bits."""
    return ring_bytes(num_worker, size) / 2


class Variant:
    """A column of the all-reduce table: ``run(args, num_worker)`` -> {str(size in MB): seconds}
    of one all-reduce of each size; ``sent(num_worker, size)`` -> bytes a worker sends per
    all-reduce of ``size`` bytes (None when not countable)."""

    def __init__(self, name, run, sent=None):
        self.name, self.run, self.sent = name, run, sent


def collective_variant(name):
    compression = CollectiveLevers(name).compression
    return Variant(name, lambda args, n: run_role(args, n, 'collective', variant=name),
                   ring16_bytes if compression else ring_bytes)


VARIANTS = {
    'mwms': Variant('mwms', lambda args, n: run_role(args, n, 'mwms'), ring_bytes),
    'horovod': Variant('horovod', run_horovod, ring_bytes),
}
"""The columns besides CollectiveAllReduceBuilder's (whose variants are made from their names)."""


def register_variant(variant):
    """Add a column (e.g. an MPI engine run under mpiexec by a sibling script)."""
    VARIANTS[variant.name] = variant


for _way in ('engine', 'raw'):
    for _transport in MPI_TRANSPORTS:
        register_variant(mpi_variant(_way, _transport))


def variant_of(name):
    return VARIANTS[name] if name in VARIANTS else collective_variant(name)


def all_reduce_rounds(args, num_worker, names):
    """({column: {size: [per-round median seconds]}}, {column: {size: [per-round cores busy in
    the reporting process]}}), the columns interleaved round by round; round r starts at column
    r (mod the number of columns), so no column is always first or last."""
    variants = [variant_of(name) for name in names]
    times = {v.name: {size: [] for size in args.sizes} for v in variants}
    cores = {v.name: {size: [] for size in args.sizes} for v in variants}
    for index in range(args.rounds):
        start = index % len(variants)
        for variant in variants[start:] + variants[:start]:
            result = variant.run(args, num_worker)
            for size in args.sizes:
                times[variant.name][size].append(result[str(size)])
                if str(size) in result.get('cores', {}):
                    cores[variant.name][size].append(result['cores'][str(size)])
    return times, cores


def load_average():
    """The machine's load averages over 1, 5 and 15 minutes, as a line."""
    return '{:.2f} {:.2f} {:.2f}'.format(*os.getloadavg()) if hasattr(os, 'getloadavg') else 'unknown'


def print_allreduce(args, num_worker, times, cores):
    print("\nall-reduce (sum) of float32 between {} processes on this machine ({}, {} cores), MB/s of "
          "float32 data; median over {} rounds of the medians of {} runs:".format(
              num_worker, platform.processor() or platform.machine(), os.cpu_count(), args.rounds,
              args.repeat))
    print("  {:>6s}".format('MB') + ''.join("  {:>38s}".format(name) for name in times))
    base = next(iter(times))
    for size in args.sizes:
        line = "  {:6d}".format(size)
        for name, by_size in times.items():
            median = statistics.median(by_size[size])
            ratios = [b / t for b, t in zip(times[base][size], by_size[size])]
            line += "  {:8.1f} ms {:7.1f} x{:5.2f} ({:4.2f}-{:4.2f})".format(
                1000 * median, size / median, statistics.median(ratios), min(ratios), max(ratios))
        print(line, flush=True)
    sent = ["{} {}".format(name, "{:.2f} S".format(variant_of(name).sent(num_worker, 1.0))
                           if variant_of(name).sent else 'not counted') for name in times]
    print("  bytes a worker sends per all-reduce of S bytes: " + ', '.join(sent))
    busy = ["{} {}".format(name, ' / '.join("{:.2f}".format(statistics.median(by_size[size])) if by_size[size]
                                            else 'n/a' for size in args.sizes))
            for name, by_size in cores.items()]
    print("  cores kept busy by the reporting process (its CPU seconds over wall seconds, median over "
          "rounds), at " + ' / '.join(str(size) for size in args.sizes) + " MB: " + ', '.join(busy))
    print("  (ms, MB/s, and the median, smallest and largest of the per-round speed ratios to {}); "
          "load average now: {}".format(base, load_average()), flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--sizes', type=int, nargs='+', default=[1, 4, 16, 64],
                        help='all-reduce sizes in MB')
    parser.add_argument('--repeat', type=int, default=10, help='timed all-reduces per size')
    parser.add_argument('--workers', type=int, nargs='+', default=[2, 3, 4], help='numbers of processes')
    parser.add_argument('--variants', nargs='+', default=['collective', 'collective-fp16'],
                        help="columns: CollectiveAllReduceBuilder's "
                             "collective[-fp16|-bf16][-chunk<MB>][-subdiv<K>][-auto][-<lever>...] (see "
                             "CollectiveLevers), or a name of VARIANTS; the first is the base of the ratios")
    parser.add_argument('--rounds', type=int, default=3, help='interleaved rounds of every column')
    parser.add_argument('--batch', type=int, default=128, help='B: the batch per worker')
    parser.add_argument('--steps', type=int, default=30, help='steps per epoch')
    parser.add_argument('--epochs', type=int, default=4, help='epochs per run, the first is warm-up')
    parser.add_argument('--skip-horovod', action='store_true')
    parser.add_argument('--skip-training', action='store_true')
    parser.add_argument('--skip-allreduce', action='store_true', help='only the training runs')
    parser.add_argument('--skip-mwms', action='store_true',
                        help="skip tf.distribute's MultiWorkerMirroredStrategy")
    parser.add_argument('--skip-mpi', action='store_true', help='skip the MPI engine (mpi-shm, mpi-tcp)')
    parser.add_argument('--role', choices=['collective', 'horovod', 'mwms', 'mpi', 'train'],
                        help=argparse.SUPPRESS)
    parser.add_argument('--variant', default='collective', help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.role:
        {'collective': collective_worker, 'horovod': horovod_worker, 'mwms': mwms_worker, 'mpi': mpi_worker,
         'train': train_worker}[args.role](args)
        return

    print("load average at the start: {}".format(load_average()), flush=True)
    if not args.skip_allreduce:
        names = list(args.variants) + ([] if args.skip_mwms else ['mwms'])
        if args.skip_mpi:
            pass
        elif mpiexec_path() is None:
            print("mpi-shm, mpi-tcp skipped: no mpiexec beside {} (pip install "
                  "\"tensorpack_lite[mpi]\")".format(sys.executable))
        else:
            names += ['mpi-shm', 'mpi-tcp']
        if not args.skip_horovod and horovod_python() is None:
            print("horovod (gloo) skipped: no built Horovod environment in {} (bash .ci/horovod_env.sh "
                  "builds it) and no $TENSORPACK_LITE_HOROVOD_PYTHON".format(HOROVOD_ENV))
        elif not args.skip_horovod:
            names.append('horovod')
        for num_worker in args.workers:
            print_allreduce(args, num_worker, *all_reduce_rounds(args, num_worker, names))
    if args.skip_training:
        return
    runs = [('1 worker, batch {}'.format(args.batch), 1, args.batch),
            ('1 worker, batch {}'.format(2 * args.batch), 1, 2 * args.batch),
            ('2 workers, batch {} each'.format(args.batch), 2, args.batch)]
    print("\nCollectiveAllReduceTrainer, MLP 784-1024-1024-10, median over {} epochs of {} steps:".format(
        args.epochs - 1, args.steps))
    for name, workers, batch in runs:
        speed = run_role(args, workers, 'train', batch=batch, steps=args.steps,
                         epochs=args.epochs)['steps_per_second']
        print("  {:<37s} {:7.2f} steps/s  {:8.0f} samples/s".format(name, speed, speed * batch * workers),
              flush=True)


if __name__ == '__main__':
    main()
