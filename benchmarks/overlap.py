#!/usr/bin/env python
"""Does gradient communication hide behind backprop? N workers, each a host of its own (a
network namespace of :class:`~tensorpack_lite.cluster.netns.NetnsCluster`), train
network_scaling.py's ``mlp`` model (784-2000-2000-10, S = 22.4 MB of float32 gradients) in
three rows:

  ``compute``        a batch of ``--batch`` per worker, links without limit: the step is the
                     compute (plus an all-reduce over the veth pairs, which costs CPU);
  ``communication``  a batch of ``--small-batch``, links of ``--rate-mbit`` Mbit/s each way:
                     the step is the communication (the compute is negligible);
  ``both``           a batch of ``--batch`` on the limited links.

Printed per engine and N: the median step of each row, the link's limit (the bytes the busiest
worker sends per step / the rate: 2 (N - 1) / N x S for a ring), ``communication / limit``,
the wire's limit (the bytes the busiest worker's interface sent per step in the communication
row, with the Ethernet, IP and TCP headers of every packet and the ACKs of what it received,
/ the rate) and ``communication / wire`` (what the step loses beyond the wire's bytes),
and the overlap ratio ``both / max(compute, communication)``: 1.0 when the communication hides
completely behind the compute or the other way round, 1 + compute / communication when nothing
overlaps. No piece can travel before backprop has produced its gradients, so the ratio cannot
reach 1.0: the *ready bound* is the shortest step the readiness allows, read from the chief's
timelines of three steps of the warm-up epoch of the ``both`` run
(:class:`~tensorpack_lite.callbacks.CommunicationTimeline`; the median over steps and rounds): the
largest, over pieces, of the time the piece was ready plus the share of the communication-only step
due to the bytes ready no earlier. Tracing slows a step a little, so the ready times, and the bound,
may be a little late. Then, per row, the CPU seconds a
worker spends per step against the wall seconds and
how busy the machine's cores were (four workers on two cores are CPU-bound in ``compute``).

Engines (``--engines``): ``collective`` (CollectiveAllReduceTrainer, TensorFlow's ring over
gRPC) and ``mpi`` (HorovodTrainer's MPI engine; skipped, saying why, without mpiexec or
mpi4py). ``--timeline DIR`` keeps the timelines of the ``both`` rows:
``DIR/<variant>-N<n>/timeline-<step>.svg`` to open in a browser, its numbers (``.json``) and
its Chrome trace.

    python benchmarks/overlap.py                      # N = 2 and 4, both engines: about 12 minutes
    python benchmarks/overlap.py --engines collective --workers 2 --timeline /tmp/timeline

Needs root and iproute2 (network namespaces, ``tc`` token buckets), as network_scaling.py.
"""

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

import network_scaling as scaling

ROWS = ('compute', 'communication', 'both')
ENGINES = {'collective': 'collective', 'mpi': 'mpi'}
"""Engine -> network_scaling.py's variant."""


def row_args(args, row, timelines):
    """The network_scaling.py arguments of one row (the ``both`` row writes its timeline into
    ``timelines``)."""
    limited = row != 'compute'
    return argparse.Namespace(
        model=args.model, hidden=0, batch=args.small_batch if row == 'communication' else args.batch,
        steps=args.steps, epochs=args.epochs, no_spin=args.no_spin, run_timeout=args.run_timeout,
        set=args.set,
        rate_mbit=args.rate_mbit if limited else 0, timeline=timelines if row == 'both' else None)


def read_pieces(timelines, variant, num_worker):
    """The pieces of each of the chief's traced steps of the ``both`` run (``timeline-<step>.json``)."""
    directory = os.path.join(timelines, '{}-N{}'.format(variant, num_worker))
    found = []
    for name in sorted(n for n in os.listdir(directory) if n.startswith('timeline-') and n.endswith('.json')):
        with open(os.path.join(directory, name)) as f:
            found.append(json.load(f)['pieces'])
    return found


def ready_bound(pieces, communication):
    """The shortest step the gradients' readiness allows: no piece moves before it is ready,
    and all the bytes ready at or after a time take their share of ``communication`` (the
    communication-only step) after it: max over pieces k of ready_k + the share of the bytes
    of the pieces ready no earlier than k x ``communication``."""
    total = sum(p['bytes'] for p in pieces)
    later = [sum(q['bytes'] for q in pieces if q['ready'] >= p['ready']) for p in pieces]
    return max(p['ready'] + share / total * communication for p, share in zip(pieces, later))


def link_seconds(args, sent):
    """Seconds a link of ``--rate-mbit`` needs to send ``sent`` bytes."""
    return sent * 8 / (args.rate_mbit * 1e6)


def table(args, results):
    headers = ['engine', 'N', 'compute (s)', 'communication (s)', 'both (s)', 'link limit (s)',
               'communication / limit', 'wire limit (s)', 'communication / wire', 'overlap ratio',
               'ready bound (s)', 'both / bound', 'CPU s/step: compute, comm., both',
               'machine busy: compute, comm., both']
    rows = []
    for engine, variant in ENGINES.items():
        for num_worker in args.workers:
            runs = {row: results.get((engine, num_worker, row)) for row in ROWS}
            if not all(runs.values()):
                continue
            step = {row: statistics.median(r.step for r in runs[row]) for row in ROWS}
            limit = link_seconds(args, scaling.bottleneck_bytes(variant, num_worker, runs['both'][0].size))
            wire = link_seconds(args, statistics.median(max(r.sent) for r in runs['communication']))
            overlap = step['both'] / max(step['compute'], step['communication'])
            traced = [pieces for run in results[(engine, num_worker, 'pieces')] for pieces in run]
            bound = statistics.median(ready_bound(pieces, step['communication']) for pieces in traced)
            rows.append([
                engine, num_worker, '{:.3f}'.format(step['compute']), '{:.3f}'.format(step['communication']),
                '{:.3f}'.format(step['both']), '{:.3f}'.format(limit),
                '{:.2f}'.format(step['communication'] / limit), '{:.3f}'.format(wire),
                '{:.2f}'.format(step['communication'] / wire), '{:.2f}'.format(overlap),
                '{:.3f}'.format(bound), '{:.2f}'.format(step['both'] / bound),
                ', '.join('{:.2f}'.format(statistics.median(statistics.median(r.cpu) for r in runs[row]))
                          for row in ROWS),
                ', '.join('{:.0%}'.format(statistics.median(r.machine_busy for r in runs[row]))
                          for row in ROWS)])
    return headers, rows


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--workers', type=int, nargs='+', default=[2, 4], help='numbers of workers N')
    parser.add_argument('--engines', nargs='+', default=list(ENGINES), choices=list(ENGINES))
    parser.add_argument('--rate-mbit', type=float, default=200, help="the limited links, Mbit/s each way")
    parser.add_argument('--model', choices=('mlp', 'cnn'), default='mlp',
                        help="network_scaling.py's model: 'mlp' (784-2000-2000-10) or 'cnn' (convolutions, "
                             "then a large fully connected layer, whose gradient backprop makes first)")
    parser.add_argument('--batch', type=int, default=1024, help='batch per worker of the compute rows')
    parser.add_argument('--small-batch', type=int, default=16,
                        help='batch per worker of the communication row')
    parser.add_argument('--steps', type=int, default=6,
                        help="steps per epoch (each epoch's first is not timed)")
    parser.add_argument('--epochs', type=int, default=2, help='epochs per run (the first is warm-up)')
    parser.add_argument('--rounds', type=int, default=1, help='interleaved rounds of every run')
    parser.add_argument('--no-spin', action='store_true',
                        help="the collective workers' servers with experimental.disable_thread_spinning")
    parser.add_argument('--run-timeout', type=float, default=300, help='seconds one run may take')
    parser.add_argument('--set', nargs='*', default=[], metavar='NAME=VALUE',
                        help="set attributes of the collective trainer's builder "
                             "(CollectiveAllReduceBuilder), "
                             "e.g. CHUNK_BYTES=4194304 NUM_PACKS=8")
    parser.add_argument('--timeline', help="keep the chief's timelines of the 'both' rows here")
    parser.add_argument('--log-dir', help="keep each run's output and results there")
    return parser.parse_args()


def main():
    args = parse_args()
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from tensorpack_lite.cluster.netns import unavailable
    reason = unavailable()
    if reason:
        sys.exit("network namespaces cannot be made here: {}".format(reason))
    if 'mpi' in args.engines and scaling.mpi_unavailable():
        print("mpi (HorovodTrainer's MPI engine) skipped: {}".format(scaling.mpi_unavailable()), flush=True)
        args.engines = [e for e in args.engines if e != 'mpi']
    print(scaling.machine_line(), flush=True)
    print("limited links: {:g} Mbit/s each way; batches {} and {} per worker; {} epochs of {} steps (the "
          "first epoch and each epoch's first step not timed); load average {}".format(
              args.rate_mbit, args.batch, args.small_batch, args.epochs, args.steps, scaling.load_average()),
          flush=True)
    runs = [(e, n, row) for e in args.engines for n in args.workers for row in ROWS]
    results, failed, began = {}, [], time.monotonic()
    with tempfile.TemporaryDirectory(prefix='overlap.') as temporary:
        log_dir = args.log_dir or temporary
        os.makedirs(log_dir, exist_ok=True)
        timelines = args.timeline or os.path.join(log_dir, 'timelines')
        for round_index in range(args.rounds):
            for number, (engine, num_worker, row) in enumerate(runs):
                run_began = time.monotonic()
                result = scaling.run_once(row_args(args, row, timelines), ENGINES[engine], num_worker,
                                          log_dir)
                if result is None:
                    failed.append((engine, num_worker, row))
                    continue
                results.setdefault((engine, num_worker, row), []).append(result)
                if row == 'both':
                    results.setdefault((engine, num_worker, 'pieces'), []).append(
                        read_pieces(timelines, ENGINES[engine], num_worker))
                print("[{}/{}] {} N={} {}: step {:.3f} s (workers {}), CPU {:.2f} s/step, machine busy "
                      "{:.0%}, a worker sends {:.2f} MB/step; run {:.0f} s".format(
                          round_index * len(runs) + number + 1, len(runs) * args.rounds, engine, num_worker,
                          row, result.step, ' '.join('{:.3f}'.format(s) for s in result.steps),
                          statistics.median(result.cpu), result.machine_busy,
                          statistics.median(result.sent) / scaling.MB, time.monotonic() - run_began),
                      flush=True)
    from tabulate import tabulate
    headers, rows = table(args, results)
    print("\n{:.0f} s in all; load average at the end {}".format(
        time.monotonic() - began, scaling.load_average()))
    print(tabulate(rows, headers=headers, disable_numparse=True, stralign='right'))
    if failed:
        print("failed runs: {}".format(', '.join('{} N={} {}'.format(*f) for f in failed)))
        sys.exit(1)


if __name__ == '__main__':
    main()
