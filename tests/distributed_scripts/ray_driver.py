"""The driver of a job on a Ray cluster, for tests/cluster/test_ray.py: runs a command as
``launch_on_ray`` does, connected to the Ray cluster at ``--address``.

    python ray_driver.py --address HOST:PORT --events FILE --workers N [--min-workers M]
                         [--placement SPREAD] [--max-restarts R] [--resize-check-interval S] -- command ...

Every event of the job (an attempt started, a resize requested, an attempt ended) is appended to
FILE as one JSON line ``{"kind": ..., "attempt": {...}}``; the output is the job's (``[worker k]``
and ``[ray]`` lines); the exit code is the job's.
"""

import argparse
import json
import sys
import time

import ray

from tensorpack_lite.cluster.ray import PLACEMENTS, launch_on_ray


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument('--address', required=True)
    parser.add_argument('--events', required=True)
    parser.add_argument('--workers', type=int, required=True)
    parser.add_argument('--ps', type=int, default=0)
    parser.add_argument('--min-workers', type=int)
    parser.add_argument('--placement', choices=PLACEMENTS, default='SPREAD')
    parser.add_argument('--max-restarts', type=int, default=3)
    parser.add_argument('--resize-check-interval', type=float, default=1.0)
    parser.add_argument('--timeout', type=float, default=900)
    parser.add_argument('command', nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ['--'] else args.command

    def record(kind, attempt):
        with open(args.events, 'a') as f:
            f.write(json.dumps({'kind': kind, 'time': time.time(), 'attempt': attempt.as_dict()}) + '\n')

    ray.init(address=args.address, log_to_driver=False)
    job = launch_on_ray(command, args.workers, num_ps=args.ps, min_workers=args.min_workers,
                        placement=args.placement, max_restarts=args.max_restarts, timeout=args.timeout,
                        grace=20.0, ready_timeout=240.0, node_loss_timeout=60.0,
                        resize_check_interval=args.resize_check_interval, name='test', on_event=record)
    print(job.describe(), flush=True)
    return job.exit_code


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
