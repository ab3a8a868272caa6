#!/usr/bin/env python
"""Multi-worker training on one machine: all-reduce throughput and training speed.

1. All-reduce (sum) of 1, 4, 16 and 64 MB of float32 between 2 local processes, in
   ``--rounds`` rounds that interleave every column:
   (a) CollectiveAllReduceBuilder, the all-reduce of CollectiveAllReduceTrainer, for each of
       ``--variants`` ``exchange[-compression]``: ``sockets`` (the default: TCP connections
       between the workers), ``queues`` (FIFO queues over RecvTensor), ``collective``
       (CollectiveReduceV2 rings over RecvBuf), with ``-fp16`` or ``-bf16`` (16 bits on the
       wire, float32 sums); processes started by the launcher;
   (b) tf.distribute's MultiWorkerMirroredStrategy (ring), a replica-context all-reduce in a
       tf.function, same launcher and TF_CONFIG;
   (c) Horovod's allreduce with Gloo (``horovodrun -np 2 --gloo``), in the Horovod
       environment (``bash .ci/horovod_env.sh`` builds it; or $TENSORPACK_LITE_HOROVOD_PYTHON).
   (a) and (c) are timed in graph mode, one all-reduce per ``session.run``; each column gives
   the median over the rounds of the medians of ``--repeat`` runs after warm-up, and the
   median (smallest, largest) of the per-round speed ratios to the first variant; throughput =
   float32 size / time.
2. Steps/s of CollectiveAllReduceTrainer on an MLP 784-1024-1024-10 (about 1.9 M parameters,
   7.6 MB of gradients) with constant inputs: 2 workers of batch B (with each of
   ``--train-exchanges``) against 1 worker of batch B and of batch 2B.

    python benchmarks/multiworker.py                 # everything
    python benchmarks/multiworker.py --skip-horovod --sizes 1 4
    python benchmarks/multiworker.py --skip-training --variants sockets queues collective

On a 2-core machine, 2 processes share the cores one process would use: expect no speed-up
there; the numbers show what the all-reduce and the second process cost.
"""

import argparse
import io
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, 'benchmarks'))
RESULT_PREFIX = 'MULTIWORKER_BENCHMARK_RESULT '
RUN_TIMEOUT = 1200
MB = 1 << 20


def _report(result):
    print(RESULT_PREFIX + json.dumps(result), flush=True)


def _time_runs(run, repeat, warmup=3):
    """The median seconds of ``repeat`` calls of ``run()``, after ``warmup`` calls."""
    for _ in range(warmup):
        run()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _tensors(tf, tfv1, sizes):
    """One float32 variable per size (in MB), read as a tensor."""
    return [tfv1.get_variable('data{}'.format(i), initializer=tf.ones([size * MB // 4]), use_resource=True)
            .read_value() for i, size in enumerate(sizes)]


def collective_worker(args):
    """A worker of the all-reduce benchmark of CollectiveAllReduceBuilder (TF_CONFIG from the
    launcher), for one variant: ``exchange[-compression]``."""
    from tensorpack_lite.compat import enable_graph_mode, tf, tfv1
    from tensorpack_lite.graph_builder.distributed import CollectiveAllReduceBuilder
    from tensorpack_lite.tfutils.distributed import DistributedSessionCreator, create_server
    enable_graph_mode()
    server = create_server()
    exchange, _, compression = args.variant.partition('-')
    with tf.device('/job:worker/task:{}/device:CPU:0'.format(server.server_def.task_index)):
        builder = CollectiveAllReduceBuilder(['/cpu:0'], server, average=False,
                                             compression=compression or None, exchange=exchange)
        reduced = [builder.all_reduce([[tensor]])[0][0] for tensor in _tensors(tf, tfv1, args.sizes)]
    sess = DistributedSessionCreator(server, device_filters=builder.session_device_filters()).create_session()
    builder.connect(sess, timeout=600)
    times = {}
    for key, (size, tensor) in enumerate(zip(args.sizes, reduced), start=1):
        options = tfv1.RunOptions(timeout_in_ms=600000)
        if builder.steps_use_collectives:
            options.experimental.collective_graph_key = key
        times[size] = _time_runs(lambda: sess.run(tensor.op, options=options), args.repeat)
    if builder.is_chief:
        _report(times)


def horovod_worker(args):
    """A rank of the Horovod all-reduce benchmark (under horovodrun)."""
    import horovod.tensorflow as hvd
    import tensorflow as tf
    tfv1 = tf.compat.v1
    tfv1.disable_eager_execution()
    hvd.init()
    reduced = [hvd.allreduce(t, op=hvd.Sum) for t in _tensors(tf, tfv1, args.sizes)]
    with tfv1.Session() as sess:
        sess.run(tfv1.global_variables_initializer())
        times = {size: _time_runs(lambda: sess.run(tensor.op), args.repeat)
                 for size, tensor in zip(args.sizes, reduced)}
    if hvd.rank() == 0:
        _report(times)


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

    times = {size: _time_runs(all_reduce_of(variable), args.repeat)
             for size, variable in zip(args.sizes, variables)}
    if strategy.cluster_resolver.task_id == 0:
        _report(times)


def train_worker(args):
    """A worker of the training benchmark: CollectiveAllReduceTrainer, epoch times."""
    from tensorpack_lite.input_source import DummyConstantInput
    from tensorpack_lite.tfutils.distributed import create_server
    from tensorpack_lite.train import TrainConfig, launch_train_with_config
    from tensorpack_lite.train.distributed import CollectiveAllReduceTrainer
    from timing import DenseMLP, EpochTimer

    trainer = CollectiveAllReduceTrainer(['/cpu:0'], create_server(), exchange=args.variant)
    timer = EpochTimer()
    config = TrainConfig(model=DenseMLP(args.batch, [1024, 1024]),
                         data=DummyConstantInput([[args.batch, 784], [args.batch]]),
                         callbacks=[timer], extra_callbacks=[], monitors=[],
                         steps_per_epoch=args.steps, max_epoch=args.epochs)
    launch_train_with_config(config, trainer)
    if trainer.is_chief:
        _report({'steps_per_second': args.steps / statistics.median(timer.times[1:])})


# ----- the driver ---------------------------------------------------------------------------------

def _result(output, what):
    found = re.findall(re.escape(RESULT_PREFIX) + r'(\{.*\})', output)
    if not found:
        sys.exit("{} failed:\n{}".format(what, output[-4000:]))
    return json.loads(found[-1])


def _worker_args(args, role, **extra):
    values = ['--role', role, '--repeat', str(args.repeat), '--sizes'] + [str(s) for s in args.sizes]
    for name, value in extra.items():
        values += ['--' + name, str(value)]
    return values


def run_local_cluster(args, num_worker, role, **extra):
    from tensorpack_lite.utils.launch import LocalCluster
    output = io.BytesIO()
    env = dict(os.environ, PYTHONPATH=REPO, TF_CPP_MIN_LOG_LEVEL='2', CUDA_VISIBLE_DEVICES='')
    cluster = LocalCluster([sys.executable, os.path.abspath(__file__)] + _worker_args(args, role, **extra),
                           num_worker, env=env, output=output)
    cluster.start()
    code = cluster.wait(timeout=RUN_TIMEOUT)
    text = output.getvalue().decode('utf-8', 'replace')
    if code != 0:
        sys.exit("{} on {} workers failed (exit code {}):\n{}".format(role, num_worker, code, text[-4000:]))
    return _result(text, role)


def run_horovod(args):
    from horovod_scaling import horovod_python
    python = horovod_python()
    horovodrun = os.path.join(os.path.dirname(python), 'horovodrun')
    command = [horovodrun, '-np', '2', '-H', 'localhost:2', '--gloo', python, os.path.abspath(__file__)] + \
        _worker_args(args, 'horovod')
    env = dict(os.environ, PYTHONPATH=REPO, TF_CPP_MIN_LOG_LEVEL='2', CUDA_VISIBLE_DEVICES='')
    proc = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                          timeout=RUN_TIMEOUT)
    return _result(proc.stdout, 'horovod allreduce')


def all_reduce_rounds(args):
    """{column: {size: [per-round median seconds]}}: the variants of CollectiveAllReduceBuilder
    and the peers (MultiWorkerMirroredStrategy, Horovod with Gloo), interleaved round by round."""
    runs = [(name, lambda name=name: run_local_cluster(args, 2, 'collective', variant=name))
            for name in args.variants]
    if not args.skip_mwms:
        runs.append(('MultiWorkerMirrored', lambda: run_local_cluster(args, 2, 'mwms')))
    if not args.skip_horovod:
        runs.append(('horovod (gloo)', lambda: run_horovod(args)))
    times = {name: {size: [] for size in args.sizes} for name, _ in runs}
    for _ in range(args.rounds):
        for name, run in runs:
            result = run()
            for size in args.sizes:
                times[name][size].append(result[str(size)])
    return times


def _load():
    return '{:.2f} {:.2f} {:.2f}'.format(*os.getloadavg()) if hasattr(os, 'getloadavg') else 'unknown'


def print_allreduce(args, times):
    print("all-reduce (sum) of float32 between 2 processes on this machine ({}, {} cores), MB/s of float32 "
          "data; median over {} rounds of the medians of {} runs:".format(
              platform.processor() or platform.machine(), os.cpu_count(), args.rounds, args.repeat))
    print("  {:>6s}".format('MB') + ''.join("  {:>37s}".format(name) for name in times))
    base = next(iter(times))
    for size in args.sizes:
        line = "  {:6d}".format(size)
        for name, by_size in times.items():
            median = statistics.median(by_size[size])
            ratios = [b / t for b, t in zip(times[base][size], by_size[size])]
            line += "  {:7.1f} ms {:7.1f} x{:5.2f} ({:4.2f}-{:4.2f})".format(
                1000 * median, size / median, statistics.median(ratios), min(ratios), max(ratios))
        print(line, flush=True)
    print("  (ms, MB/s, and the median, smallest and largest of the per-round speed ratios to {}); "
          "load average now: {}".format(base, _load()))


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--sizes', type=int, nargs='+', default=[1, 4, 16, 64],
                        help='all-reduce sizes in MB')
    parser.add_argument('--repeat', type=int, default=10, help='timed all-reduces per size')
    parser.add_argument('--variants', nargs='+',
                        default=['sockets', 'sockets-fp16', 'queues', 'collective', 'collective-fp16'],
                        help="CollectiveAllReduceBuilder's exchange[-compression]; the first is the base of "
                             "the ratios")
    parser.add_argument('--rounds', type=int, default=3, help='interleaved rounds of every column')
    parser.add_argument('--batch', type=int, default=128, help='B: the batch per worker')
    parser.add_argument('--steps', type=int, default=30, help='steps per epoch')
    parser.add_argument('--epochs', type=int, default=4, help='epochs per run, the first is warm-up')
    parser.add_argument('--train-exchanges', nargs='+', default=['sockets', 'queues'],
                        help="the exchanges of the training runs of 2 workers")
    parser.add_argument('--skip-horovod', action='store_true')
    parser.add_argument('--skip-training', action='store_true')
    parser.add_argument('--skip-allreduce', action='store_true', help='only the training runs')
    parser.add_argument('--skip-mwms', action='store_true',
                        help="skip tf.distribute's MultiWorkerMirroredStrategy")
    parser.add_argument('--role', choices=['collective', 'horovod', 'mwms', 'train'], help=argparse.SUPPRESS)
    parser.add_argument('--variant', default='sockets', help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.role:
        {'collective': collective_worker, 'horovod': horovod_worker, 'mwms': mwms_worker,
         'train': train_worker}[args.role](args)
        return

    print("load average at the start: {}".format(_load()), flush=True)
    if not args.skip_allreduce:
        print_allreduce(args, all_reduce_rounds(args))
    if args.skip_training:
        return
    runs = [('1 worker, batch {}'.format(args.batch), 1, args.batch, args.train_exchanges[0]),
            ('1 worker, batch {}'.format(2 * args.batch), 1, 2 * args.batch, args.train_exchanges[0])]
    runs += [('2 workers, batch {} each, {}'.format(args.batch, exchange), 2, args.batch, exchange)
             for exchange in args.train_exchanges]
    print("\nCollectiveAllReduceTrainer, MLP 784-1024-1024-10, median over {} epochs of {} steps:".format(
        args.epochs - 1, args.steps))
    for name, workers, batch, exchange in runs:
        speed = run_local_cluster(args, workers, 'train', batch=batch, steps=args.steps,
                                  epochs=args.epochs, variant=exchange)['steps_per_second']
        print("  {:<37s} {:7.2f} steps/s  {:8.0f} samples/s".format(name, speed, speed * batch * workers),
              flush=True)


if __name__ == '__main__':
    main()
