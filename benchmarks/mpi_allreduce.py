#!/usr/bin/env python
"""MB/s of the MPI engine's allreduce (graph_builder/mpi_ops.py) as HorovodTrainer uses it (one
fused ``tf.numpy_function`` run in a session) and of raw mpi4py ``comm.Allreduce`` on the same
float32 buffer, for N processes on this machine, over shared memory and over TCP::

    python benchmarks/mpi_allreduce.py [--workers 2 3 4] [--sizes 1 4 16 64] [--rounds 7]

MB/s is the buffer's size over the median time of one allreduce (rounds interleave the two
ways). ``--transport tcp`` sets ``MPIR_CVAR_NOLOCAL=1`` (MPICH then treats every rank as remote:
no shared memory). Other benchmarks can call :func:`mpi_mbps` and put its numbers in their
tables.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import psutil

HERE = os.path.abspath(__file__)
REPO = os.path.dirname(os.path.dirname(HERE))
TRANSPORTS = {'shm': {}, 'tcp': {'MPIR_CVAR_NOLOCAL': '1'}}
TIMEOUT = 900


def mpi_mbps(num_workers, sizes_mb, transport='shm', rounds=7):
    """``{size_mb: {'tf': MB/s, 'raw': MB/s}}`` for ``num_workers`` processes started with the
    ``mpiexec`` beside this Python; ``transport`` is ``'shm'`` or ``'tcp'``."""
    mpiexec = os.path.join(os.path.dirname(sys.executable), 'mpiexec')
    if not os.path.exists(mpiexec):
        raise RuntimeError("no mpiexec beside {}: pip install \"tensorpack_lite[mpi]\"".format(
            sys.executable))
    if transport not in TRANSPORTS:
        raise ValueError("transport must be one of {}, got {!r}".format(sorted(TRANSPORTS), transport))
    env = dict(os.environ, PYTHONPATH=REPO, TF_CPP_MIN_LOG_LEVEL='3', CUDA_VISIBLE_DEVICES='',
               **TRANSPORTS[transport])
    command = [mpiexec, '-launcher', 'fork', '-n', str(num_workers), sys.executable, HERE, '--worker',
               '--rounds', str(rounds), '--sizes'] + [str(s) for s in sizes_mb]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                            start_new_session=True)
    try:
        output, _ = proc.communicate(timeout=TIMEOUT)
    finally:
        for member in _family(proc.pid):
            member.kill()
    lines = [line for line in output.splitlines() if line.startswith('RESULT ')]
    if proc.returncode != 0 or len(lines) != 1:
        raise RuntimeError("mpiexec -n {} failed ({}):\n{}".format(
            num_workers, proc.returncode, output[-3000:]))
    return {float(k): v for k, v in json.loads(lines[0][len('RESULT '):]).items()}


def _family(pid):
    try:
        parent = psutil.Process(pid)
        return parent.children(recursive=True) + [parent]
    except psutil.NoSuchProcess:
        return []


def _worker(sizes_mb, rounds):
    import numpy as np
    from mpi4py import MPI

    from tensorpack_lite.compat import enable_graph_mode, tf, tfv1
    from tensorpack_lite.graph_builder import mpi_ops
    enable_graph_mode()
    mpi_ops.init()
    comm = MPI.COMM_WORLD
    results = {}
    for size_mb in sizes_mb:
        n = int(size_mb * 2 ** 20 / 4)
        with tfv1.Graph().as_default():
            grad = tfv1.get_variable('grad', initializer=tf.ones([n], tf.float32))
            reduced = mpi_ops.grouped_allreduce([grad.read_value()], op=mpi_ops.Sum)[0]
            step = tf.reduce_sum(reduced[:1])   # fetch a scalar, as a train op would not fetch it all
            with tfv1.Session() as sess:
                sess.run(grad.initializer)
                send, recv = np.ones(n, np.float32), np.empty(n, np.float32)
                times = {'tf': [], 'raw': []}
                for index in range(rounds + 1):   # the first round warms up
                    comm.Barrier()
                    start = time.perf_counter()
                    sess.run(step)
                    tf_seconds = time.perf_counter() - start
                    comm.Barrier()
                    start = time.perf_counter()
                    comm.Allreduce(send, recv)
                    raw_seconds = time.perf_counter() - start
                    if index:
                        times['tf'].append(tf_seconds)
                        times['raw'].append(raw_seconds)
        # the slowest rank's time of each round
        slowest = {k: np.max(comm.allgather(v), axis=0) for k, v in times.items()}
        results[size_mb] = {k: size_mb / statistics.median(v) for k, v in slowest.items()}
    if comm.Get_rank() == 0:
        print('RESULT ' + json.dumps(results), flush=True)
    mpi_ops.shutdown()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--workers', type=int, nargs='+', default=[2, 3, 4])
    parser.add_argument('--sizes', type=float, nargs='+', default=[1, 4, 16, 64], help='MB')
    parser.add_argument('--transports', nargs='+', default=['shm', 'tcp'], choices=sorted(TRANSPORTS))
    parser.add_argument('--rounds', type=int, default=7)
    parser.add_argument('--worker', action='store_true', help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return _worker(args.sizes, args.rounds)
    print("load average at start: {:.2f} {:.2f} {:.2f} on {} cores".format(*os.getloadavg(), os.cpu_count()))
    print("{:>3} {:>9} {:>8} {:>14} {:>14}".format('N', 'transport', 'MB', 'mpi_ops MB/s', 'raw MPI MB/s'))
    for num in args.workers:
        for transport in args.transports:
            for size, speed in sorted(mpi_mbps(num, args.sizes, transport, args.rounds).items()):
                print("{:>3} {:>9} {:>8g} {:>14.0f} {:>14.0f}".format(num, transport, size, speed['tf'],
                                                                      speed['raw']), flush=True)
    print("load average at end: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))


if __name__ == '__main__':
    main()
