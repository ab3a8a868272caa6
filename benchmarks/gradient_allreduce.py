"""The gradient path of CollectiveAllReduceTrainer between N processes on this machine: the
all-reduce (mean) of fresh tensors shaped like a model's gradients, as training builds it
(``CollectiveAllReduceBuilder.all_reduce``: packed into pieces, ring on CPUs).

    python benchmarks/gradient_allreduce.py --workers 2 4 --models mlp cnn --rounds 3

``mlp``: the 784-1024-1024-10 MLP (7.6 MB); ``cnn``: 27 kernels 3x3x256x256 with two vectors of
256 each, and a 2048 x 1000 classifier (72 MB). Each step multiplies every variable by 1.5 (a
fresh buffer, as a gradient is) and all-reduces the products. Prints per N and model the median
over the rounds of the median step time of ``--repeat`` steps, MB/s (float32 size / time) and the
cores the chief process kept busy (its CPU seconds over wall seconds).
"""

import argparse
import os
import statistics
import sys

from processes import report, run_local_cluster, time_runs

MODELS = {'mlp': [[784, 1024], [1024], [1024, 1024], [1024], [1024, 10], [10]],
          'cnn': [[3, 3, 256, 256], [256], [256]] * 27 + [[2048, 1000], [1000]]}


def megabytes(model):
    sizes = [1] * len(MODELS[model])
    for index, shape in enumerate(MODELS[model]):
        for dim in shape:
            sizes[index] *= dim
    return 4 * sum(sizes) / float(1 << 20)


def worker(args):
    from tensorpack_lite.compat import enable_graph_mode, tf, tfv1
    from tensorpack_lite.graph_builder.distributed import CollectiveAllReduceBuilder
    from tensorpack_lite.multiprocess.server import DistributedSessionCreator, create_server
    enable_graph_mode()
    server = create_server()
    with tf.device('/job:worker/task:{}/device:CPU:0'.format(server.server_def.task_index)):
        builder = CollectiveAllReduceBuilder(['/cpu:0'], server, average=True)
        variables = [tfv1.get_variable('v{}'.format(i), shape, initializer=tf.ones_initializer())
                     for i, shape in enumerate(MODELS[args.model])]
        reduced = builder.all_reduce([[variable * 1.5 for variable in variables]])[0]
        step = tf.group(*[tf.reduce_sum(tf.reshape(r, [-1])[:1]) for r in reduced])
    sess = DistributedSessionCreator(server, device_filters=builder.session_device_filters()).create_session()
    seconds, cores = time_runs(lambda: sess.run(step), args.repeat, warmup=5)
    if builder.is_chief:
        report({'seconds': seconds, 'cores': cores})


def run(args, num_worker, model):
    command = [sys.executable, os.path.abspath(__file__), '--role', 'worker', '--model', model,
               '--repeat', args.repeat]
    return run_local_cluster(command, num_worker, '{} workers, {}'.format(num_worker, model))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--workers', type=int, nargs='+', default=[2, 4])
    parser.add_argument('--models', nargs='+', choices=sorted(MODELS), default=['mlp', 'cnn'])
    parser.add_argument('--rounds', type=int, default=3)
    parser.add_argument('--repeat', type=int, default=40, help='timed steps per run')
    parser.add_argument('--role', choices=['worker'], help=argparse.SUPPRESS)
    parser.add_argument('--model', help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.role == 'worker':
        worker(args)
        return
    for num_worker in args.workers:
        for model in args.models:
            results = [run(args, num_worker, model) for _ in range(args.rounds)]
            seconds = statistics.median(r['seconds'] for r in results)
            cores = statistics.median(r['cores'] for r in results)
            print("N = {}, {} ({:.1f} MB): {:7.1f} ms  {:6.0f} MB/s  cores busy {:.2f}  (rounds: {})".format(
                num_worker, model, megabytes(model), seconds * 1000, megabytes(model) / seconds, cores,
                ' '.join('{:.1f}'.format(r['seconds'] * 1000) for r in results)), flush=True)


if __name__ == '__main__':
    main()
