#!/usr/bin/env python
"""Multi-worker training on one machine: all-reduce throughput and training speed.

1. All-reduce of 1, 4, 16 and 64 MB of float32 between 2 local processes:
   (a) the collective path of CollectiveAllReduceTrainer (CollectiveReduceV2 over gRPC,
       processes started by the launcher), in this environment, exact and with each
       ``--compressions`` (16-bit all-gather, float32 sum), in ``--rounds`` interleaved rounds;
   (b) Horovod's allreduce with Gloo (``horovodrun -np 2 --gloo``), in the Horovod
       environment (``bash .ci/horovod_env.sh`` builds it; or $TENSORPACK_LITE_HOROVOD_PYTHON).
   Both are timed in graph mode, one all-reduce per ``session.run``, medians of
   ``--repeat`` runs after warm-up (the collective ones: the median over the rounds of those
   medians, and of the per-round ratios to the exact path); throughput = float32 size / time.
2. Steps/s of CollectiveAllReduceTrainer on an MLP 784-1024-1024-10 (about 1.9 M parameters,
   7.6 MB of gradients) with constant inputs: 2 workers of batch B against 1 worker of
   batch B and of batch 2B.

    python benchmarks/multiworker.py                 # everything
    python benchmarks/multiworker.py --skip-horovod --sizes 1 4
    python benchmarks/multiworker.py --skip-horovod --skip-training --rounds 5   # compression

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


def _time_runs(sess, op, repeat, warmup=3, options=None):
    for _ in range(warmup):
        sess.run(op, options=options)
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        sess.run(op, options=options)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _tensors(tf, tfv1, sizes):
    """One float32 variable per size (in MB), read as a tensor."""
    return [tfv1.get_variable('data{}'.format(i), initializer=tf.ones([size * MB // 4]), use_resource=True)
            .read_value() for i, size in enumerate(sizes)]


def collective_worker(args):
    """A worker of the collective all-reduce benchmark (TF_CONFIG from the launcher)."""
    from tensorpack_lite.compat import enable_graph_mode, tf, tfv1
    from tensorpack_lite.graph_builder.distributed import CollectiveAllReduceBuilder
    from tensorpack_lite.tfutils.distributed import DistributedSessionCreator, create_server
    enable_graph_mode()
    server = create_server()
    compression = None if args.compression == 'none' else args.compression
    with tf.device('/job:worker/task:{}/device:CPU:0'.format(server.server_def.task_index)):
        builder = CollectiveAllReduceBuilder(['/cpu:0'], server, compression=compression)
        reduced = builder.all_reduce([_tensors(tf, tfv1, args.sizes)])[0]
    sess = DistributedSessionCreator(server).create_session()
    times = {}
    for key, (size, tensor) in enumerate(zip(args.sizes, reduced), start=1):
        options = tfv1.RunOptions(timeout_in_ms=600000)
        options.experimental.collective_graph_key = key
        times[size] = _time_runs(sess, tensor.op, args.repeat, options=options)
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
        times = {size: _time_runs(sess, tensor.op, args.repeat) for size, tensor in zip(args.sizes, reduced)}
    if hvd.rank() == 0:
        _report(times)


def train_worker(args):
    """A worker of the training benchmark: CollectiveAllReduceTrainer, epoch times."""
    from tensorpack_lite.input_source import DummyConstantInput
    from tensorpack_lite.tfutils.distributed import create_server
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


def collective_rounds(args):
    """{compression: {size: [per-round median seconds]}}, the variants interleaved round by round."""
    times = {name: {size: [] for size in args.sizes} for name in args.compressions}
    for _ in range(args.rounds):
        for name in args.compressions:
            result = run_local_cluster(args, 2, 'collective', compression=name)
            for size in args.sizes:
                times[name][size].append(result[str(size)])
    return times


def _load():
    return '{:.2f} {:.2f} {:.2f}'.format(*os.getloadavg()) if hasattr(os, 'getloadavg') else 'unknown'


def print_allreduce(args, collective, horovod):
    print("all-reduce of float32 between 2 processes on this machine ({}, {} cores), MB/s of float32 "
          "data; median over {} rounds of the medians of {} runs:".format(
              platform.processor() or platform.machine(), os.cpu_count(), args.rounds, args.repeat))
    labels = ['collective' + ('' if name == 'none' else ' ' + name) for name in args.compressions]
    header = "  {:>6s}".format('MB') + ''.join("  {:>25s}".format(label) for label in labels)
    print(header + ("  {:>24s}".format('horovod (gloo)') if horovod is not None else ''))
    for size in args.sizes:
        line = "  {:6d}".format(size)
        exact = collective[args.compressions[0]][size]
        for name in args.compressions:
            median = statistics.median(collective[name][size])
            ratio = statistics.median(e / t for e, t in zip(exact, collective[name][size]))
            line += "  {:7.1f} ms {:7.1f} x{:5.2f}".format(1000 * median, size / median, ratio)
        if horovod is not None:
            line += "  {:9.1f} ms {:8.1f} MB/s".format(1000 * horovod[str(size)], size / horovod[str(size)])
        print(line, flush=True)
    print("  (ms, MB/s, and the median of the per-round speed ratios to {}); load average now: {}".format(
        args.compressions[0], _load()))


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--sizes', type=int, nargs='+', default=[1, 4, 16, 64],
                        help='all-reduce sizes in MB')
    parser.add_argument('--repeat', type=int, default=10, help='timed all-reduces per size')
    parser.add_argument('--compressions', nargs='+', default=['none', 'fp16', 'bf16'],
                        choices=['none', 'fp16', 'bf16'],
                        help='collective variants; the first is the base of the ratios')
    parser.add_argument('--rounds', type=int, default=3, help='interleaved rounds of the collective variants')
    parser.add_argument('--batch', type=int, default=128, help='B: the batch per worker')
    parser.add_argument('--steps', type=int, default=30, help='steps per epoch')
    parser.add_argument('--epochs', type=int, default=4, help='epochs per run, the first is warm-up')
    parser.add_argument('--skip-horovod', action='store_true')
    parser.add_argument('--skip-training', action='store_true')
    parser.add_argument('--role', choices=['collective', 'horovod', 'train'], help=argparse.SUPPRESS)
    parser.add_argument('--compression', default='none', help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.role:
        {'collective': collective_worker, 'horovod': horovod_worker, 'train': train_worker}[args.role](args)
        return

    print("load average at the start: {}".format(_load()), flush=True)
    collective = collective_rounds(args)
    horovod = None if args.skip_horovod else run_horovod(args)
    print_allreduce(args, collective, horovod)
    if args.skip_training:
        return
    runs = [('1 worker, batch {}'.format(args.batch), 1, args.batch),
            ('1 worker, batch {}'.format(2 * args.batch), 1, 2 * args.batch),
            ('2 workers, batch {} each'.format(args.batch), 2, args.batch)]
    print("\nCollectiveAllReduceTrainer, MLP 784-1024-1024-10, median over {} epochs of {} steps:".format(
        args.epochs - 1, args.steps))
    for name, workers, batch in runs:
        speed = run_local_cluster(args, workers, 'train', batch=batch, steps=args.steps,
                                  epochs=args.epochs)['steps_per_second']
        print("  {:<28s} {:7.2f} steps/s  {:8.0f} samples/s".format(name, speed, speed * batch * workers),
              flush=True)


if __name__ == '__main__':
    main()
